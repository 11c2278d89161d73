"""Learner inputs: Keras schedules wrapped; wrong optimizer/schedule types.

A Keras LearningRateSchedule given as `lr_schedule` becomes a
schedules.KerasSchedule (base rate 1.0 when learning_rate is None), and
every wrong type given to `optimizer=` / `lr_schedule=` gets a TypeError
naming the param, what it got and the fix.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import gradient_tape
from learner import learner as learner_lib
from learner import optimizers
from params import BaseLayer
from schedules.cosine import CosineDecay
from schedules.keras_adapter import KerasSchedule


class _OneVar(BaseLayer):

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [], init=3.0)


def _Learner(**kwargs):
  base = dict(name='learner', loss_name='loss',
              optimizer=optimizers.SGD.Params())
  base.update(kwargs)
  return learner_lib.Learner.Params().Set(**base).Instantiate()


def test_keras_schedule_is_wrapped_with_base_rate_one():
  keras = tf.keras.optimizers.schedules.PiecewiseConstantDecay([2], [0.5, 0.1])
  learner = _Learner(lr_schedule=keras)
  assert isinstance(learner.lr_schedule, KerasSchedule)
  assert learner.base_learning_rate == 1.0
  layer = _OneVar.Params().Set(name='m').Instantiate()
  learner.Bind(layer.vars)
  rates = []
  for _ in range(4):
    with gradient_tape.GradientTape():
      loss = 1.0 * layer.theta.w  # d/dw = 1: w moves by the rate
    w = float(layer.vars.w.numpy())
    learner.Apply({'loss': (loss, 1.0)}, layer.vars)
    rates.append(w - float(layer.vars.w.numpy()))
  # Updates 0, 1, 2 see rate 0.5 (the boundary 2 is inclusive), then 0.1.
  np.testing.assert_allclose(rates, [0.5, 0.5, 0.5, 0.1], rtol=1e-5)


def test_keras_schedule_with_an_explicit_rate_multiplies_it():
  keras = tf.keras.optimizers.schedules.ExponentialDecay(0.5, 10, 0.5)
  learner = _Learner(lr_schedule=keras, learning_rate=2.0)
  assert learner.base_learning_rate == 2.0


@pytest.mark.parametrize('value,got,fix', [
    (optimizers.Adam, 'the class Adam', 'optimizer=Adam.Params()'),
    (optimizers.Adam.Params, 'Adam.Params (not called)',
     'optimizer=Adam.Params() (with parentheses)'),
    ('adam', "str 'adam'", 'optimizer=Adam.Params()'),
    (CosineDecay.Params(), 'Params', 'optimizer=Adam.Params()'),
])
def test_wrong_optimizer_types_name_param_value_and_fix(value, got, fix):
  with pytest.raises(TypeError) as e:
    _Learner(optimizer=value)
  msg = str(e.value)
  assert "Learner 'learner': optimizer must be the Params of a BaseOptimizer" \
      in msg
  assert got in msg and fix in msg, msg


def test_keras_optimizer_instance_as_optimizer_suggests_keras_optimizer():
  with pytest.raises(TypeError) as e:
    _Learner(optimizer=tf.keras.optimizers.Adam(0.1))
  msg = str(e.value)
  assert 'optimizer is the Keras optimizer instance Adam' in msg
  assert 'optimizer_fn=lambda: tf.keras.optimizers.Adam(...)' in msg
  assert 'KerasOptimizer.Params()' in msg


def test_keras_schedule_as_optimizer_or_learning_rate_points_to_lr_schedule():
  keras = tf.keras.optimizers.schedules.CosineDecay(0.1, 100)
  with pytest.raises(TypeError, match='optimizer is the Keras schedule '
                     'CosineDecay; give it as lr_schedule'):
    _Learner(optimizer=keras)
  with pytest.raises(TypeError, match='learning_rate is the Keras schedule '
                     "'CosineDecay'; give it as lr_schedule"):
    _Learner(learning_rate=keras)


@pytest.mark.parametrize('value,got,fix', [
    (CosineDecay, 'the class CosineDecay', 'lr_schedule=CosineDecay.Params()'),
    (CosineDecay.Params, 'CosineDecay.Params (not called)',
     'lr_schedule=CosineDecay.Params() (with parentheses)'),
    (0.1, 'float 0.1', 'lr_schedule=CosineDecay.Params().Set('),
    (optimizers.SGD.Params(), 'Params', 'lr_schedule=CosineDecay'),
])
def test_wrong_schedule_types_name_param_value_and_fix(value, got, fix):
  with pytest.raises(TypeError) as e:
    _Learner(lr_schedule=value, learning_rate=0.1)
  msg = str(e.value)
  assert "Learner 'learner': lr_schedule must be the Params of a " \
      'BaseSchedule' in msg
  assert got in msg and fix in msg, msg
