"""Mixed precision through the Learner (issue 5 acceptance, C-loss-scale).

Complements test_learner_modes.py (a linear model with Adam): here a 2-layer
MLP whose float16 gradients underflow without loss scaling, and C-loss-scale
inside tf.function, under XLA and under MirroredStrategy.

float32 variables, computation in float16 (with dynamic loss scaling) or
bfloat16 (BaseLayer's `fprop_dtype`), trained by `Learner.Apply`.

Measured when written (100 SGD steps of the MLP below, final full-data loss
evaluated in float32): float32 0.161547, float16 + dynamic loss scale
0.161531, bfloat16 0.161465, float16 without loss scale 1.415755 (= the
initial loss: every gradient underflowed). The stated tolerance is 2% of the
float32 loss, against measured differences below 0.1%.
"""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner.optimizers.base import SGD
from learner.learner import Learner
from params import BaseLayer
from learner.training.cluster import distribution

# The loss is multiplied by 2**-20 and the rate by 2**20, so float32 training
# is unchanged (powers of two are exact) but float16 gradients of the loss,
# ~1e-9, are below float16's smallest subnormal (6e-8): only loss scaling
# (S = 2**15 keeps them near 3e-5) lets float16 train.
_LOSS_FACTOR = 2.0**-20
_LR = 0.1 * 2.0**20
_STEPS = 100
_TOLERANCE = 0.02  # relative, of the float32 final loss


class _MLP(BaseLayer):
  """4 -> 16 (relu) -> 1 regression MLP; mean squared error x loss_factor."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('loss_factor', 1.0, 'Multiplier of the mean squared error.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w1', [4, 16], init='glorot_uniform')
    self.CreateVariable('b1', [16])
    self.CreateVariable('w2', [16, 1], init='glorot_uniform')
    self.CreateVariable('b2', [1])

  def FProp(self, theta, x, y):
    dtype = theta.w1.dtype
    x, y = tf.cast(x, dtype), tf.cast(y, dtype)
    h = tf.nn.relu(tf.matmul(x, theta.w1) + theta.b1)
    pred = tf.matmul(h, theta.w2) + theta.b2
    mse = tf.reduce_mean(tf.square(pred - y))
    return mse * tf.cast(self.params.loss_factor, dtype)


def _Data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(256, 4)).astype(np.float32)
  y = (np.sin(1.5 * x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]).astype(
      np.float32)
  return tf.constant(x), tf.constant(y)


def _Train(fprop_dtype, loss_scale):
  """Returns (initial loss, final loss, learner), losses in float32 / factor."""
  x, y = _Data()
  model = _MLP.Params().Set(name='mlp', fprop_dtype=fprop_dtype,
                            random_seed=1,
                            loss_factor=_LOSS_FACTOR).Instantiate()
  learner = Learner.Params().Set(
      name='loss', learning_rate=_LR, optimizer=SGD.Params(),
      loss_scale=loss_scale).Instantiate()
  learner.Bind(model.vars)

  @tf.function(autograph=False)
  def Step():
    loss = model.FProp(model.theta, x, y)
    learner.Apply({'loss': (loss, tf.constant(256.0))}, model.vars)

  def Float32Loss():
    theta = model.vars.Transform(tf.convert_to_tensor)
    return float(model.FProp(theta, x, y)) / _LOSS_FACTOR

  initial = Float32Loss()
  for _ in range(_STEPS):
    Step()
  return initial, Float32Loss(), learner


@pytest.fixture(scope='module')
def float32_run():
  return _Train(None, None)


def test_float32_baseline_learns(float32_run):
  initial, final, _ = float32_run
  assert final < 0.2 * initial


def test_float16_dynamic_loss_scale_trains_like_float32(float32_run):
  _, want, _ = float32_run
  initial, got, learner = _Train(tf.float16, 'dynamic')
  np.testing.assert_allclose(got, want, rtol=_TOLERANCE)
  # No overflow happened: every step applied, the scale is still 2**15.
  assert int(learner.num_updates.numpy()) == _STEPS
  assert int(learner.num_skipped_steps.numpy()) == 0
  assert float(learner.loss_scale.scale) == 2.0**15
  del initial


def test_float16_without_loss_scale_does_not_learn(float32_run):
  # The control: the gradients underflow to zero, so the weights never move.
  initial, got, _ = _Train(tf.float16, None)
  _, want, _ = float32_run
  np.testing.assert_allclose(got, initial, rtol=1e-6)
  assert got > 5 * want


def test_bfloat16_trains_like_float32_without_loss_scale(float32_run):
  # bfloat16 has float32's exponent range: no underflow, no scale needed.
  _, want, _ = float32_run
  _, got, _ = _Train(tf.bfloat16, None)
  np.testing.assert_allclose(got, want, rtol=_TOLERANCE)


class _ScalarLayer(BaseLayer):
  """One float32 scalar `w` = 1.0; FProp returns coef * w in fprop_dtype."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [], init=1.0)

  def FProp(self, theta, coef):
    return theta.w * tf.cast(coef, theta.w.dtype)


@pytest.mark.parametrize('mode', ['function', 'xla', 'mirrored'])
def test_c_loss_scale_float16_overflow_skips_step_and_halves_scale(mode):
  # C-loss-scale: SGD lr 0.1, w = 1.0 read in float16, loss w*1.0 for 3
  # steps: gradient 1.0 (unscaled from 32768), w = 1 - 3*0.1 = 0.7. Then loss
  # 4w: 4*32768 = 131072 > 65504 overflows float16, the step is skipped and
  # the scale halves to 16384. 'mirrored': 2 replicas, each with the same
  # loss and weight 1, so the all-reduced gradient is the same. (Eagerly:
  # test_learner.py::test_c_loss_scale_dynamic_float16.)
  strategy = (distribution.CreateStrategy('mirrored')
              if mode == 'mirrored' else tf.distribute.get_strategy())
  with strategy.scope():
    layer = _ScalarLayer.Params().Set(name='layer',
                                      fprop_dtype=tf.float16).Instantiate()
    learner = Learner.Params().Set(
        name='loss', learning_rate=0.1, optimizer=SGD.Params(),
        loss_scale='dynamic').Instantiate()
    learner.Bind(layer.vars)

  def ReplicaStep(coef):
    with learner_lib.GradientTape():
      loss = layer.FProp(layer.theta, coef)
    assert loss.dtype == tf.float16
    _, _, eval_metrics = learner.Apply({'loss': (loss, tf.constant(1.0))},
                                       layer.vars)
    return {k: v[0] for k, v in eval_metrics.items()}

  if mode == 'mirrored':
    def Step(coef):
      out = strategy.run(ReplicaStep, args=(coef,))
      return strategy.experimental_local_results(out)[0]
  else:
    Step = ReplicaStep
  Step = tf.function(Step, autograph=False, jit_compile=(mode == 'xla'))
  for _ in range(3):
    Step(tf.constant(1.0))
  np.testing.assert_allclose(layer.vars.w.numpy(), 0.7, rtol=1e-6)
  assert int(learner.num_updates.numpy()) == 3
  assert float(learner.loss_scale.scale) == 32768.0
  m = Step(tf.constant(4.0))
  np.testing.assert_allclose(layer.vars.w.numpy(), 0.7, rtol=1e-6)
  assert int(learner.num_updates.numpy()) == 3
  assert int(learner.num_skipped_steps.numpy()) == 1
  assert float(learner.loss_scale.scale) == 16384.0
  assert float(m['loss_scale']) == 16384.0
  assert float(m['has_nan_or_inf']) == 1.0
