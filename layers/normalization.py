"""LayerNorm: normalisation over the last dimension.

Ba, Kiros & Hinton 2016, "Layer Normalization" (arXiv:1607.06450):
y = (x - mean(x)) / sqrt(var(x) + epsilon) * scale + bias, with the mean and
the (biased) variance over the last dimension of each example.
"""

import tensorflow as tf

from params import BaseLayer
from params import checks


class LayerNorm(BaseLayer):
  """Layer normalisation over the last dimension (Ba et al. 2016).

  Input x: float [..., input_dim]. Output: same shape and dtype. The
  statistics are computed in float32 (also for a float16/bfloat16
  fprop_dtype), then cast back. Variables 'scale' [input_dim] (ones) and
  'bias' [input_dim] (zeros).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Size of the last dimension; must be > 0.')
    p.Define('epsilon', 1e-6,
             'Added to the variance before the square root, for stability.')
    p.Define('use_bias', True, 'Whether to add the learned bias.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(input_dim=checks.Int(1, example=128),
                 epsilon=checks.Real(0, low_open=True, example=1e-6))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self.CreateVariable('scale', [p.input_dim], init=1.0)
    if p.use_bias:
      self.CreateVariable('bias', [p.input_dim], init=0.0)

  def FProp(self, theta, x):
    """x [..., input_dim] -> normalised x, same shape and dtype."""
    p = self.params
    dtype = x.dtype
    x32 = tf.cast(x, tf.float32)
    mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
    y = (x32 - mean) * tf.math.rsqrt(variance + p.epsilon)
    y = y * tf.cast(theta.scale, tf.float32)
    if p.use_bias:
      y = y + tf.cast(theta.bias, tf.float32)
    return tf.cast(y, dtype)
