"""Learner acceptance cases of docs/cases/learner.md (ids in the test names)."""

import logging as py_logging

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner.optimizers import base as base_optimizer
from learner import gradient_combiner
from learner import grad_norm_tracker
from learner import optimizers
from learner.learner import GlobalNorm
from learner.learner import Learner
from params import BaseLayer
from schedules import PiecewiseConstantSchedule


class VarLayer(BaseLayer):
  """A layer with the given variables; FProp is a Python function of theta."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'task'
    p.Define('variables', {}, '{name: (initial value, trainable)}.')
    p.Define('loss_fn', None, 'theta -> metrics.')
    return p

  def __init__(self, params):
    super().__init__(params)
    for name, (value, trainable) in self.params.variables.items():
      self.CreateVariable(name, np.shape(value), init=np.array(value,
                                                              np.float32),
                          trainable=trainable)

  def FProp(self, theta):
    return self.params.loss_fn(theta)


def MakeTask(variables, loss_fn, fprop_dtype=None):
  return VarLayer.Params().Set(variables=variables, loss_fn=loss_fn,
                               fprop_dtype=fprop_dtype).Instantiate()


def HelloTask(loss_fn=None):
  """The cases' default layer: hello, world, moon trainable, mars not."""
  loss_fn = loss_fn or (lambda th: {'loss': (th.hello - 2. * th.world, 1.0)})
  return MakeTask({'hello': (0., True), 'world': (0., True),
                   'moon': (0., True), 'mars': (0., False)}, loss_fn)


def MakeLearner(**kw):
  p = Learner.Params().Set(name='loss', learning_rate=0.1,
                           optimizer=base_optimizer.SGD.Params())
  p.Set(**kw)
  return p.Instantiate()


def EagerStep(task, lrn, **kw):
  with learner_lib.GradientTape():
    metrics = task.FProp(task.theta)
  return lrn.Apply(metrics, task.vars, **kw)


def Values(task):
  return {k: v.numpy() for k, v in task.vars.FlattenItems()}


def Num(metric):
  return float(metric[0].numpy())


# ---- L cases ---------------------------------------------------------------


def test_l1_gradients_update_and_warning(caplog):
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)
  with caplog.at_level(py_logging.WARNING):
    losses, _, _ = EagerStep(task, lrn)
    EagerStep(task, lrn)  # The warning comes once.
  # Two steps of grads (1, -2) with lr 0.1.
  np.testing.assert_allclose(
      [Values(task)[k] for k in ('hello', 'world', 'moon', 'mars')],
      [-0.2, 0.4, 0.0, 0.0], rtol=1e-6)
  np.testing.assert_allclose(losses[0].numpy(), 0.0)
  warnings = [r.getMessage() for r in caplog.records if 'moon' in
              r.getMessage()]
  assert len(warnings) == 1 and 'task/moon' in warnings[0]


def test_l1_single_step_values():
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)
  losses, _, _ = EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world'], v['moon'], v['mars']],
                             [-0.1, 0.2, 0.0, 0.0], rtol=1e-6)
  assert len(losses) == 1


def test_l2_two_losses_with_gradient_sum():
  task = HelloTask(lambda th: {'main_loss': (th.hello, 1.0),
                               'aux_loss': (-2. * th.world, 1.0)})
  lrn = MakeLearner(loss_name=('main_loss', 'aux_loss'),
                    gradient_combiner=gradient_combiner.GradientSum.Params())
  lrn.Bind(task.vars)
  losses, _, _ = EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world'], v['moon']],
                             [-0.1, 0.2, 0.0], rtol=1e-6)
  assert len(losses) == 2


def test_l2_several_losses_need_a_combiner():
  with pytest.raises(ValueError, match='gradient_combiner'):
    MakeLearner(loss_name=('main_loss', 'aux_loss'))


def test_l3_bprop_variable_filter():
  task, lrn = HelloTask(), MakeLearner(bprop_variable_filter='ello')
  lrn.Bind(task.vars)
  EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world']], [-0.1, 0.0])


