"""DistributedShampoo (learner/optimizers/rules/shampoo.py).

Numbers: Lingvo 0.14.2 itself (tests/data/lingvo_0_14_2_shampoo.json,
recorded by tools/record_lingvo_shampoo.py: Lingvo's optimizer and learner,
with the C++ preconditioner captain transcribed in the recorder; its
docstring says how): 20 steps on a vector, a matrix, a conv kernel, a
blocked [5, 4] matrix and a thin [6, 2] one, clip by global norm 1.0 off
and on, float32; Lingvo's Schur-Newton inverse root on three small
matrices; and, in the every-rule tests, a numpy implementation
(tests/test_optimizers/optimizer_references.py `RefDistributedShampoo`).
Here also: blocks, the diagonal fallback, dropped roots, when the roots are
computed, XLA, two replicas, the ZeRO-1 refusal, the factory and the value
checks (the checkpoint: tests/test_optimizers/test_optimizer_restore.py).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import get_optimizer_fn
from learner import optimizers
from learner.optimizers import sharded_state
from learner.optimizers.rules import shampoo
from learner.optimizers.rules.shampoo import DistributedShampoo
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import NestedMap
import optax_references as refs
import mirrored_check  # pylint: disable=g-bad-import-order

_DATA = refs.Load('0_14_2_shampoo', prefix='lingvo')

# Measured (max over steps of max |ours - Lingvo| / max |Lingvo|), float32:
# 2.3e-7 (shampoo_blocks, blocks), the others 0 to 1e-7. The roots are one
# float64 SVD each (Lingvo's graph for dims <= 4096; no iteration), so the
# float32 rounding of the statistics and of the step is all that differs.
RTOL = 1e-5


def _Params(case):
  return DistributedShampoo.Params().Set(**case['kwargs'])


def _Case(rule, shape_name, clip=None):
  return refs.Select(_DATA, rule, shape_name=shape_name, clip=clip)[0]


def _Apply(p, w0, grads, lr=0.1):
  w = tf.Variable(w0, name='w')
  opt = p.Copy().Set(name='opt').Instantiate().Bind([w])
  out = []
  for g in grads:
    opt.Apply(tf.constant(lr), NestedMap(w=VarGrad(w, tf.constant(g))))
    out.append(w.numpy())
  return out, opt, w


# (1) Lingvo's numbers.


@pytest.mark.parametrize('case', _DATA['cases'], ids=refs.CaseId)
def test_twenty_steps_match_lingvo(case):
  ours = refs.RunOurs(_Params(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=RTOL)
  assert np.abs(ours[-1] - refs.Expected(case)[0]).max() > 1e-2  # moved


def test_the_recording_covers_blocks_fallback_and_dropped_roots():
  roots = {refs.CaseId(c): c['roots'] for c in _DATA['cases']}
  blocks = {r[1] for r in roots['shampoo_blocks-blocks-float32']}
  # (5, 4) in blocks of 2 above 3: 3 x 2 blocks; [1, 2] blocks have one root.
  assert 'DistributedShampoo/2_mat_preconditioner_1' in blocks
  assert 'DistributedShampoo/2_mat_preconditioner_0' not in blocks
  assert len(blocks) == 10
  assert not roots['shampoo_max_any_dim-matrix-float32']  # all diagonal
  assert len({r[1] for r in roots['shampoo_fallback-matrix-float32']}) == 1
  dropped = [r for r in roots['shampoo_rejects-thin-float32'] if not r[3]]
  assert dropped and all(r[2] >= shampoo.ROOT_ERROR_LIMIT for r in dropped)


def test_a_dropped_root_keeps_the_previous_one(monkeypatch):
  # With every root kept the trajectory leaves Lingvo's: the 5e-2 rule
  # (preconditioner_captain.cc) is what matches it.
  case = _Case('shampoo_rejects', 'thin')
  monkeypatch.setattr(shampoo, 'ROOT_ERROR_LIMIT', float('inf'))
  ours = refs.RunOurs(_Params(case), case)
  assert refs.RelativeError(ours, refs.Expected(case)) > 1e-3


def test_newton_inverse_root_matches_lingvo():
  for rec in _DATA['newton']:
    root, error = shampoo.NewtonInversePthRoot(
        tf.constant(rec['mat'], tf.float64), rec['p'])
    np.testing.assert_allclose(root.numpy(), rec['root'], rtol=1e-10,
                               atol=1e-12)
    assert float(error) == pytest.approx(rec['error'], rel=1e-6, abs=1e-15)
    # And it is the inverse p-th root (numpy, by eigh).
    lam, v = np.linalg.eigh(np.asarray(rec['mat']) + 1e-6 * np.eye(
        len(rec['mat'])))
    want = (v * lam ** (-1. / rec['p'])) @ v.T
    np.testing.assert_allclose(root.numpy(), want, rtol=1e-4, atol=1e-6)


def test_root_and_error_equal_lingvos_svd_form():
  # Lingvo: U S V^T = svd(H + eps I), root U max(S, eps)^e V^T, error
  # max|U - V|; ours from eigh. A positive definite H (error ~0) and an
  # indefinite one (a negative eigenvalue: u = -v there, error 2 max|v|).
  rng = np.random.RandomState(3)
  q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
  for lam in ([3., 2., 1., 0.5], [3., 2., 1., -0.5]):
    stat = ((q * lam) @ q.T).astype(np.float32)
    root, error = shampoo.InversePthRoot(tf.constant(stat), 2, 1e-6)
    u, sv, vt = np.linalg.svd(stat.astype(np.float64) + 1e-6 * np.eye(4))
    want = (u * np.maximum(sv, 1e-6) ** -0.25) @ vt
    np.testing.assert_allclose(root.numpy(), want, rtol=1e-5, atol=1e-6)
    assert float(error) == pytest.approx(np.abs(u - vt.T).max(), abs=1e-6)
    assert root.dtype == tf.float32
  assert float(error) > shampoo.ROOT_ERROR_LIMIT  # the indefinite one


# (2) The rule by hand.


def test_before_start_it_is_adagrad_with_momentum_by_hand():
  rng = np.random.RandomState(0)
  w0 = rng.normal(size=(4, 3)).astype(np.float32)
  grads = rng.normal(size=(2, 4, 3)).astype(np.float32)
  p = DistributedShampoo.Params().Set(start_preconditioning_steps=10,
                                      preconditioning_compute_steps=1)
  ours, opt, w = _Apply(p, w0, grads)
  # Update 1: a = g^2, d = sign(g), D = 0.1 d: w - 0.1 * 0.1 sign(g).
  np.testing.assert_allclose(ours[0], w0 - 0.01 * np.sign(grads[0]),
                             rtol=1e-6)
  a = grads[0] ** 2 + grads[1] ** 2
  dbar = 0.9 * 0.1 * np.sign(grads[0]) + 0.1 * grads[1] / np.sqrt(a)
  np.testing.assert_allclose(ours[1], ours[0] - 0.1 * dbar, rtol=1e-5)
  slots = opt.GetSlots(w)
  np.testing.assert_allclose(slots['mat_statistics_0'].numpy(),
                             grads[0] @ grads[0].T + grads[1] @ grads[1].T,
                             rtol=1e-5)
  assert np.abs(slots['mat_preconditioner_0'].numpy()).max() > 0.1


def test_roots_are_computed_only_every_k_updates():
  rng = np.random.RandomState(1)
  w0 = rng.normal(size=(4, 3)).astype(np.float32)
  grads = rng.normal(size=(6, 4, 3)).astype(np.float32)
  p = DistributedShampoo.Params().Set(start_preconditioning_steps=2,
                                      preconditioning_compute_steps=3)
  w = tf.Variable(w0, name='w')
  opt = p.Copy().Set(name='opt').Instantiate().Bind([w])
  seen = []
  for g in grads:
    opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.constant(g))))
    seen.append(opt.GetSlots(w)['mat_preconditioner_1'].numpy().copy())
  assert not seen[0].any() and not seen[1].any()
  stat = sum(g.T @ g for g in grads[:3]).astype(np.float64)
  lam, v = np.linalg.eigh(stat + 1e-6 * np.eye(3))
  np.testing.assert_allclose(seen[2], (v * lam ** -0.25) @ v.T, rtol=1e-5)
  np.testing.assert_array_equal(seen[3], seen[2])
  np.testing.assert_array_equal(seen[4], seen[2])
  assert np.abs(seen[5] - seen[2]).max() > 1e-3


def test_blocks_and_their_slot_names_are_lingvos():
  assert shampoo.PartitionSizes([5, 4, 2], 3, 2) == [[2, 2, 1], [2, 2], [2]]
  assert shampoo.PartitionSizes([7], 3, 8) == [[7]]
  x = tf.reshape(tf.range(20.), [5, 4])
  sizes = shampoo.PartitionSizes([5, 4], 3, 2)
  parts = shampoo.Partition(x, sizes)
  assert [p.shape.as_list() for p in parts] == [[2, 2], [2, 2], [1, 2]] * 2
  np.testing.assert_array_equal(shampoo.Reform(parts, sizes), x)
  p = DistributedShampoo.Params().Set(
      name='opt', block_partition_threshold_size=3, block_size=2)
  opt = p.Instantiate().Bind([tf.Variable(tf.zeros([5, 4]), name='w')])
  names = sorted(opt.GetSlots(opt.bound_variables['w']))
  assert '0_mat_statistics_0' in names and '5_mat_preconditioner_1' in names
  assert '2_mat_statistics_0' not in names  # a [1, 2] block: dim 0 is 1
  assert len([n for n in names if 'statistics' in n]) == 10


def test_diagonal_fallback_shapes():
  opt = DistributedShampoo.Params().Set(
      name='opt', max_any_dim=100, fallback_to_diagonal_dim=8).Instantiate()
  assert opt.Diagonal([5]) and opt.Diagonal([1, 1]) and opt.Diagonal(
      [101, 2])
  assert not opt.Diagonal([50, 2])
  assert opt.Blocks([50, 2])[1] == [[False, True]]
  opt.Bind([tf.Variable(tf.zeros([50, 2]), name='w'),
            tf.Variable(tf.zeros([101, 2]), name='big')])
  assert sorted(opt.GetSlots(opt.bound_variables['w'])) == [
      'accumulator', 'mat_preconditioner_1', 'mat_statistics_1', 'momentum',
      'precond_grad_momentum']
  assert sorted(opt.GetSlots(opt.bound_variables['big'])) == [
      'accumulator', 'momentum']


# (3) Where it runs.


def test_eager_equals_the_recording():
  case = _Case('shampoo', 'conv')
  refs.AssertMatches(refs.RunOurs(_Params(case), case, mode='eager'), case,
                     rtol=RTOL)


def test_xla_equals_the_recording():
  # XLA's SVD and matmuls round differently from Lingvo's graph: measured
  # 5.5e-8. (The conv kernel's four roots take 30 s to compile: the matrix.)
  case = _Case('shampoo', 'matrix', clip=1.0)
  xla = refs.RunOurs(_Params(case), case, mode='xla')
  print('xla: max relative error %.3g' % refs.RelativeError(
      xla, refs.Expected(case)))
  refs.AssertMatches(xla, case, rtol=RTOL)


def test_mirrored_replicas_apply_as_a_single_device_run():
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  strategy = distribution.CreateStrategy('mirrored')
  rng = np.random.RandomState(2)
  init = rng.randn(3, 4).astype(np.float32)
  grads = [tf.constant(g) for g in rng.randn(5, 3, 4).astype(np.float32)]
  p = DistributedShampoo.Params().Set(
      name='opt', start_preconditioning_steps=1,
      preconditioning_compute_steps=2)
  opt, w, ref, w_ref = mirrored_check.MirroredEqualsOneDevice(
      strategy, p, init, grads)
  want = ref.GetSlots(w_ref)['mat_preconditioner_0'].numpy()
  assert np.abs(want).max() > 0.1
  for r in strategy.experimental_local_results(
      opt.GetSlots(w)['mat_preconditioner_0']):
    np.testing.assert_allclose(r.numpy(), want, rtol=1e-6, atol=1e-7)


def test_zero1_state_sharding_is_refused_in_one_line():
  opt = DistributedShampoo.Params().Set(name='opt').Instantiate()
  with pytest.raises(ValueError) as e:
    sharded_state.RuleToShard('learner', opt)
  msg = str(e.value)
  assert 'DistributedShampoo' in msg and 'Shampoo' in msg
  assert '\n' not in msg


# (4) Construction.


def test_defaults_are_lingvos():
  p = DistributedShampoo.Params()
  assert (p.momentum, p.start_preconditioning_steps,
          p.initial_accumulator_value, p.block_size,
          p.block_partition_threshold_size, p.max_any_dim, p.matrix_epsilon,
          p.second_moment_averaging, p.fallback_to_diagonal_dim,
          p.statistics_computation_frequency) == (
              0.9, 1000, 0.0, 4096, 1000000, 8192, 1e-6, 1.0, 4096, 1)
  assert p.preconditioning_compute_steps == 1000  # tpu_steps_per_loop


def test_factory_names_and_text_round_trip():
  from learner.optimizers import factory  # pylint: disable=g-import-not-at-top
  for name in ('distributed_shampoo', 'shampoo'):
    q, _ = factory.OptimizerParamsFromFn(get_optimizer_fn(
        name, momentum=0.5, epsilon=1e-4, preconditioning_compute_steps=10))
    assert q.cls is DistributedShampoo is optimizers.DistributedShampoo
    assert (q.momentum, q.matrix_epsilon,
            q.preconditioning_compute_steps) == (0.5, 1e-4, 10)
  p = DistributedShampoo.Params().Set(block_size=128, momentum=0.0,
                                      preconditioning_compute_steps=10)
  q = DistributedShampoo.Params()
  q.FromText(p.ToText())
  assert q == p and q.ToText() == p.ToText()


@pytest.mark.parametrize('key, value', [
    ('momentum', 1.0), ('momentum', -0.1), ('second_moment_averaging', 0.0),
    ('second_moment_averaging', 1.5), ('initial_accumulator_value', -1.0),
    ('matrix_epsilon', 0.0), ('start_preconditioning_steps', 0),
    ('statistics_computation_frequency', 0),
    ('preconditioning_compute_steps', 2.5), ('block_size', 0),
    ('block_partition_threshold_size', 0), ('max_any_dim', 0),
    ('fallback_to_diagonal_dim', True), ('momentum', float('nan'))])
def test_bad_values_are_refused_in_one_line_naming_the_key(key, value):
  with pytest.raises(ValueError) as e:
    DistributedShampoo.Params().Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()


def test_second_moment_averaging_refusal_says_what_the_values_mean():
  with pytest.raises(ValueError) as e:
    DistributedShampoo.Params().Set(second_moment_averaging=2.0).Instantiate()
  assert "1 sums the squares (Lingvo's default), < 1 is an exponential " \
      'average' in str(e.value)


def test_not_elementwise():
  assert not DistributedShampoo.ELEMENTWISE
  assert not DistributedShampoo.SUPPORTS_LAZY_SPARSE
