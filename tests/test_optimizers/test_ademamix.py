"""AdEMAMix (learner/optimizers/rules/ademamix.py), issue 37's example rule.

The rule's file holds its formula once (`_Step`); everything else here is
the base's: clip-scale folding, bfloat16 slots, hyperparameter schedules,
XLA, MirroredStrategy, ZeRO-1 (sharded_cases.MORE_RULES in
tests/test_distribution/test_sharded_state.py) and lazy sparse rows.
Numbers: an independent numpy implementation (`_Numpy`, float64) and
optax.contrib.ademamix (tests/data/optax_ademamix.json, recorded by
tools/record_optax_ademamix.py).
"""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner import get_optimizer_fn
from learner.learner import Learner
from learner.optimizers.rules.ademamix import AdEMAMix
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import BaseLayer
from params import NestedMap
from schedules import ConstantOne
from schedules.polynomial import LinearSchedule
import optax_references as refs

_DATA = refs.Load('ademamix')
# optax's keyword -> our param.
_KEYS = {'b1': 'beta1', 'b2': 'beta2', 'b3': 'beta3', 'alpha': 'alpha',
         'eps': 'epsilon', 'weight_decay': 'decoupled_weight_decay'}


def _Numpy(w, grads, lr, beta1=0.9, beta2=0.999, beta3=0.9999, alpha=5.0,
           epsilon=1e-8, wd=0.0, alphas=None, beta3s=None, beta1s=None):
  """Weights (float64) after each gradient of `grads`: Algorithm 1 of
  Pagliardini et al. (arXiv:2409.03137), written again here. `alphas`,
  `beta3s`, `beta1s`: per-step values (a schedule) instead of alpha, beta3,
  beta1 (a scheduled beta1 is bias corrected by its current value^t)."""
  w = np.asarray(w, np.float64)
  m1, m2, nu = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
  out = []
  for t, g in enumerate(grads, start=1):
    a = alpha if alphas is None else alphas[t - 1]
    b3 = beta3 if beta3s is None else beta3s[t - 1]
    beta1 = beta1 if beta1s is None else beta1s[t - 1]
    g = np.asarray(g, np.float64)
    m1 = beta1 * m1 + (1 - beta1) * g
    m2 = b3 * m2 + (1 - b3) * g
    nu = beta2 * nu + (1 - beta2) * g * g
    m1_hat, nu_hat = m1 / (1 - beta1 ** t), nu / (1 - beta2 ** t)
    w = w - lr * ((m1_hat + a * m2) / (np.sqrt(nu_hat) + epsilon) + wd * w)
    out.append(w)
  return out


def _Problem(shape, seed, steps=5):
  rng = np.random.RandomState(seed)
  return (rng.normal(size=shape).astype(np.float32),
          [rng.normal(size=shape).astype(np.float32) for _ in range(steps)])


def _Apply(p, w0, grads, lr=0.05, scale=None, sparse_rows=None):
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


# (1) numbers.


@pytest.mark.parametrize('shape', [(5,), (4, 3), (3, 3, 2, 4)])
def test_five_steps_match_numpy_with_weight_decay(shape):
  w0, grads = _Problem(shape, seed=len(shape))
  kw = dict(beta1=0.8, beta2=0.99, beta3=0.999, alpha=8.0, epsilon=1e-3)
  p = AdEMAMix.Params().Set(decoupled_weight_decay=0.1, **kw)
  ours, _, _ = _Apply(p, w0, grads)
  want = _Numpy(w0, grads, 0.05, wd=0.1, **kw)
  # Step 1 by hand for one entry: m1_hat = g, m2 = 0.001 g, nu_hat = g^2.
  g, w = float(grads[0].flat[0]), float(w0.flat[0])
  step1 = w - 0.05 * ((g + 8. * 0.001 * g) / (abs(g) + 1e-3) + 0.1 * w)
  assert want[0].flat[0] == pytest.approx(step1, rel=1e-12)
  for t in range(5):
    np.testing.assert_allclose(ours[t], want[t], rtol=2e-6, atol=1e-6)
  assert np.abs(ours[-1] - w0).max() > 0.1  # the weights moved


def test_defaults_are_optax_contrib_ademamix_defaults():
  p = AdEMAMix.Params()
  assert (p.beta1, p.beta2, p.beta3, p.alpha, p.epsilon,
          p.decoupled_weight_decay) == (0.9, 0.999, 0.9999, 5.0, 1e-8, 0.0)
  assert _DATA['cases'][0]['kwargs'] == {}  # the 'ademamix' rule: defaults


