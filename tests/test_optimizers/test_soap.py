"""SOAP (learner/optimizers/rules/soap.py).

Numbers: pytorch-optimizer 4.1.0's `SOAP` (tests/data/torch_soap.json,
recorded by tools/record_torch_soap.py: 20 steps on a vector, a [4, 5]
matrix and a [3, 3, 2, 4] conv kernel; frequency 1, 5 and 10, merge_dims,
an unrotated dim, precondition_1d, normalize_gradient; clip by global norm
1.0 off and on; float32, float64 for two rules) and, in the every-rule
tests, an independent numpy implementation
(tests/test_optimizers/optimizer_references.py `RefSOAP`). Here also: the
first update, the bases, XLA, two replicas, the ZeRO-1 refusal and the
value checks.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from learner import get_optimizer_fn
from learner import optimizers
from learner.optimizers import sharded_state
from learner.optimizers.rules import soap
from learner.optimizers.rules.soap import SOAP
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import NestedMap
import optax_references as refs
import mirrored_check  # pylint: disable=g-bad-import-order

with open(os.path.join(refs.DATA, 'torch_soap.json')) as _f:
  _DATA = json.load(_f)

# pytorch-optimizer's keyword -> our param (betas is a pair).
_KEYS = {'precondition_frequency': 'precondition_frequency',
         'merge_dims': 'merge_dims', 'precondition_1d': 'precondition_1d',
         'max_precondition_dim': 'max_precond_dim',
         'shampoo_beta': 'shampoo_beta', 'eps': 'epsilon',
         'weight_decay': 'decoupled_weight_decay',
         'normalize_gradient': 'normalize_grads'}

# Measured (max over steps of max |ours - torch| / max |torch|): float32
# 1.2e-6 (soap_merge conv with clip; the rest 2e-7 to 6e-7); float64 9e-9
# (the reference runs its QR in float32; ours in the variable's dtype).
RTOL = {'float32': 1e-5, 'float64': 1e-7}


def _Params(case):
  p = SOAP.Params()
  for k, v in case['kwargs'].items():
    if k == 'betas':
      p.Set(beta1=v[0], beta2=v[1])
    else:
      p.Set(**{_KEYS[k]: v})
  return p


def _Case(rule, shape_name, clip=None, dtype='float32'):
  return refs.Select(_DATA, rule, shape_name=shape_name, clip=clip,
                     dtype=dtype)[0]


@pytest.mark.parametrize('case', _DATA['cases'], ids=refs.CaseId)
def test_twenty_steps_match_pytorch_optimizer(case):
  ours = refs.RunOurs(_Params(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=RTOL[case['dtype']])


def test_defaults_are_pytorch_optimizers():
  p = SOAP.Params()
  assert (p.beta1, p.beta2, p.shampoo_beta, p.epsilon,
          p.decoupled_weight_decay, p.precondition_frequency,
          p.max_precond_dim, p.merge_dims, p.precondition_1d,
          p.correct_bias, p.normalize_grads) == (
              0.95, 0.95, None, 1e-8, 0.01, 10, 10000, False, False, True,
              False)
  case = _Case('soap', 'matrix')
  assert case['kwargs'] == {} and len(case['grads']) == 20
  # The recorded steps moved the weights (the 20 steps do something).
  assert np.abs(refs.Expected(case)[-1] - np.reshape(
      case['init'], case['shape'])).max() > 0.05


def _Run(p, w0, grads, lr=0.1):
  w = tf.Variable(w0, name='w')
  opt = p.Copy().Set(name='opt').Instantiate().Bind([w])
  for g in grads:
    opt.Apply(tf.constant(lr), NestedMap(w=VarGrad(w, tf.constant(g))))
  return opt, w


def test_first_update_only_starts_the_statistics_and_the_eigenbases():
  rng = np.random.RandomState(0)
  w0 = rng.randn(3, 4).astype(np.float32)
  g = rng.randn(3, 4).astype(np.float32)
  opt, w = _Run(SOAP.Params().Set(decoupled_weight_decay=0.5), w0, [g])
  np.testing.assert_array_equal(w.numpy(), w0)  # No step, no decay.
  slots = {k: v.numpy() for k, v in opt.GetSlots(w).items()}
  assert sorted(slots) == ['gg0', 'gg1', 'm', 'q0', 'q1', 'v']
  assert not slots['m'].any() and not slots['v'].any()
  np.testing.assert_allclose(slots['gg0'], 0.05 * g @ g.T, rtol=1e-6)
  np.testing.assert_allclose(slots['gg1'], 0.05 * g.T @ g, rtol=1e-6,
                             atol=1e-7)
  for i in (0, 1):
    q, gg = slots['q%d' % i], slots['gg%d' % i]
    np.testing.assert_allclose(q.T @ q, np.eye(len(q)), atol=1e-6)
    eig = np.diag(q.T @ gg @ q)
    np.testing.assert_allclose(eig, np.sort(np.linalg.eigvalsh(gg))[::-1],
                               rtol=1e-5, atol=1e-7)
    # Each column's largest entry is positive (CanonicalSigns).
    assert (q[np.argmax(np.abs(q), axis=0), range(len(q))] > 0).all()
  assert int(opt.num_updates.numpy()) == 1


def test_second_update_is_adam_in_the_eigenbasis_by_hand():
  # t = 1 after the skipped update: m = 0.05 g, v = 0.05 g'^2 with g' =
  # Q0^T g Q1; N = Q0 (0.05 g' / (sqrt(0.05) |g'| + eps)) Q1^T; the step
  # lr sqrt(0.05) / 0.05 N = lr Q0 sign(g') Q1^T (eps aside).
  rng = np.random.RandomState(1)
  w0 = rng.randn(3, 3).astype(np.float32)
  g1, g2 = rng.randn(2, 3, 3).astype(np.float32)
  opt, w = _Run(SOAP.Params().Set(decoupled_weight_decay=0.0), w0, [g1])
  q0, q1 = opt.GetSlots(w)['q0'].numpy(), opt.GetSlots(w)['q1'].numpy()
  opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.constant(g2))))
  want = w0 - 0.1 * q0 @ np.sign(q0.T @ g2 @ q1) @ q1.T
  np.testing.assert_allclose(w.numpy(), want, rtol=1e-5, atol=1e-6)


def test_dims_over_max_precond_dim_and_vectors_are_not_rotated():
  p = SOAP.Params().Set(name='opt', max_precond_dim=4)
  opt = p.Instantiate().Bind([tf.Variable(tf.zeros([4, 5]), name='a'),
                              tf.Variable(tf.zeros([6]), name='b')])
  assert sorted(opt.GetSlots(opt._bound['a'])) == ['gg0', 'm', 'q0', 'v']
  assert sorted(opt.GetSlots(opt._bound['b'])) == ['m', 'v']
  assert opt.RotatedDims([6]) == ([6], [False])
  p1 = SOAP.Params().Set(precondition_1d=True, max_precond_dim=4)
  assert p1.Instantiate().RotatedDims([4]) == ([4], [True])
  assert p1.Instantiate().RotatedDims([5]) == ([5], [False])


def test_merged_shapes():
  assert soap.MergedShape([3, 3, 2, 4], 16) == [9, 8]
  assert soap.MergedShape([3, 3, 4, 8], 10000) == [288]  # torch: [1]
  assert soap.MergedShape([1, 2, 512, 1, 2048, 1, 3, 4], 1024) == [
      1024, 2048, 12]  # pytorch-optimizer's docstring example.
  p = SOAP.Params().Set(merge_dims=True, max_precond_dim=16)
  assert p.Instantiate().RotatedDims([3, 3, 2, 4]) == ([9, 8], [True, True])


def test_xla_equals_eager_and_matches_the_reference():
  case = _Case('soap_merge', 'conv', clip=1.0)
  eager = refs.RunOurs(_Params(case), case, mode='eager')
  xla = refs.RunOurs(_Params(case), case, mode='xla')
  np.testing.assert_allclose(xla, eager, rtol=1e-5, atol=1e-6)
  refs.AssertMatches(xla, case, rtol=RTOL['float32'])


def test_mirrored_replicas_apply_as_a_single_device_run():
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  strategy = distribution.CreateStrategy('mirrored')
  rng = np.random.RandomState(2)
  init = rng.randn(3, 4).astype(np.float32)
  grads = [tf.constant(g) for g in rng.randn(4, 3, 4).astype(np.float32)]
  p = SOAP.Params().Set(name='opt', precondition_frequency=2)
  opt, w, ref, w_ref = mirrored_check.MirroredEqualsOneDevice(
      strategy, p, init, grads)
  for q in strategy.experimental_local_results(opt.GetSlots(w)['q1']):
    np.testing.assert_allclose(q.numpy(), ref.GetSlots(w_ref)['q1'].numpy(),
                               rtol=1e-6, atol=1e-7)
  assert np.abs(w_ref.numpy() - init).max() > 0.1


def test_zero1_gives_each_variable_a_home_replica():
  # Per-variable eigenbases: not flat slices, but WHOLE_TENSOR homes
  # (home_sharding.py; the 2-replica run: test_home_sharding.py, 'soap').
  opt = SOAP.Params().Set(name='opt').Instantiate()
  assert SOAP.WHOLE_TENSOR and not SOAP.ELEMENTWISE
  assert sharded_state.RuleToShard('learner', opt) is opt


def test_factory_name_and_keyword_aliases():
  p = get_optimizer_fn('soap', beta_1=0.9, beta_2=0.99, eps=1e-6,
                       weight_decay=0.1, max_precondition_dim=64,
                       normalize_gradient=True)
  from learner.optimizers import factory  # pylint: disable=g-import-not-at-top
  q, _ = factory.OptimizerParamsFromFn(p)
  assert q.cls is SOAP is optimizers.SOAP
  assert (q.beta1, q.beta2, q.epsilon, q.decoupled_weight_decay,
          q.max_precond_dim, q.normalize_grads) == (0.9, 0.99, 1e-6, 0.1, 64,
                                                    True)


@pytest.mark.parametrize('key, value', [
    ('beta1', 1.0), ('beta2', -0.1), ('shampoo_beta', 1.0),
    ('epsilon', 0.0), ('precondition_frequency', 0),
    ('precondition_frequency', 2.5), ('max_precond_dim', 0),
    ('merge_dims', 1), ('precondition_1d', 'yes'), ('correct_bias', None),
    ('normalize_grads', 0), ('beta1', float('nan'))])
def test_bad_values_are_refused_in_one_line_naming_the_key(key, value):
  with pytest.raises(ValueError) as e:
    SOAP.Params().Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()


def test_not_elementwise():
  assert not SOAP.ELEMENTWISE and not SOAP.SUPPORTS_LAZY_SPARSE
