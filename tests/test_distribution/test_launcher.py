"""Tests of learner/launcher.py with tiny non-TF worker scripts (fast).

Every process is started by the launcher and stopped by pid; the tests
check that none is left running.
"""

import json
import os
import textwrap
import time

import pytest

from learner.training import launcher


def _Alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  # A zombie still answers kill(0); the launcher waits for its children,
  # so a reaped child is gone.
  return True


def _Script(tmp_path, body):
  path = tmp_path / 'worker.py'
  path.write_text(textwrap.dedent("""\
      import json, os, sys, time
      cfg = json.loads(os.environ['TF_CONFIG'])
      i = cfg['task']['index']
      out = sys.argv[1]
      with open(os.path.join(out, 'pid_%d' % i), 'w') as f:
        f.write(str(os.getpid()))
      with open(os.path.join(out, 'tf_config_%d' % i), 'w') as f:
        f.write(os.environ['TF_CONFIG'])
      """) + textwrap.dedent(body))
  return str(path)


def _Pids(tmp_path, n):
  return [int((tmp_path / ('pid_%d' % i)).read_text()) for i in range(n)]


def test_tf_configs_use_loopback_and_distinct_free_ports():
  configs = [json.loads(c) for c in launcher.MakeTfConfigs(3)]
  workers = configs[0]['cluster']['worker']
  assert len(workers) == 3 and len(set(workers)) == 3
  assert all(w.startswith('127.0.0.1:') for w in workers)
  for i, c in enumerate(configs):
    assert c['cluster']['worker'] == workers
    assert c['task'] == {'type': 'worker', 'index': i}


def test_tf_configs_bad_num_workers_names_it():
  with pytest.raises(ValueError) as e:
    launcher.MakeTfConfigs(0)
  assert 'num_workers=0' in str(e.value)
  with pytest.raises(ValueError) as e:
    launcher.MakeTfConfigs(2, ports=[1])
  assert 'num_workers=2' in str(e.value)


def test_all_workers_succeed_exit_code_zero(tmp_path):
  script = _Script(tmp_path, 'sys.exit(0)\n')
  code = launcher.main(['--num_workers=2', '--deadline_secs=60',
                        '--script=%s' % script, '--', str(tmp_path)])
  assert code == 0
  c0 = json.loads((tmp_path / 'tf_config_0').read_text())
  c1 = json.loads((tmp_path / 'tf_config_1').read_text())
  assert c0['cluster'] == c1['cluster']
  assert (c0['task']['index'], c1['task']['index']) == (0, 1)


def test_first_failure_is_propagated_and_the_others_are_stopped(tmp_path):
  # Worker 1 fails with exit code 3; worker 0 would run for 60 s.
  script = _Script(tmp_path, """\
      if i == 1:
        time.sleep(0.5)
        sys.exit(3)
      time.sleep(60)
      """)
  start = time.monotonic()
  code = launcher.main(['--num_workers=2', '--deadline_secs=60',
                        '--grace_secs=2', '--script=%s' % script, '--',
                        str(tmp_path)])
  assert code == 3
  assert time.monotonic() - start < 30
  assert not any(_Alive(p) for p in _Pids(tmp_path, 2))


def test_deadline_stops_every_worker_even_one_ignoring_sigterm(tmp_path):
  script = _Script(tmp_path, """\
      import signal
      signal.signal(signal.SIGTERM, signal.SIG_IGN)
      time.sleep(60)
      """)
  start = time.monotonic()
  code = launcher.main(['--num_workers=2', '--deadline_secs=2',
                        '--grace_secs=1', '--script=%s' % script, '--',
                        str(tmp_path)])
  assert code == launcher.DEADLINE_EXIT_CODE
  assert time.monotonic() - start < 30
  assert not any(_Alive(p) for p in _Pids(tmp_path, 2))


def test_worker_killed_by_signal_reports_128_plus_signal(tmp_path):
  script = _Script(tmp_path, """\
      import signal
      if i == 0:
        os.kill(os.getpid(), signal.SIGKILL)
      time.sleep(60)
      """)
  code = launcher.main(['--num_workers=2', '--deadline_secs=60',
                        '--grace_secs=1', '--script=%s' % script, '--',
                        str(tmp_path)])
  assert code == 128 + 9


def test_bad_launcher_flags_are_refused():
  with pytest.raises(SystemExit):
    launcher.main(['--num_workers=0', '--', '--model=x'])
  with pytest.raises(SystemExit):
    launcher.main(['--deadline_secs=0'])


def test_arguments_after_double_dash_reach_the_worker_module(tmp_path):
  # Default worker: python -m <module> <args>; `json.tool` echoes a file.
  src = tmp_path / 'in.json'
  src.write_text('{"a": 1}')
  dst = tmp_path / 'out.json'
  code = launcher.main(['--num_workers=1', '--deadline_secs=60',
                        '--module=json.tool', '--', str(src), str(dst)])
  assert code == 0
  assert json.loads(dst.read_text()) == {'a': 1}

