"""Low-precision optimizer state: BaseOptimizer.slot_dtype (issue 24.7).

Slots stored in bfloat16, the update computed in float32 (read, upcast,
the rule's `_Step`, round to nearest, store). The float32-slot form of the same
path is checked against the numpy references in test_optimizers.py
(`*_upcast` cases) and restored in test_optimizer_restore.py.
"""

import numpy as np
import pytest
from sklearn import datasets as sklearn_datasets
import tensorflow as tf

import learner as learner_lib
from learner import optimizers
from learner.learner import Learner
from learner.optimizers.wrappers import ema
from learner.optimizers.kernels import low_precision
from learner.optimizers.var_grad import VarGrad
from params import BaseLayer
from params import NestedMap
from schedules import ConstantOne

# Digits MLP, 100 steps (see `_TrainDigits`): the largest weight deviation of
# bfloat16 state from float32 state, relative to the largest weight.
# Measured: Adam 2.6e-3, Momentum 1.3e-3 (bfloat16 keeps 8 significant bits,
# 2^-9 = 2e-3 relative per rounding, and a rounded slot feeds every later
# step). The loss after 100 steps differs by < 1%.
DEVIATION_TOL = {'adam': 2e-2, 'momentum': 1e-2, 'adam_stochastic': 2e-2}
LOSS_RTOL = 1e-2


