"""GradientAccumulation: O7 and the accumulation cases of docs/cases/optimizers.md."""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner.optimizers import base as base_optimizer
from learner import optimizers
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.learner import Learner
from learner.optimizers.var_grad import VarGrad
from params import BaseLayer
from params import NestedMap
from schedules import LinearSchedule
from schedules import PiecewiseConstantSchedule


class ScalarTask(BaseLayer):
  """Scalar variables `names`; metrics from a Python function of theta."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'task'
    p.Define('names', ['w'], 'Scalar variables, all starting at 0.')
    return p

  def __init__(self, params):
    super().__init__(params)
    for n in self.params.names:
      self.CreateVariable(n, [], init=0.0)


def Accum(num_batches, inner=None, **kw):
  return GradientAccumulation.Params().Set(
      num_batches=num_batches,
      optimizer=inner or base_optimizer.SGD.Params(), **kw)


def MakeLearner(num_batches, inner=None, lr=0.1, **kw):
  return Learner.Params().Set(
      name='loss', learning_rate=lr, optimizer=Accum(num_batches, inner),
      **kw).Instantiate()


def Step(task, lrn, loss_fn, weight=1.0):
  with learner_lib.GradientTape():
    metrics = {'loss': (loss_fn(task.theta), weight)}
  return lrn.Apply(metrics, task.vars)[2]


def test_o7_standalone_accumulation_around_sgd():
  # O7: gradients (3, 1), lr 0.1, num_batches 2.
  a = tf.Variable(0.0, name='a')
  b = tf.Variable(0.0, name='b')
  opt = Accum(2).Set(name='acc').Instantiate()
  opt.Bind([a, b])
  vgs = NestedMap(a=VarGrad(a, tf.constant(3.0)), b=VarGrad(b, tf.constant(1.0)))
  opt.Apply(0.1, vgs)
  assert (a.numpy(), b.numpy()) == (0.0, 0.0)
  assert float(opt.GetAccumulator(a).numpy()) == 3.0
  assert float(opt.GetAccumulator(b).numpy()) == 1.0
  opt.Apply(0.1, vgs)
  np.testing.assert_allclose([a.numpy(), b.numpy()], [-0.3, -0.1], rtol=1e-6)
  assert float(opt.GetAccumulator(a).numpy()) == 0.0
  assert int(opt.micro_step.numpy()) == 0
  opt.Apply(0.1, vgs)
  np.testing.assert_allclose([a.numpy(), b.numpy()], [-0.3, -0.1], rtol=1e-6)
  assert int(opt.num_updates.numpy()) == 1


def test_o7_two_equal_micro_steps_equal_one_step_on_the_mean():
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(2)
  lrn.Bind(task.vars)
  m = Step(task, lrn, lambda th: 1.0 * th.w)
  assert float(task.vars.w.numpy()) == 0.0
  # Window metrics have weight 0 on a micro-step that only accumulates.
  assert float(m['grad_norm/all'][1]) == 0.0
  assert float(m['learning_rate'][1]) == 1.0
  m = Step(task, lrn, lambda th: 3.0 * th.w)
  # mean(1, 3) = 2, so w = -0.2.
  assert float(task.vars.w.numpy()) == pytest.approx(-0.2, rel=1e-6)
  assert float(m['grad_norm/all'][0]) == pytest.approx(2.0)
  assert float(m['grad_norm/all'][1]) == 1.0
  assert float(m['num_updates'][0]) == 1.0


@pytest.mark.parametrize('weights,expected', [((2.0, 6.0), -0.15),
                                              ((1.0, 1.0), -0.2)])
def test_c_accum_weighted(weights, expected):
  # C-accum-weighted: (2*3 + 6*1)/8 = 1.5 -> w = -0.15; equal weights give
  # the plain mean 2.0 -> w = -0.2 (the control).
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(2)
  lrn.Bind(task.vars)
  Step(task, lrn, lambda th: 3.0 * th.w, weight=weights[0])
  Step(task, lrn, lambda th: 1.0 * th.w, weight=weights[1])
  assert float(task.vars.w.numpy()) == pytest.approx(expected, rel=1e-5)


def test_c_accum_schedule():
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(4, inner=optimizers.Adam.Params().Set(epsilon=1e-8),
                    lr=1.0, lr_schedule=LinearSchedule.Params().Set(
                        start=(0, 0.125), limit=(7, 1.0)))
  lrn.Bind(task.vars)

  @tf.function
  def TrainStep():
    return lrn.Apply({'loss': (task.theta.w, 1.0)}, task.vars)[2]

  rates = []
  for _ in range(8):
    m = TrainStep()
    if float(m['grad_norm/all'][1]) == 1.0:
      rates.append(float(m['learning_rate'][0]))
  assert rates == pytest.approx([0.125, 0.25])
  assert int(lrn.num_updates.numpy()) == 2
  assert int(lrn.optimizer.num_updates.numpy()) == 2  # Adam's step count.
  assert float(lrn.LearningRate().numpy()) == pytest.approx(0.375)
  assert float(task.vars.w.numpy()) == pytest.approx(-0.3749999, rel=1e-5)


def test_c_accum_reset():
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(4, lr=1.0)
  lrn.Bind(task.vars)
  acc = lrn.optimizer
  for g in (1., 2., 3., 4., 5., 6.):
    Step(task, lrn, lambda th, g=g: g * th.w)
  assert float(task.vars.w.numpy()) == pytest.approx(-2.5)
  acc.Reset()
  assert float(acc.GetAccumulator(task.vars.w).numpy()) == 0.0
  assert float(acc.accumulated_weight.numpy()) == 0.0
  assert int(acc.micro_step.numpy()) == 0
  for g in (1., 2., 3., 4.):
    Step(task, lrn, lambda th, g=g: g * th.w)
  assert float(task.vars.w.numpy()) == pytest.approx(-5.0)
  assert int(lrn.num_updates.numpy()) == 2


def test_non_finite_micro_batch_is_dropped_and_counted():
  # Micro-batches 1, NaN, 3 with num_batches 3: the NaN one is dropped and
  # the update uses (1 + 3) / 2 = 2.
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(3, lr=1.0)
  lrn.Bind(task.vars)
  Step(task, lrn, lambda th: 1.0 * th.w)
  m = Step(task, lrn, lambda th: float('nan') * th.w)
  assert float(m['num_dropped_microbatches'][0]) == 1.0
  m = Step(task, lrn, lambda th: 3.0 * th.w)
  assert float(task.vars.w.numpy()) == pytest.approx(-2.0)
  assert float(m['num_skipped_steps'][0]) == 0.0
  assert float(m['num_updates'][0]) == 1.0


def test_skipped_applying_step_discards_the_window():
  # grad_norm_to_clip_to_zero 5: the window mean 6 is over the limit, so the
  # update is skipped once (not per micro-batch), the accumulators are zero
  # and the next window starts clean.
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(2, lr=1.0, grad_norm_to_clip_to_zero=5.0)
  lrn.Bind(task.vars)
  acc = lrn.optimizer
  Step(task, lrn, lambda th: 6.0 * th.w)
  m = Step(task, lrn, lambda th: 6.0 * th.w)
  assert float(task.vars.w.numpy()) == 0.0
  assert float(m['num_skipped_steps'][0]) == 1.0
  assert float(acc.GetAccumulator(task.vars.w).numpy()) == 0.0
  assert float(acc.accumulated_weight.numpy()) == 0.0
  Step(task, lrn, lambda th: 1.0 * th.w)
  Step(task, lrn, lambda th: 3.0 * th.w)
  assert float(task.vars.w.numpy()) == pytest.approx(-2.0)
  assert int(lrn.num_skipped_steps.numpy()) == 1


def test_all_micro_batches_dropped_is_one_skipped_update():
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(2, lr=1.0)
  lrn.Bind(task.vars)
  Step(task, lrn, lambda th: float('inf') * th.w)
  m = Step(task, lrn, lambda th: float('nan') * th.w)
  assert float(task.vars.w.numpy()) == 0.0
  assert float(m['num_skipped_steps'][0]) == 1.0
  assert float(m['num_dropped_microbatches'][0]) == 2.0
  assert float(m['num_updates'][0]) == 0.0


def test_clipping_sees_the_window_mean_once():
  # Micro-batch grads 0.5 and 1.5, global clip 1: the mean 1.0 is at the
  # threshold and passes unchanged, w = -1. (Clipping each micro-batch first
  # would give (0.5 + 1.0) / 2 = 0.75.)
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(2, lr=1.0, clip_gradient_norm_to_value=1.0)
  lrn.Bind(task.vars)
  Step(task, lrn, lambda th: 0.5 * th.w)
  m = Step(task, lrn, lambda th: 1.5 * th.w)
  assert float(task.vars.w.numpy()) == pytest.approx(-1.0)
  assert float(m['grad_scale_all'][0]) == 1.0


def test_accumulators_and_micro_step_are_checkpointed(tmp_path):
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(3, lr=1.0)
  lrn.Bind(task.vars)
  Step(task, lrn, lambda th: 2.0 * th.w, weight=2.0)
  path = tf.train.Checkpoint(task=task, learner=lrn).save(
      str(tmp_path / 'ckpt'))
  task2 = ScalarTask.Params().Instantiate()
  lrn2 = MakeLearner(3, lr=1.0)
  lrn2.Bind(task2.vars)
  tf.train.Checkpoint(task=task2, learner=lrn2).restore(path).assert_consumed()
  acc2 = lrn2.optimizer
  assert float(acc2.GetAccumulator(task2.vars.w).numpy()) == 4.0
  assert float(acc2.accumulated_weight.numpy()) == 2.0
  assert int(acc2.micro_step.numpy()) == 1
  # Two more micro-batches of gradient 5 (weight 1): (4 + 5 + 5) / 4 = 3.5.
  Step(task2, lrn2, lambda th: 5.0 * th.w)
  Step(task2, lrn2, lambda th: 5.0 * th.w)
  assert float(task2.vars.w.numpy()) == pytest.approx(-3.5)


def test_accumulation_must_be_the_outermost_wrapper():
  with pytest.raises(ValueError, match='outermost'):
    Accum(2, inner=Accum(2)).Set(name='acc').Instantiate()


@pytest.mark.parametrize('value', [0, -1, 2.5])
def test_num_batches_must_be_a_positive_int(value):
  with pytest.raises(ValueError, match='num_batches'):
    Accum(value).Set(name='acc').Instantiate()


def test_decay_on_the_wrapper_is_an_error():
  with pytest.raises(ValueError, match='decoupled_weight_decay'):
    Accum(2, decoupled_weight_decay=0.1).Set(name='acc').Instantiate()


def test_c_accum_weighted_under_jit_compile():
  # C-accum-weighted inside tf.function(jit_compile=True): w = -0.15.
  task = ScalarTask.Params().Instantiate()
  lrn = MakeLearner(2, clip_gradient_norm_to_value=10.0)
  lrn.Bind(task.vars)

  @tf.function(jit_compile=True)
  def TrainStep(c, weight):
    return lrn.Apply({'loss': (c * task.theta.w, weight)}, task.vars)[2]

  TrainStep(tf.constant(3.0), tf.constant(2.0))
  m = TrainStep(tf.constant(1.0), tf.constant(6.0))
  assert float(task.vars.w.numpy()) == pytest.approx(-0.15, rel=1e-5)
  assert float(m['grad_norm/all'][0]) == pytest.approx(1.5, rel=1e-6)
  assert int(lrn.optimizer.micro_step.numpy()) == 0


def test_inner_optimizer_must_be_optimizer_params():
  with pytest.raises(ValueError, match='params.optimizer'):
    GradientAccumulation.Params().Set(name='acc', num_batches=2).Instantiate()


def test_standalone_apply_on_an_unbound_variable_is_named():
  opt = Accum(2).Set(name='acc').Instantiate()
  stray = tf.Variable(0.0, name='stray_var')
  with pytest.raises(ValueError, match='stray_var'):
    opt.Apply(0.1, NestedMap(s=VarGrad(stray, tf.constant(1.0))))


class LinearTask(BaseLayer):
  """y = x.w + b on a fixed batch; per-example squared error."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'lin'
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [3], init=0.1)
    self.CreateVariable('b', [], init=0.0)

  def Loss(self, theta, x, y):
    err = tf.linalg.matvec(x, theta.w) + theta.b - y
    return tf.reduce_mean(tf.square(err)), float(x.shape[0])


