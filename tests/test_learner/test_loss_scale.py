"""Tests of learner/loss_scale.py."""

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from learner.loss_scale import LossScale
from learner.training.cluster import distribution


def _LossScale(**kw):
  return LossScale.Params().Set(name='ls', **kw).Instantiate()


def _State(ls):
  return float(ls.scale.numpy()), int(ls.good_steps.numpy())


def test_dynamic_defaults_start_at_2_pow_15():
  ls = _LossScale()
  assert _State(ls) == (32768.0, 0)
  assert ls.params.growth_interval == 2000 and ls.params.factor == 2.0


def test_c_loss_scale_overflow_halves_the_scale():
  # C-loss-scale: 3 finite steps (no growth before 2000), then an overflow:
  # the scale becomes 32768 / 2 = 16384 and good_steps resets.
  ls = _LossScale()
  for _ in range(3):
    ls.Update(True)
  assert _State(ls) == (32768.0, 3)
  ls.Update(False)
  assert _State(ls) == (16384.0, 0)


def test_dynamic_growth_after_growth_interval_finite_steps():
  ls = _LossScale(initial_scale=8.0, growth_interval=3, factor=4.0)
  ls.Update(True)
  ls.Update(True)
  assert _State(ls) == (8.0, 2)
  ls.Update(True)  # 3rd consecutive finite step: 8 * 4.
  assert _State(ls) == (32.0, 0)
  ls.Update(True)
  ls.Update(False)  # overflow: 32 / 4, counter reset.
  assert _State(ls) == (8.0, 0)
  ls.Update(True)
  ls.Update(True)
  assert _State(ls) == (8.0, 2)  # the interval restarted after the overflow.


def test_dynamic_scale_floor_and_ceiling():
  ls = _LossScale(initial_scale=1.5)
  ls.Update(False)  # 1.5 / 2 = 0.75 -> floored at min_scale 1.0.
  assert _State(ls) == (1.0, 0)
  big = _LossScale(initial_scale=2.0**127, growth_interval=1)
  big.Update(True)  # 2**128 overflows float32: the scale is kept.
  assert _State(big) == (2.0**127, 0)


def test_fixed_mode_never_changes():
  ls = _LossScale(mode='fixed', initial_scale=128.0)
  ls.Update(False)
  ls.Update(True)
  assert _State(ls) == (128.0, 0)
  np.testing.assert_allclose(ls.ScaleLoss(tf.constant(0.5)), 64.0)


def test_scale_loss_keeps_dtype_and_float16_overflow():
  ls = _LossScale()
  out = ls.ScaleLoss(tf.constant(1.0, tf.float16))
  assert out.dtype == tf.float16 and float(out) == 32768.0
  # C-loss-scale: 4 * 32768 = 131072 > 65504, the float16 maximum.
  assert np.isinf(float(ls.ScaleLoss(tf.constant(4.0, tf.float16))))


def test_unscale_tensor_indexed_slices_and_none():
  ls = _LossScale(mode='fixed', initial_scale=4.0)
  np.testing.assert_allclose(ls.Unscale(tf.constant([2.0, 8.0])), [0.5, 2.0])
  s = ls.Unscale(tf.IndexedSlices(tf.constant([[4.0, 8.0]]),
                                  tf.constant([1]), tf.constant([3, 2])))
  assert isinstance(s, tf.IndexedSlices)
  np.testing.assert_allclose(s.values, [[1.0, 2.0]])
  np.testing.assert_array_equal(s.indices, [1])
  assert ls.Unscale(None) is None


def test_unscale_float16_gradient_beyond_float16_range():
  # S = 65536 is inf in float16; dividing in float32 still gives 0.5.
  ls = _LossScale(mode='fixed', initial_scale=65536.0)
  out = ls.Unscale(tf.constant(32768.0, tf.float16))
  assert out.dtype == tf.float16 and float(out) == 0.5


def test_scaling_recovers_a_gradient_that_underflows_in_float16():
  # loss = (w * 1e-4) * 1e-4 in float16: dloss/dw = 1e-8, below the smallest
  # float16 subnormal (5.96e-8), so it is 0 unscaled; with S = 2**15 the
  # backward values are 3.2768 and 3.2768e-4, and the unscaled float32
  # gradient is 1e-8 (to float16 precision).
  w = tf.Variable(1.0)
  c = tf.constant(1e-4, tf.float16)
  ls = _LossScale()
  with tf.GradientTape(persistent=True) as tape:
    loss = (tf.cast(w, tf.float16) * c) * c
    scaled = ls.ScaleLoss(loss)
  assert float(tape.gradient(loss, w)) == 0.0
  grad = ls.Unscale(tape.gradient(scaled, w))
  assert grad.dtype == tf.float32
  np.testing.assert_allclose(grad, 1e-8, rtol=2e-3)


@pytest.mark.parametrize('jit', [False, True])
def test_update_in_tf_function(jit):
  ls = _LossScale(initial_scale=8.0, growth_interval=2)

  @tf.function(jit_compile=jit, autograph=False)
  def Step(finite):
    ls.Update(finite)
    return ls.scale

  got = [float(Step(tf.constant(f))) for f in (True, True, False, True)]
  assert got == [8.0, 16.0, 8.0, 8.0]
  assert int(ls.good_steps.numpy()) == 1


def test_checkpoint_round_trip():
  ls = _LossScale(initial_scale=8.0, growth_interval=3)
  ls.Update(False)
  ls.Update(True)
  ls.Update(True)
  with tempfile.TemporaryDirectory() as d:
    path = tf.train.Checkpoint(model=ls).save(os.path.join(d, 'ckpt'))
    ls2 = _LossScale(initial_scale=8.0, growth_interval=3)
    tf.train.Checkpoint(model=ls2).restore(path).assert_consumed()
  assert _State(ls2) == (4.0, 2)
  ls2.Update(True)  # The restored counter completes the interval.
  assert _State(ls2) == (8.0, 0)


def test_update_in_replica_context_applies_once():
  strategy = distribution.CreateStrategy('mirrored')
  with strategy.scope():
    ls = _LossScale(initial_scale=8.0, growth_interval=2)

  @tf.function
  def Step(finite):
    def Fn():
      ls.Update(finite)
      return ls.ScaleLoss(tf.constant(1.0))
    return strategy.run(Fn)

  Step(tf.constant(True))
  out = Step(tf.constant(True))
  assert [float(v) for v in strategy.experimental_local_results(out)] == [
      16.0, 16.0]
  assert _State(ls) == (16.0, 0)


@pytest.mark.parametrize('key,value', [
    ('mode', 'auto'), ('initial_scale', 0.0), ('min_scale', -1.0),
    ('growth_interval', 0), ('factor', 1.0)])
def test_bad_params_raise_naming_the_key(key, value):
  with pytest.raises(ValueError, match=key):
    _LossScale(**{key: value})
