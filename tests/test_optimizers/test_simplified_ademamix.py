"""SimplifiedAdEMAMix (learner/optimizers/rules/simplified_ademamix.py).

The rule's file holds its formula once (`_Step`); the rest is the base's:
clip-scale folding, bfloat16 slots, hyperparameter schedules, XLA, ZeRO-1
(sharded_cases.MORE_RULES in tests/test_distribution/test_sharded_state.py)
and lazy sparse rows. Numbers: an independent numpy implementation
(`_Numpy`, float64) and optax.contrib.simplified_ademamix
(tests/data/optax_simplified_ademamix.json, recorded by
tools/record_optax_simplified_ademamix.py).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import get_optimizer_fn
from learner.optimizers.rules.simplified_ademamix import SimplifiedAdEMAMix
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
from schedules.polynomial import LinearSchedule
import optax_references as refs

_DATA = refs.Load('simplified_ademamix')
# optax's keyword -> our param.
_KEYS = {'b1': 'beta1', 'b2': 'beta2', 'alpha': 'alpha', 'eps': 'epsilon',
         'weight_decay': 'decoupled_weight_decay'}
_ALT = dict(beta1=0.9, beta2=0.99, alpha=2.0, epsilon=1e-3)


def _Numpy(w, grads, lr, beta1=0.99, beta2=0.95, alpha=0.0, epsilon=1e-8,
           wd=0.0, alphas=None, beta2s=None):
  """Weights (float64) after each gradient of `grads`, the formula of
  Morwani et al. (arXiv:2502.02431) written again here. `alphas`,
  `beta2s`: per-step values (a schedule) instead of alpha, beta2 (a
  scheduled beta2 is bias corrected by its current value^t)."""
  w = np.asarray(w, np.float64)
  m, nu = np.zeros_like(w), np.zeros_like(w)
  out = []
  for t, g in enumerate(grads, start=1):
    a = alpha if alphas is None else alphas[t - 1]
    b2 = beta2 if beta2s is None else beta2s[t - 1]
    g = np.asarray(g, np.float64)
    m = beta1 * m + g
    nu = b2 * nu + (1 - b2) * g * g
    nu_hat = nu / (1 - b2 ** t)
    w = w - lr * ((m + a * g) / (np.sqrt(nu_hat) + epsilon) + wd * w)
    out.append(w)
  return out


def _Problem(shape, seed, steps=5):
  rng = np.random.RandomState(seed)
  return (rng.normal(size=shape).astype(np.float32),
          [rng.normal(size=shape).astype(np.float32) for _ in range(steps)])


def _Apply(p, w0, grads, lr=0.01, scale=None, sparse_rows=None):
  """Our weights (float32) after each step, the optimizer applied alone."""
  w = tf.Variable(w0, name='w')
  opt = p.Copy().Set(name='opt').Instantiate().Bind([w])
  out = []
  for g in grads:
    g = tf.constant(g)
    if sparse_rows is not None:
      g = tf.IndexedSlices(tf.gather(g, sparse_rows),
                           tf.constant(sparse_rows), tf.constant(w0.shape))
    vgs = NestedMap(w=VarGrad(w, g))
    if scale is None:
      opt.Apply(tf.constant(lr), vgs)
    else:
      opt.ApplyScaled(tf.constant(lr), vgs, tf.constant(scale))
    out.append(w.numpy())
  return out, opt, w


def _OurParams(case):
  p = SimplifiedAdEMAMix.Params()
  for k, v in case['kwargs'].items():
    p.Set(**{_KEYS[k]: v})
  return p


# (1) numbers.


@pytest.mark.parametrize('shape', [(5,), (4, 3), (3, 3, 2, 4)])
def test_five_steps_match_numpy_with_weight_decay(shape):
  w0, grads = _Problem(shape, seed=len(shape))
  p = SimplifiedAdEMAMix.Params().Set(decoupled_weight_decay=0.1, **_ALT)
  ours, _, _ = _Apply(p, w0, grads)
  want = _Numpy(w0, grads, 0.01, wd=0.1, **_ALT)
  # Step 1 by hand for one entry: m = g, nu_hat = g^2.
  g, w = float(grads[0].flat[0]), float(w0.flat[0])
  step1 = w - 0.01 * ((g + 2. * g) / (abs(g) + 1e-3) + 0.1 * w)
  assert want[0].flat[0] == pytest.approx(step1, rel=1e-12)
  for t in range(5):
    np.testing.assert_allclose(ours[t], want[t], rtol=2e-6, atol=1e-6)
  assert np.abs(ours[-1] - w0).max() > 0.1  # the weights moved


def test_defaults_are_optax_contrib_simplified_ademamix_defaults():
  p = SimplifiedAdEMAMix.Params()
  assert (p.beta1, p.beta2, p.alpha, p.epsilon,
          p.decoupled_weight_decay) == (0.99, 0.95, 0.0, 1e-8, 0.0)
  assert _DATA['cases'][0]['kwargs'] == {}  # 'simplified_ademamix': defaults
  assert len(_DATA['cases'][0]['grads']) == 20


@pytest.mark.parametrize('case', _DATA['cases'], ids=refs.CaseId)
def test_twenty_steps_match_optax(case):
  # optax: the update, add_decayed_weights, then the rate: the same
  # lr * wd * w_old as our decoupled weight decay; eps outside the square
  # root after nu's bias correction (eps_root 0), as ours. float64 with no
  # clip and no decay is exact up to rounding (measured 2.3e-16); the clip
  # scale and the decay rate lr * wd are float32 (the learner's, the
  # base's): measured 2.6e-10 (decay), 2.2e-8 (clip); float32 5.4e-7.
  ours = refs.RunOurs(_OurParams(case), case)
  exact = (case['dtype'] == 'float64' and not case['clip'] and
           case['rule'] == 'simplified_ademamix')
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=1e-12 if exact else 1e-6)


# (2) clip-scale folding.


def test_apply_scaled_equals_apply_on_the_scaled_gradient():
  w0, grads = _Problem((4, 3), seed=7)
  p = SimplifiedAdEMAMix.Params().Set(decoupled_weight_decay=0.1, **_ALT)
  scaled, _, _ = _Apply(p, w0, grads, scale=0.375)
  plain, _, _ = _Apply(p, w0, [0.375 * g for g in grads])
  for a, b in zip(scaled, plain):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  # The scale reaches the step: with eps 1e-3 a gradient scaled by 1e-3
  # moves the weights visibly less (the test can fail).
  a3, _, _ = _Apply(p, w0, grads, scale=0.001)
  b3, _, _ = _Apply(p, w0, grads)
  assert np.abs(a3[-1] - b3[-1]).max() > 1e-3


# (3) slot dtypes.

# 50 steps on (64, 32) weights, lr 0.001, defaults: largest weight deviation
# of bfloat16 slots from float32 slots, relative to the largest weight.
# Measured 1.5e-3 (bfloat16's 8 significant bits: 2^-9 per rounding; m is
# an undamped sum of up to 1 / (1 - beta1) = 100 gradients).
BF16_DEVIATION_TOL = 1e-2


def test_bfloat16_slots_are_stored_bfloat16_and_stay_close():
  w0, grads = _Problem((64, 32), seed=3, steps=50)
  p = SimplifiedAdEMAMix.Params().Set(decoupled_weight_decay=0.01)
  ref, _, _ = _Apply(p, w0, grads, lr=0.001)
  got, opt, w = _Apply(p.Copy().Set(slot_dtype=tf.bfloat16), w0, grads,
                       lr=0.001)
  slots = opt.GetSlots(w)
  assert sorted(slots) == ['m', 'nu']
  assert all(s.dtype == tf.bfloat16 for s in slots.values())
  dev = np.abs(got[-1] - ref[-1]).max() / np.abs(ref[-1]).max()
  print('SimplifiedAdEMAMix bfloat16 slots, 50 steps: max weight '
        'deviation %.3g' % dev)
  assert 0 < dev <= BF16_DEVIATION_TOL


def test_float32_slots_through_the_upcast_path_equal_the_plain_run():
  w0, grads = _Problem((4, 3), seed=5)
  p = SimplifiedAdEMAMix.Params().Set(decoupled_weight_decay=0.1, **_ALT)
  plain, _, _ = _Apply(p, w0, grads)
  upcast, _, _ = _Apply(p.Copy().Set(slot_dtype=tf.float32), w0, grads)
  for a, b in zip(plain, upcast):
    np.testing.assert_array_equal(a, b)


# (4) hyperparameter schedules.


def test_scheduled_alpha_and_beta2_give_numpy_with_the_scheduled_values():
  w0, grads = _Problem((4, 3), seed=13, steps=8)
  kw = dict(beta1=0.9, epsilon=1e-3)
  p = SimplifiedAdEMAMix.Params().Set(hyper_schedules={
      'alpha': LinearSchedule.Params().Set(start=(0, 0.0), limit=(4, 4.0)),
      'beta2': LinearSchedule.Params().Set(start=(0, 0.5), limit=(4, 0.9)),
  }, **kw)
  ours, _, _ = _Apply(p, w0, grads)
  alphas = [0., 1., 2., 3., 4., 4., 4., 4.]
  beta2s = [0.5, 0.6, 0.7, 0.8, 0.9, 0.9, 0.9, 0.9]
  want = _Numpy(w0, grads, 0.01, alphas=alphas, beta2s=beta2s, **kw)
  # The schedules' values are float32 (0.6, 0.7 rounded).
  assert refs.RelativeError(np.stack(ours), np.stack(want)) <= 1e-6
  plain = _Numpy(w0, grads, 0.01, **kw)
  assert np.abs(want[-1] - plain[-1]).max() > 1e-2


# (5) XLA.


@pytest.mark.parametrize('clip', [None, 1.0])
def test_xla_equals_eager(clip):
  case = refs.Select(_DATA, 'simplified_ademamix_alt', shape_name='conv',
                     dtype='float32', clip=clip)[0]
  eager = refs.RunOurs(_OurParams(case), case, mode='eager')
  xla = refs.RunOurs(_OurParams(case), case, mode='xla')
  np.testing.assert_allclose(xla, eager, rtol=1e-6, atol=1e-7)
  refs.AssertMatches(xla, case, rtol=1e-6)


# Lazy sparse rows (ELEMENTWISE: _Step on the gathered rows).


def test_lazy_sparse_update_moves_only_the_present_rows():
  w0, grads = _Problem((4, 3), seed=11)
  p = SimplifiedAdEMAMix.Params().Set(decoupled_weight_decay=0.1,
                                      lazy_sparse_updates=True, **_ALT)
  ours, opt, w = _Apply(p, w0, grads, sparse_rows=[0, 2])
  want = _Numpy(w0[[0, 2]], [g[[0, 2]] for g in grads], 0.01, wd=0.1,
                **_ALT)
  np.testing.assert_allclose(ours[-1][[0, 2]], want[-1], rtol=2e-6)
  np.testing.assert_array_equal(ours[-1][[1, 3]], w0[[1, 3]])
  for name, slot in opt.GetSlots(w).items():
    assert not slot.numpy()[[1, 3]].any(), name
    assert slot.numpy()[[0, 2]].all(), name


# Construction: the factory row and the value checks.


def test_factory_name_and_keyword_aliases():
  p = get_optimizer_fn('simplified_ademamix', beta_1=0.9, beta_2=0.99,
                       weight_decay=0.1, alpha=2.0)
  from learner.optimizers import factory  # pylint: disable=g-import-not-at-top
  q, lr = factory.OptimizerParamsFromFn(p)
  assert lr is None
  assert q.cls is SimplifiedAdEMAMix
  assert (q.beta1, q.beta2, q.alpha, q.decoupled_weight_decay) == (
      0.9, 0.99, 2.0, 0.1)


@pytest.mark.parametrize('key, value', [
    ('beta1', 1.0), ('beta2', 1.0), ('beta1', -0.1), ('alpha', -1.0),
    ('epsilon', 0.0), ('alpha', float('nan')), ('beta2', True)])
def test_bad_values_are_refused_in_one_line_naming_the_key(key, value):
  with pytest.raises(ValueError) as e:
    SimplifiedAdEMAMix.Params().Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()


def test_alpha_and_betas_are_schedulable_and_elementwise():
  assert {'alpha', 'beta1', 'beta2'} <= set(
      SimplifiedAdEMAMix.SCHEDULABLE_PARAMS)
  assert SimplifiedAdEMAMix.ELEMENTWISE
  assert SimplifiedAdEMAMix.SUPPORTS_LAZY_SPARSE