@pytest.mark.parametrize('inner', ['adam', 'momentum'])
def test_micro_batches_of_sizes_2_3_5_equal_one_step_on_the_union(inner):
  # Issue 4 acceptance: accumulating micro-batches of sizes n1..nN (each
  # reporting its mean loss with weight n_i) equals one step on the union
  # batch of 10, weights and slots, for 2 windows.
  rng = np.random.RandomState(0)
  x = rng.randn(2, 10, 3).astype(np.float32)
  y = rng.randn(2, 10).astype(np.float32)
  inner_p = (optimizers.Adam.Params() if inner == 'adam' else
             optimizers.Momentum.Params().Set(alpha=0.9))

  def Run(num_batches, sizes):
    task = LinearTask.Params().Instantiate()
    if num_batches == 1:
      lrn = Learner.Params().Set(name='loss', learning_rate=0.1,
                                 optimizer=inner_p).Instantiate()
    else:
      lrn = MakeLearner(num_batches, inner_p)
    lrn.Bind(task.vars)
    for window in range(2):
      start = 0
      for n in sizes:
        xs = tf.constant(x[window, start:start + n])
        ys = tf.constant(y[window, start:start + n])
        start += n
        with learner_lib.GradientTape():
          metrics = {'loss': task.Loss(task.theta, xs, ys)}
        lrn.Apply(metrics, task.vars)
    inner_opt = lrn.optimizer.optimizer if num_batches > 1 else lrn.optimizer
    slots = {}
    for v in task.vars.Flatten():
      if inner == 'momentum':
        slots[v.name] = inner_opt.Velocity(v).numpy()
      else:
        slots.update({v.name + k: s.numpy()
                      for k, s in inner_opt.GetSlots(v).items()})
    return [v.numpy() for v in task.vars.Flatten()], slots

  w_acc, s_acc = Run(3, [2, 3, 5])
  w_one, s_one = Run(1, [10])
  for a, b in zip(w_acc, w_one):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  assert s_acc.keys() == s_one.keys()
  for k in s_acc:
    np.testing.assert_allclose(s_acc[k], s_one[k], rtol=1e-5, atol=1e-7,
                               err_msg=k)


