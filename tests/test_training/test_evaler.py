"""The evaler job (issue 15.3): each checkpoint evaluated exactly once.

regression.LinearRegression (w, b; fast). Each evaluation is checked
against the metrics computed by hand with numpy from the checkpoint's
w and b and the eval split's arrays, and against a one-shot
`--mode=eval` of the same checkpoint.
"""

import io
import os
import shutil
import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from params import registry
from learner import optimizers
from learner.optimizers.wrappers import ema as ema_lib
from learner.training.services import checkpointer as checkpointer_lib
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import cli as cli_lib

_KEY = 'regression.LinearRegression'
_VAR = 'task/_private_vars/%s/.ATTRIBUTES/VARIABLE_VALUE'


def _Params(max_steps=60):
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=max_steps, save_interval_steps=20,
                   save_max_to_keep=10, summary_interval_steps=10,
                   log_interval_steps=10)
  return p


def _Train(logdir, p, mode='train'):
  return trainer_lib.Trainer(p, str(logdir), mode=mode,
                             stream=io.StringIO()).Run()


def _Evaler(logdir, p, timeout=0.5):
  out = io.StringIO()
  ev = evaler_lib.Evaler(p, str(logdir), timeout_secs=timeout, poll_secs=0,
                         stream=out)
  record = ev.Run()
  return ev, record, out.getvalue()


def _ByHand(ckpt_path):
  """loss = mean((w x + b - y)^2) over the test split, w and b as saved."""
  reader = tf.train.load_checkpoint(ckpt_path)
  w, b = (float(reader.get_tensor(_VAR % n)) for n in ('w', 'b'))
  arrays = _Params().eval_input.Instantiate().LoadArrays()
  x, y = (arrays[k].astype(np.float64) for k in ('x', 'y'))
  return {'loss': float(np.mean((w * x + b - y) ** 2)), 'w': w, 'b': b}


def _Steps(record):
  return [e['global_step'] for e in record['evaluations']]


def _Files(logdir):
  out = set()
  for root, _, files in os.walk(str(logdir)):
    out.update(os.path.join(root, f) for f in files)
  return out


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  logdir = tmp_path_factory.mktemp('trained')
  _Train(logdir, _Params())
  return logdir


def test_each_checkpoint_once_with_the_metrics_computed_by_hand(trained):
  before = _Files(trained)
  ev, record, out = _Evaler(trained, _Params())
  assert ev.evaluated_steps == [20, 40, 60]
  assert _Steps(record) == [20, 40, 60]
  assert record['stopped'] == 'evaluated the final checkpoint (global step 60)'
  losses = {}
  for e in record['evaluations']:
    assert os.path.basename(e['checkpoint']) == 'ckpt-%d' % e['global_step']
    want = _ByHand(e['checkpoint'])
    np.testing.assert_allclose(e['metrics']['loss'], want['loss'], rtol=1e-5)
    np.testing.assert_allclose(e['metrics']['w'], want['w'], rtol=1e-7)
    np.testing.assert_allclose(e['metrics']['b'], want['b'], rtol=1e-7)
    losses[e['global_step']] = want['loss']
  # The best by the dev metric ('loss', 'min').
  best_step = min(losses, key=losses.get)
  assert record['best']['global_step'] == best_step
  assert record['best']['metric'] == 'loss' and record['best']['mode'] == 'min'
  assert 'Evaler: global step 20 (ckpt-20): b ' in out
  # Only <logdir>/evaler/ was written.
  new = _Files(trained) - before
  assert new and all(f.startswith(os.path.join(str(trained), 'evaler') + os.sep)
                     for f in new), sorted(new)
  # Its own TensorBoard run, at each checkpoint's step (scalars are tensors).
  acc = event_accumulator.EventAccumulator(os.path.join(str(trained),
                                                        'evaler'))
  acc.Reload()
  events = acc.Tensors('loss')
  assert [e.step for e in events] == [20, 40, 60]
  np.testing.assert_allclose(
      [float(tf.make_ndarray(e.tensor_proto)) for e in events],
      [e['metrics']['loss'] for e in record['evaluations']], rtol=1e-6)


def test_metrics_equal_a_one_shot_eval_of_the_same_checkpoint(trained,
                                                              tmp_path):
  record = _Evaler(trained, _Params())[1]  # Already evaluated: no work.
  one_shot = _Train(trained, _Params(), mode='eval')  # Restores ckpt-60.
  assert one_shot['global_step'] == 60
  final = record['evaluations'][-1]
  assert final['global_step'] == 60
  for k in ('loss', 'w', 'b'):
    assert final['metrics'][k] == one_shot[k], k


def test_a_restarted_evaler_does_not_evaluate_a_checkpoint_again(tmp_path):
  _Train(tmp_path, _Params(max_steps=40))
  ev, record, _ = _Evaler(tmp_path, _Params(max_steps=60))
  assert ev.evaluated_steps == [20, 40]
  assert record['stopped'].startswith('timeout: no new checkpoint')
  _Train(tmp_path, _Params(max_steps=60))  # Resumes: ckpt-60.
  ev, record, _ = _Evaler(tmp_path, _Params(max_steps=60))
  assert ev.evaluated_steps == [60]
  assert _Steps(record) == [20, 40, 60]
  ev, record, out = _Evaler(tmp_path, _Params(max_steps=60))
  assert ev.evaluated_steps == [] and _Steps(record) == [20, 40, 60]
  assert 'already evaluated' in record['stopped']
  assert '0 checkpoint(s) evaluated now, 3 in all' in out


