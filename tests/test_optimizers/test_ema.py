"""Tests of learner/optimizers/wrappers/ema.py."""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers.wrappers import ema
from learner import optimizers
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
import schedules


def _Ema(**kw):
  return ema.Ema.Params().Set(name='ema', optimizer=optimizers.SGD.Params(),
                              **kw).Instantiate()


def test_c_ema_average_swap_and_checkpoint(tmp_path):
  # C-ema: w goes 0, then -1; the average 1.0, 0.9, 0.71.
  w = tf.Variable(1.0, name='w')
  opt = _Ema(decay=0.9).Bind([w])
  with opt.SwapAverages():
    assert w.numpy() == 1.0
  step = lambda: opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0))))
  step()
  np.testing.assert_allclose(opt.GetAverage(w).numpy(), 0.9, rtol=1e-6)
  step()
  np.testing.assert_allclose(opt.GetAverage(w).numpy(), 0.71, rtol=1e-6)
  assert w.numpy() == -1.0
  with opt.SwapAverages():
    np.testing.assert_allclose(w.numpy(), 0.71, rtol=1e-6)
  np.testing.assert_allclose(w.numpy(), -1.0)
  path = tf.train.Checkpoint(opt=opt, w=w).save(str(tmp_path / 'ckpt'))
  w2 = tf.Variable(5.0, name='w')
  opt2 = _Ema(decay=0.9).Bind([w2])
  tf.train.Checkpoint(opt=opt2, w=w2).restore(path).assert_consumed()
  np.testing.assert_allclose(opt2.GetAverage(w2).numpy(), 0.71, rtol=1e-6)
  assert int(opt2.num_updates.numpy()) == 2


def test_ema_decay_from_a_schedule_params():
  # Any BaseSchedule params: a constant 0.5: average 1 -> 0.5 * 1 + 0.5 * 0.
  w = tf.Variable(1.0, name='w')
  opt = _Ema(decay_schedule=schedules.Constant.Params().Set(value=0.5))
  opt.Bind([w])
  opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0))))
  np.testing.assert_allclose(opt.GetAverage(w).numpy(), 0.5)


def test_ema_decay_schedule_ema_decay_schedule_when_available():
  cls = getattr(schedules, 'EmaDecaySchedule', None)
  if cls is None:
    pytest.skip('schedules.EmaDecaySchedule does not exist yet')
  # At num_updates 0 the decay is min(0.9999, 1/10) = 0.1 (S21): average
  # 0.1 * 1 + 0.9 * 0 = 0.1.
  w = tf.Variable(1.0, name='w')
  opt = _Ema(decay_schedule=cls.Params().Set(ema_decay=0.9999)).Bind([w])
  opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0))))
  np.testing.assert_allclose(opt.GetAverage(w).numpy(), 0.1, rtol=1e-6)


def test_ema_averages_variables_without_gradient_too():
  w = tf.Variable(1.0, name='w')
  u = tf.Variable(2.0, name='u')
  opt = _Ema(decay=0.5).Bind([w, u])
  opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0)),
                           u=VarGrad(u, None)))
  np.testing.assert_allclose(opt.GetAverage(w).numpy(), 0.5)
  np.testing.assert_allclose(opt.GetAverage(u).numpy(), 2.0)


def test_ema_in_tf_function():
  w = tf.Variable(1.0, name='w')
  opt = _Ema(decay=0.9).Bind([w])

  @tf.function
  def Step():
    opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0))))

  Step()
  Step()
  np.testing.assert_allclose(opt.GetAverage(w).numpy(), 0.71, rtol=1e-6)


def test_ema_swap_inside_tf_function_is_refused():
  opt = _Ema().Bind([tf.Variable(1.0, name='w')])

  @tf.function
  def Swap():
    with opt.SwapAverages():
      pass

  with pytest.raises(RuntimeError, match='SwapAverages'):
    Swap()


def test_ema_bad_decay_names_it():
  with pytest.raises(ValueError, match='decay=1.5'):
    _Ema(decay=1.5)


def test_ema_refuses_accumulation_inside():
  class _Acc(optimizers.SGD):
    IS_ACCUMULATION = True

  with pytest.raises(ValueError, match='accumulation must be the outermost'):
    ema.Ema.Params().Set(name='ema', optimizer=_Acc.Params()).Instantiate()


def test_ema_decay_schedule_must_be_schedule_params():
  with pytest.raises(ValueError, match='decay_schedule must be BaseSchedule'):
    _Ema(decay_schedule=optimizers.SGD.Params())
