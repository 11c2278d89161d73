"""MADGRAD (learner/optimizers/rules/madgrad.py).

The rule's file holds its formula once (`_Step`); the rest is the base's:
the clip scale, bfloat16 slots, decoupled weight decay, XLA, replicas and
ZeRO-1 (sharded_cases.MORE_RULES in tests/test_distribution/
test_sharded_state.py). Numbers: optax.contrib.madgrad
(tests/data/optax_lr_free.json, recorded by tools/record_optax_lr_free.py),
a first step by hand and the numpy reference in test_optimizers.py. The
cube root (`CubeRoot`): within 1 ulp of numpy's over a sweep of the float32
range eagerly, traced and under XLA (where no `power` op is left).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import get_optimizer_fn
from learner.optimizers import factory
from learner.optimizers.rules.madgrad import CubeRoot
from learner.optimizers.rules.madgrad import MADGRAD
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import NestedMap
import lr_free_cases as cases
import optax_references as refs


@pytest.mark.parametrize('case', cases.Cases('madgrad'), ids=refs.CaseId)
def test_twenty_steps_match_optax(case):
  # The learner's rate is float32 (0.01 rounded) and optax's sqrt(k + 1)
  # is float32 in its float64 runs: measured float32 <= 1.1e-7, float64
  # <= 3.0e-8.
  ours = refs.RunOurs(cases.OurParams(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=cases.Tolerance(case, 1e-7, 1e-7))


def test_defaults_are_optax_contrib_defaults():
  p = MADGRAD.Params()
  assert (p.momentum, p.epsilon, p.decoupled_weight_decay) == (0.9, 1e-6, 0.0)
  case = refs.Select(cases.DATA, 'madgrad')[0]
  assert case['kwargs'] == {} and case['lr'] == 0.01
  assert len(case['grads']) == 20


def _Run(p, w0, grads, lr=0.01, scale=None):
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
  # lr 0.125, eps 1e-6, g = 8: lambda = 0.125001, s = 8 lambda, nu = 64
  # lambda, z = x0 - 8 lambda / (4 lambda^(1/3) + eps), w = 0.1 z + 0.9 x0.
  w0 = np.array([1.0, -1.0], np.float32)
  ours, opt, w = _Run(MADGRAD.Params(), w0,
                      [np.array([8.0, 0.0], np.float32)], lr=0.125)
  lam = 0.125 + 1e-6
  z = 1.0 - 8 * lam / (4 * np.cbrt(lam) + 1e-6)
  np.testing.assert_allclose(ours[0], [0.1 * z + 0.9, -1.0], rtol=1e-6)
  np.testing.assert_array_equal(opt.GetSlots(w)['x0'].numpy(), w0)


def test_apply_scaled_equals_apply_on_the_scaled_gradient():
  rng = np.random.RandomState(7)
  w0 = rng.normal(size=[4, 3]).astype(np.float32)
  grads = [rng.normal(size=[4, 3]).astype(np.float32) for _ in range(5)]
  p = MADGRAD.Params().Set(decoupled_weight_decay=0.1)
  scaled, _, _ = _Run(p, w0, grads, lr=0.1, scale=0.375)
  plain, _, _ = _Run(p, w0, [0.375 * g for g in grads], lr=0.1)
  for a, b in zip(scaled, plain):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert np.abs(scaled[-1] - w0).max() > 1e-2


# 50 steps on (64, 32) weights, lr 0.01: largest weight deviation of
# bfloat16 slots from float32 slots, relative to the largest weight.
# Measured 3.9e-3 (x0 itself is stored rounded: 2^-9 relative).
BF16_DEVIATION_TOL = 1e-2


def test_bfloat16_slots_are_stored_bfloat16_and_stay_close():
  rng = np.random.RandomState(3)
  w0 = rng.normal(size=[64, 32]).astype(np.float32)
  grads = [rng.normal(size=[64, 32]).astype(np.float32) for _ in range(50)]
  ref, _, _ = _Run(MADGRAD.Params(), w0, grads)
  got, opt, w = _Run(MADGRAD.Params().Set(slot_dtype=tf.bfloat16), w0, grads)
  slots = opt.GetSlots(w)
  assert sorted(slots) == ['grad_sum_sq', 's', 'x0']
  assert all(s.dtype == tf.bfloat16 for s in slots.values())
  dev = np.abs(got[-1] - ref[-1]).max() / np.abs(ref[-1]).max()
  print('MADGRAD bfloat16 slots, 50 steps: max weight deviation %.3g' % dev)
  assert 0 < dev <= BF16_DEVIATION_TOL


@pytest.mark.parametrize('clip', [None, 1.0])
def test_xla_equals_eager(clip):
  case = refs.Select(cases.DATA, 'madgrad_alt', shape_name='conv',
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
  p = MADGRAD.Params().Set(decoupled_weight_decay=0.1)
  two = cases.Train(distribution.CreateStrategy('mirrored'), p, 0.05)
  one = cases.Train(tf.distribute.OneDeviceStrategy('/cpu:0'), p, 0.05)
  assert len(two) == 2 and len(one) == 1
  np.testing.assert_array_equal(two[0], two[1])
  np.testing.assert_allclose(two[0], one[0], rtol=1e-6, atol=1e-7)
  assert np.abs(one[0] - cases.InitialWeights()).max() > 0.05


def test_factory_name_and_eps_alias():
  q, lr = factory.OptimizerParamsFromFn(
      get_optimizer_fn('madgrad', momentum=0.5, eps=1e-4))
  assert lr is None and q.cls is MADGRAD
  assert (q.momentum, q.epsilon) == (0.5, 1e-4)


@pytest.mark.parametrize('key, value', [
    ('momentum', 1.0), ('momentum', -0.1), ('epsilon', 0.0),
    ('epsilon', float('nan')), ('momentum', True)])
def test_bad_values_are_refused_in_one_line_naming_the_key(key, value):
  with pytest.raises(ValueError) as e:
    MADGRAD.Params().Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()


def test_elementwise():
  assert MADGRAD.ELEMENTWISE and not MADGRAD.SUPPORTS_LAZY_SPARSE


def _SweepFloats():
  """Non-negative float32 bit patterns: a stride over the whole range, the
  subnormals, the first and last normal binades, +-0, inf and NaN."""
  bits = np.concatenate([
      np.arange(0, 0x7f800000, 997), np.arange(0, 0x00800000, 61),
      np.arange(0x00800000, 0x01000000, 53),
      np.arange(0x7f000000, 0x7f800000, 53),
      [0x7f7fffff, 0x7f800000, 0x7fc00000]]).astype(np.uint32)
  return bits.view(np.float32)


def _Ulps(y, x):
  """(ulp distance to the rounded float64 root, error in ulps of it)."""
  ref = np.cbrt(x.astype(np.float64))
  r32 = ref.astype(np.float32)
  dist = np.abs(y.view(np.int32).astype(np.int64) -
                r32.view(np.int32).astype(np.int64))
  err = np.abs(y.astype(np.float64) - ref) / np.spacing(r32)
  return dist, err


@pytest.mark.parametrize('mode', ['eager', 'function', 'xla'])
def test_cube_root_within_one_ulp_of_numpy(mode):
  # Float32 against np.cbrt in float64; the sign is copied (odd). Every
  # float: tools/check_cube_root.py (0.738 ulp at most, 8.5 % off by 1).
  x = _SweepFloats()
  x = np.concatenate([x, -x[::7]])
  fn = {'eager': CubeRoot, 'function': tf.function(CubeRoot),
        'xla': tf.function(CubeRoot, jit_compile=True)}[mode]
  y = fn(tf.constant(x)).numpy()
  finite = np.isfinite(x)
  dist, err = _Ulps(y[finite], x[finite])
  print('%s: %d floats, largest error %.3f ulp, %.2f %% off by 1 ulp' % (
      mode, finite.sum(), err.max(), 100 * (dist > 0).mean()))
  assert dist.max() <= 1 and err.max() < 1.0
  assert 0.0 < (dist > 0).mean() < 0.1
  np.testing.assert_array_equal(y[~finite], x[~finite])  # inf, NaN.


def test_cube_root_edges_and_exact_cubes():
  x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45,
                np.finfo(np.float32).max], np.float32)
  y = CubeRoot(tf.constant(x)).numpy()
  np.testing.assert_array_equal(y[:5], x[:5])
  assert not np.signbit(y[0]) and np.signbit(y[1])
  np.testing.assert_allclose(y[5:], np.cbrt(x[5:].astype(np.float64)),
                             rtol=1.2e-7)
  k = np.arange(1, 257, dtype=np.float32)
  for scale in (1.0, 2.0 ** -40, 2.0 ** 30):
    np.testing.assert_array_equal(
        CubeRoot(tf.constant(k ** 3 * scale ** 3)).numpy(), k * scale)


@pytest.mark.parametrize('dtype', [tf.float16, tf.bfloat16, tf.float64])
def test_cube_root_other_dtypes(dtype):
  # float16 and bfloat16 through float32, float64 by tf.pow.
  x = tf.constant([0.0, 1e-3, 0.5, 8.0, 30.0], dtype)
  y = CubeRoot(x)
  assert y.dtype == dtype
  want = np.cbrt(tf.cast(x, tf.float64).numpy())
  tol = {tf.float16: 1e-3, tf.bfloat16: 8e-3, tf.float64: 1e-15}[dtype]
  np.testing.assert_allclose(tf.cast(y, tf.float64).numpy(), want, rtol=tol)


def test_xla_step_has_no_power_op():
  # The step's cube root is plain arithmetic under XLA: no `power` in the
  # optimized HLO (TF's Pow cost ~8 ns per element there).
  w = tf.Variable(tf.ones([5, 7]), name='w')
  opt = MADGRAD.Params().Set(name='opt').Instantiate().Bind([w])

  def Step(g, lr):
    opt.Apply(lr, NestedMap(w=VarGrad(w, g)))
    return tf.constant(0)

  args = (tf.fill([5, 7], 0.5), tf.constant(0.01))
  step = tf.function(Step, jit_compile=True)
  hlo = step.experimental_get_compiler_ir(*args)(stage='optimized_hlo')
  assert 'divide(' in hlo and 'power(' not in hlo
  step(*args)
  assert not np.array_equal(w.numpy(), np.ones([5, 7]))