def test_evaler_next_to_a_running_trainer_waits_and_misses_none(tmp_path):
  # The evaler starts before any checkpoint exists; the trainer then runs
  # in three stages. Whatever the timing, every checkpoint is evaluated
  # once and the evaler stops by itself after the final one.
  box = {}

  def _RunEvaler():
    box['ev'] = _Evaler(tmp_path, _Params(max_steps=60), timeout=120)[0]

  thread = threading.Thread(target=_RunEvaler)
  thread.start()
  for max_steps in (20, 40, 60):
    _Train(tmp_path, _Params(max_steps=max_steps))
  thread.join(timeout=180)
  assert not thread.is_alive()
  assert box['ev'].evaluated_steps == [20, 40, 60]


def _CheckpointsOnly(trained, logdir):
  """A copy of the run's ckpt/ alone (no params.txt, which is refused first,
  see test_logdir_guard.py): the checkpoints decide."""
  shutil.copytree(os.path.join(str(trained), 'ckpt'),
                  os.path.join(str(logdir), 'ckpt'))
  return str(logdir)


def test_a_checkpoint_of_another_model_is_refused_naming_its_variables(
    trained, tmp_path):
  other = registry.GetParams('diabetes.LinearAdamL2')
  with pytest.raises(checkpointer_lib.CheckpointMismatchError,
                     match=r"lacks 3 variable.*'diabetes/global_step', "
                     r"'diabetes/linear/b', 'diabetes/linear/w'.*--model"):
    evaler_lib.Evaler(other, _CheckpointsOnly(trained, tmp_path),
                      timeout_secs=0.5, stream=io.StringIO()).Run()


def test_evaler_command_line_refusal_is_one_error_line(trained, capsys,
                                                       tmp_path):
  cli_lib.DefineFlags()
  flags = cli_lib.FLAGS
  try:
    flags(['trainer', '--model=diabetes.LinearAdamL2', '--mode=evaler',
           '--logdir=%s' % _CheckpointsOnly(trained, tmp_path),
           '--evaler_timeout_secs=0.5'])
    code = cli_lib.main([])
  finally:
    flags.unparse_flags()
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2
  assert len(err) == 1 and err[0].startswith('ERROR: Checkpoint '), err


def test_an_ema_run_is_evaluated_on_its_averages(tmp_path):
  p = _Params(max_steps=40)
  lp = p.task.train.learner
  lp.optimizer_fn = None
  lp.learning_rate = 0.05
  lp.optimizer = ema_lib.Ema.Params().Set(
      decay=0.9, optimizer=optimizers.Momentum.Params())
  _Train(tmp_path, p)
  record = _Evaler(tmp_path, p)[1]
  one_shot = _Train(tmp_path, p, mode='eval')  # Tested on the averages.
  final = record['evaluations'][-1]['metrics']
  raw_w = float(tf.train.load_checkpoint(
      tf.train.latest_checkpoint(str(tmp_path / 'ckpt'))).get_tensor(
          _VAR % 'w'))
  assert final['w'] == one_shot['w']
  assert abs(final['w'] - raw_w) > 1e-3  # The averages, not the weights.


def test_evaler_without_checkpoints_times_out_and_writes_nothing(tmp_path):
  ev, record, out = _Evaler(tmp_path / 'run', _Params())
  assert ev.evaluated_steps == [] and record['evaluations'] == []
  assert record['stopped'].startswith('timeout: no new checkpoint in ')
  assert 'Evaler stopped: timeout' in out
  assert 'nothing evaluated, nothing written' in out
  assert not os.path.exists(tmp_path / 'run')


def test_evaler_refuses_a_bad_dev_metric_before_writing(tmp_path, capsys):
  # Found by the fresh-user trial: evaler/ was created, then the refusal.
  _Train(tmp_path, _Params(max_steps=20))
  cli_lib.DefineFlags()
  flags = cli_lib.FLAGS
  try:
    flags(['trainer', '--model=' + _KEY, '--mode=evaler',
           '--logdir=%s' % tmp_path, '--evaler_timeout_secs=0.5',
           "--params_override=task.eval.dev_metric : 'acc'"])
    code = cli_lib.main([])
  finally:
    flags.unparse_flags()
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2
  assert len(err) == 1 and err[0].startswith('ERROR: '), err
  assert "dev_metric : 'acc'" in err[0] and "'loss'" in err[0], err
  assert not os.path.exists(tmp_path / 'evaler')


def test_the_trainer_class_runs_no_job_mode():
  # The jobs are evaler.Evaler and export.Export (the command line's
  # --mode takes them all).
  for mode in ('evaler', 'export'):
    with pytest.raises(ValueError, match="mode '%s' is not one of" % mode):
      trainer_lib.Trainer(_Params(), '/tmp/unused', mode=mode)


def test_kept_eval_batches_give_the_metrics_by_hand_twice(trained):
  # EvalBatches reads the eval split once; EvalMetrics over the kept list
  # equals the by-hand loss of the restored weights, on every reuse.
  p = _Params()
  task = p.task.Instantiate()
  ckpt = checkpointer_lib.NewestCheckpoint(
      os.path.join(str(trained), 'ckpt'))
  tf.train.Checkpoint(task=task).read(ckpt).expect_partial()
  batches = evaler_lib.EvalBatches(p)
  want = _ByHand(ckpt)
  for _ in range(2):
    got = evaler_lib.EvalMetrics(p, task, batches=batches)
    np.testing.assert_allclose(got['loss'], want['loss'], rtol=1e-5)
    np.testing.assert_allclose(got['w'], want['w'], rtol=1e-7)
  with pytest.raises(ValueError, match='The eval input yielded no batch'):
    evaler_lib.EvalMetrics(p, task, batches=[])