def test_l4_filter_and_exclusion():
  task = HelloTask()
  lrn = MakeLearner(bprop_variable_filter='o', bprop_variable_exclusion='ello')
  assert [x.name for x in lrn.GetTrainableVariables(task.vars).Flatten()] == [
      'task/moon:0', 'task/world:0']
  lrn.Bind(task.vars)
  EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world']], [0.0, 0.2])


def test_l6_eval_metrics():
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  assert Num(m['learning_rate']) == pytest.approx(0.1)
  assert Num(m['lr_schedule']) == pytest.approx(1.0)
  assert Num(m['grad_norm/all']) == pytest.approx(2.236068, rel=1e-6)
  assert Num(m['var_norm/all']) == pytest.approx(0.0)
  assert Num(m['grad_scale_all']) == pytest.approx(1.0)
  assert Num(m['has_nan_or_inf']) == 0.0
  assert Num(m['num_updates']) == 1.0 and Num(m['num_skipped_steps']) == 0.0
  assert all(float(w) == 1.0 for _, w in m.values())


def test_l8_grad_norm_to_clip_to_zero_skips():
  task, lrn = HelloTask(), MakeLearner(grad_norm_to_clip_to_zero=2.0)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  assert all(x == 0.0 for x in Values(task).values())
  assert Num(m['num_skipped_steps']) == 1.0 and Num(m['num_updates']) == 0.0
  assert int(lrn.num_skipped_steps.numpy()) == 1


def test_l8_grad_norm_below_limit_is_a_normal_step():
  task, lrn = HelloTask(), MakeLearner(grad_norm_to_clip_to_zero=3.0)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  assert Values(task)['hello'] == pytest.approx(-0.1)
  assert Num(m['num_skipped_steps']) == 0.0


def test_l9_single_norm_clipping():
  task = HelloTask()
  lrn = MakeLearner(clip_gradient_single_norm_to_value=1.0)
  lrn.Bind(task.vars)
  EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world']], [-0.1, 0.1], rtol=1e-6)


def test_l10_both_norm_clips_is_an_error():
  with pytest.raises(ValueError) as e:
    MakeLearner(clip_gradient_norm_to_value=1.0,
                clip_gradient_single_norm_to_value=1.0)
  assert 'clip_gradient_norm_to_value' in str(e.value)
  assert 'clip_gradient_single_norm_to_value' in str(e.value)


def test_l12_l1_regularizer():
  task = MakeTask({'a': (2., True), 'b': (-1., True)},
                  lambda th: {'loss': (3. * th.a + th.b, 1.0)})
  lrn = MakeLearner(l1_regularizer_weight=0.1, per_variable_norm_metrics=True)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  assert Num(m['l1_loss']) == pytest.approx(0.3, rel=1e-6)
  # Gradients (3.1, 0.9): their norms are reported per variable.
  assert Num(m['grad_norm/task/a']) == pytest.approx(3.1, rel=1e-6)
  assert Num(m['grad_norm/task/b']) == pytest.approx(0.9, rel=1e-6)
  v = Values(task)
  np.testing.assert_allclose([v['a'], v['b']], [1.69, -1.09], rtol=1e-6)


def test_l12_l2_regularizer_and_skip_1d():
  # l2 0.5: grads (3 + 0.5*2, 1 + 0.5*(-1)) = (4, 0.5); l2_loss
  # = 0.5*0.5*(4+1) = 1.25. The rank-1 `c` is skipped: grad stays 1.
  task = MakeTask({'a': (2., True), 'b': (-1., True), 'c': ([4.], True)},
                  lambda th: {'loss': (3. * th.a + th.b + th.c[0], 1.0)})
  lrn = MakeLearner(l2_regularizer_weight=0.5, skip_lp_1d_vectors=True)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  assert Num(m['l2_loss']) == pytest.approx(1.25, rel=1e-6)
  v = Values(task)
  np.testing.assert_allclose([v['a'], v['b'], v['c'][0]], [1.6, -1.05, 3.9],
                             rtol=1e-6)


def test_l15_schedule_on_first_update():
  task = HelloTask()
  lrn = MakeLearner(lr_schedule=PiecewiseConstantSchedule.Params().Set(
      boundaries=[0], values=[1.0, 0.5]))
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  assert Num(m['lr_schedule']) == pytest.approx(0.5)
  assert Num(m['learning_rate']) == pytest.approx(0.05)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world']], [-0.05, 0.1], rtol=1e-6)


