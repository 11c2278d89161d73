"""A small Learner-free layer tree, built and printed: `python -m layers.demo`.

It shows the foundation at work until the trainer exists: experiment-style
Params for a two-level MLP classifier, the params text (`ToText`), the layer
tree's variables (names and shapes) and one forward pass on a random batch.
"""

import sys

import numpy as np
import tensorflow as tf

from params import checks
from params.base_layer import BaseLayer
from params.base_layer import VariableName


class Linear(BaseLayer):
  """y = x @ w + b, then an optional activation.

  Shapes: x [batch, input_dim] -> y [batch, output_dim], in fprop_dtype.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Size of the last input dimension; must be > 0.')
    p.Define('output_dim', 0, 'Size of the output; must be > 0.')
    p.Define('activation', 'relu',
             'Name of a tf.nn function applied to the output, or None.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(input_dim=checks.Int(1, example=16),
                 output_dim=checks.Int(1, example=16))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self.CreateVariable('w', [p.input_dim, p.output_dim])
    self.CreateVariable('b', [p.output_dim], init='zeros')

  def FProp(self, theta, x):
    """x: [batch, input_dim] -> [batch, output_dim]."""
    y = tf.matmul(tf.cast(x, theta.w.dtype), theta.w) + theta.b
    if self.params.activation:
      y = getattr(tf.nn, self.params.activation)(y)
    return y


class MlpClassifier(BaseLayer):
  """A stack of Linear layers ('hidden', a list) and an output Linear."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 64, 'Features per example (8x8 digits: 64).')
    p.Define('hidden_dims', [32, 16], 'Width of each hidden layer.')
    p.Define('num_classes', 10, 'Number of output classes.')
    p.Define('hidden', Linear.Params(), 'Template of each hidden layer.')
    p.Define('output', Linear.Params().Set(activation=None),
             'Params of the output layer.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    dims = [p.input_dim] + list(p.hidden_dims)
    hidden = [p.hidden.Copy(frozen=False).Set(input_dim=i, output_dim=o)
              for i, o in zip(dims[:-1], dims[1:])]
    self.CreateChildren('hidden', hidden)
    self.CreateChild('output', p.output.Copy(frozen=False).Set(
        input_dim=dims[-1], output_dim=p.num_classes))

  def FProp(self, theta, x):
    """x: [batch, input_dim] -> logits [batch, num_classes]."""
    for layer, layer_theta in zip(self.hidden, theta.hidden):
      x = layer.FProp(layer_theta, x)
    return self.output.FProp(theta.output, x)


def DemoParams():
  """Params of the demo model: an MLP for 8x8 digits, Glorot-initialised."""
  return MlpClassifier.Params().Set(
      name='mlp', params_init='glorot_uniform', random_seed=1234)


def Main(out=sys.stdout):
  """Builds the demo tree and writes its params, variables and one FProp."""
  p = DemoParams()
  model = p.Instantiate()
  out.write('# Params (ToText)\n%s\n' % p.ToText())
  out.write('# Variables: vars key, variable name, shape, dtype\n')
  for key, var in model.vars.FlattenItems():
    name = VariableName(var)
    out.write('%-12s %-16s %-10s %s\n' % (key, name, var.shape.as_list(),
                                          var.dtype.name))
  batch = np.random.default_rng(0).normal(size=(4, p.input_dim))
  logits = model.FProp(model.theta, batch.astype(np.float32))
  out.write('\n# FProp on a [4, %d] batch -> logits %s\n' %
            (p.input_dim, logits.shape))
  return model


if __name__ == '__main__':
  # Run the module's own copy so classes print as 'layers.demo.Linear', an
  # import path FromText can resolve, not '__main__.Linear'.
  from layers import demo  # pylint: disable=g-import-not-at-top,import-self
  demo.Main()
