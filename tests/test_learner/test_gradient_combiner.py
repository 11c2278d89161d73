"""Tests of learner/gradient_combiner.py: GradientSum and PCGrad."""

import numpy as np
import pytest
import tensorflow as tf

from learner.gradient_combiner import GradientSum
from learner.gradient_combiner import PCGrad
from learner.optimizers.var_grad import VarGrad
from params import BaseLayer
from params import NestedMap


def _Vars(**shapes):
  return NestedMap({k: tf.Variable(tf.zeros(s), name=k)
                    for k, s in shapes.items()})


def _Inputs(vmap, per_loss):
  """per_loss: {loss_name: {var_key: grad or None}} -> losses_and_grads."""
  out = NestedMap()
  for name, grads in per_loss.items():
    out[name] = NestedMap(
        loss_metric=(tf.constant(1.0), tf.constant(1.0)),
        grads=NestedMap({
            k: VarGrad(vmap[k], None if g is None else tf.constant(
                g, tf.float32)) for k, g in grads.items()}))
  return out


def _Combine(cls, vmap, per_loss):
  combiner = cls.Params().Set(name='comb').Instantiate()
  return combiner.Combine(vmap, _Inputs(vmap, per_loss))


def test_l2_gradient_sum_adds_losses_like_one_loss():
  # L2: main_loss = hello gives hello->1; aux_loss = -2*world gives world->-2.
  vmap = _Vars(hello=[], world=[], moon=[])
  out = _Combine(GradientSum, vmap, {
      'main_loss': {'hello': 1.0, 'world': None, 'moon': None},
      'aux_loss': {'hello': None, 'world': -2.0, 'moon': None}})
  assert sorted(out.keys()) == ['hello', 'moon', 'world']
  assert out.hello.var is vmap.hello
  np.testing.assert_allclose(out.hello.grad, 1.0)
  np.testing.assert_allclose(out.world.grad, -2.0)
  assert out.moon.grad is None


def test_gradient_sum_sums_overlapping_and_sparse_gradients():
  vmap = _Vars(w=[3, 2])
  s1 = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([0]),
                        tf.constant([3, 2]))
  s2 = tf.IndexedSlices(tf.constant([[3.0, 4.0]]), tf.constant([0]),
                        tf.constant([3, 2]))
  inputs = NestedMap(
      a=NestedMap(loss_metric=(1.0, 1.0), grads=NestedMap(w=VarGrad(vmap.w,
                                                                    s1))),
      b=NestedMap(loss_metric=(1.0, 1.0), grads=NestedMap(w=VarGrad(vmap.w,
                                                                    s2))))
  comb = GradientSum.Params().Set(name='sum').Instantiate()
  out = comb.Combine(vmap, inputs)
  assert isinstance(out.w.grad, tf.IndexedSlices)
  np.testing.assert_allclose(tf.convert_to_tensor(out.w.grad),
                             [[4, 6], [0, 0], [0, 0]])
  # Sparse + dense densifies.
  inputs.b.grads.w = VarGrad(vmap.w, tf.ones([3, 2]))
  out = comb.Combine(vmap, inputs)
  np.testing.assert_allclose(out.w.grad, [[2, 3], [1, 1], [1, 1]])


def test_pcgrad_two_conflicting_2d_gradients_by_hand():
  # g1 = [1, 0], g2 = [-1, 1]: g1.g2 = -1 < 0.
  # g1' = g1 - (-1/2) g2 = [0.5, 0.5]; g2' = g2 - (-1/1) g1 = [0, 1].
  # Sum = [0.5, 1.5] (GradientSum would give [0, 1]).
  vmap = _Vars(w=[2])
  out = _Combine(PCGrad, vmap, {'a': {'w': [1.0, 0.0]},
                                'b': {'w': [-1.0, 1.0]}})
  np.testing.assert_allclose(out.w.grad, [0.5, 1.5], rtol=1e-6)


def test_pcgrad_flattens_over_all_variables():
  # The same two gradients split over two scalar variables: the dot product
  # is taken over both, so the result is the same [0.5, 1.5].
  vmap = _Vars(u=[], v=[])
  out = _Combine(PCGrad, vmap, {'a': {'u': 1.0, 'v': 0.0},
                                'b': {'u': -1.0, 'v': 1.0}})
  np.testing.assert_allclose([out.u.grad, out.v.grad], [0.5, 1.5], rtol=1e-6)


def test_pcgrad_no_conflict_is_the_plain_sum():
  vmap = _Vars(w=[2])
  out = _Combine(PCGrad, vmap, {'a': {'w': [1.0, 0.0]},
                                'b': {'w': [1.0, 1.0]}})
  np.testing.assert_allclose(out.w.grad, [2.0, 1.0])


def test_pcgrad_missing_gradient_counts_as_zero_and_all_none_stays_none():
  # a: u=1, v=None (zeros); b: u=-1, v=1 -> same as the 2-D example.
  vmap = _Vars(u=[], v=[], z=[])
  out = _Combine(PCGrad, vmap, {'a': {'u': 1.0, 'v': None, 'z': None},
                                'b': {'u': -1.0, 'v': 1.0, 'z': None}})
  np.testing.assert_allclose([out.u.grad, out.v.grad], [0.5, 1.5], rtol=1e-6)
  assert out.z.grad is None and out.z.var is vmap.z