def test_l16_missing_loss_before_any_work():
  task = HelloTask(lambda th: {'l': (th.hello, 1.0)})
  lrn = MakeLearner(loss_name='missing')
  lrn.Bind(task.vars)
  # No tape at all: the loss check comes before any gradient is asked for.
  metrics = task.FProp(task.theta)
  with pytest.raises(ValueError) as e:
    lrn.Apply(metrics, task.vars)
  assert "'missing'" in str(e.value) and "['l']" in str(e.value)
  assert all(x == 0.0 for x in Values(task).values())
  assert int(lrn.num_updates.numpy()) == 0


def test_l18_gradient_mask():
  task = MakeTask({k: (0., True) for k in 'abcd'},
                  lambda th: {'loss': (th.a + th.b + th.c + th.d, 1.0)})
  lrn = MakeLearner()
  lrn.Bind(task.vars)
  mask = {'task/a': 0.0, 'task/b:0': 0.0, 'task/c': 1.0, 'task/d': 1.0}
  _, _, m = EagerStep(task, lrn, gradient_mask=mask)
  v = Values(task)
  np.testing.assert_allclose([v[k] for k in 'abcd'], [0, 0, -0.1, -0.1],
                             rtol=1e-6)
  assert Num(m['grad_norm/all']) == pytest.approx(np.sqrt(2.0), rel=1e-6)


def _GradsTask(w0, b0):
  """`w` (shape [2]) and `b` (shape [1]); loss 0.5*|w|^2-ish gradient g."""
  return MakeTask({'w': (w0, True), 'b': (b0, True)}, None)


@pytest.mark.parametrize('clip,expected', [
    ('global', ([0.301511, 0.301511], [0.904534])),
    ('single', ([0.5, 0.5], [1.0])),
])
def test_p5_clipping(clip, expected):
  # P5: gradients [0.5, 0.5] and [1.5]; SGD lr 1 from zero shows -grad.
  task = MakeTask({'u': ([0., 0.], True), 'v': ([0.], True)},
                  lambda th: {'loss': (0.5 * th.u[0] + 0.5 * th.u[1] +
                                       1.5 * th.v[0], 1.0)})
  kw = ({'clip_gradient_norm_to_value': 1.0} if clip == 'global' else
        {'clip_gradient_single_norm_to_value': 1.0})
  lrn = MakeLearner(learning_rate=1.0, **kw)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose(-v['u'], expected[0], rtol=1e-5)
  np.testing.assert_allclose(-v['v'], expected[1], rtol=1e-5)
  if clip == 'global':
    assert Num(m['grad_scale_all']) == pytest.approx(1 / 1.658312, rel=1e-5)
    assert Num(m['grad_norm/clipped']) == pytest.approx(1.0, rel=1e-5)


def test_p5_zero_gradients_stay_zero():
  task = MakeTask({'u': ([0., 0.], True)},
                  lambda th: {'loss': (0.0 * th.u[0], 1.0)})
  lrn = MakeLearner(learning_rate=1.0, clip_gradient_norm_to_value=1.0)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  np.testing.assert_array_equal(Values(task)['u'], [0., 0.])
  assert Num(m['has_nan_or_inf']) == 0.0


def test_clip_gradient_value():
  # Elementwise clip 1.0 of gradients (3, -0.5): applied (1, -0.5).
  task = MakeTask({'a': (0., True), 'b': (0., True)},
                  lambda th: {'loss': (3. * th.a - 0.5 * th.b, 1.0)})
  lrn = MakeLearner(learning_rate=1.0, clip_gradient_value=1.0)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose([v['a'], v['b']], [-1.0, 0.5], rtol=1e-6)
  assert Num(m['grad_norm/clipped']) == pytest.approx(np.sqrt(1.25), rel=1e-6)


# ---- C cases -----------------------------------------------------------------


@pytest.mark.parametrize('grad,clip,norm', [([3., 4.], 5.0, 5.0),
                                            ([0., 0.], 1.0, 0.0),
                                            ([3., 4.], 0.0, 5.0)])