# ---- the one entry point: AccumulateOrApply -----------------------------------


def _EntryPoint(num_batches=2):
  w = tf.Variable([1.0, 2.0], name='w')
  acc = Accum(num_batches).Set(name='acc').Instantiate()
  acc.Bind([w])
  return w, acc


def test_entry_point_hands_back_the_window_only_when_it_completes():
  # Micro-batches (g=[1, 0], weight 1) and (g=[3, 2], weight 3): the window
  # is sum(w*g) = [1 + 9, 0 + 6] = [10, 6], sum(w) = 4, grad_scale 0.25.
  w, acc = _EntryPoint()
  windows = []

  def ApplyWindow(window):
    windows.append(window)
    return [window.weight_sum]

  out, is_apply = acc.AccumulateOrApply(
      NestedMap(enc=NestedMap(w=VarGrad(w, tf.constant([1.0, 0.0])))), 1.0,
      ApplyWindow, lambda: [tf.constant(-1.0)])
  assert not windows and not bool(is_apply) and float(out[0]) == -1.0
  out, is_apply = acc.AccumulateOrApply(
      NestedMap(enc=NestedMap(w=VarGrad(w, tf.constant([3.0, 2.0])))), 3.0,
      ApplyWindow, lambda: [tf.constant(-1.0)])
  assert bool(is_apply) and float(out[0]) == 4.0
  (window,) = windows
  np.testing.assert_array_equal(window.var_grads.enc.w.grad.numpy(),
                                [10.0, 6.0])
  assert window.var_grads.enc.w.var is w
  assert float(window.grad_scale) == 0.25
  assert float(window.num_dropped) == 0.0
  # The callback applied nothing: w is unchanged, the window is emptied.
  np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
  np.testing.assert_array_equal(acc.GetAccumulator(w).numpy(), [0.0, 0.0])
  assert int(acc.micro_step.numpy()) == 0
  assert float(acc.accumulated_weight.numpy()) == 0.0


