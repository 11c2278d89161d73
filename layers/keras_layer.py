"""KerasLayer: any Keras layer (or model) as a Params-configured BaseLayer.

    p = KerasLayer.Params().Set(name='conv', keras_class='Conv1D',
                                keras_config=dict(filters=8, kernel_size=3),
                                input_shape=[40, 1])

builds `tf.keras.layers.Conv1D(filters=8, kernel_size=3)` in the attribute
`layer` and builds it for inputs [batch, 40, 1] at construction, so its
variables exist when the learners bind. By BaseLayer's rule for Keras
attributes (params/base_layer.py, `__setattr__`) they are in `vars.layer`
named '<path>/layer/<Keras variable path>', e.g. 'task/conv/layer/kernel',
so learners' regexes select them and `tf.train.Checkpoint` saves them.
"""

import inspect

import tensorflow as tf

from params import BaseLayer
from params import text_registry


def _ResolveKerasClass(keras_class, where):
  """A Layer subclass from a class, a tf.keras.layers name or the path of an already imported class (never imports)."""
  cls = keras_class
  if isinstance(keras_class, str):
    if '.' in keras_class:
      cls = text_registry.LookupImported(keras_class)
    else:
      cls = getattr(tf.keras.layers, keras_class, None)
      if cls is None:
        raise ValueError(
            '%s: keras_class %r is not in tf.keras.layers. Give a name there '
            '(e.g. \'Conv1D\', \'Dense\'), an import path (\'pkg.mod.Class\') '
            'or the class.' % (where, keras_class))
  if not (inspect.isclass(cls) and issubclass(cls, tf.keras.layers.Layer)):
    raise ValueError('%s: keras_class %r is not a Keras Layer class.' %
                     (where, keras_class))
  return cls


class KerasLayer(BaseLayer):
  """Wraps a Keras layer built from `keras_class` and `keras_config`.

  FProp(theta, *inputs, training=False, **kwargs) returns
  `self.layer(*inputs, training=training, **kwargs)`: shapes and dtypes
  are the Keras layer's (e.g. Conv1D: float [batch, time, channels] ->
  [batch, out_time, filters]). `theta` is accepted for the uniform
  interface, but the Keras layer reads its own variables: `fprop_dtype`
  does not apply (set a Keras `dtype` in keras_config instead).

  Variables: those of the Keras layer, in `vars.layer` (e.g.
  `vars.layer.kernel`, named '<path>/layer/kernel').
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define(
        'keras_class', None,
        'The Keras layer class: a name in tf.keras.layers (\'Conv1D\'), the '
        'path of an already imported class (\'pkg.module.Class\'; nothing '
        'is imported) or the class itself.')
    p.Define('keras_config', {},
             'Keyword arguments of the class\'s constructor, e.g. '
             'dict(filters=8, kernel_size=3). A \'name\' here is replaced '
             'by \'layer\' (the attribute name, part of variable names).')
    p.Define(
        'input_shape', None,
        'Shape of one input without the batch dimension, e.g. [40, 1]; the '
        'layer is built for [None] + input_shape at construction. None: '
        'the layer must be built by its constructor (e.g. a functional '
        'Keras model), else building fails with an error.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    cls = _ResolveKerasClass(p.keras_class, self.path)
    config = dict(p.keras_config or {})
    config.pop('name', None)
    try:
      keras_layer = cls(**config)
    except (TypeError, ValueError) as e:
      raise ValueError('%s: %s(**%r) failed: %s' %
                       (self.path, cls.__name__, config, e)) from None
    self.layer = keras_layer  # BaseLayer adopts it: names, vars, checkpoint.
    if p.input_shape is not None:
      self.layer.build(tuple([None] + list(p.input_shape)))
    elif not self.layer.built:
      raise ValueError(
          '%s: %s is not built by its constructor; set input_shape (the '
          'shape of one example, without the batch dimension) so it is built '
          'now and the learners see its variables.' % (self.path,
                                                       cls.__name__))

  def FProp(self, theta, *inputs, training=False, **kwargs):
    """Calls the Keras layer on `inputs`."""
    del theta  # The Keras layer reads its own variables.
    return self.layer(*inputs, training=training, **kwargs)