def test_c_clip_at_threshold(grad, clip, norm):
  task = MakeTask({'w': ([0., 0.], True)},
                  lambda th: {'loss': (grad[0] * th.w[0] + grad[1] * th.w[1],
                                       1.0)})
  lrn = MakeLearner(learning_rate=1.0, clip_gradient_norm_to_value=clip)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  assert Num(m['grad_scale_all']) == 1.0  # Exactly.
  assert Num(m['grad_norm/all']) == pytest.approx(norm)
  assert Num(m['has_nan_or_inf']) == 0.0
  np.testing.assert_allclose(Values(task)['w'], [-grad[0], -grad[1]])


@pytest.mark.parametrize('key', ['clip_gradient_norm_to_value',
                                 'clip_gradient_single_norm_to_value',
                                 'clip_gradient_value',
                                 'grad_norm_to_clip_to_zero'])
def test_c_clip_at_threshold_negative_is_an_error(key):
  with pytest.raises(ValueError, match=key):
    MakeLearner(**{key: -1.0})


def test_c_none_grads():
  task = MakeTask({'w': ([0., 0.], True), 'b': ([7.], True)},
                  lambda th: {'loss': (3. * th.w[0] + 4. * th.w[1], 1.0)})
  lrn = MakeLearner(
      learning_rate=1.0, clip_gradient_norm_to_value=1.0,
      optimizer=optimizers.Momentum.Params().Set(alpha=0.9))
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  assert Num(m['grad_norm/all']) == pytest.approx(5.0)
  v = Values(task)
  np.testing.assert_allclose(v['w'], [-0.6, -0.8], rtol=1e-6)
  np.testing.assert_array_equal(v['b'], [7.0])
  b_slots = lrn.optimizer.GetSlots(task.vars.b)
  assert all(np.all(s.numpy() == 0) for s in b_slots.values())
  assert float(GlobalNorm([None, None]).numpy()) == 0.0


def test_c_disconnected(caplog):
  task = MakeTask({'w': ([1.], True), 'u': ([1.], True)},
                  lambda th: {'loss': (2. * th.w[0], 1.0)})
  lrn = MakeLearner()
  lrn.Bind(task.vars)
  with caplog.at_level(py_logging.WARNING):
    _, _, m = EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose([v['w'][0], v['u'][0]], [0.8, 1.0], rtol=1e-6)
  assert Num(m['grad_norm/all']) == pytest.approx(2.0)
  assert sum('task/u' in r.getMessage() for r in caplog.records) == 1


def test_c_disconnected_filter_selects_only_unused_variable():
  task = MakeTask({'w': ([1.], True), 'u': ([1.], True)},
                  lambda th: {'loss': (2. * th.w[0], 1.0)})
  lrn = MakeLearner(bprop_variable_filter='u$')
  lrn.Bind(task.vars)
  with pytest.raises(ValueError) as e:
    EagerStep(task, lrn)
  msg = str(e.value)
  assert 'task/u' in msg and "'u$'" in msg and 'depends on none' in msg


def test_c_eager_needs_tape():
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)
  learner_lib.gradient_tape.ClearTape()
  metrics = task.FProp(task.theta)
  with pytest.raises(RuntimeError, match=r'learner\.GradientTape\(\)'):
    lrn.Apply(metrics, task.vars)

  @tf.function
  def Step():
    return lrn.Apply(task.FProp(task.theta), task.vars)[2]

  Step()  # No tape inside tf.function.
  assert Values(task)['hello'] == pytest.approx(-0.1)


def test_c_loss_scale_dynamic_float16():
  task = MakeTask({'w': (1., True)}, None, fprop_dtype=tf.float16)
  lrn = MakeLearner(loss_scale='dynamic')
  lrn.Bind(task.vars)

  def Step(c):
    with learner_lib.GradientTape():
      th = task.theta
      assert th.w.dtype == tf.float16
      metrics = {'loss': (th.w * tf.constant(c, tf.float16), 1.0)}
    return lrn.Apply(metrics, task.vars)[2]

  for _ in range(3):
    m = Step(1.0)
  assert float(task.vars.w.numpy()) == pytest.approx(0.7, rel=1e-6)
  assert Num(m['num_updates']) == 3.0
  assert Num(m['loss_scale']) == 32768.0
  m = Step(4.0)
  assert float(task.vars.w.numpy()) == pytest.approx(0.7, rel=1e-6)
  assert Num(m['loss_scale']) == 16384.0
  assert Num(m['num_updates']) == 3.0 and Num(m['num_skipped_steps']) == 1.0
  assert Num(m['has_nan_or_inf']) == 1.0