class _Mlp(BaseLayer):
  """64 -> 32 (tanh) -> 10 softmax, seeded initial weights."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'mlp'
    return p

  def __init__(self, params):
    super().__init__(params)
    rng = np.random.RandomState(0)
    for name, shape in (('w1', [64, 32]), ('b1', [32]), ('w2', [32, 10]),
                        ('b2', [10])):
      init = (rng.normal(0., 1. / np.sqrt(shape[0]), shape)
              if len(shape) == 2 else np.zeros(shape))
      self.CreateVariable(name, shape, init=init.astype(np.float32))

  def Loss(self, theta, x, y):
    h = tf.tanh(tf.matmul(x, theta.w1) + theta.b1)
    logits = tf.matmul(h, theta.w2) + theta.b2
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))


def _Digits():
  d = sklearn_datasets.load_digits()
  return (tf.constant(d.data.astype(np.float32) / 16.),
          tf.constant(d.target.astype(np.int32)))


def _TrainDigits(opt, steps=100, jit=False):
  """(weights dict, final loss, learner) after `steps` full-batch steps."""
  x, y = _Digits()
  task = _Mlp.Params().Instantiate()
  lrn = Learner.Params().Set(
      name='loss', learning_rate=0.01 if opt.cls is optimizers.Adam else 0.1,
      lr_schedule=ConstantOne.Params(), optimizer=opt).Instantiate()
  lrn.Bind(task.vars)

  @tf.function(jit_compile=jit)
  def Step():
    loss = task.Loss(task.theta, x, y)
    lrn.Apply({'loss': (loss, 1.0)}, task.vars)
    return loss

  for _ in range(steps):
    Step()
  loss = float(task.Loss(task.theta, x, y).numpy())
  return {k: v.numpy() for k, v in task.vars.FlattenItems()}, loss, lrn


def _SlotBytes(lrn, task_vars):
  total = 0
  for v in task_vars:
    for s in lrn.optimizer.GetSlots(v).values():
      total += s.shape.num_elements() * s.dtype.size
  return total


def _Deviation(a, b):
  return max(np.abs(a[k] - b[k]).max() for k in a) / max(
      np.abs(b[k]).max() for k in b)


_RULES = {'adam': optimizers.Adam.Params(),
          'momentum': optimizers.Momentum.Params(),
          'adam_stochastic': optimizers.Adam.Params().Set(
              slot_stochastic_rounding=True)}


@pytest.mark.parametrize('rule', sorted(_RULES))
def test_bfloat16_state_halves_slot_bytes_and_stays_close(rule):
  base = _RULES[rule]
  w32, loss32, lrn32 = _TrainDigits(base.Copy().Set(
      slot_stochastic_rounding=False))
  w16, loss16, lrn16 = _TrainDigits(base.Copy().Set(slot_dtype=tf.bfloat16))
  variables = [lrn16.optimizer.bound_variables[k]
               for k in sorted(lrn16.optimizer.bound_variables)]
  for v in variables:
    for s in lrn16.optimizer.GetSlots(v).values():
      assert s.dtype == tf.bfloat16
  ratio = _SlotBytes(lrn16, variables) / _SlotBytes(
      lrn32, [lrn32.optimizer.bound_variables[k]
              for k in sorted(lrn32.optimizer.bound_variables)])
  dev = _Deviation(w16, w32)
  print('%s: slot bytes bf16/f32 %.3f, max weight deviation %.3g, loss '
        '%.5f vs %.5f' % (rule, ratio, dev, loss16, loss32))
  assert ratio <= 0.55
  assert ratio == 0.5
  assert 0 < dev <= DEVIATION_TOL[rule]
  assert loss16 == pytest.approx(loss32, rel=LOSS_RTOL)
  assert loss32 < 0.6  # it learned (ln 10 = 2.3 at the start)


@pytest.mark.parametrize('epsilon_form', ['tf', 'optax'])
def test_float32_slots_through_the_upcast_path_match_the_kernels(
    epsilon_form):
  # The baseline of the deviation above: the same path with float32 slots
  # differs from the fused kernels only by float32 rounding.
  base = optimizers.Adam.Params().Set(epsilon_form=epsilon_form)
  w_kernel, _, _ = _TrainDigits(base.Copy())
  w_upcast, _, _ = _TrainDigits(base.Copy().Set(slot_dtype=tf.float32))
  dev = _Deviation(w_upcast, w_kernel)
  print('adam float32 slots, upcast path vs kernel: %.3g' % dev)
  assert dev <= 1e-4


def test_bfloat16_state_under_xla_matches_tf_function():
  p = optimizers.Adam.Params().Set(slot_dtype=tf.bfloat16)
  w_fn, _, _ = _TrainDigits(p.Copy(), steps=20)
  w_xla, _, lrn = _TrainDigits(p.Copy(), steps=20, jit=True)
  dev = _Deviation(w_xla, w_fn)
  print('bf16 adam xla vs function, 20 steps: %.3g' % dev)
  assert dev <= 1e-3
  assert int(lrn.optimizer.num_updates.numpy()) == 20


def test_stochastic_rounding_to_bfloat16_is_unbiased():
  # 1 + 2^-10 lies 1/8 of a bfloat16 spacing (2^-7 at 1) above 1: rounded
  # up with probability 1/8, so the mean is x. To nearest it is always 1.
  n = 200000
  for sign in (1., -1.):
    x = tf.fill([n], tf.constant(sign * (1. + 2. ** -10), tf.float32))
    r = low_precision.StochasticRoundToBfloat16(
        x, tf.constant([3, 4], tf.int64)).numpy().astype(np.float64)
    assert set(np.unique(r)) == {sign * 1., sign * (1. + 2. ** -7)}
    up = np.mean(np.abs(r) > 1.)
    assert abs(up - 0.125) < 4 * np.sqrt(0.125 * 0.875 / n)
    assert abs(r.mean() - sign * (1. + 2. ** -10)) < 1e-4
  exact = tf.constant([0., 1.5, -2., float('inf')], tf.float32)
  np.testing.assert_array_equal(
      low_precision.StochasticRoundToBfloat16(
          exact, tf.constant([1, 2], tf.int64)).numpy().astype(np.float32),
      exact.numpy())


@pytest.mark.parametrize('kw,words', [
    (dict(slot_dtype=tf.int32), "slot_dtype=tf.int32 is not a float dtype"),
    (dict(slot_dtype='float8'), "slot_dtype='float8' is not a float dtype"),
    (dict(slot_stochastic_rounding=True),
     'slot_stochastic_rounding=True needs slot_dtype=tf.bfloat16'),
    (dict(slot_dtype=tf.float16, slot_stochastic_rounding=True),
     'for tf.bfloat16 slots only'),
    (dict(slot_stochastic_rounding=1), 'slot_stochastic_rounding=1'),
])
def test_bad_slot_dtype_is_refused_in_one_line(kw, words):
  with pytest.raises(ValueError, match=words) as e:
    optimizers.Adam.Params().Set(name='opt', **kw).Instantiate()
  assert '\n' not in str(e.value)


class _DoubledAdam(optimizers.Adam):
  """Changes Adam's `_Step` (2 g): the kernels (Adam's accelerator) are
  not its rule, so every path, the low-precision one too, runs its own."""

  def _Step(self, s, w, g, slots):
    return super()._Step(s, w, 2. * g, slots)


@pytest.mark.parametrize('p,name', [
    (ema.Ema.Params().Set(optimizer=optimizers.Adam.Params()), 'Ema'),
    (optimizers.Lookahead.Params().Set(optimizer=optimizers.Adam.Params()),
     'Lookahead'),
    (optimizers.Lars.Params().Set(optimizer=optimizers.Momentum.Params()),
     'Lars'),
])
def test_wrappers_refuse_it(p, name):
  with pytest.raises(ValueError, match='slot_dtype=bfloat16 is not supported '
                     'by %s' % name):
    p.Copy().Set(name='opt', slot_dtype=tf.bfloat16).Instantiate()


@pytest.mark.parametrize('cls', [optimizers.RMSProp, optimizers.Lion,
                                 optimizers.AdaDelta, _DoubledAdam,
                                 optimizers.LAMB, optimizers.Adafactor])
def test_every_rule_with_a_step_stores_its_slots_in_float32(cls):
  """slot_dtype=tf.float32 on float32 variables runs the read / `_Step` /
  store path; it gives the rule's own numbers: those of the dense path
  (its raw TF op where it has one) to float32 rounding."""
  def Run(slot_dtype):
    opt = cls.Params().Set(name='opt', slot_dtype=slot_dtype).Instantiate()
    w = tf.Variable([0.5, -1.0, 2.0])
    opt.Bind([w])
    for g in ([0.1, -0.2, 0.3], [0.3, 0.1, -0.2], [-0.1, 0.2, 0.05]):
      opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.constant(g))))
    return w.numpy()
  dense, upcast = Run(None), Run(tf.float32)
  np.testing.assert_allclose(upcast, dense, rtol=1e-5, atol=1e-7)
  assert not np.array_equal(dense, [0.5, -1.0, 2.0])


@pytest.mark.parametrize('p', [
    optimizers.Nadam.Params().Set(momentum_schedule='dozat'),
    optimizers.RAdam.Params().Set(beta2=0.9, threshold=4.0,
                                  use_nesterov=True),
    optimizers.Adamax.Params().Set(epsilon_form='keras'),
    optimizers.AMSGrad.Params().Set(bias_correction_nu=False),
    optimizers.ADOPT.Params().Set(use_nesterov=True)],
                         ids=['nadam', 'radam', 'adamax', 'amsgrad', 'adopt'])
def test_the_adam_family_takes_float32_slots_bit_for_bit(p):
  """Issue 37: the family's `_Step` gives it the read / `_Step` / store
  path. Float32 slots on float32 variables give the default path's bits
  (Nadam's and AMSGrad's fused kernels are bit-identical to `_Step`,
  test_rule_kernels.py); 5 steps pass RAdam's threshold (rho_5 = 4.58
  with beta2 = 0.9) and ADOPT's first update."""
  def Run(slot_dtype):
    opt = p.Copy().Set(name='opt', slot_dtype=slot_dtype).Instantiate()
    w = tf.Variable([0.5, -1.0, 2.0])
    opt.Bind([w])
    for g in ([0.1, -0.2, 0.3], [0.3, 0.1, -0.2], [-0.1, 0.2, 0.05],
              [0.2, -0.3, 0.1], [-0.4, 0.1, 0.2]):
      opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.constant(g))))
    slots = opt.GetSlots(w)
    assert {s.dtype for s in slots.values()} == {tf.float32}
    return [w.numpy()] + [slots[k].numpy() for k in sorted(slots)]
  dense, upcast = Run(None), Run(tf.float32)
  for a, b in zip(dense, upcast):
    np.testing.assert_array_equal(b, a)
  assert not np.array_equal(dense[0], [0.5, -1.0, 2.0])