def _NumpyPCGrad(gs):
  gs = [np.asarray(g, np.float64) for g in gs]
  total = np.zeros_like(gs[0])
  for i, g in enumerate(gs):
    pc = g.copy()
    for j, h in enumerate(gs):
      if j != i and pc @ h < 0:
        pc = pc - (pc @ h) / (h @ h) * h
    total += pc
  return total


@pytest.mark.parametrize('jit', [False, True])
def test_pcgrad_three_losses_match_numpy_in_tf_function(jit):
  rng = np.random.default_rng(0)
  gs = rng.normal(size=(3, 5)).astype(np.float32)
  # Make sure there are conflicts to project.
  gs[1] = -gs[0] + 0.3 * gs[1]
  want = _NumpyPCGrad(gs)
  vmap = _Vars(a=[2], b=[3])
  comb = PCGrad.Params().Set(name='pc').Instantiate()

  @tf.function(jit_compile=jit, autograph=False)
  def Run(g):
    inputs = NestedMap()
    for i, name in enumerate(['l0', 'l1', 'l2']):
      inputs[name] = NestedMap(
          loss_metric=(1.0, 1.0),
          grads=NestedMap(a=VarGrad(vmap.a, g[i, :2]),
                          b=VarGrad(vmap.b, g[i, 2:])))
    out = comb.Combine(vmap, inputs)
    return tf.concat([out.a.grad, out.b.grad], 0)

  np.testing.assert_allclose(Run(tf.constant(gs)), want, rtol=1e-5,
                             atol=1e-6)
  # The projection changed the plain sum.
  assert np.abs(want - gs.sum(0)).max() > 0.1
  # The order is fixed (loss_name order) and matters: with losses 1 and 2
  # swapped the answer differs, and matches numpy in that same order.
  swapped = gs[[0, 2, 1]]
  assert np.abs(_NumpyPCGrad(swapped) - want).max() > 0.05
  np.testing.assert_allclose(Run(tf.constant(swapped)), _NumpyPCGrad(swapped),
                             rtol=1e-5, atol=1e-6)


def test_mismatched_keys_raise_naming_loss_and_keys():
  vmap = _Vars(u=[], v=[])
  with pytest.raises(ValueError, match=r"loss 'b'.*\['v'\]"):
    _Combine(GradientSum, vmap, {'a': {'u': 1.0, 'v': 1.0},
                                 'b': {'u': 1.0}})


def test_empty_and_malformed_inputs_raise():
  comb = GradientSum.Params().Set(name='sum').Instantiate()
  with pytest.raises(ValueError, match='losses_and_grads is empty'):
    comb.Combine(NestedMap(), NestedMap())
  with pytest.raises(ValueError, match=r"losses_and_grads\['a'\].*grads"):
    comb.Combine(NestedMap(), {'a': NestedMap(loss_metric=(1.0, 1.0))})
  vmap = _Vars(u=[])
  with pytest.raises(ValueError, match=r"loss 'a' at 'u'"):
    comb.Combine(vmap, {'a': NestedMap(loss_metric=(1.0, 1.0),
                                       grads=NestedMap(u=tf.constant(1.0)))})


class _TwoLossLayer(BaseLayer):
  """w = [0, 0]; losses a = w0 (gradient [1, 0]), b = -w0 + w1 ([-1, 1])."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [2])

  def FProp(self, theta):
    return {'a': (theta.w[0], 1.0), 'b': (theta.w[1] - theta.w[0], 1.0)}


@pytest.mark.parametrize('combiner,want', [
    # PCGrad: [0.5, 1.5] (by hand, above); SGD lr 1 -> w = -[0.5, 1.5].
    (PCGrad, [-0.5, -1.5]),
    # GradientSum: [1, 0] + [-1, 1] = [0, 1] -> w = [0, -1].
    (GradientSum, [0.0, -1.0])])
def test_combiner_inside_learner_apply_in_tf_function(combiner, want):
  from learner.optimizers.base import SGD  # pylint: disable=g-import-not-at-top
  from learner.learner import Learner  # pylint: disable=g-import-not-at-top
  layer = _TwoLossLayer.Params().Set(name='layer').Instantiate()
  lrn = Learner.Params().Set(
      name='lrn', loss_name=('a', 'b'), learning_rate=1.0,
      optimizer=SGD.Params(),
      gradient_combiner=combiner.Params()).Instantiate()
  lrn.Bind(layer.vars)

  @tf.function(autograph=False)
  def Step():
    return lrn.Apply(layer.FProp(layer.theta), layer.vars)[2]

  m = Step()
  np.testing.assert_allclose(layer.vars.w.numpy(), want, rtol=1e-6)
  np.testing.assert_allclose(m['grad_norm/all'][0], np.linalg.norm(want),
                             rtol=1e-6)
