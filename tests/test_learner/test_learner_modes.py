"""Learner acceptance of issue 5: execution modes, NaN skipping, two learners,
mixed precision."""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner.optimizers import base as base_optimizer
from learner import optimizers
from learner.learner import Learner
from params import BaseLayer
from schedules import PiecewiseConstantSchedule
from learner.training.cluster import distribution

_RNG = np.random.RandomState(1)
_X = _RNG.randn(3, 8, 3).astype(np.float32)  # 3 steps of batches of 8.
_Y = _RNG.randn(3, 8).astype(np.float32)
_SPLIT = 5  # Replica 0 sees 5 examples, replica 1 sees 3.


class Linear(BaseLayer):
  """y = x.w + b; metrics['loss'] = (mean squared error, batch size)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'lin'
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [3], init=np.array([0.5, -0.5, 0.1], np.float32))
    self.CreateVariable('b', [1], init=0.0)

  def FProp(self, theta, x, y):
    x = tf.cast(x, theta.w.dtype)
    y = tf.cast(y, theta.w.dtype)
    pred = tf.linalg.matvec(x, theta.w) + theta.b[0]
    n = tf.cast(tf.shape(x)[0], tf.float32)
    loss = tf.cast(tf.reduce_mean(tf.square(pred - y)), tf.float32)
    return {'loss': (loss, n)}


def _LearnerParams():
  return Learner.Params().Set(
      name='loss', learning_rate=0.1,
      optimizer=optimizers.Momentum.Params().Set(alpha=0.9),
      clip_gradient_norm_to_value=1.0, l2_regularizer_weight=0.01,
      lr_schedule=PiecewiseConstantSchedule.Params().Set(
          boundaries=[1], values=[1.0, 0.5]))


def _Build():
  task = Linear.Params().Instantiate()
  lrn = _LearnerParams().Instantiate()
  lrn.Bind(task.vars)
  return task, lrn


def _Result(task, lrn, metrics):
  out = {'w': task.vars.w.numpy(), 'b': task.vars.b.numpy(),
         'mom_w': lrn.optimizer.GetSlots(task.vars.w)['momentum'].numpy()}
  for k, (v, w) in metrics.items():
    out['metric/' + k] = (float(np.asarray(v)), float(np.asarray(w)))
  return out


def _RunEager():
  task, lrn = _Build()
  for i in range(3):
    with learner_lib.GradientTape():
      metrics = task.FProp(task.theta, _X[i], _Y[i])
    _, _, m = lrn.Apply(metrics, task.vars)
  return _Result(task, lrn, m)


def _RunFunction(jit):
  task, lrn = _Build()

  @tf.function(jit_compile=jit)
  def Step(x, y):
    metrics = task.FProp(task.theta, x, y)
    return lrn.Apply(metrics, task.vars)[2]

  for i in range(3):
    m = Step(_X[i], _Y[i])
  return _Result(task, lrn, m)


def _RunMirrored():
  strategy = distribution.CreateStrategy('mirrored')
  with strategy.scope():
    task, lrn = _Build()

  @tf.function
  def Step(x, y):
    def Fn(x, y):
      metrics = task.FProp(task.theta, x, y)
      return lrn.Apply(metrics, task.vars)[2]
    return strategy.run(Fn, args=(x, y))

  for i in range(3):
    parts = [(_X[i][:_SPLIT], _Y[i][:_SPLIT]), (_X[i][_SPLIT:], _Y[i][_SPLIT:])]
    x = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(parts[ctx.replica_id_in_sync_group][0]))
    y = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(parts[ctx.replica_id_in_sync_group][1]))
    m = Step(x, y)
  results = []
  for r in range(2):
    out = {'w': task.vars.w.values[r].numpy(),
           'b': task.vars.b.values[r].numpy(),
           'mom_w': lrn.optimizer.GetSlots(
               task.vars.w)['momentum'].values[r].numpy()}
    for k, (v, w) in m.items():
      out['metric/' + k] = (float(v.values[r].numpy()),
                            float(w.values[r].numpy()))
    results.append(out)
  return results


def _AssertSame(a, b):
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_four_ways_give_the_same_weights_and_metrics():
  eager = _RunEager()
  # The run moved and clipped something, so the comparison means something.
  assert eager['metric/grad_norm/all'][0] > 1.0
  assert eager['metric/lr_schedule'][0] == 0.5
  _AssertSame(eager, _RunFunction(jit=False))
  _AssertSame(eager, _RunFunction(jit=True))
  for replica in _RunMirrored():
    _AssertSame(eager, replica)


def test_nan_step_in_the_middle_is_as_if_removed():
  """Run A: batches 0, NaN, 1, 2. Run B: batches 0, 1, 2. Same weights."""

  def Run(with_nan):
    task, lrn = _Build()

    @tf.function
    def Step(x, y):
      return lrn.Apply(task.FProp(task.theta, x, y), task.vars)[2]

    batches = [(_X[0], _Y[0])]
    if with_nan:
      batches.append((_X[1], np.full_like(_Y[1], np.nan)))
    batches += [(_X[1], _Y[1]), (_X[2], _Y[2])]
    for x, y in batches:
      m = Step(x, y)
    return task, lrn, m

  ta, la, ma = Run(True)
  tb, lb, mb = Run(False)
  for v in ('w', 'b'):
    np.testing.assert_allclose(ta.vars[v].numpy(), tb.vars[v].numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(
        la.optimizer.GetSlots(ta.vars[v])['momentum'].numpy(),
        lb.optimizer.GetSlots(tb.vars[v])['momentum'].numpy(), rtol=1e-6)
  assert int(la.num_skipped_steps.numpy()) == 1
  assert int(lb.num_skipped_steps.numpy()) == 0
  assert int(la.num_updates.numpy()) == int(lb.num_updates.numpy()) == 3
  assert float(ma['learning_rate'][0]) == float(mb['learning_rate'][0])


class TwoParts(BaseLayer):
  """enc/w and dec/w scalars; loss = 3*enc + dec, reported under two names."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'two'
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('enc_w', [], init=0.0)
    self.CreateVariable('dec_w', [], init=0.0)


