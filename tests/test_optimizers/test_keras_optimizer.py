"""Tests of learner/optimizers/keras_optimizer.py."""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers import keras_optimizer
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def _Keras(fn):
  return keras_optimizer.KerasOptimizerParams(fn).Set(
      name='keras').Instantiate()


def test_the_fed_rate_replaces_the_keras_rate():
  # Keras SGD built with 0.5 but fed 0.1: w = 1 - 0.1 * 2 = 0.8.
  w = tf.Variable(1.0, name='w')
  opt = _Keras(lambda: tf.keras.optimizers.SGD(0.5)).Bind([w])
  assert opt.keras_learning_rate == 0.5
  opt.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant(2.0))))
  np.testing.assert_allclose(w.numpy(), 0.8, rtol=1e-6)
  assert int(opt.num_updates.numpy()) == 1


def test_slots_built_at_bind_and_restored_before_any_step(tmp_path):
  # Keras Adam, one step with g = 0.5, lr 0.1: m = 0.05, v = 0.00025.
  w = tf.Variable([1.0], name='w')
  opt = _Keras(lambda: tf.keras.optimizers.Adam(0.1)).Bind([w])
  n_vars = len(opt.keras_optimizer.variables)
  assert n_vars >= 4  # iterations, learning rate, m, v: built at Bind.
  opt.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant([0.5]))))
  path = tf.train.Checkpoint(opt=opt, w=w).save(str(tmp_path / 'ckpt'))
  w_next = w.numpy().copy()
  opt.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant([-0.25]))))
  expected = w.numpy().copy()

  w2 = tf.Variable([7.0], name='w')
  opt2 = _Keras(lambda: tf.keras.optimizers.Adam(0.1)).Bind([w2])
  tf.train.Checkpoint(opt=opt2, w=w2).restore(path).assert_consumed()
  np.testing.assert_allclose(w2.numpy(), w_next)
  slot_values = sorted(float(v.numpy().ravel()[0])
                       for v in opt2.keras_optimizer.variables
                       if v.shape == (1,))
  np.testing.assert_allclose(slot_values, [0.00025, 0.05], rtol=1e-5)
  opt2.Apply(0.1, NestedMap(w=VarGrad(w2, tf.constant([-0.25]))))
  np.testing.assert_allclose(w2.numpy(), expected, rtol=1e-6)


def test_keras_in_tf_function_and_decoupled_decay():
  # SGD fed 0.1, g = 1, wd 0.5 on w_old = 2: 2 - 0.1 - 0.1 * 0.5 * 2 = 1.8.
  w = tf.Variable(2.0, name='w')
  opt = keras_optimizer.KerasOptimizerParams(
      lambda: tf.keras.optimizers.SGD(1.0)).Set(
          name='k', decoupled_weight_decay=0.5).Instantiate().Bind([w])

  @tf.function
  def Step():
    opt.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant(1.0))))

  Step()
  np.testing.assert_allclose(w.numpy(), 1.8, rtol=1e-6)


def test_keras_instance_instead_of_callable_shows_the_lambda_fix():
  with pytest.raises(TypeError, match=r'optimizer_fn=lambda: Adam\(\.\.\.\)'):
    _Keras(tf.keras.optimizers.Adam(0.1))


def test_callable_returning_something_else_is_refused():
  with pytest.raises(TypeError, match='optimizer_fn'):
    _Keras(lambda: 3)


def test_keras_schedule_rate_is_refused():
  sched = tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
  with pytest.raises(ValueError, match='lr_schedule'):
    _Keras(lambda: tf.keras.optimizers.SGD(sched))
