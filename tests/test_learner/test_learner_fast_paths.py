"""The Learner's fast paths (issue 8) keep its semantics exactly.

Covers: `var_norm_metrics`, `BaseOptimizer.ApplyScaled` (the clip scale
folded into SGD's kernel, materialised elsewhere), the fused accumulation
micro-step and the applying step that folds 1 / sum(weight) into the clip
scale, checked against numpy; and that Learner.Apply is not converted by
AutoGraph.
"""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner.optimizers import base as base_optimizer
from learner import optimizers
from learner.optimizers.wrappers import accumulation
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.learner import Learner
from learner.optimizers.var_grad import VarGrad
from params import BaseLayer
from params import NestedMap

W0 = {'a': np.array([1.0, -2.0], np.float32),
      'b': np.array([[0.5, 0.25], [-1.0, 3.0]], np.float32)}
# Linear loss sum(c_k * w_k): the gradient of each variable is c_k.
COEF = {'a': np.array([3.0, -4.0], np.float32),
        'b': np.array([[1.0, 2.0], [0.0, -2.0]], np.float32)}


class TwoVars(BaseLayer):
  """Variables a (2,) and b (2, 2) from W0."""

  def __init__(self, params):
    super().__init__(params)
    for k, v in W0.items():
      self.CreateVariable(k, list(v.shape), init=v)


def MakeTask():
  return TwoVars.Params().Set(name='task').Instantiate()


def Loss(theta, mult):
  return (mult * tf.reduce_sum(COEF['a'] * theta.a) +
          mult * tf.reduce_sum(COEF['b'] * theta.b))


def MakeLearner(opt, **kw):
  p = Learner.Params().Set(name='loss', learning_rate=0.5, optimizer=opt)
  p.Set(**kw)
  return p.Instantiate()


def Values(task):
  return {k: v.numpy() for k, v in task.vars.FlattenItems()}


def NumpyMomentum(grads_per_update, lr=0.5, alpha=0.9):
  """Lingvo/TF1 momentum: v <- alpha v + g; w <- w - lr v."""
  w = {k: v.copy() for k, v in W0.items()}
  v = {k: np.zeros_like(x) for k, x in W0.items()}
  for g in grads_per_update:
    for k in w:
      v[k] = alpha * v[k] + g[k]
      w[k] = w[k] - lr * v[k]
  return w, v


def Clip(g, c):
  norm = np.sqrt(sum(np.sum(x.astype(np.float64) ** 2) for x in g.values()))
  s = c / max(norm, c)
  return {k: x * s for k, x in g.items()}, norm


# ---- var_norm_metrics ----------------------------------------------------


def test_var_norm_metrics_false_leaves_only_var_norm_out():
  results = []
  for flag in (True, False):
    task = MakeTask()
    lrn = MakeLearner(optimizers.Momentum.Params(), var_norm_metrics=flag,
                      clip_gradient_norm_to_value=1.0)
    lrn.Bind(task.vars)
    with learner_lib.GradientTape():
      loss = Loss(task.theta, 1.0)
    _, _, m = lrn.Apply({'loss': (loss, 1.0)}, task.vars)
    results.append((Values(task), m))
  (w_on, m_on), (w_off, m_off) = results
  expected_var_norm = np.sqrt(sum(np.sum(v ** 2) for v in W0.values()))
  np.testing.assert_allclose(float(m_on['var_norm/all'][0]),
                             expected_var_norm, rtol=1e-6)
  assert 'var_norm/all' not in m_off
  assert set(m_on) - set(m_off) == {'var_norm/all'}
  for k in W0:
    np.testing.assert_array_equal(w_on[k], w_off[k])
  for k in m_off:
    np.testing.assert_allclose(float(m_on[k][0]), float(m_off[k][0]))


def test_per_variable_norms_still_reported_without_var_norm_all():
  task = MakeTask()
  lrn = MakeLearner(base_optimizer.SGD.Params(), var_norm_metrics=False,
                    per_variable_norm_metrics=True)
  lrn.Bind(task.vars)
  with learner_lib.GradientTape():
    loss = Loss(task.theta, 1.0)
  _, _, m = lrn.Apply({'loss': (loss, 1.0)}, task.vars)
  assert 'var_norm/all' not in m
  np.testing.assert_allclose(float(m['var_norm/task/b'][0]),
                             np.sqrt(np.sum(W0['b'] ** 2)), rtol=1e-6)
  np.testing.assert_allclose(float(m['grad_norm/task/a'][0]), 5.0, rtol=1e-6)


# ---- ApplyScaled ---------------------------------------------------------


