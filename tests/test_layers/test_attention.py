"""MultiHeadedAttention against a numpy reference (Vaswani et al. 2017)."""

import numpy as np
import pytest
import tensorflow as tf

from layers import attention


def _Attention(**kw):
  return attention.MultiHeadedAttention.Params().Set(
      name='atten', model_dim=8, num_heads=2, random_seed=1,
      **kw).Instantiate()


def _Softmax(z):
  z = z - z.max(-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(-1, keepdims=True)


def _NumpyAttention(x, w_qkv, b_qkv, w_post, b_post, num_heads, causal):
  """Scaled dot-product attention, head by head, written out in numpy."""
  b, t, d = x.shape
  dh = d // num_heads
  qkv = x @ w_qkv + b_qkv
  q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
  out = np.zeros((b, t, d))
  for h in range(num_heads):
    sl = slice(h * dh, (h + 1) * dh)
    logits = q[..., sl] @ np.swapaxes(k[..., sl], 1, 2) / np.sqrt(dh)
    if causal:
      logits = np.where(np.tril(np.ones((t, t))) > 0, logits, -np.inf)
    out[..., sl] = _Softmax(logits) @ v[..., sl]
  return out @ w_post + b_post


@pytest.mark.parametrize('causal', [True, False])
def test_matches_numpy_reference(causal):
  layer = _Attention(causal=causal)
  rng = np.random.default_rng(0)
  for v in layer.vars.Flatten():  # non-zero biases too
    v.assign(rng.normal(size=v.shape).astype(np.float32) * 0.5)
  x = rng.normal(size=(2, 5, 8)).astype(np.float32)
  out = layer.FProp(layer.theta, tf.constant(x))
  assert out.shape == (2, 5, 8) and out.dtype == tf.float32
  vs = {k: v.numpy() for k, v in layer.vars.FlattenItems()}
  expected = _NumpyAttention(x, vs['w_qkv'], vs['b_qkv'], vs['w_post'],
                             vs['b_post'], 2, causal)
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_causal_output_does_not_depend_on_later_inputs():
  layer = _Attention()
  rng = np.random.default_rng(1)
  x = rng.normal(size=(1, 6, 8)).astype(np.float32)
  x_changed = x.copy()
  x_changed[0, 4:] = rng.normal(size=(2, 8))  # change positions 4 and 5
  a = layer.FProp(layer.theta, tf.constant(x)).numpy()
  b = layer.FProp(layer.theta, tf.constant(x_changed)).numpy()
  np.testing.assert_allclose(a[0, :4], b[0, :4], rtol=1e-6, atol=1e-6)
  assert np.abs(a[0, 4:] - b[0, 4:]).max() > 1e-3


def test_paddings_are_never_attended_to():
  layer = _Attention(causal=False)
  rng = np.random.default_rng(2)
  x = rng.normal(size=(1, 5, 8)).astype(np.float32)
  paddings = tf.constant([[0.0, 0.0, 0.0, 1.0, 1.0]])
  out = layer.FProp(layer.theta, tf.constant(x), paddings=paddings).numpy()
  # Equals attention over the first three positions only.
  short = layer.FProp(layer.theta, tf.constant(x[:, :3])).numpy()
  np.testing.assert_allclose(out[:, :3], short, rtol=1e-5, atol=1e-6)


def test_attention_dropout_only_when_training():
  layer = _Attention(atten_dropout_prob=0.5)
  x = tf.constant(np.random.default_rng(3).normal(size=(2, 6, 8)),
                  tf.float32)
  eval_a = layer.FProp(layer.theta, x).numpy()
  eval_b = layer.FProp(layer.theta, x, training=False).numpy()
  np.testing.assert_array_equal(eval_a, eval_b)
  train = layer.FProp(layer.theta, x, training=True).numpy()
  assert np.abs(train - eval_a).max() > 1e-3


def test_num_heads_must_divide_model_dim():
  with pytest.raises(ValueError, match='divide model_dim'):
    attention.MultiHeadedAttention.Params().Set(
        name='a', model_dim=10, num_heads=3).Instantiate()
