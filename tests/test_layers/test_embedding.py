"""EmbeddingLayer (sparse lookup, tied logits) and PositionalEmbeddingLayer."""

import math

import numpy as np
import pytest
import tensorflow as tf

from layers import embedding


def _Emb(**kw):
  return embedding.EmbeddingLayer.Params().Set(
      name='emb', vocab_size=7, embedding_dim=4, random_seed=1,
      **kw).Instantiate()


def test_lookup_gathers_rows_and_scales_by_sqrt_depth():
  layer = _Emb(scale_sqrt_depth=True)
  table = layer.vars.emb.numpy()
  ids = np.array([[0, 3, 6], [2, 2, 5]])
  out = layer.EmbLookup(layer.theta, tf.constant(ids))
  assert out.shape == (2, 3, 4) and out.dtype == tf.float32
  np.testing.assert_allclose(out.numpy(), table[ids] * 2.0, rtol=1e-6)


def test_default_init_is_gaussian_with_stddev_dim_to_minus_half():
  layer = embedding.EmbeddingLayer.Params().Set(
      name='emb', vocab_size=2000, embedding_dim=64,
      random_seed=3).Instantiate()
  std = layer.vars.emb.numpy().std()
  # 128,000 draws: the sample std is within 1 % of the true one.
  assert abs(std - 64**-0.5) < 0.01 * 64**-0.5


def test_lookup_gradient_is_indexed_slices_of_the_looked_up_rows():
  layer = _Emb()
  ids = tf.constant([1, 4, 4])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(layer.EmbLookup(layer.theta, ids))
  grad = tape.gradient(loss, layer.vars.emb)
  assert isinstance(grad, tf.IndexedSlices)
  dense = tf.convert_to_tensor(grad).numpy()
  expected = np.zeros((7, 4))
  expected[1] = 1.0
  expected[4] = 2.0  # looked up twice
  np.testing.assert_allclose(dense, expected)


def test_tied_logits_use_the_same_variable_as_the_lookup():
  layer = _Emb(softmax_bias=True)
  assert [k for k, _ in layer.vars.FlattenItems()] == ['emb', 'softmax_bias']
  layer.vars.softmax_bias.assign(np.arange(7, dtype=np.float32))
  table = layer.vars.emb.numpy()
  x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
  logits = layer.Logits(layer.theta, tf.constant(x))
  assert logits.shape == (2, 3, 7)
  np.testing.assert_allclose(logits.numpy(), x @ table.T + np.arange(7),
                             rtol=1e-5, atol=1e-6)
  # One variable, both uses: its gradient has the lookup's rows plus the
  # softmax's x^T-weighted part, dz/dE = g^T x for z = x E^T.
  ids = tf.constant([2])
  with tf.GradientTape() as tape:
    h = layer.EmbLookup(layer.theta, ids)  # [1, 4]
    z = tf.reduce_sum(layer.Logits(layer.theta, h))
  grad = tf.convert_to_tensor(tape.gradient(z, layer.vars.emb)).numpy()
  expected = np.tile(table[2], (7, 1))  # d/dE_v of sum_v h . E_v = h
  expected[2] += table.sum(0)  # d/dh of sum_v h . E_v, into row 2
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)


def test_positional_embedding_matches_the_sinusoid_formula():
  d, t = 8, 5
  layer = embedding.PositionalEmbeddingLayer.Params().Set(
      name='pos', embedding_dim=d).Instantiate()
  out = layer.FProp(layer.theta, t).numpy()
  assert out.shape == (t, d)
  # Vaswani et al. 3.5 with the halves [sin | cos]; timescale_i =
  # 10^4^(i / (d/2 - 1)) for i < d/2.
  expected = np.zeros((t, d))
  for pos in range(t):
    for i in range(d // 2):
      angle = pos / (1e4**(i / (d // 2 - 1)))
      expected[pos, i] = math.sin(angle)
      expected[pos, d // 2 + i] = math.cos(angle)
  np.testing.assert_allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize('kw', [dict(vocab_size=0), dict(embedding_dim=-1)])
def test_bad_sizes_raise(kw):
  p = embedding.EmbeddingLayer.Params().Set(name='emb', vocab_size=3,
                                            embedding_dim=2)
  (key, value), = kw.items()
  with pytest.raises(ValueError, match='%s=%r is not >= 1' % (key, value)):
    p.Set(**kw).Instantiate()
