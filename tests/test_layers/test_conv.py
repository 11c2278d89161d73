"""Conv1DLayer and Pool1DLayer against numpy loops."""

import numpy as np
import pytest
import tensorflow as tf

from layers import conv


def _NumpyConv(x, w, b, stride, pad_left, pad_right):
  """y[b, t, f] = sum_{k, c} xpad[b, t * stride + k, c] w[k, c, f] + b[f]."""
  xp = np.pad(x, [(0, 0), (pad_left, pad_right), (0, 0)])
  k = w.shape[0]
  out_t = (xp.shape[1] - k) // stride + 1
  y = np.zeros((x.shape[0], out_t, w.shape[2]))
  for t in range(out_t):
    window = xp[:, t * stride:t * stride + k, :]  # [b, k, c]
    y[:, t] = np.einsum('bkc,kcf->bf', window, w) + b
  return y


@pytest.mark.parametrize('padding,stride,pads,out_t', [
    ('VALID', 1, (0, 0), 8),   # 10 - 3 + 1
    ('VALID', 2, (0, 0), 4),   # ceil(8 / 2)
    ('SAME', 1, (1, 1), 10),
    ('SAME', 2, (0, 1), 5),    # TF: total pad 1, left 0, right 1
    ('CAUSAL', 1, (2, 0), 10),
])
def test_conv_matches_numpy(padding, stride, pads, out_t):
  layer = conv.Conv1DLayer.Params().Set(
      name='conv', input_dim=2, filters=4, kernel_size=3, stride=stride,
      padding=padding, activation='none', random_seed=1).Instantiate()
  rng = np.random.default_rng(0)
  layer.vars.b.assign(rng.normal(size=4).astype(np.float32))
  x = rng.normal(size=(3, 10, 2)).astype(np.float32)
  out = layer.FProp(layer.theta, tf.constant(x)).numpy()
  expected = _NumpyConv(x, layer.vars.w.numpy(), layer.vars.b.numpy(),
                        stride, *pads)
  assert out.shape == (3, out_t, 4)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_conv_relu_and_causality():
  layer = conv.Conv1DLayer.Params().Set(
      name='conv', input_dim=1, filters=3, kernel_size=4, padding='CAUSAL',
      random_seed=2).Instantiate()
  x = np.random.default_rng(1).normal(size=(1, 9, 1)).astype(np.float32)
  y = x.copy()
  y[0, 6:] = 5.0
  a = layer.FProp(layer.theta, tf.constant(x)).numpy()
  b = layer.FProp(layer.theta, tf.constant(y)).numpy()
  assert (a >= 0).all()
  np.testing.assert_allclose(a[0, :6], b[0, :6], atol=1e-6)


def _NumpyPool(x, window, stride, fn):
  out_t = (x.shape[1] - window) // stride + 1
  return np.stack([fn(x[:, t * stride:t * stride + window], axis=1)
                   for t in range(out_t)], axis=1)


@pytest.mark.parametrize('pooling_type,fn', [('MAX', np.max),
                                             ('AVG', np.mean)])
@pytest.mark.parametrize('window,stride', [(2, 0), (3, 2), (3, 1)])
def test_pool_matches_numpy(pooling_type, fn, window, stride):
  layer = conv.Pool1DLayer.Params().Set(
      name='pool', pooling_type=pooling_type, window=window,
      stride=stride).Instantiate()
  x = np.random.default_rng(2).normal(size=(2, 11, 3)).astype(np.float32)
  out = layer.FProp(layer.theta, tf.constant(x)).numpy()
  expected = _NumpyPool(x, window, stride or window, fn)
  assert out.shape == expected.shape
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_unknown_padding_and_pooling_type_raise():
  with pytest.raises(ValueError, match='padding'):
    conv.Conv1DLayer.Params().Set(name='c', input_dim=1, filters=1,
                                  padding='FULL').Instantiate()
  with pytest.raises(ValueError, match='pooling_type'):
    conv.Pool1DLayer.Params().Set(name='p', pooling_type='MIN').Instantiate()
