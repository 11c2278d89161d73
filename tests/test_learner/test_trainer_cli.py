"""The trainer as a command: --list, bad flags, and kill -9 + resume.

The flag tests run the trainer's main() in-process; the kill test runs
`python -m learner.trainer` in subprocesses, as a user would.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from learner.training import trainer as trainer_lib

_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONUNBUFFERED='1',
            CUDA_VISIBLE_DEVICES='')
_DEADLINE_SECS = 240


def _Cmd(*args):
  return [sys.executable, '-m', 'learner.trainer'] + list(args)


def _Main(argv, capsys):
  """Runs the trainer's main() in-process on command-line flags."""
  trainer_lib.DefineFlags()
  FLAGS = trainer_lib.FLAGS  # pylint: disable=invalid-name
  try:
    FLAGS(['trainer'] + argv)
    code = trainer_lib.main([])
  finally:
    FLAGS.unparse_flags()
  out = capsys.readouterr()
  return code, out.out, out.err


def test_list_prints_every_experiment_with_one_line(capsys):
  code, out, _ = _Main(['--list'], capsys)
  assert code == 0
  lines = [l for l in out.splitlines() if l.strip()]
  keys = [l.split()[0] for l in lines]
  for key in ('digits.MlpMomentum', 'digits.MlpLarsAccumulate',
              'regression.LinearRegression', 'diabetes.LinearAdamL2',
              'multi.TwoLearners'):
    assert key in keys
  assert all(len(l.split()) > 1 for l in lines)  # each has a description


def test_typo_in_override_fails_before_anything_starts(tmp_path, capsys):
  logdir = tmp_path / 'never'
  code, _, err = _Main(
      ['--model=regression.LinearRegression', '--logdir=%s' % logdir,
       '--params_override=task.train.learner.learning_rat : 0.1'], capsys)
  assert code == 2
  assert "Did you mean 'learning_rate'" in err
  assert not logdir.exists()


def test_unknown_model_fails_with_close_keys(tmp_path, capsys):
  code, _, err = _Main(['--model=digits.MlpMomentun',
                        '--logdir=%s' % tmp_path], capsys)
  assert code == 2
  assert "Did you mean 'digits.MlpMomentum'" in err


def test_missing_logdir_or_model_is_one_line_not_the_usage_page(capsys):
  code, out, err = _Main(['--model=digits.MlpMomentum'], capsys)
  assert code == 2 and not out
  assert err.strip().count('\n') == 0 and '--logdir is required' in err
  code, out, err = _Main([], capsys)
  assert code == 2 and not out
  assert err.strip().count('\n') == 0 and '--model is required' in err


def _KillArgs(logdir):
  return _Cmd(
      '--model=regression.LinearRegression', '--logdir=%s' % logdir,
      '--mode=train_and_eval', '--seed=3',
      '--params_override=task.train.max_steps : 40; '
      'task.train.save_interval_steps : 7; task.eval.interval_steps : 20; '
      'task.train.summary_interval_steps : 5; '
      'task.train.log_interval_steps : 3; task.train.steps_per_loop : 2')


def _Values(prefix):
  r = tf.train.load_checkpoint(prefix)
  return {k: r.get_tensor(k) for k in r.get_variable_to_shape_map()
          if 'save_counter' not in k and 'ITERATOR_STATE' not in k and
          k != '_CHECKPOINTABLE_OBJECT_GRAPH'}


