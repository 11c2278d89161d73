"""Tied variables, VarGrad as one tf.nest leaf, AdamW's refused None (issue 13 B).

Numbers by hand: loss = a (d loss / d a = 1), SGD(0.1), a from 1.0.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import learner as learner_lib
from learner.optimizers.base import SGD
from learner.optimizers.rules.adam import AdamW
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def _Learner(**kw):
  p = learner_lib.Learner.Params().Set(name='loss', learning_rate=0.1,
                                       optimizer=SGD.Params(), **kw)
  return p.Instantiate()


def _Step(learner, vmap, loss_fn):
  @tf.function
  def _Fn():
    _, _, m = learner.Apply({'loss': (loss_fn(), 1.0)}, vmap)
    return {k: v for k, (v, _) in m.items()}
  return {k: float(v) for k, v in _Fn().items()}


def test_tied_variable_updated_once_with_one_norm_entry():
  a = tf.Variable(1.0, name='tied_a')
  vmap = NestedMap(emb=NestedMap(w=a), softmax=NestedMap(w=a))
  learner = _Learner().Bind(vmap)
  assert learner.GetTrainableVariables(vmap).Flatten() == [a]
  m = _Step(learner, vmap, lambda: a * 1.0)
  # One gradient 1.0, one update: 1.0 - 0.1 * 1 = 0.9 (not 0.8);
  # grad_norm/all = |1| (not sqrt(1 + 1) = 1.414).
  np.testing.assert_allclose(a.numpy(), 0.9, rtol=1e-6)
  np.testing.assert_allclose(m['grad_norm/all'], 1.0, rtol=1e-6)
  np.testing.assert_allclose(m['var_norm/all'], 1.0, rtol=1e-6)


def test_tied_variable_gradient_is_sum_of_uses():
  # loss = emb.w * 3 + softmax.w * 2 with emb.w and softmax.w the same a:
  # d loss / d a = 5; a = 1 - 0.1 * 5 = 0.5; grad_norm/all = 5.
  a = tf.Variable(1.0, name='tied_b')
  vmap = NestedMap(emb=NestedMap(w=a), softmax=NestedMap(w=a))
  learner = _Learner().Bind(vmap)
  m = _Step(learner, vmap,
            lambda: vmap.emb.w * 3.0 + vmap.softmax.w * 2.0)
  np.testing.assert_allclose(a.numpy(), 0.5, rtol=1e-6)
  np.testing.assert_allclose(m['grad_norm/all'], 5.0, rtol=1e-6)


def test_tied_variable_l2_counted_once():
  # L2 0.1 on a = 2: l2_loss = 0.5 * 0.1 * 4 = 0.2 (not 0.4); grad =
  # 1 + 0.1 * 2 = 1.2; a = 2 - 0.1 * 1.2 = 1.88.
  a = tf.Variable(2.0, name='tied_c')
  vmap = NestedMap(x=a, y=NestedMap(z=a), w=[a])
  learner = _Learner(l2_regularizer_weight=0.1).Bind(vmap)
  m = _Step(learner, vmap, lambda: a * 1.0)
  np.testing.assert_allclose(m['l2_loss'], 0.2, rtol=1e-6)
  np.testing.assert_allclose(m['grad_norm/all'], 1.2, rtol=1e-6)
  np.testing.assert_allclose(a.numpy(), 1.88, rtol=1e-6)


def test_apply_gradients_merges_a_variable_given_twice():
  # The same variable under two keys with grads 1 and 3: one update with
  # their sum 4: 1 - 0.1 * 4 = 0.6.
  a = tf.Variable(1.0, name='tied_d')
  learner = _Learner().Bind(NestedMap(a=a))
  vgs = NestedMap(p=VarGrad(a, tf.constant(1.0)),
                  q=VarGrad(a, tf.constant(3.0)))
  _, m = learner.ApplyGradients(vgs)
  np.testing.assert_allclose(a.numpy(), 0.6, rtol=1e-6)
  np.testing.assert_allclose(float(m['grad_norm/all'][0]), 4.0, rtol=1e-6)


def test_var_grad_is_one_nest_leaf():
  v = tf.Variable([1.0, 2.0], name='vg_leaf')
  g = tf.constant([3.0, 4.0])
  vg = VarGrad(v, g)
  vgs = NestedMap(a=vg, b=NestedMap(c=VarGrad(v, None)))
  assert len(tf.nest.flatten(vg)) == 1
  assert tf.nest.flatten(vgs)[0] is vg
  assert len(tf.nest.flatten(vgs)) == 2
  assert vgs.Flatten()[0] is vg
  var, grad = vg
  assert var is v and grad is g
  assert vg.var is v and vg.grad is g
  mapped = tf.nest.map_structure(lambda x: x.var.name, vgs)
  assert mapped['a'] == v.name


def test_adamw_refuses_none_decay():
  p = AdamW.Params().Set(decoupled_weight_decay=None)
  with pytest.raises(ValueError, match='decoupled_weight_decay=None'):
    p.Instantiate()
  # A number (0.0 included) is still accepted.
  AdamW.Params().Set(decoupled_weight_decay=0.0).Instantiate()