def test_sgd_apply_scaled_by_hand():
  # w = [1, -2], g = [3, -4], lr 0.5, scale 0.25: w - 0.125 g.
  w = tf.Variable([1.0, -2.0], name='w')
  opt = base_optimizer.SGD.Params().Set(name='sgd').Instantiate()
  opt.Bind([w])
  opt.ApplyScaled(tf.constant(0.5), NestedMap(w=VarGrad(w, tf.constant(
      [3.0, -4.0]))), tf.constant(0.25))
  np.testing.assert_allclose(w.numpy(), [0.625, -1.5], rtol=1e-7)
  assert int(opt.num_updates.numpy()) == 1


@pytest.mark.parametrize('opt_params', [
    optimizers.Momentum.Params(),
    optimizers.Adam.Params(),
    base_optimizer.SGD.Params().Set(decoupled_weight_decay=0.1),
], ids=['momentum', 'adam', 'sgd_decay'])
def test_apply_scaled_equals_apply_of_scaled_grads(opt_params):
  g = [np.array([3.0, -4.0], np.float32), np.array([0.5, 2.0], np.float32)]
  out = []
  for scaled in (True, False):
    w = tf.Variable([1.0, -2.0], name='w')
    opt = opt_params.Copy().Set(name='opt').Instantiate()
    opt.Bind([w])
    for grad in g:
      if scaled:
        opt.ApplyScaled(0.5, NestedMap(w=VarGrad(w, tf.constant(grad))),
                        tf.constant(0.3))
      else:
        opt.Apply(0.5, NestedMap(w=VarGrad(w, tf.constant(0.3 * grad))))
    slots = {k: s.numpy() for k, s in opt.GetSlots(w).items()}
    if 'momentum' in slots:  # The slot holds v / s; compare v itself.
      slots['momentum'] = opt.Velocity(w).numpy()
    out.append((w.numpy(), slots))
  np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-6)
  for k in out[0][1]:
    np.testing.assert_allclose(out[0][1][k], out[1][1][k], rtol=1e-6)


def test_apply_scaled_on_a_wrapper_scales_before_its_apply():
  # Ema overrides Apply: ApplyScaled hands it the scaled gradient. SGD lr
  # 0.5, g [3, -4], scale 0.2: w = [1, -2] - 0.1 g = [0.7, -1.6].
  from learner.optimizers.wrappers import ema  # pylint: disable=g-import-not-at-top
  w = tf.Variable([1.0, -2.0], name='w')
  opt = ema.Ema.Params().Set(
      name='ema', optimizer=base_optimizer.SGD.Params()).Instantiate()
  opt.Bind([w])
  opt.ApplyScaled(0.5, NestedMap(w=VarGrad(w, tf.constant([3.0, -4.0]))),
                  tf.constant(0.2))
  np.testing.assert_allclose(w.numpy(), [0.7, -1.6], rtol=1e-6)


# ---- clipping through the Learner, against numpy -------------------------


def test_momentum_global_clip_in_function_matches_numpy():
  task = MakeTask()
  lrn = MakeLearner(optimizers.Momentum.Params(),
                    clip_gradient_norm_to_value=2.0)
  lrn.Bind(task.vars)

  @tf.function(autograph=False)
  def Step(mult):
    _, _, m = lrn.Apply({'loss': (Loss(task.theta, mult), 1.0)}, task.vars)
    return m['grad_norm/all'][0], m['grad_scale_all'][0]

  mults = [1.0, 0.1, 2.0]
  updates = []
  for mult in mults:
    g, norm = Clip({k: mult * c for k, c in COEF.items()}, 2.0)
    updates.append(g)
    got_norm, got_scale = Step(tf.constant(mult))
    np.testing.assert_allclose(float(got_norm), norm, rtol=1e-6)
    np.testing.assert_allclose(float(got_scale), 2.0 / max(norm, 2.0),
                               rtol=1e-6)
  w, v = NumpyMomentum(updates)
  for k in W0:
    np.testing.assert_allclose(task.vars[k].numpy(), w[k], rtol=1e-5)
    np.testing.assert_allclose(
        lrn.optimizer.Velocity(task.vars[k]).numpy(), v[k],
        rtol=1e-5)