@pytest.mark.slow
def test_kill_9_at_a_random_step_then_restart_equals_uninterrupted(tmp_path):
  seed = int(time.time())
  kill_step = random.Random(seed).randint(1, 36)
  print('kill step %d (random seed %d)' % (kill_step, seed))
  straight = tmp_path / 'straight'
  killed = tmp_path / 'killed'
  ref = subprocess.Popen(_KillArgs(straight), env=_ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  victim = subprocess.Popen(_KillArgs(killed), env=_ENV,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
  start = time.time()
  was_killed = False
  try:
    for line in victim.stdout:
      if time.time() - start > _DEADLINE_SECS:
        break
      if line.startswith('step '):
        step = int(line.split()[1].split('/')[0])
        if step >= kill_step:
          os.kill(victim.pid, signal.SIGKILL)
          was_killed = True
          break
  finally:
    if victim.poll() is None and not was_killed:
      os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    victim.stdout.close()
  assert was_killed and victim.returncode == -signal.SIGKILL
  assert not (killed / 'metrics.json').exists()
  restart = subprocess.run(_KillArgs(killed), env=_ENV, capture_output=True,
                           text=True, timeout=_DEADLINE_SECS)
  assert restart.returncode == 0, restart.stderr[-2000:]
  _, ref_err = ref.communicate(timeout=_DEADLINE_SECS)
  assert ref.returncode == 0, ref_err[-2000:]

  with open(straight / 'metrics.json') as f:
    m_ref = json.load(f)
  with open(killed / 'metrics.json') as f:
    m_killed = json.load(f)
  assert m_ref == m_killed
  assert m_ref['global_step'] == 40 and abs(m_ref['w'] - 5.0) < 1.0
  a = _Values(str(straight / 'ckpt' / 'ckpt-40'))
  b = _Values(str(killed / 'ckpt' / 'ckpt-40'))
  assert sorted(a) == sorted(b)
  # Weights, momentum slots, counters and the global step.
  assert any(k.endswith('global_step/.ATTRIBUTES/VARIABLE_VALUE') for k in a)
  assert any('_slots' in k for k in a), sorted(a)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ---- quiet output and --help (issue 15, item 5) ----------------------------


def test_help_exits_0_lists_our_flags_and_prints_no_tf_start_up_lines():
  env = dict(_ENV)
  env.pop('TF_CPP_MIN_LOG_LEVEL')  # The trainer's own quiet default.
  proc = subprocess.run(_Cmd('--help'), env=env, capture_output=True,
                        text=True, timeout=_DEADLINE_SECS)
  assert proc.returncode == 0, proc.stderr[-2000:]
  for flag in ('--model', '--logdir', '--strategy', '--tf_log_level',
               '--worker_register_timeout_secs'):
    assert flag in proc.stdout
  assert 'python -m learner.trainer --model=digits.MlpMomentum' in proc.stdout
  for noise in ('cpu_feature_guard', 'oneDNN', 'I0000', 'W0000',
                'absl::InitializeLog'):
    assert noise not in proc.stderr, proc.stderr[-2000:]


def test_tf_log_level_flag_then_the_users_setting_then_quiet():
  from learner import tf_log  # pylint: disable=g-import-not-at-top
  env = {}
  assert tf_log.QuietTensorFlow(['trainer', '--model=m'], env) == '3'
  assert env == {'TF_CPP_MIN_LOG_LEVEL': '3'}
  env = {'TF_CPP_MIN_LOG_LEVEL': '1'}  # The user's own wins over quiet ...
  assert tf_log.QuietTensorFlow(['trainer'], env) == '1'
  # ... and the flag over both, in either spelling.
  assert tf_log.QuietTensorFlow(['trainer', '--tf_log_level=0'], env) == '0'
  assert tf_log.QuietTensorFlow(['trainer', '-tf_log_level', '2'], env) == '2'
  # The launcher's worker arguments (after --) are not the launcher's.
  assert tf_log.FlagValue(['--num_workers=2', '--', '--tf_log_level=0']) is None


def test_ctrl_c_while_tensorflow_loads_is_one_line_exit_130(tmp_path):
  # Found by the fresh-user trial: an interrupt in the first seconds was the
  # 45-line traceback of an interrupted import.
  proc = subprocess.Popen(
      [sys.executable, '-m', 'learner.trainer', '--model=digits.MlpMomentum',
       '--logdir=%s' % (tmp_path / 'run')], env=_ENV,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  time.sleep(1.0)  # Loading TensorFlow alone takes longer than this.
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 130, err
  assert err.strip() == ('Interrupted while starting, before training: '
                         'nothing was written.'), err
  assert not (tmp_path / 'run').exists()


def test_help_lists_the_jobs_flags_too():
  r = subprocess.run([sys.executable, '-m', 'learner.trainer', '--help'],
                     env=_ENV, capture_output=True, text=True, timeout=120)
  assert r.returncode == 0
  for flag in ('--evaler_timeout_secs', '--evaler_poll_secs',
               '--export_checkpoint', '--model', '--verbose'):
    assert flag in r.stdout, flag
