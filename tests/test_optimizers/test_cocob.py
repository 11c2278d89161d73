"""COCOB (learner/optimizers/rules/cocob.py).

The rule's file holds its formula once (`_Step`); the rest is the base's:
the clip scale, XLA, replicas and ZeRO-1 (sharded_cases.MORE_RULES in
tests/test_distribution/test_sharded_state.py). Numbers: optax.contrib.
cocob (tests/data/optax_lr_free.json, recorded by
tools/record_optax_lr_free.py), a first step by hand and the numpy
reference in test_optimizers.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import get_optimizer_fn
from learner.optimizers import factory
from learner.optimizers.rules.cocob import COCOB
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import NestedMap
import lr_free_cases as cases
import optax_references as refs


@pytest.mark.parametrize('case', cases.Cases('cocob'), ids=refs.CaseId)
def test_twenty_steps_match_optax(case):
  # optax: lr * g (flip_sign=False), then the bet. Measured: float32 <=
  # 3.3e-7, float64 without clip 0 (bit for bit), with clip (our clip
  # scale is float32) <= 8.7e-8.
  ours = refs.RunOurs(cases.OurParams(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=cases.Tolerance(case, 1e-15, 2e-7))


def test_defaults_are_optax_contrib_defaults():
  p = COCOB.Params()
  assert (p.alpha, p.epsilon, p.decoupled_weight_decay) == (100.0, 1e-8, 0.0)
  case = refs.Select(cases.DATA, 'cocob')[0]
  assert case['kwargs'] == {} and case['lr'] == 1.0
  assert len(case['grads']) == 20


def _Run(p, w0, grads, lr=1.0, scale=None):
  w = tf.Variable(w0, name='w')
  opt = p.Copy().Set(name='opt').Instantiate().Bind([w])
  out = []
  for g in grads:
    vgs = NestedMap(w=VarGrad(w, tf.constant(g)))
    if scale is None:
      opt.Apply(tf.constant(lr), vgs)
    else:
      opt.ApplyScaled(tf.constant(lr), vgs, tf.constant(scale))
    out.append(w.numpy())
  return out, opt, w


def test_first_step_by_hand():
  # g = 2 (lr 1): L = 2, G = 2, R = 0, C = -2; bet = C / (L max(G + L,
  # alpha L)) (L + R) = -2 / (2 * 200) * 2 = -0.01 (alpha 100), and
  # -2 / (2 * 4) * 2 = -0.5 (alpha 1).
  w0 = np.array([1.0, 1.0], np.float32)
  grads = [np.array([2.0, 0.0], np.float32)]
  ours, opt, w = _Run(COCOB.Params(), w0, grads)
  np.testing.assert_allclose(ours[0], [1.0 - 0.01, 1.0], rtol=1e-7)
  ours, opt, w = _Run(COCOB.Params().Set(alpha=1.0), w0, grads)
  np.testing.assert_allclose(ours[0], [0.5, 1.0], rtol=1e-7)
  slots = {k: v.numpy() for k, v in opt.GetSlots(w).items()}
  np.testing.assert_array_equal(slots['x0'], w0)
  np.testing.assert_array_equal(slots['scale'], np.float32([2.0, 1e-8]))
  np.testing.assert_array_equal(slots['cumulative_gradients'], [-2.0, 0.0])


def test_apply_scaled_equals_apply_on_the_scaled_gradient():
  rng = np.random.RandomState(7)
  w0 = rng.normal(size=[4, 3]).astype(np.float32)
  grads = [rng.normal(size=[4, 3]).astype(np.float32) for _ in range(5)]
  scaled, _, _ = _Run(COCOB.Params(), w0, grads, scale=0.375)
  plain, _, _ = _Run(COCOB.Params(), w0, [0.375 * g for g in grads])
  for a, b in zip(scaled, plain):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert np.abs(scaled[-1] - w0).max() > 1e-2


@pytest.mark.parametrize('clip', [None, 1.0])
def test_xla_equals_eager(clip):
  case = refs.Select(cases.DATA, 'cocob_alt', shape_name='conv',
                     dtype='float32', clip=clip)[0]
  p = cases.OurParams(case)
  eager = refs.RunOurs(p, case, mode='eager')
  xla = refs.RunOurs(p, case, mode='xla')
  # Relative to the tensor's scale (an entry near 0 differs by 1 ulp of
  # the weights).
  assert refs.RelativeError(xla, eager) <= 1e-6
  refs.AssertMatches(xla, case, rtol=1e-6)


def test_two_replicas_equal_one_replica_on_the_global_batch():
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  p = COCOB.Params().Set(alpha=10.0)
  two = cases.Train(distribution.CreateStrategy('mirrored'), p, 1.0)
  one = cases.Train(tf.distribute.OneDeviceStrategy('/cpu:0'), p, 1.0)
  assert len(two) == 2 and len(one) == 1
  np.testing.assert_array_equal(two[0], two[1])
  np.testing.assert_allclose(two[0], one[0], rtol=1e-6, atol=1e-7)
  assert np.abs(one[0] - cases.InitialWeights()).max() > 0.05


def test_factory_name_and_eps_alias():
  q, lr = factory.OptimizerParamsFromFn(
      get_optimizer_fn('cocob', alpha=10.0, eps=1e-6))
  assert lr is None and q.cls is COCOB
  assert (q.alpha, q.epsilon) == (10.0, 1e-6)


@pytest.mark.parametrize('key, value', [
    ('alpha', 0.0), ('alpha', float('inf')), ('epsilon', 0.0),
    ('epsilon', True), ('decoupled_weight_decay', 0.1)])
def test_bad_values_are_refused_in_one_line_naming_the_key(key, value):
  with pytest.raises(ValueError) as e:
    COCOB.Params().Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()
  if key == 'decoupled_weight_decay':
    assert 'l2_regularizer_weight' in msg


def test_elementwise_with_no_schedulable_params():
  assert COCOB.ELEMENTWISE and COCOB.SCHEDULABLE_PARAMS == ()
