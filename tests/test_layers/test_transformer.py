"""FeedForwardLayer, TransformerBlock (pre-norm) and TransformerStack."""

import numpy as np
import tensorflow as tf

from layers import transformer


def _LayerNorm(x, eps=1e-6):
  m = x.mean(-1, keepdims=True)
  return (x - m) / np.sqrt(((x - m)**2).mean(-1, keepdims=True) + eps)


def test_feed_forward_matches_numpy():
  layer = transformer.FeedForwardLayer.Params().Set(
      name='ffn', input_dim=4, hidden_dim=6, output_dim=3,
      random_seed=1).Instantiate()
  rng = np.random.default_rng(0)
  layer.vars.b1.assign(rng.normal(size=6).astype(np.float32))
  layer.vars.b2.assign(rng.normal(size=3).astype(np.float32))
  x = rng.normal(size=(2, 5, 4)).astype(np.float32)
  out = layer.FProp(layer.theta, tf.constant(x)).numpy()
  v = {k: t.numpy() for k, t in layer.vars.FlattenItems()}
  expected = np.maximum(x @ v['w1'] + v['b1'], 0) @ v['w2'] + v['b2']
  assert out.shape == (2, 5, 3)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def _Block(**kw):
  return transformer.TransformerBlock.Params().Set(
      name='block', model_dim=8, num_heads=2, hidden_dim=16, random_seed=1,
      **kw).Instantiate()


def test_block_is_pre_norm_residual_of_its_children():
  block = _Block()
  rng = np.random.default_rng(1)
  x = rng.normal(size=(2, 5, 8)).astype(np.float32)
  out = block.FProp(block.theta, tf.constant(x)).numpy()
  th = block.theta
  # x + atten(LN(x)), then + ffn(LN(.)): the children applied by hand; LN's
  # scale/bias are 1/0 at initialisation, so LN is the numpy formula.
  atten = block.atten.FProp(th.atten, tf.constant(_LayerNorm(x),
                                                  tf.float32)).numpy()
  h = x + atten
  ffn = block.ffn.FProp(th.ffn, tf.constant(_LayerNorm(h),
                                            tf.float32)).numpy()
  np.testing.assert_allclose(out, h + ffn, rtol=1e-4, atol=1e-4)


def test_block_is_causal():
  block = _Block()
  rng = np.random.default_rng(2)
  x = rng.normal(size=(1, 6, 8)).astype(np.float32)
  y = x.copy()
  y[0, 3:] += 1.0
  a = block.FProp(block.theta, tf.constant(x)).numpy()
  b = block.FProp(block.theta, tf.constant(y)).numpy()
  np.testing.assert_allclose(a[0, :3], b[0, :3], atol=1e-5)


def test_residual_dropout_only_when_training():
  block = _Block(residual_dropout_prob=0.3)
  x = tf.constant(np.random.default_rng(3).normal(size=(2, 5, 8)),
                  tf.float32)
  eval_out = block.FProp(block.theta, x).numpy()
  np.testing.assert_array_equal(eval_out, block.FProp(block.theta, x).numpy())
  train_out = block.FProp(block.theta, x, training=True).numpy()
  assert np.abs(train_out - eval_out).max() > 1e-3


def test_stack_builds_num_layers_blocks_and_a_final_layer_norm():
  p = transformer.TransformerStack.Params().Set(name='stack', num_layers=3)
  p.block.Set(model_dim=8, num_heads=2)
  stack = p.Instantiate()
  assert len(stack.blocks) == 3
  names = sorted(v.name for v in stack.vars.Flatten())
  assert 'stack/blocks_2/atten/w_qkv:0' in names
  assert 'stack/final_ln/scale:0' in names
  assert stack.vars.blocks[0].ffn.w1.shape == (8, 32)  # hidden 4 * model
  x = np.random.default_rng(4).normal(size=(2, 4, 8)).astype(np.float32)
  out = stack.FProp(stack.theta, tf.constant(x)).numpy()
  h = tf.constant(x)
  for block, th in zip(stack.blocks, stack.theta.blocks):
    h = block.FProp(th, h)
  np.testing.assert_allclose(out, _LayerNorm(h.numpy()), rtol=1e-4,
                             atol=1e-4)
