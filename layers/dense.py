"""A fully connected layer: y = activation(x @ w + b).

The dense layer of the experiments' MLPs and linear models
(configs/model_tasks.py); Glorot & Bengio 2010 ("Understanding the
difficulty of training deep feedforward neural networks") for its default
initializer.
"""

import tensorflow as tf

from layers import activations
from params import BaseLayer
from params import checks


class DenseLayer(BaseLayer):
  """A fully connected layer: y = activation(x @ w + b).

  Input x: float [batch, input_dim]; output float [batch, output_dim].
  Variables 'w' [input_dim, output_dim] (Glorot-uniform unless params_init
  says otherwise) and 'b' [output_dim] (zeros).

  Raises:
    ValueError: for non-positive dims or an unknown activation.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Input features; must be > 0.')
    p.Define('output_dim', 0, 'Output features; must be > 0.')
    p.Define('activation', 'relu',
             'One of %s (layers/activations.py).' % list(activations.NAMES))
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(input_dim=checks.Int(1, example=64),
                 output_dim=checks.Int(1, example=10))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._activation = activations.GetActivation(p.activation, self.path)
    self.CreateVariable('w', [p.input_dim, p.output_dim],
                        init=('glorot_uniform' if p.params_init is None
                              else p.params_init))
    self.CreateVariable('b', [p.output_dim], init=0.0)

  def FProp(self, theta, x):
    y = tf.matmul(x, theta.w) + theta.b
    return self._activation(y)