def test_entry_point_window_applies_through_the_inner_optimizer():
  # One micro-batch of g=[2, 4], weight 2: sums [4, 8], grad_scale 0.5;
  # SGD lr 0.1 via ApplyScaled: w = [1, 2] - 0.1 * [2, 4] = [0.8, 1.6].
  w, acc = _EntryPoint(num_batches=1)

  def ApplyWindow(window):
    window.ApplyScaled(0.1, window.var_grads, window.grad_scale)
    return [tf.constant(1.0)]

  acc.AccumulateOrApply(NestedMap(w=VarGrad(w, tf.constant([2.0, 4.0]))),
                        2.0, ApplyWindow, lambda: [tf.constant(0.0)])
  np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)
  assert int(acc.num_updates.numpy()) == 1


def test_entry_point_drops_a_non_finite_micro_batch_and_counts_it():
  # (nan, weight 5) is dropped; (g=[1, 1], weight 2) is kept: sums [2, 2],
  # sum(w) = 2, one dropped in the window and in the run's counter.
  w, acc = _EntryPoint()
  windows = []

  def ApplyWindow(window):
    windows.append(window)
    return [window.num_dropped]

  acc.AccumulateOrApply(NestedMap(w=VarGrad(w, tf.constant([np.nan, 1.0]))),
                        5.0, ApplyWindow, lambda: [tf.constant(0.0)])
  out, _ = acc.AccumulateOrApply(
      NestedMap(w=VarGrad(w, tf.constant([1.0, 1.0]))), 2.0, ApplyWindow,
      lambda: [tf.constant(0.0)])
  assert float(out[0]) == 1.0
  np.testing.assert_array_equal(windows[0].var_grads.w.grad.numpy(),
                                [2.0, 2.0])
  assert float(windows[0].weight_sum) == 2.0
  assert int(acc.num_dropped_microbatches.numpy()) == 1


