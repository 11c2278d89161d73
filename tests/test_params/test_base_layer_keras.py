"""BaseLayer with Keras layer attributes: vars, names, learners, checkpoints.

`self.<attr> = <Keras layer or model>` in a BaseLayer puts the Keras
variables in `vars.<attr>` named '<layer path>/<attr>/...' (see
BaseLayer.__setattr__).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from params import BaseLayer
import learner


class KerasHolder(BaseLayer):
  """A Dense built explicitly, a Dense built by a call, a Sequential, a w."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [3], init=1.0)
    self.dense = tf.keras.layers.Dense(3, name='keras_name_is_replaced')
    self.dense.build((None, 4))
    self.lazy = tf.keras.layers.Dense(2)
    self.lazy(tf.zeros([1, 3]))  # builds on its first call
    self.mlp = tf.keras.Sequential([tf.keras.layers.Dense(4, name='hidden'),
                                    tf.keras.layers.Dense(2, name='out')])
    self.mlp.build((None, 3))

  def FProp(self, theta, x):
    return self.mlp(self.dense(x)) + tf.reduce_sum(theta.w)


class Root(BaseLayer):

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('holder', KerasHolder.Params())


def _Root():
  return Root(Root.Params().Set(name='task'))


def test_keras_variables_are_in_vars_under_the_layer_path():
  names = {k: v.name for k, v in _Root().vars.FlattenItems()}
  assert names == {
      'holder.w': 'task/holder/w:0',
      'holder.dense.kernel': 'task/holder/dense/kernel:0',
      'holder.dense.bias': 'task/holder/dense/bias:0',
      'holder.lazy.kernel': 'task/holder/lazy/kernel:0',
      'holder.lazy.bias': 'task/holder/lazy/bias:0',
      'holder.mlp.hidden.kernel': 'task/holder/mlp/hidden/kernel:0',
      'holder.mlp.hidden.bias': 'task/holder/mlp/hidden/bias:0',
      'holder.mlp.out.kernel': 'task/holder/mlp/out/kernel:0',
      'holder.mlp.out.bias': 'task/holder/mlp/out/bias:0',
  }


def test_vars_hold_the_variables_keras_uses():
  root = _Root()
  assert root.vars.holder.dense.kernel is root.holder.dense.kernel.value
  assert isinstance(root.vars.holder.dense.kernel, tf.Variable)
  assert root.theta.holder.dense.kernel.shape == (4, 3)


def test_learner_filter_selects_and_trains_keras_variables():
  root = _Root()
  lrn = learner.Learner.Params().Set(
      name='learner', loss_name='loss', learning_rate=0.5,
      optimizer=learner.Momentum.Params().Set(alpha=0.0),
      bprop_variable_filter='holder/dense/').Instantiate()
  lrn.Bind(root.vars)
  selected = sorted(v.name for v in lrn.GetTrainableVariables(
      root.vars).Flatten())
  assert selected == ['task/holder/dense/bias:0',
                      'task/holder/dense/kernel:0']
  x = np.ones([2, 4], np.float32)
  bias_before = root.vars.holder.dense.bias.numpy().copy()
  mlp_before = root.vars.holder.mlp.out.kernel.numpy().copy()

  @tf.function
  def Step():
    # loss = mean over the batch of sum(dense(x)); d loss / d bias = 1.
    loss = tf.reduce_mean(tf.reduce_sum(root.holder.dense(x), -1))
    lrn.Apply({'loss': (loss, tf.constant(2.0))}, root.vars)

  Step()
  # SGD, rate 0.5: bias -= 0.5 * 1.
  np.testing.assert_allclose(root.vars.holder.dense.bias.numpy(),
                             bias_before - 0.5, rtol=1e-6)
  np.testing.assert_array_equal(root.vars.holder.mlp.out.kernel.numpy(),
                                mlp_before)


def test_checkpoint_round_trip_restores_keras_variables(tmp_path):
  root = _Root()
  saved = {k: v.numpy() for k, v in root.vars.FlattenItems()}
  path = tf.train.Checkpoint(model=root).save(os.path.join(tmp_path, 'c'))
  other = _Root()  # other random values
  assert not np.allclose(other.vars.holder.mlp.hidden.kernel.numpy(),
                         saved['holder.mlp.hidden.kernel'])
  tf.train.Checkpoint(model=other).restore(path).assert_consumed()
  for k, v in other.vars.FlattenItems():
    np.testing.assert_array_equal(v.numpy(), saved[k], err_msg=k)


def test_unbuilt_keras_layer_makes_vars_raise():

  class Unbuilt(BaseLayer):

    def __init__(self, params):
      super().__init__(params)
      self.dense = tf.keras.layers.Dense(3)

  layer = Unbuilt(Unbuilt.Params().Set(name='u'))
  with pytest.raises(ValueError, match=r'u\.dense is a Keras layer that is '
                     'not built'):
    _ = layer.vars


def test_keras_attribute_name_must_not_clash_with_a_variable():

  class Clash(BaseLayer):

    def __init__(self, params):
      super().__init__(params)
      self.CreateVariable('dense', [1])
      self.dense = tf.keras.layers.Dense(3)

  with pytest.raises(ValueError, match='already a child or variable'):
    Clash(Clash.Params().Set(name='c'))


def test_variable_name_must_not_clash_with_a_keras_attribute():

  class Clash(BaseLayer):

    def __init__(self, params):
      super().__init__(params)
      self.dense = tf.keras.layers.Dense(3)
      self.CreateVariable('dense', [1])

  with pytest.raises(ValueError, match='already a child or variable'):
    Clash(Clash.Params().Set(name='c'))


def test_replacing_the_attribute_drops_the_old_keras_layer():

  class Replace(BaseLayer):

    def __init__(self, params):
      super().__init__(params)
      self.dense = tf.keras.layers.Dense(3)
      self.dense = None

  assert not Replace(Replace.Params().Set(name='r')).vars