def test_two_learners_over_disjoint_variables():
  task = TwoParts.Params().Instantiate()
  enc = Learner.Params().Set(
      name='enc', loss_name='loss', learning_rate=0.1,
      optimizer=optimizers.Momentum.Params().Set(alpha=0.9),
      bprop_variable_filter='enc_', clip_gradient_norm_to_value=1.0,
      lr_schedule=PiecewiseConstantSchedule.Params().Set(
          boundaries=[0], values=[1.0, 0.5])).Instantiate()
  dec = Learner.Params().Set(
      name='dec', loss_name='loss', learning_rate=1.0,
      optimizer=base_optimizer.SGD.Params(),
      bprop_variable_filter='dec_').Instantiate()
  enc.Bind(task.vars)
  dec.Bind(task.vars)

  @tf.function
  def Step():
    th = task.theta
    metrics = {'loss': (3.0 * th.enc_w + 2.0 * th.dec_w, 1.0)}
    return [l.Apply(metrics, task.vars)[2] for l in (enc, dec)]

  me, md = Step()
  # enc: grad 3 clipped to 1, lr 0.1 * 0.5 -> -0.05. dec: grad 2, lr 1 -> -2.
  assert float(task.vars.enc_w.numpy()) == pytest.approx(-0.05)
  assert float(task.vars.dec_w.numpy()) == pytest.approx(-2.0)
  assert float(me['grad_norm/all'][0]) == pytest.approx(3.0)
  assert float(me['grad_norm/clipped'][0]) == pytest.approx(1.0)
  assert float(me['learning_rate'][0]) == pytest.approx(0.05)
  assert float(md['grad_norm/all'][0]) == pytest.approx(2.0)
  assert float(md['grad_scale_all'][0]) == 1.0
  assert float(md['learning_rate'][0]) == pytest.approx(1.0)
  assert enc.optimizer.bound_variables.keys() == {'two/enc_w'}
  assert dec.optimizer.bound_variables.keys() == {'two/dec_w'}


def _TrainPrecision(fprop_dtype, loss_scale, steps=60):
  """Fits a 3-feature linear model with Adam; returns the final float32 loss."""
  rng = np.random.RandomState(3)
  x = rng.randn(64, 3).astype(np.float32)
  y = (x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3).astype(np.float32)
  task = Linear.Params().Set(fprop_dtype=fprop_dtype).Instantiate()
  lrn = Learner.Params().Set(
      name='loss', learning_rate=0.05, loss_scale=loss_scale,
      optimizer=optimizers.Adam.Params()).Instantiate()
  lrn.Bind(task.vars)

  @tf.function
  def Step():
    return lrn.Apply(task.FProp(task.theta, x, y), task.vars)[2]

  for _ in range(steps):
    m = Step()
  pred = x @ task.vars.w.numpy() + task.vars.b.numpy()[0]
  return float(np.mean((pred - y) ** 2)), m


def test_float16_dynamic_loss_scale_and_bfloat16_train_like_float32():
  # Tolerance: 60 Adam steps take the float32 loss from ~2.8 to 0.0064; the
  # float16 (dynamic loss scale) and bfloat16 runs must end within 0.002
  # absolute of it (measured: 0.0068 and 0.0072; bfloat16 keeps 8 mantissa
  # bits, so its weights are rounded to ~0.4%).
  ref, _ = _TrainPrecision(None, None)
  f16, m16 = _TrainPrecision(tf.float16, 'dynamic')
  bf16, _ = _TrainPrecision(tf.bfloat16, None)
  assert ref < 0.01
  assert f16 == pytest.approx(ref, abs=0.002)
  assert bf16 == pytest.approx(ref, abs=0.002)
  # Each overflow halves the scale and skips one step (no growth within 60
  # steps: growth_interval is 2000).
  halvings = np.log2(32768.0 / float(m16['loss_scale'][0]))
  assert float(m16['num_skipped_steps'][0]) == halvings
  print('float32 %.5f float16 %.5f bfloat16 %.5f skipped %d' %
        (ref, f16, bf16, halvings))