def test_entry_point_calls_the_all_reduce_only_on_the_window_by_default():
  # sync_on_apply=True: the caller's all_reduce sees the window's sums
  # once; with sync_on_apply=False it sees every micro-batch's weight*g.
  def Run(sync_on_apply):
    w = tf.Variable([0.0], name='w')
    acc = Accum(2, sync_on_apply=sync_on_apply).Set(
        name='acc').Instantiate()
    acc.Bind([w])
    calls = []

    def AllReduce(tensors, weight, extras):
      calls.append([float(t.numpy()[0]) for t in tensors])
      return tensors, weight, extras

    for g, wt in ((2.0, 1.0), (4.0, 3.0)):
      acc.AccumulateOrApply(
          NestedMap(w=VarGrad(w, tf.constant([g]))), wt,
          lambda window: [window.weight_sum], lambda: [tf.constant(0.0)],
          all_reduce=AllReduce)
    return calls

  assert Run(True) == [[2.0 + 12.0]]
  assert Run(False) == [[2.0], [12.0]]


# ---- batch-size ramp (issue 25, item 4) -------------------------------------

_RAMP_G = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
_RAMP_W = [1.0, 1.0, 1.0, 2.0, 1.0, 3.0, 1.0, 1.0]


def _RampLearner():
  ramp = PiecewiseConstantSchedule.Params().Set(boundaries=[2],
                                                values=[1.0, 3.0])
  return Learner.Params().Set(
      name='loss', learning_rate=0.1,
      optimizer=Accum(3, num_batches_schedule=ramp)).Instantiate()


