"""DynamicAccumulator (learner/optimizers/wrappers/dynamic_accumulator.py).

Numbers: Lingvo 0.14.2 itself (tests/data/lingvo_0_14_2_dynamic_accumulator
.json, recorded by tools/record_lingvo_dynamic_accumulator.py: Lingvo's TF1
DynamicAccumulator around its Adam and Momentum, min_accum_weight 10, loss
weights 1..8 per step (updates after steps 2, 4, 6, 10, 14, 17, 20), in
Lingvo's learner; a matrix, a vector and a conv kernel in one learner; 20
steps; clip by global norm off and 1.0; float32), cases by hand and a numpy
Momentum for our clip of the window. Replicas and ZeRO-1:
tests/test_distribution/test_dynamic_accumulator_replicas.py.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner import optimizers
from learner.learner import Learner
from learner.optimizers import factory
from learner.optimizers.var_grad import VarGrad
from params import BaseLayer
from params import NestedMap
import schedules

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), 'data', 'lingvo_0_14_2_dynamic_accumulator.json')
with open(_PATH) as _f:
  _DATA = json.load(_f)
_NAMES = ('matrix', 'vector', 'conv')
# Measured (max over steps and variables of max |ours - Lingvo| / max
# |Lingvo| of the step): 5.1e-7 (Adam), 1.0e-7 (Momentum); float32.
RTOL = 1e-6


class _Vars(BaseLayer):
  """The recorded case's three variables, from its `init`."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'task'
    p.Define('case', None, 'The recorded case (dict).')
    return p

  def __init__(self, params):
    super().__init__(params)
    for name in _NAMES:
      v = self.params.case['variables'][name]
      self.CreateVariable(name, v['shape'], init=np.asarray(
          v['init'], np.float32).reshape(v['shape']))


def _Inner(case):
  cls, kw = case['inner']
  return getattr(optimizers, cls).Params().Set(**kw)


def _Params(case, **kw):
  return optimizers.DynamicAccumulator.Params().Set(
      optimizer=_Inner(case), min_accum_weight=case['min_accum_weight'], **kw)


def _Schedule(case):
  if case['schedule'] is None:
    return schedules.ConstantOne.Params()
  cls, kw = case['schedule']
  return getattr(schedules, cls).Params().Set(**kw)


def _Grads(case, step):
  return [np.asarray(case['variables'][n]['grads'][step], np.float32).reshape(
      case['variables'][n]['shape']) for n in _NAMES]


def _Build(case, opt=None, clip=None, mode='function'):
  """(task, learner, step(grads, weight)) for `case`."""
  task = _Vars.Params().Set(case=case).Instantiate()
  lrn = Learner.Params().Set(
      name='loss', learning_rate=case['lr'], lr_schedule=_Schedule(case),
      optimizer=opt or _Params(case),
      clip_gradient_norm_to_value=clip or 0.0).Instantiate()
  lrn.Bind(task.vars)
  g = [tf.Variable(tf.zeros(task.vars[n].shape), trainable=False)
       for n in _NAMES]
  wt = tf.Variable(0.0, trainable=False)

  def _Step():
    with learner_lib.GradientTape():
      loss = tf.add_n([tf.reduce_sum(task.theta[n] * gv)
                       for n, gv in zip(_NAMES, g)])
    lrn.Apply({'loss': (loss, wt)}, task.vars)

  if mode != 'eager':
    _Step = tf.function(_Step, jit_compile=(mode == 'xla'))

  def Step(grads, weight):
    for gv, x in zip(g, grads):
      gv.assign(x)
    wt.assign(weight)
    _Step()

  return task, lrn, Step


def _Run(case, grads_fn=_Grads, first=0, built=None, **kw):
  """Weights after each step (list of [matrix, vector, conv]), counters."""
  task, lrn, step = built or _Build(case, **kw)
  out, updates, window = [], [], []
  for t in range(first, len(case['weights'])):
    step(grads_fn(case, t), case['weights'][t])
    out.append([task.vars[n].numpy().astype(np.float64) for n in _NAMES])
    updates.append(float(lrn.optimizer.num_updates.numpy()))
    window.append(float(lrn.optimizer.window_weight.numpy()))
  return out, updates, window