def _OurParams(case, scheduled=()):
  p = AdEMAMix.Params()
  schedules = {}
  for k, v in case['kwargs'].items():
    if k in scheduled:
      init, end, steps = v
      schedules[_KEYS[k]] = LinearSchedule.Params().Set(
          start=(0, init), limit=(steps, end))
    else:
      p.Set(**{_KEYS[k]: v})
  return p.Set(hyper_schedules=schedules)


_PLAIN = [c for c in _DATA['cases'] if c['rule'] != 'ademamix_warmup']
_WARMUP = refs.Select(_DATA, 'ademamix_warmup')


@pytest.mark.parametrize('case', _PLAIN, ids=refs.CaseId)
def test_ten_steps_match_optax(case):
  # optax: ademamix's update, add_decayed_weights, then the rate: the same
  # lr * wd * w_old as our decoupled weight decay. Clipped cases chain
  # clip_by_global_norm(1.0) first; ours: clip_gradient_norm_to_value.
  # float64 with no clip and no decay is exact up to rounding; the clip
  # scale and the decay rate lr * wd are float32 (the learner's, the
  # base's): ~1e-8 relative.
  ours = refs.RunOurs(_OurParams(case), case)
  exact = (case['dtype'] == 'float64' and not case['clip'] and
           case['rule'] == 'ademamix')
  refs.AssertMatches(ours, case, rtol=1e-12 if exact else 1e-6)


# (2) clip-scale folding.


def test_apply_scaled_equals_apply_on_the_scaled_gradient():
  w0, grads = _Problem((4, 3), seed=7)
  p = AdEMAMix.Params().Set(decoupled_weight_decay=0.1)
  scaled, _, _ = _Apply(p, w0, grads, scale=0.375)
  plain, _, _ = _Apply(p, w0, [0.375 * g for g in grads])
  for a, b in zip(scaled, plain):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  # The scale reaches the step: with eps 1e-3 a gradient scaled by 1e-3
  # moves the weights visibly less (the test can fail).
  p3 = p.Copy().Set(epsilon=1e-3)
  a3, _, _ = _Apply(p3, w0, grads, scale=0.001)
  b3, _, _ = _Apply(p3, w0, grads)
  assert np.abs(a3[-1] - b3[-1]).max() > 1e-3


def test_learner_clip_gives_numpy_on_the_clipped_gradient():
  case = refs.Select(_DATA, 'ademamix_alt', shape_name='matrix',
                     dtype='float32', clip=1.0)[0]
  ours = refs.RunOurs(_OurParams(case), case)
  grads = [np.asarray(g).reshape(case['shape']) for g in case['grads']]
  clipped = [g * min(1., 1. / np.linalg.norm(g)) for g in grads]
  assert all(np.linalg.norm(g) > 1.5 for g in grads)  # clipping acts
  want = _Numpy(np.reshape(case['init'], case['shape']), clipped,
                case['lr'], beta1=0.8, beta2=0.99, beta3=0.999, alpha=8.0,
                epsilon=1e-3, wd=0.1)
  np.testing.assert_allclose(ours, np.stack(want), rtol=1e-5, atol=1e-6)


# (3) bfloat16 slots.

# 50 steps on (64, 32) weights, lr 0.01: largest weight deviation of bfloat16
# slots from float32 slots, relative to the largest weight. Measured 3.2e-4
# (bfloat16's 8 significant bits: 2^-9 per rounding, fed to later steps).
BF16_DEVIATION_TOL = 5e-3


def test_bfloat16_slots_are_stored_bfloat16_and_stay_close():
  w0, grads = _Problem((64, 32), seed=3, steps=50)
  p = AdEMAMix.Params().Set(decoupled_weight_decay=0.01)
  ref, _, _ = _Apply(p, w0, grads, lr=0.01)
  got, opt, w = _Apply(p.Copy().Set(slot_dtype=tf.bfloat16), w0, grads,
                       lr=0.01)
  slots = opt.GetSlots(w)
  assert sorted(slots) == ['m1', 'm2', 'nu']
  assert all(s.dtype == tf.bfloat16 for s in slots.values())
  dev = np.abs(got[-1] - ref[-1]).max() / np.abs(ref[-1]).max()
  print('AdEMAMix bfloat16 slots, 50 steps: max weight deviation %.3g' % dev)
  assert 0 < dev <= BF16_DEVIATION_TOL


