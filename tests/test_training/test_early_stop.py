"""Early stopping on the dev metric (issue 15.3): the stop evaluation by hand.

Unit tests of `EarlyStop` on scripted metric sequences, then the trainer in
train_and_eval on a task whose dev metric is a scripted function of the
global step, uninterrupted and resumed.
"""

import io
import json
import os

import pytest
import tensorflow as tf

from params import NestedMap
from params import registry
from configs import model_tasks
from learner.training.services import early_stop as early_stop_lib
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import trainer as trainer_lib
import trainer_helpers

# Scripted dev metric ('min'), one value per evaluation at 10, 20, ... 100.
_SCRIPT = [5.0, 3.0, 4.0, 2.0, 2.5, 2.1, 2.2, 1.0, 0.5, 0.4]


def _Stops(values, mode, patience, interval=10):
  es = early_stop_lib.EarlyStop('dev', mode, patience, interval_steps=interval)
  for i, v in enumerate(values):
    if es.Update((i + 1) * interval, v):
      return (i + 1) * interval, es
  return None, es


def test_min_sequence_stops_at_the_third_evaluation_without_a_new_best():
  # Best 5 (10), 3 (20); 4 waits 1 (30); 2 is best (40); 2.5, 2.1, 2.2 wait
  # 1, 2, 3 (50, 60, 70): patience 3 runs out at global step 70.
  step, es = _Stops(_SCRIPT, 'min', 3)
  assert step == 70
  assert es.stopped
  assert es.reason == (
      'Early stop at global step 70: dev 2.2 has not been lower than its best '
      '2 (global step 40) for 3 evaluations (task.eval.early_stop_patience 3)')
  assert es.history == [(10, 5.0), (20, 3.0), (30, 4.0), (40, 2.0),
                        (50, 2.5), (60, 2.1), (70, 2.2)]
  # Patience 4 is never exhausted: 1.0 at 80 is a new best.
  assert _Stops(_SCRIPT, 'min', 4)[0] is None
  # Patience 1: the first evaluation that is not a new best, 30.
  assert _Stops(_SCRIPT, 'min', 1)[0] == 30


def test_max_mode_and_a_tie_is_not_an_improvement():
  # 0.5 best, 0.6 best, 0.6 ties (waits 1), 0.55 waits 2: stops at 40.
  step, _ = _Stops([0.5, 0.6, 0.6, 0.55, 0.7], 'max', 2)
  assert step == 40


def test_patience_zero_never_stops_and_writes_nothing(tmp_path):
  es = early_stop_lib.EarlyStop('dev', 'min', 0,
                                path=str(tmp_path / 'early_stop.json'))
  assert not any(es.Update(s, 1.0) for s in range(10, 200, 10))
  assert not es.stopped and es.Summary() == {}
  assert not os.path.exists(tmp_path / 'early_stop.json')


def test_off_grid_and_repeated_steps_are_not_counted():
  es = early_stop_lib.EarlyStop('dev', 'min', 2, interval_steps=10)
  assert not es.Update(10, 1.0)
  assert not es.Update(15, 9.0)   # not a multiple of 10: ignored
  assert not es.Update(10, 9.0)   # step 10 already counted
  assert not es.Update(20, 9.0)   # waits 1
  assert es.Update(30, 9.0)       # waits 2: stops
  assert es.history == [(10, 1.0), (20, 9.0), (30, 9.0)]


def test_history_is_replayed_up_to_the_resumed_step(tmp_path):
  path = str(tmp_path / 'early_stop.json')
  es = early_stop_lib.EarlyStop('dev', 'min', 3, interval_steps=10, path=path)
  for i, v in enumerate(_SCRIPT[:6]):
    es.Update((i + 1) * 10, v)
  # Resumed at step 40: the evaluations at 50 and 60 are dropped and redone.
  again = early_stop_lib.EarlyStop('dev', 'min', 3, interval_steps=10,
                                   path=path, resume_step=40)
  assert again.history == [(10, 5.0), (20, 3.0), (30, 4.0), (40, 2.0)]
  assert [again.Update(s, v) for s, v in ((50, 2.5), (60, 2.1), (70, 2.2))] \
      == [False, False, True]
  with open(path) as f:
    state = json.load(f)
  assert state['stopped_at'] == 70
  assert early_stop_lib.StoppedAt(str(tmp_path)) == 70