def _RelativeError(ours, case, first=0):
  err = 0.0
  for i, n in enumerate(_NAMES):
    ref = np.asarray(case['variables'][n]['params'][first:], np.float64)
    got = np.stack([step[i].ravel() for step in ours])
    scale = np.abs(ref).max(axis=1)
    err = max(err, float((np.abs(got - ref).max(axis=1) / scale).max()))
  return err


def _Case(rule, clip=None):
  (case,) = [c for c in _DATA['cases']
             if c['rule'] == rule and c['clip'] == clip]
  return case


def _LingvoClipped(case, step):
  """Lingvo's learner clips each step's gradient to global norm `clip`
  before the optimizer sees it (learner.py _GetGlobalGradScale:
  min(1, clip / norm)), in float32."""
  grads = _Grads(case, step)
  norm = np.sqrt(sum(np.sum(np.square(g, dtype=np.float32)) for g in grads),
                 dtype=np.float32)
  scale = np.minimum(np.float32(1.0), np.float32(case['clip']) / norm)
  return [g * scale for g in grads]


_RULES = sorted({c['rule'] for c in _DATA['cases']})


@pytest.mark.parametrize('rule', _RULES)
def test_twenty_steps_match_lingvo_clip_off(rule):
  case = _Case(rule)
  ours, updates, window = _Run(case)
  err = _RelativeError(ours, case)
  print('%s: max relative error %.3g' % (rule, err))
  assert err <= RTOL, err
  # The same updates on the same steps, the same pending weight.
  assert updates == case['param_update_step']
  assert window == case['accum_weight']


@pytest.mark.parametrize('rule', _RULES)
def test_lingvo_clip_is_per_step_before_the_window(rule):
  # Lingvo's clip-on record equals ours fed with each step's gradient
  # clipped alone: Lingvo clips per train step, then weights and sums; the
  # window's mean is not clipped again (docs/lingvo.md).
  case = _Case(rule, clip=1.0)
  ours, updates, _ = _Run(case, grads_fn=_LingvoClipped)
  err = _RelativeError(ours, case)
  print('%s clip 1.0: max relative error %.3g' % (rule, err))
  assert err <= RTOL, err
  assert updates == case['param_update_step']


def _NumpyMomentumWindowClip(case, clip):
  """Our clip: the window's weighted mean is clipped once (global norm),
  then TF1 Momentum: a <- alpha a + g, w <- w - lr a (float64)."""
  w = [np.asarray(case['variables'][n]['init'], np.float64) for n in _NAMES]
  a = [np.zeros_like(x) for x in w]
  acc, total, alpha = [np.zeros_like(x) for x in w], 0.0, 0.9
  for t, weight in enumerate(case['weights']):
    acc = [s + weight * np.ravel(g) for s, g in zip(acc, _Grads(case, t))]
    total += weight
    if total >= case['min_accum_weight']:
      mean = [s / total for s in acc]
      norm = np.sqrt(sum(np.sum(m * m) for m in mean))
      mean = [m * min(1.0, clip / norm) for m in mean]
      a = [alpha * x + m for x, m in zip(a, mean)]
      w = [x - case['lr'] * y for x, y in zip(w, a)]
      acc, total = [np.zeros_like(x) for x in w], 0.0
  return w


def test_our_clip_is_on_the_window_mean_numpy_momentum():
  case = _Case('dynacc_momentum')
  ours, _, _ = _Run(case, clip=1.0)
  want = _NumpyMomentumWindowClip(case, 1.0)
  for got, ref in zip(ours[-1], want):
    np.testing.assert_allclose(got.ravel(), ref, rtol=2e-6, atol=2e-6)
  # Not Lingvo's per-step clip: the two differ visibly here.
  lingvo = np.asarray(_Case('dynacc_momentum', 1.0)['variables']['vector'][
      'params'][-1])
  assert np.abs(ours[-1][1] - lingvo).max() > 1e-2


def test_xla_equals_the_recording():
  case = _Case('dynacc_adam')
  ours, updates, _ = _Run(case, mode='xla')
  assert _RelativeError(ours, case) <= RTOL
  assert updates == case['param_update_step']


