"""Tests of learner/optimizers/base.py: weight decay, binding, XLA, wrappers."""

from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers import base as base_optimizer
from learner.optimizers import wrapper
from learner import optimizers
from learner.optimizers import kernels
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def _DecayCase(exclude):
  names = {'gamma': ('encoder/LayerNorm/gamma', [1.0, 1.0]),
           'beta': ('encoder/LayerNorm/beta', [0.5]),
           'kernel': ('dense/kernel', [[2.0]]),
           'bias': ('dense/bias', [0.5])}
  variables = {k: tf.Variable(np.asarray(v, np.float32), name=n)
               for k, (n, v) in names.items()}
  opt = optimizers.SGD.Params().Set(
      name='sgd', decoupled_weight_decay=0.1,
      weight_decay_exclude=exclude).Instantiate()
  with mock.patch.object(base_optimizer.logging, 'warning') as warning:
    opt.Bind(list(variables.values()))
  opt.Apply(1.0, NestedMap({k: VarGrad(v, tf.zeros_like(v))
                            for k, v in variables.items()}))
  return {k: v.numpy() for k, v in variables.items()}, warning


def test_c_decay_exclusion_excludes_layer_norm_and_bias():
  # C-decay-exclusion: kernel 2 - 1.0 * 0.1 * 2 = 1.8; the rest unchanged.
  got, warning = _DecayCase(['LayerNorm', 'bias'])
  np.testing.assert_allclose(got['kernel'], [[1.8]], rtol=1e-6)
  np.testing.assert_allclose(got['gamma'], [1.0, 1.0])
  np.testing.assert_allclose(got['beta'], [0.5])
  np.testing.assert_allclose(got['bias'], [0.5])
  warning.assert_not_called()


def test_c_decay_exclusion_misspelt_regex_decays_and_warns_naming_it():
  # C-decay-exclusion: 'layer_norm' matches nothing: gamma 0.9, beta 0.45.
  got, warning = _DecayCase(['layer_norm', 'bias'])
  np.testing.assert_allclose(got['gamma'], [0.9, 0.9], rtol=1e-6)
  np.testing.assert_allclose(got['beta'], [0.45], rtol=1e-6)
  np.testing.assert_allclose(got['bias'], [0.5])
  assert warning.call_count == 1
  assert "'layer_norm'" in warning.call_args[0][0] % warning.call_args[0][1:]


def test_decay_uses_weights_before_the_update():
  # w = 2, g = 1, lr 0.5, wd 0.1: 2 - 0.5 - 0.5 * 0.1 * 2 = 1.4.
  w = tf.Variable(2.0, name='w')
  opt = optimizers.SGD.Params().Set(
      name='sgd', decoupled_weight_decay=0.1).Instantiate().Bind([w])
  opt.Apply(0.5, NestedMap(w=VarGrad(w, tf.constant(1.0))))
  np.testing.assert_allclose(w.numpy(), 1.4, rtol=1e-6)


def test_apply_on_an_unbound_variable_names_it():
  w = tf.Variable(1.0, name='bound_w')
  u = tf.Variable(1.0, name='stray_w')
  opt = optimizers.SGD.Params().Set(name='sgd').Instantiate().Bind([w])
  with pytest.raises(ValueError, match="'stray_w' was not bound"):
    opt.Apply(0.1, NestedMap(u=VarGrad(u, tf.constant(1.0))))


def test_none_gradient_leaves_the_variable_and_counts_the_update():
  w = tf.Variable(1.0, name='w')
  opt = optimizers.Momentum.Params().Set(name='m').Instantiate().Bind([w])
  opt.Apply(0.1, NestedMap(w=VarGrad(w, None)))
  assert w.numpy() == 1.0 and int(opt.num_updates.numpy()) == 1


def test_in_xla_true_only_when_jit_compiled_including_cond_branches():
  seen = {}

  def Probe(tag):
    seen[tag] = kernels.InXla()
    return tf.constant(0)

  @tf.function(jit_compile=True)
  def Jit(x):
    Probe('jit')
    return tf.cond(x > 0, lambda: Probe('jit_cond'), lambda: Probe('jit_else'))

  @tf.function
  def Plain(x):
    Probe('plain')
    return tf.cond(x > 0, lambda: Probe('plain_cond'),
                   lambda: Probe('plain_else'))

  Jit(tf.constant(1))
  Plain(tf.constant(1))
  Probe('eager')
  assert seen == {'jit': True, 'jit_cond': True, 'jit_else': True,
                  'plain': False, 'plain_cond': False, 'plain_else': False,
                  'eager': False}