def test_float32_slots_through_the_upcast_path_equal_the_plain_run():
  w0, grads = _Problem((4, 3), seed=5)
  p = AdEMAMix.Params().Set(decoupled_weight_decay=0.1)
  plain, _, _ = _Apply(p, w0, grads)
  upcast, _, _ = _Apply(p.Copy().Set(slot_dtype=tf.float32), w0, grads)
  for a, b in zip(plain, upcast):
    np.testing.assert_array_equal(a, b)


# (4) hyperparameter schedules.


@pytest.mark.parametrize('case', _WARMUP, ids=refs.CaseId)
def test_alpha_and_beta3_warmup_match_optax_schedules(case):
  # optax evaluates alpha(count) and b3(count) before the count increments;
  # ours reads the schedule at the learner's step before the update.
  ours = refs.RunOurs(_OurParams(case, scheduled=('alpha', 'b3')), case)
  refs.AssertMatches(ours, case, rtol=1e-6)


def test_scheduled_alpha_and_beta3_give_numpy_with_the_scheduled_values():
  case = refs.Select(_DATA, 'ademamix_warmup', shape_name='vector',
                     dtype='float64', clip=None)[0]
  ours = refs.RunOurs(_OurParams(case, scheduled=('alpha', 'b3')), case)
  alphas = [0.5 * k for k in range(10)]  # 0 -> 5 over 10 steps
  beta3s = [0.9 + 0.0099 * k for k in range(10)]  # 0.9 -> 0.999
  grads = case['grads']
  want = _Numpy(case['init'], grads, case['lr'], alphas=alphas,
                beta3s=beta3s)
  # The schedules' values are float32 (beta3 = 0.9 + 0.0099 k rounded).
  assert refs.RelativeError(ours, np.stack(want)) <= 1e-6
  unscheduled = _Numpy(case['init'], grads, case['lr'])
  assert np.abs(np.stack(want) - np.stack(unscheduled)).max() > 1e-2


def test_scheduled_beta1_is_bias_corrected_by_its_current_value():
  w0, grads = _Problem((4, 3), seed=13, steps=6)
  p = AdEMAMix.Params().Set(epsilon=1e-3, hyper_schedules={
      'beta1': LinearSchedule.Params().Set(start=(0, 0.5), limit=(4, 0.9))})
  ours, _, _ = _Apply(p, w0, grads)
  beta1s = [0.5, 0.6, 0.7, 0.8, 0.9, 0.9]
  want = _Numpy(w0, grads, 0.05, epsilon=1e-3, beta1s=beta1s)
  assert refs.RelativeError(np.stack(ours), np.stack(want)) <= 1e-6
  plain = _Numpy(w0, grads, 0.05, epsilon=1e-3)
  assert np.abs(want[-1] - plain[-1]).max() > 1e-3


# (5) XLA.


@pytest.mark.parametrize('clip', [None, 1.0])
def test_xla_equals_eager(clip):
  case = refs.Select(_DATA, 'ademamix_alt', shape_name='conv',
                     dtype='float32', clip=clip)[0]
  eager = refs.RunOurs(_OurParams(case), case, mode='eager')
  xla = refs.RunOurs(_OurParams(case), case, mode='xla')
  np.testing.assert_allclose(xla, eager, rtol=1e-6, atol=1e-7)
  refs.AssertMatches(xla, case, rtol=1e-6)


# (6) MirroredStrategy: 2 replicas, half of the global batch each.