def test_patience_without_dev_metric_or_evaluations_is_refused():
  p = registry.GetParams('regression.LinearRegression').task.eval
  p.early_stop_patience = 2
  p.dev_metric = None
  with pytest.raises(ValueError, match='dev_metric is None'):
    early_stop_lib.EarlyStop.FromParams(p, '/tmp/unused', 0, evaluating=True)
  p.dev_metric = 'loss'
  p.interval_steps = 0
  with pytest.raises(ValueError, match='interval_steps is 0'):
    early_stop_lib.EarlyStop.FromParams(p, '/tmp/unused', 0, evaluating=True)
  for bad in (-1, 1.5, True):
    p.early_stop_patience = bad
    with pytest.raises(ValueError, match=r'task.eval.early_stop_patience must '
                       r'be an int >= 0 .*got %r' % (bad,)):
      early_stop_lib.EarlyStop.FromParams(p, '/tmp/unused', 0,
                                          evaluating=False)
  p.early_stop_patience = 2
  # Mode 'train' evaluates nothing: early stopping is simply off.
  assert not early_stop_lib.EarlyStop.FromParams(
      p, '/tmp/unused', 0, evaluating=False).Update(10, 1.0)


class ScriptedDevTask(model_tasks.LinearRegressionTask):
  """Linear regression whose eval metric 'dev' is _SCRIPT[step / 10 - 1]."""

  def ComputeLoss(self, theta, predictions, batch):
    metrics, per_example = super().ComputeLoss(theta, predictions, batch)
    index = tf.clip_by_value(self.global_step // 10 - 1, 0, len(_SCRIPT) - 1)
    metrics.dev = (tf.gather(tf.constant(_SCRIPT), index), tf.constant(1.0))
    return NestedMap(metrics), per_example


def _Params(max_steps=100, patience=3):
  p = registry.GetParams('regression.LinearRegression')
  p.task.cls = ScriptedDevTask
  p.task.train.Set(max_steps=max_steps, save_interval_steps=20,
                   summary_interval_steps=10, log_interval_steps=10)
  p.task.eval.Set(interval_steps=10, dev_metric='dev', dev_metric_mode='min',
                  early_stop_patience=patience)
  return p


def _Run(logdir, p):
  out = io.StringIO()
  result = trainer_lib.Trainer(p, str(logdir), mode='train_and_eval',
                               stream=out).Run()
  return result, out.getvalue()


def _CkptStep(logdir):
  path = tf.train.latest_checkpoint(os.path.join(str(logdir), 'ckpt'))
  return path, int(tf.train.load_checkpoint(path).get_tensor(
      'task/_global_step/.ATTRIBUTES/VARIABLE_VALUE'))


def test_trainer_stops_at_the_expected_evaluation_and_says_why(tmp_path):
  result, out = _Run(tmp_path, _Params())
  assert result['global_step'] == 70
  assert result['early_stopped'] is True
  assert 'global step 70' in result['early_stop_reason']
  assert 'best 2 (global step 40)' in result['early_stop_reason']
  with open(tmp_path / 'metrics.json') as f:
    assert json.load(f) == result
  assert result['dev'] == pytest.approx(2.2)  # The final eval, at 70.
  assert 'Early stop at global step 70' in out
  # The checkpoint of the stop step is saved (70 is not a save step).
  path, step = _CkptStep(tmp_path)
  assert (os.path.basename(path), step) == ('ckpt-70', 70)
  # A rerun does not train on, and writes nothing: it is a finished run.
  files = trainer_helpers.Files(tmp_path)
  again, out = _Run(tmp_path, _Params())
  assert again['global_step'] == 70 and again['early_stopped'] is True
  assert _CkptStep(tmp_path)[1] == 70
  assert 'nothing was run or written' in out
  assert trainer_helpers.Files(tmp_path) == files



def test_a_run_resumed_with_more_steps_stops_where_an_uninterrupted_one_does(
    tmp_path):
  # Ends at max_steps 50 (its final evaluation, at 50, counts: waits 1) ...
  first, _ = _Run(tmp_path, _Params(max_steps=50))
  assert first['global_step'] == 50 and 'early_stopped' not in first
  # ... and resumed to 100: 60 waits 2, 70 waits 3 and stops.
  result, _ = _Run(tmp_path, _Params(max_steps=100))
  assert result['global_step'] == 70 and result['early_stopped'] is True
  assert 'for 3 evaluations' in result['early_stop_reason']


def test_the_evaler_stops_after_the_checkpoint_where_training_stopped(
    tmp_path):

  _Run(tmp_path, _Params())  # Stops early at 70 (of max_steps 100).
  ev = evaler_lib.Evaler(_Params(), str(tmp_path), timeout_secs=600,
                         poll_secs=0, stream=io.StringIO())
  record = ev.Run()  # Would wait 600 s if it waited for step 100.
  # The checkpoints kept (save_max_to_keep 3).
  assert ev.evaluated_steps == [40, 60, 70]
  assert record['stopped'] == ('evaluated the final checkpoint (global step '
                               '70)')
  assert record['evaluations'][-1]['metrics']['dev'] == pytest.approx(2.2)