# ---- construction and binding errors ----------------------------------------


def test_c_not_callable_optimizer_fn():
  with pytest.raises(TypeError) as e:
    MakeLearner(optimizer=None, optimizer_fn=tf.keras.optimizers.Adam(0.1))
  assert 'optimizer_fn' in str(e.value)
  assert 'optimizer_fn=lambda: ' in str(e.value)


def test_no_learning_rate_anywhere_is_an_error():
  with pytest.raises(ValueError, match='learning_rate'):
    MakeLearner(learning_rate=None)


def test_global_step_schedule_needs_a_global_step():
  task = HelloTask()
  lrn = MakeLearner(lr_schedule_step='global_step')
  with pytest.raises(ValueError, match='global_step'):
    lrn.Bind(task.vars)


def test_global_step_schedule_reads_the_task_step():
  task = HelloTask()
  gs = tf.Variable(5, dtype=tf.int64)
  lrn = MakeLearner(lr_schedule_step='global_step',
                    lr_schedule=PiecewiseConstantSchedule.Params().Set(
                        boundaries=[3], values=[1.0, 0.5]))
  lrn.Bind(task.vars, global_step=gs)
  _, _, m = EagerStep(task, lrn)
  assert Num(m['lr_schedule']) == 0.5
  assert float(lrn.LearningRate().numpy()) == pytest.approx(0.05)


def test_apply_before_bind_and_on_unbound_variables():
  task, lrn = HelloTask(), MakeLearner()
  with pytest.raises(ValueError, match='Bind'):
    EagerStep(task, lrn)
  lrn.Bind(task.vars)
  other = MakeTask({'zeta': (0., True)},
                   lambda th: {'loss': (th.zeta, 1.0)})
  with pytest.raises(ValueError, match='zeta'):
    EagerStep(other, lrn)


def test_bind_with_no_selected_variable_names_the_filter():
  task = HelloTask()
  lrn = MakeLearner(bprop_variable_filter='nothing_matches')
  with pytest.raises(ValueError) as e:
    lrn.Bind(task.vars)
  assert 'nothing_matches' in str(e.value) and 'task/hello' in str(e.value)


@pytest.mark.parametrize('key,value', [('loss_scale', 'dynamc'),
                                       ('lr_schedule_step', 'steps'),
                                       ('loss_scale', -2.0)])
def test_bad_params_name_the_key(key, value):
  with pytest.raises(ValueError, match=key):
    MakeLearner(**{key: value})


def test_grad_norm_tracker_rejection_is_a_skipped_step():
  # Norms <= 10 are never rejected (cap >= log 11); after the warm-up (2
  # steps at decay 0.5) a norm of 1000 (log 1001 = 6.9) is rejected.
  task = MakeTask({'w': (0., True)}, None)
  lrn = MakeLearner(grad_norm_tracker=grad_norm_tracker.GradNormTracker.Params()
                    .Set(decay=0.5, clip_threshold=1.0,
                         grad_norm_clip_cap_min=10.0))
  lrn.Bind(task.vars)

  @tf.function
  def Step(c):
    return lrn.Apply({'loss': (c * task.theta.w, 1.0)}, task.vars)[2]

  for _ in range(5):
    Step(tf.constant(1.0))
  w_before = float(task.vars.w.numpy())
  m = Step(tf.constant(1000.0))
  assert float(task.vars.w.numpy()) == w_before
  assert Num(m['num_skipped_steps']) == 1.0
  assert int(lrn.grad_norm_tracker.total_rejections.numpy()) == 1