def test_a_changed_step_is_the_rule_on_every_path():
  def Run(cls, slot_dtype=None):
    opt = cls.Params().Set(name='opt', slot_dtype=slot_dtype).Instantiate()
    w = tf.Variable([0.5, -1.0])
    opt.Bind([w])
    opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.constant(
        [0.1, -0.4]))))
    return w.numpy()
  # The dense path (no raw op: the step is not Adam's) and the upcast
  # path both run _DoubledAdam's step; Adam's own differs through epsilon
  # (m / (sqrt(v) + eps) is not scale-invariant).
  np.testing.assert_array_equal(Run(_DoubledAdam), Run(_DoubledAdam,
                                                       tf.float32))
  assert Run(_DoubledAdam)[0] != Run(optimizers.Adam)[0]


def test_slot_params_round_trip_as_text():
  p = optimizers.Adam.Params().Set(slot_dtype=tf.bfloat16,
                                   slot_stochastic_rounding=True)
  q = optimizers.Adam.Params()
  q.FromText(p.ToText())
  assert q.slot_dtype == tf.bfloat16 and q.slot_stochastic_rounding is True
  assert q.ToText() == p.ToText()
  lp = Learner.Params().Set(adaptive_clip_ratio=0.02, adaptive_clip_eps=1e-4)
  lq = Learner.Params()
  lq.FromText(lp.ToText())
  assert (lq.adaptive_clip_ratio, lq.adaptive_clip_eps) == (0.02, 1e-4)


def test_sparse_gradient_is_densified_and_clip_scale_applied():
  # Momentum is lazy by default; with bfloat16 slots the sparse gradient is
  # densified (the absent rows keep moving with their velocity) and the
  # learner's clip scale reaches the upcast step (ApplyScaled).
  results = {}
  for slot_dtype in (None, tf.float32):
    w = tf.Variable(np.ones([3, 2], np.float32), name='w')
    opt = optimizers.Momentum.Params().Set(
        name='opt', lazy_sparse_updates=(slot_dtype is None),
        slot_dtype=slot_dtype).Instantiate().Bind([w])
    for g in (tf.constant(np.full([3, 2], 0.5, np.float32)),
              tf.IndexedSlices(tf.constant([[1., 2.]]), tf.constant([1]),
                               tf.constant([3, 2]))):
      if slot_dtype is None:
        g = tf.convert_to_tensor(g)
      opt.ApplyScaled(tf.constant(0.1), NestedMap(w=VarGrad(w, g)),
                      tf.constant(0.5))
    results[slot_dtype] = w.numpy()
  # Step 1: v = 0.25, w = 0.975; step 2: v = 0.225 (+0.5, 1.0 on row 1).
  want = np.full([3, 2], 0.975 - 0.1 * 0.225, np.float32)
  want[1] -= 0.1 * np.array([0.5, 1.])
  np.testing.assert_allclose(results[None], want, rtol=1e-6)
  np.testing.assert_allclose(results[tf.float32], want, rtol=1e-6)