class _Linear(BaseLayer):
  """y = x w, w [3, 2] seeded."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'linear'
    return p

  def __init__(self, params):
    super().__init__(params)
    init = np.random.RandomState(0).normal(size=[3, 2]).astype(np.float32)
    self.CreateVariable('w', [3, 2], init=init)


def _Batch(step):
  rng = np.random.RandomState(step)
  return (rng.normal(size=[8, 3]).astype(np.float32),
          rng.normal(size=[8, 2]).astype(np.float32))


def _Train(strategy, steps=5):
  """The weights after `steps` steps on the global batches of `_Batch`."""
  opt = AdEMAMix.Params().Set(decoupled_weight_decay=0.1, alpha=8.0,
                              beta3=0.99)
  with strategy.scope():
    task = _Linear.Params().Instantiate()
    lrn = Learner.Params().Set(
        name='loss', learning_rate=0.05, lr_schedule=ConstantOne.Params(),
        optimizer=opt, clip_gradient_norm_to_value=0.5).Instantiate()
    lrn.Bind(task.vars)

  def Replica(x, y):
    with learner_lib.GradientTape():
      loss = tf.reduce_mean(tf.square(tf.matmul(x, task.vars.w) - y))
    n = tf.cast(tf.shape(x)[0], tf.float32)
    lrn.Apply({'loss': (loss, n)}, task.vars)

  @tf.function
  def Step(x, y):
    strategy.run(Replica, args=(x, y))

  n = strategy.num_replicas_in_sync
  for step in range(steps):
    x, y = _Batch(step)

    def Part(ctx, a):
      k = 8 // n
      i = ctx.replica_id_in_sync_group
      return tf.constant(a[i * k:(i + 1) * k])

    dist = strategy.experimental_distribute_values_from_function
    Step(dist(lambda ctx, a=x: Part(ctx, a)),
         dist(lambda ctx, a=y: Part(ctx, a)))
  return [v.numpy() for v in strategy.experimental_local_results(task.vars.w)]


def test_two_replicas_equal_one_replica_on_the_global_batch():
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  two = _Train(distribution.CreateStrategy('mirrored'))
  one = _Train(tf.distribute.OneDeviceStrategy('/cpu:0'))
  assert len(two) == 2 and len(one) == 1
  np.testing.assert_array_equal(two[0], two[1])
  np.testing.assert_allclose(two[0], one[0], rtol=1e-6, atol=1e-7)
  w0 = _Linear.Params().Instantiate().vars.w.numpy()
  assert np.abs(one[0] - w0).max() > 0.1


# Lazy sparse rows (ELEMENTWISE: _Step on the gathered rows).


def test_lazy_sparse_update_moves_only_the_present_rows():
  w0, grads = _Problem((4, 3), seed=11)
  p = AdEMAMix.Params().Set(decoupled_weight_decay=0.1,
                            lazy_sparse_updates=True)
  ours, opt, w = _Apply(p, w0, grads, sparse_rows=[0, 2])
  want = _Numpy(w0[[0, 2]], [g[[0, 2]] for g in grads], 0.05, wd=0.1)
  np.testing.assert_allclose(ours[-1][[0, 2]], want[-1], rtol=2e-6)
  np.testing.assert_array_equal(ours[-1][[1, 3]], w0[[1, 3]])
  for name, slot in opt.GetSlots(w).items():
    assert not slot.numpy()[[1, 3]].any(), name
    assert slot.numpy()[[0, 2]].all(), name
  # Densified (the default), every row decays: rows 1 and 3 move too.
  dense, _, _ = _Apply(p.Copy().Set(lazy_sparse_updates=False), w0, grads,
                       sparse_rows=[0, 2])
  assert np.abs(dense[-1][[1, 3]] - w0[[1, 3]]).max() > 1e-3


# Construction: the factory row and the value checks.


def test_factory_name_and_keyword_aliases():
  p = get_optimizer_fn('ademamix', beta_1=0.8, beta_2=0.99, beta_3=0.999,
                       weight_decay=0.1, alpha=8.0)
  from learner.optimizers import factory  # pylint: disable=g-import-not-at-top
  q, lr = factory.OptimizerParamsFromFn(p)
  assert lr is None
  assert q.cls is AdEMAMix
  assert (q.beta1, q.beta2, q.beta3, q.alpha, q.decoupled_weight_decay) == (
      0.8, 0.99, 0.999, 8.0, 0.1)


@pytest.mark.parametrize('key, value', [
    ('beta1', 1.0), ('beta2', 1.0), ('beta3', 1.0), ('beta3', -0.1),
    ('alpha', -1.0), ('epsilon', 0.0), ('alpha', float('nan')),
    ('beta3', True)])
def test_bad_values_are_refused_in_one_line_naming_the_key(key, value):
  with pytest.raises(ValueError) as e:
    AdEMAMix.Params().Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()


def test_alpha_and_beta3_are_schedulable():
  assert {'alpha', 'beta3'} <= set(AdEMAMix.SCHEDULABLE_PARAMS)
  assert AdEMAMix.ELEMENTWISE
