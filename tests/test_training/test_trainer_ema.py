"""Trainer: evaluation finds EMA averages by asking the optimizer tree.

The trainer asks `optimizer.EvalAverages()` (a built task) and
`EvalAverageClasses(params)` (mode eval, no optimizer built), so an Ema under
another wrapper, or a subclass with another name, is evaluated on its
averages in both modes.
"""

import io

import numpy as np
import tensorflow as tf

from params import NestedMap
from params import registry
from learner import optimizers
from learner.optimizers.wrappers import accumulation
from learner.optimizers.wrappers import ema as ema_lib
from learner.optimizers.wrappers import lars
from learner.optimizers.var_grad import VarGrad
from learner.training.jobs import trainer as trainer_lib

_KEY = 'regression.LinearRegression'


class PolyakAverage(ema_lib.Ema):
  """An Ema by another name: the trainer must not look at class names."""


def _Params(optimizer, max_steps=40):
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=max_steps, save_interval_steps=20,
                   summary_interval_steps=10, log_interval_steps=10)
  p.task.eval.interval_steps = 20
  lp = p.task.train.learner
  lp.optimizer_fn = None
  lp.learning_rate = 0.05
  lp.optimizer = optimizer
  return p


def _Run(logdir, p, mode='train_and_eval'):
  out = io.StringIO()
  t = trainer_lib.Trainer(p, str(logdir), mode=mode, stream=out)
  result = t.Run()
  return t, result, out.getvalue()


def _CheckBothModesUseTheAverages(tmp_path, optimizer, ema_path):
  p = _Params(optimizer)
  t, r, out = _Run(tmp_path, p)
  assert 'Evaluating on the EMA averages' in out
  ema = t.task.learner.optimizer
  for name in ema_path:
    ema = ema.children[name]
  assert t._EmaContexts(t.task) == [ema]  # pylint: disable=protected-access
  avg_w = float(ema.GetAverage(t.task.vars.w).numpy())
  raw_w = float(t.task.vars.w.numpy())
  assert abs(avg_w - raw_w) > 1e-3  # averages lag the weights here
  np.testing.assert_allclose(r['w'], avg_w, rtol=1e-6)
  t2, r2, out2 = _Run(tmp_path, p, mode='eval')
  assert 'EMA averages of the weights (2 variables restored' in out2
  assert t2.task._learners is None  # pylint: disable=protected-access
  np.testing.assert_allclose(r2['w'], avg_w, rtol=1e-6)


def test_an_ema_under_accumulation_and_lars_is_evaluated_on_its_averages(
    tmp_path):
  ema = ema_lib.Ema.Params().Set(decay=0.9, optimizer=lars.Lars.Params().Set(
      eta=1.0, exclude_1d=False, optimizer=optimizers.Momentum.Params()))
  _CheckBothModesUseTheAverages(
      tmp_path, accumulation.GradientAccumulation.Params().Set(
          num_batches=2, optimizer=ema), ['optimizer'])


def test_an_ema_subclass_by_another_name_is_evaluated_on_its_averages(
    tmp_path):
  _CheckBothModesUseTheAverages(
      tmp_path, lars.Lars.Params().Set(
          eta=1.0, exclude_1d=False, optimizer=PolyakAverage.Params().Set(
              decay=0.9, optimizer=optimizers.Momentum.Params())),
      ['optimizer'])


def test_no_averages_no_swap_and_no_message(tmp_path):
  t, _, out = _Run(tmp_path, _Params(optimizers.Momentum.Params(), 20))
  assert 'EMA' not in out
  assert t._EmaContexts(t.task) == []  # pylint: disable=protected-access


class _FakeTask:

  def __init__(self, variables):
    self._vars = variables

  def ModelVars(self):
    return self._vars


def test_load_ema_averages_reads_the_keys_the_ema_class_gives(tmp_path):
  # Accum(1) -> Ema(0.9) -> SGD, lr 0.1, g 0.5 twice:
  # w 1 -> 0.95 -> 0.90; avg 1 -> 0.995 -> 0.9 * 0.995 + 0.1 * 0.9 = 0.9855.
  w = tf.Variable(1.0, name='w')
  p = accumulation.GradientAccumulation.Params().Set(
      name='opt', num_batches=1, optimizer=ema_lib.Ema.Params().Set(
          decay=0.9, optimizer=optimizers.SGD.Params()))
  opt = p.Instantiate().Bind([w])
  for _ in range(2):
    opt.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant(0.5))))
  path = tf.train.Checkpoint(opt=opt).save(str(tmp_path / 'ckpt'))
  fresh = tf.Variable(0.0, name='w')
  n = trainer_lib.LoadEmaAverages(path, _FakeTask(NestedMap(w=fresh)),
                                  p.cls.EvalAverageClasses(p))
  assert n == 1
  np.testing.assert_allclose(fresh.numpy(), 0.9855, rtol=1e-6)
