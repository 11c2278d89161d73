"""LayerNorm against numpy (Ba et al. 2016)."""

import numpy as np
import pytest
import tensorflow as tf

from layers import normalization


def test_layer_norm_matches_numpy_with_scale_and_bias():
  layer = normalization.LayerNorm.Params().Set(
      name='ln', input_dim=6, epsilon=1e-3).Instantiate()
  rng = np.random.default_rng(0)
  scale = rng.normal(size=6).astype(np.float32)
  bias = rng.normal(size=6).astype(np.float32)
  layer.vars.scale.assign(scale)
  layer.vars.bias.assign(bias)
  x = rng.normal(3.0, 2.0, size=(2, 3, 6)).astype(np.float32)
  out = layer.FProp(layer.theta, tf.constant(x))
  assert out.shape == (2, 3, 6) and out.dtype == tf.float32
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean)**2).mean(-1, keepdims=True)  # biased, as the paper
  expected = (x - mean) / np.sqrt(var + 1e-3) * scale + bias
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_fresh_layer_norm_output_has_zero_mean_unit_variance():
  layer = normalization.LayerNorm.Params().Set(name='ln',
                                               input_dim=16).Instantiate()
  x = np.random.default_rng(1).normal(5.0, 3.0, size=(4, 16))
  out = layer.FProp(layer.theta, tf.constant(x, tf.float32)).numpy()
  np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-5)
  np.testing.assert_allclose(out.var(-1), 1.0, rtol=1e-4)


def test_bfloat16_fprop_keeps_the_input_dtype():
  layer = normalization.LayerNorm.Params().Set(
      name='ln', input_dim=4, fprop_dtype=tf.bfloat16).Instantiate()
  x = tf.constant([[1.0, 2.0, 3.0, 4.0]], tf.bfloat16)
  out = layer.FProp(layer.theta, x)
  assert out.dtype == tf.bfloat16
  v = np.array([1.0, 2.0, 3.0, 4.0])
  expected = (v - v.mean()) / np.sqrt(v.var() + 1e-6)
  np.testing.assert_allclose(tf.cast(out, tf.float32).numpy()[0], expected,
                             atol=2e-2)


def test_non_positive_epsilon_raises():
  with pytest.raises(ValueError, match='epsilon=0.0 is not > 0'):
    normalization.LayerNorm.Params().Set(name='ln', input_dim=4,
                                         epsilon=0.0).Instantiate()