def test_momentum_fold_slot_holds_v_over_s_and_fold_off_keeps_v():
  # Clip 1 on g = COEF (norm sqrt(34)): c = 1/sqrt(34). Folded, the slot is
  # v / c = g and grad_scale_state = c; unfolded the slot is v = c g.
  c = 1.0 / np.sqrt(34.0)
  for fold in (True, False):
    task = MakeTask()
    lrn = MakeLearner(optimizers.Momentum.Params().Set(fold_grad_scale=fold),
                      clip_gradient_norm_to_value=1.0)
    lrn.Bind(task.vars)
    with learner_lib.GradientTape():
      loss = Loss(task.theta, 1.0)
    lrn.Apply({'loss': (loss, 1.0)}, task.vars)
    opt = lrn.optimizer
    slot = opt.GetSlots(task.vars.a)['momentum'].numpy()
    np.testing.assert_allclose(opt.Velocity(task.vars.a).numpy(),
                               c * COEF['a'], rtol=1e-6)
    np.testing.assert_allclose(task.vars.a.numpy(),
                               W0['a'] - 0.5 * c * COEF['a'], rtol=1e-6)
    if fold:
      np.testing.assert_allclose(slot, COEF['a'], rtol=1e-6)
      np.testing.assert_allclose(opt.grad_scale_state.numpy(), c, rtol=1e-6)
    else:
      np.testing.assert_allclose(slot, c * COEF['a'], rtol=1e-6)
      assert float(opt.grad_scale_state.numpy()) == 1.0


def test_momentum_partial_update_after_a_fold_keeps_the_other_slots():
  # Fold on both variables (s = 0.5), then a step on `a` alone: s stays,
  # a's gradient is multiplied by c / s, b's velocity is untouched.
  a = tf.Variable([1.0], name='a')
  b = tf.Variable([2.0], name='b')
  opt = optimizers.Momentum.Params().Set(name='m', alpha=0.5).Instantiate()
  opt.Bind([a, b])
  g = tf.constant([1.0])
  opt.ApplyScaled(1.0, NestedMap(a=VarGrad(a, g), b=VarGrad(b, g)),
                  tf.constant(0.5))
  # v_a = v_b = 0.5; a = 0.5, b = 1.5.
  opt.ApplyScaled(1.0, NestedMap(a=VarGrad(a, g)), tf.constant(0.25))
  # v_a = 0.5 * 0.5 + 0.25 = 0.5; a = 0.5 - 0.5 = 0.
  np.testing.assert_allclose(opt.Velocity(a).numpy(), [0.5], rtol=1e-6)
  np.testing.assert_allclose(a.numpy(), [0.0], atol=1e-6)
  np.testing.assert_allclose(opt.Velocity(b).numpy(), [0.5], rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), [1.5], rtol=1e-6)
  assert float(opt.grad_scale_state.numpy()) == 0.5
  # A full step folds again: v = 0.5 * 0.5 + 2 * 1 = 2.25 for both.
  opt.ApplyScaled(1.0, NestedMap(a=VarGrad(a, g), b=VarGrad(b, g)),
                  tf.constant(2.0))
  np.testing.assert_allclose(opt.Velocity(a).numpy(), [2.25], rtol=1e-6)
  np.testing.assert_allclose(opt.Velocity(b).numpy(), [2.25], rtol=1e-6)
  np.testing.assert_allclose(a.numpy(), [-2.25], rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), [-0.75], rtol=1e-6)


# ---- accumulation ----------------------------------------------------------


def _AccumLearner(inner, **kw):
  return MakeLearner(GradientAccumulation.Params().Set(
      optimizer=inner, num_batches=2), **kw)


@pytest.mark.parametrize('kw,mode', [
    (dict(clip_gradient_norm_to_value=1.0), 'global'),
    (dict(clip_gradient_single_norm_to_value=2.0,
          per_variable_norm_metrics=True), 'single'),
    (dict(clip_gradient_norm_to_value=1.0, clip_gradient_value=0.3), 'value'),
    (dict(l2_regularizer_weight=0.1, clip_gradient_norm_to_value=1.0), 'l2'),
    (dict(), 'none'),
], ids=['global', 'single', 'value', 'l2', 'none'])
def test_c_accum_weighted_window_with_clipping_matches_numpy(kw, mode):
  # Micro-batches with gradient multipliers 1 and 3 and weights 1 and 3:
  # the window gradient is (1*1 + 3*3) / 4 = 2.5 times COEF.
  task = MakeTask()
  lrn = _AccumLearner(optimizers.Momentum.Params(), **kw)
  lrn.Bind(task.vars)

  @tf.function(autograph=False)
  def Step(mult, weight):
    _, _, m = lrn.Apply({'loss': (Loss(task.theta, mult), weight)},
                        task.vars)
    return m

  Step(tf.constant(1.0), tf.constant(1.0))
  for k in W0:
    np.testing.assert_array_equal(task.vars[k].numpy(), W0[k])
  m = Step(tf.constant(3.0), tf.constant(3.0))
  g = {k: 2.5 * c for k, c in COEF.items()}
  if mode == 'l2':
    g = {k: g[k] + 0.1 * W0[k] for k in g}
  norm = np.sqrt(sum(np.sum(x.astype(np.float64) ** 2) for x in g.values()))
  np.testing.assert_allclose(float(m['grad_norm/all'][0]), norm, rtol=1e-6)
  if mode in ('global', 'value', 'l2'):
    g, _ = Clip(g, 1.0)
  if mode == 'value':
    g = {k: np.clip(x, -0.3, 0.3) for k, x in g.items()}
  if mode == 'single':
    g = {k: x * 2.0 / max(np.sqrt(np.sum(x ** 2)), 2.0) for k, x in g.items()}
    np.testing.assert_allclose(float(m['grad_norm/task/b'][0]),
                               2.5 * np.sqrt(np.sum(COEF['b'] ** 2)),
                               rtol=1e-6)
  clipped = np.sqrt(sum(np.sum(x ** 2) for x in g.values()))
  np.testing.assert_allclose(float(m['grad_norm/clipped'][0]), clipped,
                             rtol=1e-5)
  w, v = NumpyMomentum([g])
  for k in W0:
    np.testing.assert_allclose(task.vars[k].numpy(), w[k], rtol=1e-5)
    np.testing.assert_allclose(
        lrn.optimizer.inner.Velocity(task.vars[k]).numpy(), v[k],
        rtol=1e-5)
    np.testing.assert_array_equal(
        lrn.optimizer.GetAccumulator(task.vars[k]).numpy(), 0.0)


