"""Tests of learner/launcher.py with tiny non-TF worker scripts (fast).

Every process is started by the launcher and stopped by pid; the tests
check that none is left running.
"""

import json
import os
import textwrap
import time

import pytest

from learner.training.cluster import launcher


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



# ---- refusal, prefixed output, summary (issue 15, items 5 and 7) ----------


def test_two_trainer_workers_without_multi_worker_are_refused_before_start(
    tmp_path, capfd):
  logdir = tmp_path / 'logdir'
  for strategy in ([], ['--strategy=mirrored'], ['--strategy', 'default']):
    code = launcher.main(['--num_workers=2', '--', '--model=regression.'
                          'LinearRegression', '--logdir=%s' % logdir] +
                         strategy)
    assert code == 2
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith('ERROR: --num_workers=2 '
                                                   'needs --strategy=multi_'
                                                   'worker'), err
    assert 'started' not in err
  assert not logdir.exists()


def test_a_script_given_another_strategy_is_refused_and_never_runs(
    tmp_path, capfd):
  script = _Script(tmp_path, 'sys.exit(0)\n')
  code = launcher.main(['--num_workers=2', '--script=%s' % script, '--',
                        str(tmp_path), '--strategy=default'])
  assert code == 2
  assert 'got --strategy=default' in capfd.readouterr().err
  assert not (tmp_path / 'pid_0').exists()


def test_strategy_refusal_rules():
  refuse = launcher.StrategyRefusal
  trainer = 'learner.trainer'
  assert refuse(1, trainer, None, ['--model=m']) is None
  assert refuse(2, trainer, None, ['--strategy=multi_worker']) is None
  assert refuse(2, trainer, None, ['--strategy', 'multi_worker']) is None
  assert refuse(3, trainer, None, ['--model=m']).startswith(
      '--num_workers=3 needs --strategy=multi_worker')
  # Another program: its flags are unknown unless --strategy is given.
  assert refuse(2, 'json.tool', None, ['a', 'b']) is None
  assert refuse(2, None, 'w.py', ['-strategy=tpu']) is not None


def test_worker_lines_are_prefixed_whole_and_end_with_one_summary(
    tmp_path, capfd):
  digest = 'ab' * 32
  script = _Script(tmp_path, """\
      for k in range(200):
        print('line %d of worker %d ' % (k, i) + 'x' * 200, flush=True)
      sys.stderr.write('an error line of %d\\n' % i)
      sys.stderr.flush()
      print('Final metrics (global step 7): {"global_step": 7, "loss": 0.5}')
      print('Final weights: sha256 %s' % sys.argv[2])
      """)
  code = launcher.main(['--num_workers=2', '--deadline_secs=60',
                        '--script=%s' % script, '--', str(tmp_path), digest])
  assert code == 0
  out, err = capfd.readouterr()
  lines = out.splitlines()
  for i in (0, 1):
    mine = [l for l in lines if l.startswith('[worker %d] ' % i)]
    assert mine[:200] == ['[worker %d] line %d of worker %d ' % (i, k, i) +
                          'x' * 200 for k in range(200)]
    assert '[worker %d] an error line of %d' % (i, i) in mine
  assert all(l.startswith(('[worker 0] ', '[worker 1] ')) for l in lines)
  summary = err.strip().splitlines()[-1]
  assert summary == (
      'launcher: 2 worker(s) finished; final global step 7; final metrics '
      'of worker 0: loss 0.5; final weights identical on every worker '
      '(sha256 %s).' % digest[:16])


def test_summary_says_when_the_weights_differ_or_are_not_reported():
  same = {'global_step': 5, 'metrics': {'global_step': 5, 'w': 1.0}}
  text = launcher.Summary({0: dict(same, weights='aa' * 32),
                           1: dict(same, weights='bb' * 32)})
  assert ('final weights DIFFER: worker 0 sha256 %s, worker 1 sha256 %s' %
          ('aa' * 8, 'bb' * 8)) in text
  assert 'final global step 5;' in text
  assert 'no worker reported its final weights' in launcher.Summary({0: {}})


def test_summary_is_read_from_the_log_files_with_log_dir(tmp_path, capfd):
  script = _Script(tmp_path, """\
      print('Final metrics (global step 3): {"global_step": 3}')
      print('Final weights: sha256 %s' % ('0f' * 32))
      """)
  code = launcher.main(['--num_workers=2', '--log_dir=%s' % (tmp_path / 'l'),
                        '--script=%s' % script, '--', str(tmp_path)])
  assert code == 0
  out, err = capfd.readouterr()
  assert not out
  assert err.strip().splitlines()[-1] == (
      'launcher: 2 worker(s) finished; final global step 3; final weights '
      'identical on every worker (sha256 %s).' % ('0f' * 8))


def test_console_script_help_exits_0_and_names_the_module_command(onednn):
  # The console script's own function, called as its installed wrapper
  # calls it (nothing here needs the wrapper on PATH).
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn)
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  proc = subprocess.run(
      [sys.executable, '-c', 'import sys; sys.argv = ["tf-learner-launch", '
       '"--help"]; from learner.launcher import Main; Main()'],
      env=env, capture_output=True, text=True, timeout=240)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.startswith('usage: python -m learner.launcher')
  assert '--tf_log_level' in proc.stdout
  # TensorFlow loaded (learner.training), quietly.
  for noise in ('cpu_feature_guard', 'oneDNN', 'I0000', 'W0000',
                'absl::InitializeLog'):
    assert noise not in proc.stderr, proc.stderr[-2000:]
