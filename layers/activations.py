"""Activation functions by name, for the `activation` param of layers.

`GetActivation(name)` returns the function; `NAMES` lists the names.
GELU is Hendrycks & Gimpel 2016, "Gaussian Error Linear Units (GELUs)"
(the exact erf form; `gelu_tanh` is their tanh approximation).
"""

import tensorflow as tf

_ACTIVATIONS = {
    'none': tf.identity,
    'relu': tf.nn.relu,
    'gelu': lambda x: tf.nn.gelu(x, approximate=False),
    'gelu_tanh': lambda x: tf.nn.gelu(x, approximate=True),
    'tanh': tf.tanh,
    'sigmoid': tf.sigmoid,
    'swish': tf.nn.silu,
}

NAMES = tuple(sorted(_ACTIVATIONS))


def GetActivation(name, where=''):
  """Returns the activation function called `name`.

  Raises:
    ValueError: naming the valid names if `name` is unknown.
  """
  if name not in _ACTIVATIONS:
    raise ValueError('%sactivation %r is not one of %s.' %
                     ('%s: ' % where if where else '', name, list(NAMES)))
  return _ACTIVATIONS[name]
