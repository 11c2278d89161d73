"""Tests of learner/optimizers/wrappers/lars.py (You, Gitman & Ginsburg 2017)."""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers.wrappers import lars
from learner import optimizers
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def _Lars(**kw):
  p = lars.Lars.Params().Set(
      name='lars', optimizer=optimizers.Momentum.Params().Set(alpha=0.9))
  return p.Set(**kw).Instantiate()


def test_c_lars_1d_kernel_is_adapted_and_gamma_is_excluded():
  # C-lars-1d: trust = 0.001 * 5 / (1 + 0.01 * 5) = 0.0047619; decayed
  # gradient [0.83, -0.56]; K = [3, 4] - 0.0047619 * [0.83, -0.56].
  k = tf.Variable([[3.0], [4.0]], name='dense/kernel')
  gamma = tf.Variable([1.0, 1.0], name='bn/gamma')
  opt = _Lars(eta=0.001, weight_decay=0.01).Bind([k, gamma])
  opt.Apply(1.0, NestedMap(k=VarGrad(k, tf.constant([[0.8], [-0.6]])),
                           gamma=VarGrad(gamma, tf.constant([0.1, 0.1]))))
  np.testing.assert_allclose(k.numpy(), [[2.9960476], [4.0026667]], rtol=1e-6)
  np.testing.assert_allclose(gamma.numpy(), [0.9, 0.9], rtol=1e-6)
  # The inner momentum holds the scaled gradient.
  np.testing.assert_allclose(opt.optimizer.GetSlots(k)['momentum'].numpy(),
                             [[0.83 * 0.0047619], [-0.56 * 0.0047619]],
                             rtol=1e-4)
  assert int(opt.num_updates.numpy()) == 1
  assert int(opt.optimizer.num_updates.numpy()) == 1


def test_lars_trust_ratio_is_one_when_a_norm_is_zero():
  w = tf.Variable([[0.0], [0.0]], name='w0')
  opt = _Lars(eta=0.001).Bind([w])
  np.testing.assert_allclose(
      opt.ScaledGradient(w, tf.constant([[1.0], [2.0]])).numpy(),
      [[1.0], [2.0]])
  v = tf.Variable([[3.0], [4.0]], name='w1')
  opt.Bind([v])
  np.testing.assert_allclose(
      opt.ScaledGradient(v, tf.zeros([2, 1])).numpy(), [[0.0], [0.0]])


def test_lars_exclude_regex_and_1d_switch():
  w = tf.Variable([[3.0], [4.0]], name='head/kernel')
  b = tf.Variable([3.0, 4.0], name='head/bias')
  g = tf.constant([[0.8], [-0.6]])
  opt = _Lars(exclude=['head/kernel']).Bind([w])
  np.testing.assert_allclose(opt.ScaledGradient(w, g).numpy(), g.numpy())
  opt = _Lars(eta=0.001, exclude_1d=False).Bind([b])
  # ||b|| = 5, ||g|| = 1: trust 0.005.
  np.testing.assert_allclose(
      opt.ScaledGradient(b, tf.constant([0.8, -0.6])).numpy(),
      [0.004, -0.003], rtol=1e-5)


def test_lars_densifies_sparse_gradients():
  w = tf.Variable([[3.0], [4.0]], name='emb')
  opt = _Lars(eta=0.001).Bind([w])
  sparse = tf.IndexedSlices(tf.constant([[0.8], [-0.6]]), tf.constant([0, 1]),
                            tf.constant([2, 1]))
  np.testing.assert_allclose(opt.ScaledGradient(w, sparse).numpy(),
                             [[0.004], [-0.003]], rtol=1e-5)


class _FakeAccumulation(optimizers.SGD):
  IS_ACCUMULATION = True


def test_lars_refuses_accumulation_inside():
  with pytest.raises(ValueError, match='accumulation must be the outermost'):
    lars.Lars.Params().Set(
        name='lars', optimizer=_FakeAccumulation.Params()).Instantiate()


def test_lars_refuses_its_own_decoupled_weight_decay():
  with pytest.raises(ValueError, match='decoupled_weight_decay'):
    _Lars(decoupled_weight_decay=0.1)


def test_lars_apply_on_unbound_variable_names_it():
  opt = _Lars().Bind([tf.Variable(1.0, name='known')])
  u = tf.Variable([[1.0]], name='unknown_var')
  with pytest.raises(ValueError, match='unknown_var'):
    opt.Apply(0.1, NestedMap(u=VarGrad(u, tf.constant([[1.0]]))))