def test_update_waits_for_the_weight_by_hand():
  # SGD, rate 0.1, min 5: weights 2, 2 (sum 4: nothing moves), 3 (sum 7 >=
  # 5: w = -0.1 * (2 [1, 2] + 2 [3, 0] + 3 [1, 1]) / 7 = -0.1 [11/7, 1]),
  # then 4 (pending again).
  w = tf.Variable([0.0, 0.0], name='w')
  lrn = Learner.Params().Set(
      name='loss', learning_rate=0.1,
      lr_schedule=schedules.ConstantOne.Params(),
      optimizer=optimizers.DynamicAccumulator.Params().Set(
          optimizer=optimizers.SGD.Params(), min_accum_weight=5)).Instantiate()
  lrn.Bind(NestedMap(w=w))
  seen = []
  for g, n in [([1., 2.], 2.), ([3., 0.], 2.), ([1., 1.], 3.), ([5., 5.], 4.)]:
    with learner_lib.GradientTape():
      loss = tf.reduce_sum(w * tf.constant(g))
    lrn.Apply({'loss': (loss, tf.constant(n))}, NestedMap(w=w))
    seen.append((w.numpy().tolist(), float(lrn.optimizer.window_weight),
                 int(lrn.num_updates)))
  assert [s[1:] for s in seen] == [(2., 0), (4., 0), (0., 1), (4., 1)]
  np.testing.assert_allclose(seen[2][0], [-0.1 * 11 / 7, -0.1], rtol=1e-6)
  assert seen[3][0] == seen[2][0]


def test_weight_key_counts_another_metric_and_weights_by_the_loss():
  # min 10 counted on metrics['num_samples'] (value 6, then 6: applies at
  # step 2); the mean stays loss-weighted: (1 * 2 + 3 * 4) / (1 + 3) = 3.5.
  w = tf.Variable(0.0, name='w')
  lrn = Learner.Params().Set(
      name='loss', learning_rate=1.0,
      lr_schedule=schedules.ConstantOne.Params(),
      optimizer=optimizers.DynamicAccumulator.Params().Set(
          optimizer=optimizers.SGD.Params(), min_accum_weight=10,
          weight_key='num_samples')).Instantiate()
  lrn.Bind(NestedMap(w=w))

  @tf.function
  def Step(g, n):
    with learner_lib.GradientTape():
      loss = w * g
    lrn.Apply({'loss': (loss, n), 'num_samples': (6.0, 1.0)},
              NestedMap(w=w))

  Step(tf.constant(2.0), tf.constant(1.0))
  assert float(w.numpy()) == 0.0
  assert float(lrn.optimizer.window_weight.numpy()) == 6.0
  Step(tf.constant(4.0), tf.constant(3.0))
  np.testing.assert_allclose(w.numpy(), -3.5, rtol=1e-6)


def test_checkpoint_mid_window_resumes_bit_identically(tmp_path):
  # Saved after step 7 (updates after steps 2, 4, 6; weight 1 pending).
  case = _Case('dynacc_adam')
  full, _, _ = _Run(case)
  task, lrn, step = _Build(case)
  for t in range(7):
    step(_Grads(case, t), case['weights'][t])
  assert float(lrn.optimizer.window_weight.numpy()) == 1.0
  assert np.abs(lrn.optimizer.GetAccumulator(task.vars.conv).numpy()).max() > 0
  path = tf.train.Checkpoint(task=task, learner=lrn).save(
      str(tmp_path / 'ckpt'))
  built = _Build(case)
  tf.train.Checkpoint(task=built[0], learner=built[1]).restore(
      path).assert_consumed()
  resumed, updates, _ = _Run(case, first=7, built=built)
  assert updates == case['param_update_step'][7:]
  for a, b in zip(resumed, full[7:]):
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize('value', [None, 0, -1.0, float('nan'), True])
def test_min_accum_weight_refused_in_one_line(value):
  p = optimizers.DynamicAccumulator.Params().Set(min_accum_weight=value)
  with pytest.raises(ValueError, match='min_accum_weight') as e:
    p.Instantiate()
  assert '\n' not in str(e.value) and 'e.g. 256' in str(e.value)


