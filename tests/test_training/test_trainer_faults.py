"""The trainer under numerical and checkpoint faults (issue 12, items 3-4).

regression.LinearRegression (y = 5x + 2 + noise; w, b start at 0; Momentum
0.9) with a learning rate made absurd on purpose:
  * 1e30: step 1 applies w, b ~ 1e30 (finite); from step 2 on the squared
    error ~ 1e60 overflows float32, so every later step is skipped as
    'non-finite loss' and changes nothing.
  * 3e38: step 1's update 3e38 * g overflows a weight to Inf unless
    `check_finite_weights` undoes it: float32 ends at 3.4e38 and the first
    batch's gradient is (-1.88, -2.49) for (w, b) (data and shuffle seeded
    by the run's seed; any |g| > 1.14 overflows). 1e38 overflowed only for
    batches with |g| > 3.4, so it passed or failed with the shuffle.
"""

import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from params import registry
from learner.training.services import checkpointer as checkpointer_lib
from learner.training.services import skipped_steps
from learner.training.jobs import trainer as trainer_lib
import trainer_helpers

_KEY = 'regression.LinearRegression'


def _Params(lr, limit=100, check=False, max_steps=30):
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=max_steps, save_interval_steps=5,
                   summary_interval_steps=5, log_interval_steps=10,
                   max_consecutive_skipped_steps=limit)
  p.task.train.learner.Set(learning_rate=lr, check_finite_weights=check)
  return p


def _Trainer(logdir, p, mode='train'):
  out = io.StringIO()
  return trainer_lib.Trainer(p, str(logdir), mode=mode, stream=out), out


def _Ckpts(logdir):
  d = os.path.join(str(logdir), 'ckpt')
  return sorted(f for f in os.listdir(d) if f.startswith('ckpt-'))


_Main = trainer_helpers.RunMain


def test_all_inf_run_stops_at_the_limit_and_keeps_the_last_good_checkpoint(
    tmp_path):
  # Loops end every 5 steps. Step 1 applies; steps 2.. skip. At step 5: 4 in
  # a row < 7, ckpt-5 saved (the state after step 1: skips change nothing).
  # At step 10: 9 in a row >= 7: stop, nothing saved.
  t, out = _Trainer(tmp_path, _Params(1e30, limit=7))
  with pytest.raises(skipped_steps.TooManySkippedStepsError) as e:
    t.Run()
  msg = str(e.value)
  assert ("learner 'learner' skipped 9 updates in a row up to global step 10 "
          "(non-finite loss: 9)" in msg)
  assert 'max_consecutive_skipped_steps : 7' in msg
  assert str(tmp_path / 'ckpt' / 'ckpt-5') in msg
  assert 'The weights are finite' in msg and '\n' not in msg
  assert _Ckpts(tmp_path) == ['ckpt-5.data-00000-of-00001', 'ckpt-5.index']
  assert not (tmp_path / 'metrics.json').exists()
  assert ("WARNING: learner 'learner' skipped 9 update(s) in global steps "
          "1-10 (non-finite loss: 9); 9 in a row now" in out.getvalue())
  # ckpt-5 holds exactly the weights in memory at the stop.
  reader = tf.train.load_checkpoint(str(tmp_path / 'ckpt' / 'ckpt-5'))
  keys = checkpointer_lib.VariableCheckpointKeys(t.task)
  for v in t.task.ModelVars().Flatten():
    name = v.name[:-2]
    assert abs(float(v.numpy())) > 1e29  # The one applied update.
    assert reader.get_tensor(keys[name]) == v.numpy()


def test_all_inf_run_exits_1_with_one_error_line(tmp_path, capsys):
  code, _, err = _Main([
      '--model=%s' % _KEY, '--logdir=%s' % tmp_path, '--params_override='
      'task.train.learner.learning_rate : 1e30; task.train.max_steps : 300; '
      'task.train.max_consecutive_skipped_steps : 20'], capsys)
  assert code == 1
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('ERROR: learner ')
  assert 'in a row' in lines[0]


def test_weights_overflowed_by_an_update_are_never_saved(tmp_path):
  t, _ = _Trainer(tmp_path, _Params(3e38))
  with pytest.raises(skipped_steps.NonFiniteTrainingError) as e:
    t.Run()
  values = {v.name[:-2]: float(v.numpy()) for v in t.task.ModelVars().Flatten()}
  bad = sorted(n for n, x in values.items() if not np.isfinite(x))
  assert bad, values  # 3e38 * |g| > 3.4e38 for one weight at least.
  assert str(e.value).startswith('Not saving ckpt-5: the weights %s' % bad)
  assert _Ckpts(tmp_path) == []


def test_checked_weights_skip_the_overflow_and_every_mode_counts_skips(
    tmp_path):
  p = _Params(3e38, limit=0, check=True, max_steps=20)
  t, out = _Trainer(tmp_path, p, mode='train_and_eval')
  result = t.Run()
  lrn = t.task.learners[0]
  applied = int(lrn.num_updates.numpy())
  assert result['num_skipped_steps'] == 20 - applied > 0
  assert 'non-finite updated weights' in out.getvalue()
  for v in t.task.ModelVars().Flatten():
    assert np.isfinite(v.numpy())
  with open(tmp_path / 'metrics.json') as f:
    assert json.load(f)['num_skipped_steps'] == 20 - applied
  # An eval job reports the count the checkpoint holds.
  t2, _ = _Trainer(tmp_path, p, mode='eval')
  assert t2.Run()['num_skipped_steps'] == 20 - applied


def test_lost_state_file_resumes_from_the_newest_checkpoint(tmp_path):
  p = _Params(0.05, max_steps=10)
  _Trainer(tmp_path, p)[0].Run()
  os.remove(tmp_path / 'ckpt' / 'checkpoint')
  t, out = _Trainer(tmp_path, _Params(0.05, max_steps=15))
  assert t.Run()['global_step'] == 15
  text = out.getvalue()
  assert 'checkpoint is missing; found 2 complete checkpoint(s)' in text
  assert 'Resumed from %s at global step 10.' % (
      tmp_path / 'ckpt' / 'ckpt-10') in text
  assert 'ckpt-15.index' in _Ckpts(tmp_path)


def test_unwritable_checkpoint_directory_fails_before_training(tmp_path):
  tmp_path.joinpath('ckpt').write_text('a file, not a directory')
  t, _ = _Trainer(tmp_path, _Params(0.05))
  with pytest.raises(checkpointer_lib.CheckpointError,
                     match='cannot be written.*nothing was trained'):
    t.Run()
  assert not (tmp_path / 'model_analysis.txt').exists()
  assert int(t.task.global_step.numpy()) == 0


def test_eval_of_another_models_checkpoint_is_refused(tmp_path, capsys):
  _Trainer(tmp_path, _Params(0.05, max_steps=5))[0].Run()
  # Without params.txt (which names the other task and is refused first,
  # see test_logdir_guard.py) the checkpoint itself is refused.
  os.remove(str(tmp_path / 'params.txt'))
  code, _, err = _Main(['--model=digits.MlpMomentum', '--mode=eval',
                        '--logdir=%s' % tmp_path], capsys)
  assert code == 2
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('ERROR: Checkpoint ')
  assert 'lacks' in lines[0] and "'digits/" in lines[0]
  assert 'choose another --logdir' in lines[0]
  assert not (tmp_path / 'metrics.json').exists() or json.loads(
      (tmp_path / 'metrics.json').read_text()).get('accuracy') is None