def test_compute_activation_gradients_agrees_with_full_loss():
  # Two layers: h = tanh(x W1), y = h W2, loss = sum(y^2); split at h.
  rng = np.random.RandomState(0)
  x = tf.constant(rng.randn(3, 4).astype(np.float32))
  task = MakeTask({'w1': (rng.randn(4, 5).astype(np.float32), True),
                   'w2': (rng.randn(5, 2).astype(np.float32), True)}, None)
  lrn = MakeLearner()
  lrn.Bind(task.vars)

  @tf.function
  def Grads():
    th = task.theta
    h = tf.tanh(tf.matmul(x, th.w1))
    loss = tf.reduce_sum(tf.square(tf.matmul(h, th.w2)))
    full = tf.gradients(loss, [task.vars.w1, task.vars.w2])
    dh = tf.gradients(loss, h)[0]
    stage = lrn.ComputeActivationGradients(h, dh, task.vars)
    return full, stage.w1.grad, 'w2' in stage

  full, staged_w1, has_w2 = Grads()
  np.testing.assert_allclose(staged_w1.numpy(), full[0].numpy(), rtol=1e-5)
  assert not bool(has_w2)  # h does not depend on w2.
  # Eagerly, through the tape.
  with learner_lib.GradientTape() as tape:
    th = task.theta
    h = tf.tanh(tf.matmul(x, th.w1))
    loss = tf.reduce_sum(tf.square(tf.matmul(h, th.w2)))
  dh = tape.gradient(loss, h)
  stage = lrn.ComputeActivationGradients(h, dh, task.vars)
  np.testing.assert_allclose(stage.w1.grad.numpy(), full[0].numpy(),
                             rtol=1e-5)


def test_run_functions_eagerly_uses_the_tape():
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)

  @tf.function
  def Step():
    with learner_lib.GradientTape():
      metrics = task.FProp(task.theta)
    return lrn.Apply(metrics, task.vars)[2]

  tf.config.run_functions_eagerly(True)
  try:
    Step()
  finally:
    tf.config.run_functions_eagerly(False)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world']], [-0.1, 0.2], rtol=1e-6)


def test_counters_are_checkpointed(tmp_path):
  # L8's skipped step, then a normal one: num_skipped_steps 1, num_updates 1
  # come back in a fresh learner restored before any step.
  task, lrn = HelloTask(), MakeLearner(grad_norm_to_clip_to_zero=2.0)
  lrn.Bind(task.vars)
  EagerStep(task, lrn)
  path = tf.train.Checkpoint(task=task, learner=lrn).save(
      str(tmp_path / 'ckpt'))
  task2, lrn2 = HelloTask(), MakeLearner(grad_norm_to_clip_to_zero=2.0)
  lrn2.Bind(task2.vars)
  tf.train.Checkpoint(task=task2, learner=lrn2).restore(path).assert_consumed()
  assert int(lrn2.num_skipped_steps.numpy()) == 1
  assert int(lrn2.num_updates.numpy()) == 0


def test_sparse_gradients_match_dense():
  # Embedding rows 0, 0, 2 looked up, loss = sum(rows * [1, 2]); global clip
  # 2.0. Row 0 gets 2*[1, 2] = [2, 4] (duplicate merged), row 2 [1, 2]:
  # norm sqrt(20 + 5) = 5, scale 0.4; SGD lr 1.
  table = np.arange(8, dtype=np.float32).reshape(4, 2)

  def Run(sparse):
    task = MakeTask({'emb': (table, True)}, None)
    lrn = MakeLearner(learning_rate=1.0, clip_gradient_norm_to_value=2.0,
                      gradient_combiner=None)
    lrn.Bind(task.vars)

    @tf.function
    def Step():
      emb = task.theta.emb
      if sparse:
        rows = tf.gather(emb, [0, 0, 2])
      else:
        rows = tf.matmul(tf.one_hot([0, 0, 2], 4), emb)
      loss = tf.reduce_sum(rows * tf.constant([1.0, 2.0]))
      return lrn.Apply({'loss': (loss, 1.0)}, task.vars)[2]

    m = Step()
    return task.vars.emb.numpy(), float(m['grad_norm/all'][0])

  sparse_w, sparse_norm = Run(True)
  dense_w, dense_norm = Run(False)
  expected = table.copy()
  expected[0] -= 0.4 * np.array([2., 4.])
  expected[2] -= 0.4 * np.array([1., 2.])
  np.testing.assert_allclose(sparse_w, expected, rtol=1e-6)
  np.testing.assert_allclose(dense_w, expected, rtol=1e-6)
  assert sparse_norm == pytest.approx(5.0) and dense_norm == pytest.approx(5.0)


