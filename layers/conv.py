"""1-D convolution and pooling over [batch, time, channels].

Convolution as in LeCun et al. 1998, "Gradient-Based Learning Applied to
Document Recognition" (the convolution is a cross-correlation, as in every
deep learning library): y[b, t, f] = sum_{k, c} x[b, t * stride + k -
pad_left, c] * w[k, c, f] + bias[f].
"""

import tensorflow as tf

from params import BaseLayer
from params import checks
from layers import activations

_PADDINGS = ('SAME', 'VALID', 'CAUSAL')
_POOLING_TYPES = ('MAX', 'AVG')


class Conv1DLayer(BaseLayer):
  """1-D convolution + bias + activation.

  FProp(theta, x): x float [batch, time, input_dim] -> float [batch,
  out_time, filters], out_time = ceil(time / stride) for 'SAME' and
  'CAUSAL', ceil((time - kernel_size + 1) / stride) for 'VALID'.
  'SAME' pads (kernel_size - 1) // 2 on the left and the rest on the right
  (as TensorFlow); 'CAUSAL' pads kernel_size - 1 on the left only, so
  output t sees inputs <= t * stride.

  Variables 'w' [kernel_size, input_dim, filters] (Glorot-uniform unless
  params_init says otherwise) and 'b' [filters] (zeros, if use_bias).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Input channels; > 0.')
    p.Define('filters', 0, 'Output channels; > 0.')
    p.Define('kernel_size', 3, 'Width of the filters in time steps; > 0.')
    p.Define('stride', 1, 'Step between filter positions; > 0.')
    p.Define('padding', 'SAME', 'One of %s.' % list(_PADDINGS))
    p.Define('activation', 'relu',
             'One of %s.' % list(activations.NAMES))
    p.Define('use_bias', True, 'Add a learned bias per filter.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    for key, example in (('input_dim', 1), ('filters', 32),
                         ('kernel_size', 3), ('stride', 1)):
      specs[key] = checks.Int(1, example=example)
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.padding not in _PADDINGS:
      raise ValueError('%s: padding %r is not one of %s.' %
                       (self.path, p.padding, list(_PADDINGS)))
    self._act = activations.GetActivation(p.activation, self.path)
    init = 'glorot_uniform' if p.params_init is None else p.params_init
    self.CreateVariable('w', [p.kernel_size, p.input_dim, p.filters],
                        init=init)
    if p.use_bias:
      self.CreateVariable('b', [p.filters], init=0.0)

  def FProp(self, theta, x):
    """x [batch, time, input_dim] -> [batch, out_time, filters]."""
    p = self.params
    padding = p.padding
    if padding == 'CAUSAL':
      x = tf.pad(x, [[0, 0], [p.kernel_size - 1, 0], [0, 0]])
      padding = 'VALID'
    y = tf.nn.conv1d(x, theta.w, stride=p.stride, padding=padding)
    if p.use_bias:
      y = y + theta.b
    return self._act(y)


class Pool1DLayer(BaseLayer):
  """1-D max or average pooling over time.

  FProp(theta, x): x float [batch, time, channels] -> float [batch,
  out_time, channels]; out_time as for Conv1DLayer with kernel_size =
  window. 'AVG' with 'SAME' averages only the real (unpadded) inputs of a
  window, as TensorFlow does. No variables.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('pooling_type', 'MAX', 'One of %s.' % list(_POOLING_TYPES))
    p.Define('window', 2, 'Pooling window in time steps; > 0.')
    p.Define('stride', 0, 'Step between windows; 0 means window.')
    p.Define('padding', 'VALID', "'SAME' or 'VALID'.")
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(window=checks.Int(1, example=2),
                 stride=checks.Int(0, example=2, why='0 means window'))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.pooling_type not in _POOLING_TYPES:
      raise ValueError('%s: pooling_type %r is not one of %s.' %
                       (self.path, p.pooling_type, list(_POOLING_TYPES)))
    if p.padding not in ('SAME', 'VALID'):
      raise ValueError("%s: padding %r is not 'SAME' or 'VALID'." %
                       (self.path, p.padding))

  def FProp(self, theta, x):
    """x [batch, time, channels] -> [batch, out_time, channels]."""
    p = self.params
    return tf.nn.pool(x, window_shape=[p.window], pooling_type=p.pooling_type,
                      strides=[p.stride or p.window], padding=p.padding)