def test_weight_key_not_a_str_refused():
  p = optimizers.DynamicAccumulator.Params().Set(min_accum_weight=8,
                                                 weight_key=3)
  with pytest.raises(ValueError, match=r'weight_key=3 is not a str'):
    p.Instantiate()


def test_weight_key_naming_no_metric_refused_before_any_write():
  w = tf.Variable(1.0, name='w')
  lrn = Learner.Params().Set(
      name='loss', learning_rate=1.0,
      optimizer=optimizers.DynamicAccumulator.Params().Set(
          optimizer=optimizers.SGD.Params(), min_accum_weight=8,
          weight_key='num_samples')).Instantiate()
  lrn.Bind(NestedMap(w=w))
  with learner_lib.GradientTape():
    loss = w * 2.0
  with pytest.raises(ValueError, match=r"weight_key='num_samples' is not a "
                     r"metric; metrics: \['loss'\]") as e:
    lrn.Apply({'loss': (loss, 1.0)}, NestedMap(w=w))
  assert '\n' not in str(e.value)
  assert float(w.numpy()) == 1.0
  assert float(lrn.optimizer.window_weight.numpy()) == 0.0


def test_weight_key_without_metrics_refused():
  w = tf.Variable(1.0, name='w')
  opt = optimizers.DynamicAccumulator.Params().Set(
      optimizer=optimizers.SGD.Params(), min_accum_weight=8,
      weight_key='num_samples').Instantiate().Bind([w])
  with pytest.raises(ValueError, match='only Learner.Apply'):
    opt.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant(1.0))))


def test_standalone_apply_counts_the_weight_given():
  # Without a learner: Apply(lr, var_grads, weight); min 3: the third call.
  w = tf.Variable(0.0, name='w')
  opt = optimizers.DynamicAccumulator.Params().Set(
      optimizer=optimizers.SGD.Params(), min_accum_weight=3).Instantiate()
  opt.Bind([w])
  for g in (1.0, 2.0, 6.0):
    opt.Apply(0.5, NestedMap(w=VarGrad(w, tf.constant(g))), weight=1.0)
  np.testing.assert_allclose(w.numpy(), -0.5 * 3.0, rtol=1e-6)


def test_inside_another_wrapper_refused():
  p = optimizers.Ema.Params().Set(
      optimizer=optimizers.DynamicAccumulator.Params().Set(
          min_accum_weight=8))
  with pytest.raises(ValueError, match='outermost'):
    p.Instantiate()


def test_lingvo_defaults_adam_inside_and_min_weight_unset():
  p = optimizers.DynamicAccumulator.Params()
  assert p.optimizer.cls is optimizers.Adam
  assert p.min_accum_weight is None and p.weight_key == ''
  assert 'num_batches' not in p and 'num_batches_schedule' not in p
  assert optimizers.DynamicAccumulator.MicroBatchesPerUpdateOf(p) == 1


def test_factory_name_and_params_text_round_trip():
  fn = factory.get_optimizer_wrapper_fn(
      'dynamic_accumulator',
      factory.get_optimizer_fn('momentum', learning_rate=0.1, momentum=0.9),
      min_accum_weight=64, weight_key='num_samples', sync_on_apply=False)
  p = fn.Params()
  assert p.cls is optimizers.DynamicAccumulator
  assert (p.min_accum_weight, p.weight_key, p.sync_on_apply) == (
      64, 'num_samples', False)
  assert p.optimizer.cls is optimizers.Momentum and p.optimizer.alpha == 0.9
  assert fn.learning_rate == 0.1
  lp = Learner.Params().Set(optimizer_fn=fn)
  back = Learner.Params()
  back.FromText(lp.ToText())
  assert back.optimizer_fn == fn
  assert back.optimizer_fn.Params() == p
  q = optimizers.DynamicAccumulator.Params().Set(
      optimizer=optimizers.Momentum.Params(), min_accum_weight=12.5,
      weight_key='num_samples')
  q2 = optimizers.DynamicAccumulator.Params()
  q2.FromText(q.ToText())
  assert q2 == q and q2.optimizer.cls is optimizers.Momentum
  with pytest.raises(ValueError, match='unknown keyword argument'):
    factory.get_optimizer_wrapper_fn('dynamic_accumulator',
                                     optimizers.SGD.Params(), num_batches=2)