def test_gradient_adjuster_runs_after_the_norms():
  # Gradients (1, -2), norm 2.236068; the adjuster doubles them after the
  # norm is measured, and the clip scale 1/2.236068 comes from that norm:
  # hello = -0.1 * 2 / 2.236068 = -0.0894427, world = +0.1788854.
  from learner.optimizers.var_grad import VarGrad  # pylint: disable=g-import-not-at-top
  task = HelloTask()
  lrn = MakeLearner(clip_gradient_norm_to_value=1.0)
  lrn.Bind(task.vars)
  double = lambda vgs: vgs.Transform(lambda vg: VarGrad(vg.var, 2. * vg.grad))
  _, _, m = EagerStep(task, lrn, gradient_adjuster=double)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world']],
                             [-0.0894427, 0.1788854], rtol=1e-5)
  assert Num(m['grad_norm/all']) == pytest.approx(2.236068, rel=1e-6)


def test_gradient_adjuster_that_makes_nan_skips_the_step():
  from learner.optimizers.var_grad import VarGrad  # pylint: disable=g-import-not-at-top
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)
  poison = lambda vgs: vgs.Transform(
      lambda vg: VarGrad(vg.var, vg.grad * float('nan')))
  _, _, m = EagerStep(task, lrn, gradient_adjuster=poison)
  assert all(x == 0.0 for x in Values(task).values())
  assert Num(m['has_nan_or_inf']) == 1.0 and Num(m['num_skipped_steps']) == 1


def test_fixed_loss_scale_unscales_gradients():
  # loss_scale=128.0: the same update as L1, the scale reported and fixed.
  task, lrn = HelloTask(), MakeLearner(loss_scale=128.0)
  lrn.Bind(task.vars)
  _, _, m = EagerStep(task, lrn)
  v = Values(task)
  np.testing.assert_allclose([v['hello'], v['world']], [-0.1, 0.2], rtol=1e-6)
  assert Num(m['loss_scale']) == 128.0


@pytest.mark.parametrize('kw,key', [
    (dict(l1_regularizer_weight=-0.1), 'l1_regularizer_weight'),
    (dict(l2_regularizer_weight=-0.1), 'l2_regularizer_weight'),
    (dict(learning_rate=-1.0), 'learning_rate'),
    (dict(loss_name=[]), 'loss_name'),
    (dict(loss_name=3), 'loss_name'),
    (dict(optimizer=None), 'optimizer_fn'),
])
def test_bad_construction_params_name_the_key(kw, key):
  with pytest.raises(ValueError, match=key):
    MakeLearner(**kw)


def test_metric_that_is_not_a_pair_is_named():
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)
  with pytest.raises(ValueError, match=r"metrics\['loss'\]"):
    lrn.ComputeLosses({'loss': 3.0})


def test_apply_gradients_on_an_unbound_variable_is_named():
  from learner.optimizers.var_grad import VarGrad  # pylint: disable=g-import-not-at-top
  from params import NestedMap  # pylint: disable=g-import-not-at-top
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)
  stray = tf.Variable(0.0, name='stray')
  with pytest.raises(ValueError, match='stray'):
    lrn.ApplyGradients(NestedMap(s=VarGrad(stray, tf.constant(1.0))))


def test_apply_gradients_without_any_gradient_is_an_error():
  from learner.optimizers.var_grad import VarGrad  # pylint: disable=g-import-not-at-top
  from params import NestedMap  # pylint: disable=g-import-not-at-top
  task, lrn = HelloTask(), MakeLearner()
  lrn.Bind(task.vars)
  with pytest.raises(ValueError, match='no gradient'):
    lrn.ApplyGradients(NestedMap(hello=VarGrad(task.vars.hello, None)))
