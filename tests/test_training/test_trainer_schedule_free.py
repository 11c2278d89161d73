"""Every job evaluates a schedule-free run on its eval weights x (issue 24.2).

regression.LinearRegression (y = w*x + b) trained by ScheduleFreeSGD
(momentum b1 = 0.9) for 30 steps, checkpoints at 10, 20, 30. The expected
values are computed by hand from each checkpoint's y (the variable) and z
(the slot): x = (y - (1 - b1) z) / b1, the relation y = b1 x + (1 - b1) z
the rule keeps; the loss is the eval set's MSE at x, in numpy. Then
--mode=train_and_eval (its evaluations), --mode=eval, --mode=evaler and
--mode=export must all give x, not y; a run resumed at step 20 ends
bit-identical to one that never stopped.
"""

import io
import shutil

import numpy as np
import pytest
import tensorflow as tf

from params import registry
from learner import optimizers
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import export as export_lib
from learner.training.jobs import trainer as trainer_lib

_KEY = 'regression.LinearRegression'
_B1 = 0.9
_SF = optimizers.ScheduleFreeSGD


def _Params(max_steps=30):
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=max_steps, save_interval_steps=10,
                   save_max_to_keep=5, summary_interval_steps=10,
                   log_interval_steps=10)
  p.task.eval.interval_steps = 10
  lp = p.task.train.learner
  lp.optimizer_fn = None
  lp.learning_rate = 0.1
  lp.optimizer = _SF.Params().Set(momentum=_B1, warmup_steps=5)
  return p


def _Run(logdir, mode='train_and_eval', max_steps=30):
  out = io.StringIO()
  t = trainer_lib.Trainer(_Params(max_steps), str(logdir), mode=mode,
                          stream=out)
  return t, t.Run(), out.getvalue()


def _Key(reader, suffix):
  found = [k for k in reader.get_variable_to_shape_map()
           if k.endswith(suffix)]
  assert len(found) == 1, (suffix, found)
  return reader.get_tensor(found[0])


def _Expected(prefix):
  """{'w', 'b', 'loss'} at x, by hand from the checkpoint's y and z."""
  reader = tf.train.load_checkpoint(prefix)
  out = {}
  for name in ('w', 'b'):
    y = float(reader.get_tensor('task/_private_vars/%s/.ATTRIBUTES/'
                                'VARIABLE_VALUE' % name))
    z = float(_Key(reader, '/_slots/regression_%s/z/.ATTRIBUTES/'
                   'VARIABLE_VALUE' % name))
    x = (y - (1. - _B1) * z) / _B1
    stored = float(_Key(reader, _SF.AverageCheckpointKeySuffix(
        'regression/%s' % name)))
    np.testing.assert_allclose(stored, x, rtol=1e-5, atol=1e-6)
    assert abs(x - y) > 1e-3, (name, x, y)  # x differs from the weights.
    out[name] = x
  sq = [(out['w'] * batch['x'].numpy().astype(np.float64) + out['b'] -
         batch['y'].numpy()) ** 2
        for batch in _Params().eval_input.Instantiate().GetDataset()]
  out['loss'] = float(np.concatenate(sq).mean())
  return out


def _AssertValues(got, want):
  for k in ('w', 'b', 'loss'):
    np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6,
                               err_msg=k)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """train_and_eval, 30 steps: (logdir, trainer, final metrics, output)."""
  logdir = tmp_path_factory.mktemp('sf') / 'run'
  t, r, out = _Run(logdir)
  return logdir, t, r, out


def test_train_and_eval_evaluates_on_x(trained):
  logdir, t, r, out = trained
  assert 'Evaluating on the schedule-free average x of the weights.' in out
  opt = t.task.learner.optimizer
  assert t._EmaContexts(t.task) == [opt]  # pylint: disable=protected-access
  _AssertValues(r, _Expected(str(logdir / 'ckpt' / 'ckpt-30')))
  # After the evaluation the variables hold y again (the swap is undone).
  reader = tf.train.load_checkpoint(str(logdir / 'ckpt' / 'ckpt-30'))
  assert float(t.task.vars.w.numpy()) == float(reader.get_tensor(
      'task/_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE'))


def test_mode_eval_restores_x_from_the_checkpoint(trained, tmp_path):
  logdir = tmp_path / 'run'
  shutil.copytree(trained[0], logdir)
  t, r, out = _Run(logdir, mode='eval')
  assert t.task._learners is None  # pylint: disable=protected-access
  assert 'schedule-free average x of the weights (2 variables restored' in out
  assert r['global_step'] == 30
  _AssertValues(r, _Expected(str(logdir / 'ckpt' / 'ckpt-30')))
  for k in ('w', 'b', 'loss'):
    assert r[k] == trained[2][k], k  # As train_and_eval's final evaluation.


def test_mode_evaler_evaluates_each_checkpoint_on_its_x(trained, tmp_path):
  logdir = tmp_path / 'run'
  shutil.copytree(trained[0], logdir)
  record = evaler_lib.Evaler(_Params(), str(logdir), timeout_secs=0.5,
                             poll_secs=0, stream=io.StringIO()).Run()
  assert [e['global_step'] for e in record['evaluations']] == [10, 20, 30]
  for e in record['evaluations']:
    _AssertValues(e['metrics'], _Expected(e['checkpoint']))


def test_mode_export_serves_x(trained, tmp_path):
  logdir = tmp_path / 'run'
  shutil.copytree(trained[0], logdir)
  out = io.StringIO()
  export_dir = export_lib.Export(_Params(), str(logdir), stream=out)
  assert '(schedule-free average x of 2 variables)' in out.getvalue()
  want = _Expected(str(logdir / 'ckpt' / 'ckpt-30'))
  inputs = np.array([0.0, 1.0, -2.5], np.float32)
  got = tf.saved_model.load(export_dir).signatures['serving_default'](
      x=tf.constant(inputs))['y'].numpy()
  np.testing.assert_allclose(got, want['w'] * inputs + want['b'], rtol=1e-5)


def test_a_run_resumed_at_step_20_is_bit_identical(trained, tmp_path):
  logdir = tmp_path / 'resumed'
  _Run(logdir, mode='train', max_steps=20)
  _, _, out = _Run(logdir, mode='train', max_steps=30)
  assert 'Resumed from' in out
  a = tf.train.load_checkpoint(str(logdir / 'ckpt' / 'ckpt-30'))
  b = tf.train.load_checkpoint(str(trained[0] / 'ckpt' / 'ckpt-30'))
  keys = sorted(k for k in b.get_variable_to_shape_map()
                if '/optimizer/' in k or k.startswith('task/_private_vars/'))
  assert any(k.endswith('lr_max/.ATTRIBUTES/VARIABLE_VALUE') for k in keys)
  assert any('/_slots/' in k for k in keys)
  for k in keys:
    np.testing.assert_array_equal(a.get_tensor(k), b.get_tensor(k),
                                  err_msg=k)