def _RampSteps(task, lrn, steps, jit=None):
  """Micro-steps `steps` (eager; or one tf.function, jit_compile=jit)."""
  def One(g, w):
    return Step(task, lrn, lambda th: g * th.w, weight=w)
  if jit is not None:
    One = tf.function(One, jit_compile=jit)
  out = []
  for t in steps:
    One(tf.constant(_RAMP_G[t]), tf.constant(_RAMP_W[t]))
    out.append(float(task.vars.w.numpy()))
  return out


@pytest.mark.parametrize('jit', [None, False, True])
def test_batch_ramp_window_lengths_follow_the_schedule_weighted_exactly(jit):
  # Windows of 1, 1 (updates 0, 1), then 3 (from update 2): micro-steps
  # {0}, {1}, {2, 3, 4}, {5, 6, 7}; each update is lr * sum(w g) / sum(w).
  task = ScalarTask.Params().Instantiate()
  lrn = _RampLearner()
  lrn.Bind(task.vars)
  got = _RampSteps(task, lrn, range(8), jit)
  u3 = (3 * 1 + 4 * 2 + 5 * 1) / 4.0
  u4 = (6 * 3 + 7 * 1 + 8 * 1) / 5.0
  want = [-0.1, -0.3, -0.3, -0.3, -0.3 - 0.1 * u3, -0.3 - 0.1 * u3,
          -0.3 - 0.1 * u3, -0.3 - 0.1 * (u3 + u4)]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert int(lrn.optimizer.num_updates.numpy()) == 4


def test_batch_ramp_resume_mid_window_equals_an_uninterrupted_run(tmp_path):
  task = ScalarTask.Params().Instantiate()
  lrn = _RampLearner()
  lrn.Bind(task.vars)
  straight = _RampSteps(task, lrn, range(8))
  task = ScalarTask.Params().Instantiate()
  lrn = _RampLearner()
  lrn.Bind(task.vars)
  _RampSteps(task, lrn, range(6))  # Mid-window: micro-step 1 of {5, 6, 7}.
  path = tf.train.Checkpoint(task=task, learner=lrn).save(
      str(tmp_path / 'ckpt'))
  task2 = ScalarTask.Params().Instantiate()
  lrn2 = _RampLearner()
  lrn2.Bind(task2.vars)
  tf.train.Checkpoint(task=task2, learner=lrn2).restore(path)
  resumed = _RampSteps(task2, lrn2, range(6, 8))
  assert resumed == straight[6:]


def test_batch_ramp_refuses_a_non_schedule_and_round_trips_as_text():
  with pytest.raises(ValueError, match='num_batches_schedule=.*is not a '
                     "schedule's params"):
    Accum(2, num_batches_schedule=base_optimizer.SGD.Params()).Set(
        name='acc').Instantiate()
  p = Accum(2, num_batches_schedule=PiecewiseConstantSchedule.Params().Set(
      boundaries=[2], values=[1.0, 3.0]))
  q = GradientAccumulation.Params().FromText(p.ToText())
  assert q.num_batches_schedule.values == [1.0, 3.0]