def test_accumulate_scaled_adds_weight_times_grad_and_drops_non_finite():
  w = tf.Variable([1.0, 2.0], name='w')
  acc = GradientAccumulation.Params().Set(
      name='acc', optimizer=base_optimizer.SGD.Params(),
      num_batches=4).Instantiate()
  acc.Bind([w])
  acc.AccumulateScaled([(w, tf.constant([1.0, -2.0]))], 3.0,
                       tf.constant(True))
  acc.AccumulateScaled([(w, tf.constant([np.nan, 1.0]))], 5.0,
                       tf.constant(False))
  acc.AccumulateScaled([(w, tf.constant([0.5, 0.5]))], 2.0, tf.constant(True))
  np.testing.assert_allclose(acc.GetAccumulator(w).numpy(), [4.0, -5.0])
  assert float(acc.accumulated_weight.numpy()) == 5.0
  assert int(acc.num_dropped_microbatches.numpy()) == 1
  assert int(acc.micro_step.numpy()) == 3


def test_standalone_accumulation_divides_by_the_weight_sum():
  # Weights 1 and 3, grads 2 and 6 (weight*grad 2 + 18 = 20, / 4 = 5);
  # SGD lr 0.1: w = 1 - 0.5.
  w = tf.Variable(1.0, name='w')
  acc = GradientAccumulation.Params().Set(
      name='acc', optimizer=base_optimizer.SGD.Params(),
      num_batches=2).Instantiate()
  acc.Bind([w])
  acc.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant(2.0))), weight=1.0)
  acc.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant(6.0))), weight=3.0)
  np.testing.assert_allclose(w.numpy(), 0.5, rtol=1e-6)


# ---- AutoGraph ---------------------------------------------------------------


def test_apply_is_not_converted_by_autograph():
  # Inside tf.function(autograph=True) the learner's code (and a
  # gradient_adjuster it calls) runs unconverted: Python `if` on a tensor
  # is refused, so tracing never pays for AutoGraph's conversion.
  task = MakeTask()
  lrn = MakeLearner(base_optimizer.SGD.Params())
  lrn.Bind(task.vars)

  def Adjuster(vgs):
    if tf.reduce_sum(vgs.a.grad) > 0:  # Python control flow on a tensor.
      return vgs
    return vgs

  @tf.function(autograph=True)
  def Step():
    return lrn.Apply({'loss': (Loss(task.theta, 1.0), 1.0)}, task.vars,
                     gradient_adjuster=Adjuster)[2]['grad_norm/all'][0]

  with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
    Step()


def test_cond_as_call_runs_the_taken_branch_and_is_not_lowered():
  v = tf.Variable(0.0, name='v')

  def Run(pred):
    out = accumulation.CondAsCall(
        pred, lambda: v.assign_add(1.0) * 2.0, lambda: v.assign_add(10.0))
    return out

  fn = tf.function(Run, autograph=False)
  assert float(fn(tf.constant(True))) == 2.0
  assert float(fn(tf.constant(False))) == 11.0
  assert float(v.numpy()) == 11.0
  graph = fn.get_concrete_function(tf.constant(True)).graph
  ifs = [op for op in graph.get_operations()
         if op.type in ('If', 'StatelessIf')]
  assert len(ifs) == 1
  assert ifs[0].get_attr('_lower_using_switch_merge') is False
