"""Schedules across the Keras boundary: Keras' in ours, ours in Keras'."""

import math

import numpy as np
import pytest
import tensorflow as tf

from params import Params
from schedules.cosine import CosineDecay
from schedules.keras_adapter import AsKerasSchedule
from schedules.keras_adapter import KerasSchedule


def _KerasCosine():
  return tf.keras.optimizers.schedules.CosineDecay(
      initial_learning_rate=0.1, decay_steps=100, alpha=0.0)


def test_keras_schedule_in_ours_gives_keras_rate():
  s = KerasSchedule.FromKeras(_KerasCosine()).Instantiate()
  for step in (0, 25, 50, 100, 150):
    # Keras' CosineDecay: 0.1 * 0.5 * (1 + cos(pi * min(step, 100) / 100)).
    want = 0.1 * 0.5 * (1 + math.cos(math.pi * min(step, 100) / 100))
    np.testing.assert_allclose(s.Value(step).numpy(), want, rtol=1e-6,
                               atol=1e-8)


def test_keras_schedule_params_round_trip_through_text():
  p = KerasSchedule.FromKeras(
      tf.keras.optimizers.schedules.PiecewiseConstantDecay([10, 20],
                                                           [1.0, 0.5, 0.1]))
  q = KerasSchedule.Params()
  q.FromText(p.ToText())
  s = q.Instantiate()
  got = [float(s.Value(step)) for step in (0, 10, 11, 20, 21)]
  np.testing.assert_allclose(got, [1.0, 1.0, 0.5, 0.5, 0.1], rtol=1e-6)


def test_keras_schedule_works_in_tf_function_and_xla():
  s = KerasSchedule.FromKeras(_KerasCosine()).Instantiate()
  f = tf.function(s.Value, jit_compile=True)
  want = 0.1 * 0.5 * (1 + math.cos(math.pi * 0.3))
  np.testing.assert_allclose(f(tf.constant(30, tf.int64)).numpy(), want,
                             rtol=1e-6)


def test_keras_schedule_refuses_other_values():
  with pytest.raises(TypeError, match='expects a Keras LearningRateSchedule'):
    KerasSchedule.FromKeras(CosineDecay.Params())
  with pytest.raises(ValueError, match='keras_schedule'):
    KerasSchedule.Params().Set(keras_schedule={'x': 1}).Instantiate()


def test_our_schedule_as_keras_learning_rate_drives_a_keras_optimizer():
  sched = AsKerasSchedule(CosineDecay.Params().Set(total_steps=4),
                          learning_rate=0.5)
  # lr at update k (Keras passes iterations = k): 0.5*0.5*(1+cos(pi*k/4)).
  lrs = [0.5 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(3)]
  np.testing.assert_allclose([float(sched(k)) for k in range(3)], lrs,
                             rtol=1e-6)
  w = tf.Variable(0.0)
  opt = tf.keras.optimizers.SGD(learning_rate=sched)
  for _ in range(3):
    opt.apply_gradients([(tf.constant(1.0), w)])
  # SGD with gradient 1: w = -(sum of the three rates).
  np.testing.assert_allclose(w.numpy(), -sum(lrs), rtol=1e-6)


def test_as_keras_schedule_refuses_other_values():
  with pytest.raises(TypeError, match='expects the params of one of our'):
    AsKerasSchedule(Params())


def test_keras_schedule_of_a_module_not_imported_is_refused_unimported(
    tmp_path, monkeypatch):
  # Params text is data (issue 12): a serialized schedule naming a module
  # must not make Keras import it.
  marker = tmp_path / 'imported'
  (tmp_path / 'ks_not_imported_q5.py').write_text(
      'open(%r, "w").write("x")\n' % str(marker))
  monkeypatch.syspath_prepend(str(tmp_path))
  p = KerasSchedule.Params().Set(keras_schedule={
      'module': 'ks_not_imported_q5', 'class_name': 'Evil', 'config': {},
      'registered_name': 'Evil'})
  with pytest.raises(ValueError, match='names no imported Keras schedule'):
    p.Instantiate()
  assert not marker.exists()