def test_lazy_sparse_under_jit_compile_is_densified_and_matches_dense():
  # ResourceSparseApplyMomentum and tf.unique do not compile under XLA: the
  # sparse gradient (row 0 twice) is densified and gives the dense result.
  p = optimizers.Momentum.Params().Set(name='m', alpha=0.9,
                                       lazy_sparse_updates=True)
  w_jit = tf.Variable(np.ones((3, 2), np.float32), name='emb')
  w_ref = tf.Variable(np.ones((3, 2), np.float32), name='emb')
  opt_jit = p.Instantiate().Bind([w_jit])
  opt_ref = p.Copy().Set(lazy_sparse_updates=False).Instantiate().Bind([w_ref])
  values = tf.constant([[1.0, 2.0], [3.0, 4.0]])
  indices = tf.constant([0, 0])

  @tf.function(jit_compile=True)
  def Step():
    g = tf.IndexedSlices(values, indices, tf.constant([3, 2]))
    opt_jit.Apply(0.1, NestedMap(w=VarGrad(w_jit, g)))

  for _ in range(2):
    Step()
    opt_ref.Apply(0.1, NestedMap(w=VarGrad(w_ref, tf.constant(
        [[4.0, 6.0], [0.0, 0.0], [0.0, 0.0]]))))
  # Row 0: v = 4, then 7.6: w = 1 - 0.4 - 0.76 = -0.16 (first column).
  np.testing.assert_allclose(w_jit.numpy(), w_ref.numpy(), rtol=1e-6)
  np.testing.assert_allclose(w_jit.numpy()[0], [-0.16, -0.74], rtol=1e-5)
  np.testing.assert_allclose(w_jit.numpy()[1:], 1.0)
  assert int(opt_jit.num_updates.numpy()) == 2


def test_apply_in_tf_function_matches_eager():
  w1 = tf.Variable([1.0, 2.0], name='w')
  w2 = tf.Variable([1.0, 2.0], name='w')
  p = optimizers.Adam.Params().Set(name='adam')
  o1 = p.Instantiate().Bind([w1])
  o2 = p.Instantiate().Bind([w2])
  g = tf.constant([0.5, -1.0])

  @tf.function
  def Step():
    o1.Apply(0.1, NestedMap(w=VarGrad(w1, g)))

  for _ in range(3):
    Step()
    o2.Apply(0.1, NestedMap(w=VarGrad(w2, g)))
  np.testing.assert_allclose(w1.numpy(), w2.numpy(), rtol=1e-6)
  assert int(o1.num_updates.numpy()) == 3


class _FakeAccumulation(optimizers.SGD):
  IS_ACCUMULATION = True


def test_check_inner_refuses_accumulation_saying_it_must_be_outermost():
  with pytest.raises(ValueError, match='outermost wrapper'):
    wrapper.CheckInnerOptimizerParams(
        'Lars', 'optimizer', _FakeAccumulation.Params())


def test_check_inner_refuses_non_optimizer_params_naming_the_key():
  with pytest.raises(ValueError, match=r'params\.optimizer must be'):
    wrapper.CheckInnerOptimizerParams('Ema', 'optimizer', None)


def test_lazy_sparse_updates_on_a_rule_that_densifies_warns(caplog):
  # Lion densifies sparse gradients (SUPPORTS_LAZY_SPARSE is False): asking
  # for lazy rows is not silently ignored.
  with caplog.at_level('WARNING'):
    optimizers.Lion.Params().Set(name='lion', lazy_sparse_updates=True
                                 ).Instantiate()
  assert any('lazy_sparse_updates=True, but Lion does not update sparse rows'
             in r.getMessage() and 'set lazy_sparse_updates : False on it' in
             r.getMessage() for r in caplog.records)
  caplog.clear()
  with caplog.at_level('WARNING'):
    optimizers.Adam.Params().Set(name='adam', lazy_sparse_updates=True
                                 ).Instantiate()
  assert not any('lazy_sparse_updates' in r.getMessage()
                 for r in caplog.records)
