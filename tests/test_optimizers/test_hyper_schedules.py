"""Tests of `hyper_schedules` (learner/optimizers/hyper.py; issue 24 item 6).

Numbers: optax's `inject_hyperparams` with `optax.linear_schedule`
hyperparameters (tests/data/optax_hyper.json, recorded by
tools/record_optax_hyper.py), and hand computations.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner import get_optimizer_fn
from learner.learner import Learner
from learner.optimizers.wrappers import accumulation
from learner.optimizers import base
from learner.optimizers.wrappers import composite
from learner.optimizers.wrappers import ema
from learner.optimizers import kernels
from learner.optimizers.wrappers import lookahead
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.rules import adam
from learner.optimizers.rules import lamb
from learner.optimizers.rules import lion
from learner.optimizers.rules import momentum
from learner.optimizers.rules import rmsprop
from params import NestedMap
import schedules
from schedules import ConstantOne
from schedules import PiecewiseConstantSchedule
from schedules.polynomial import LinearSchedule
import optax_references as refs

_DATA = refs.Load('hyper')


def _Linear(init, end, steps):
  """Our counterpart of optax.linear_schedule(init, end, steps)."""
  return LinearSchedule.Params().Set(start=(0, init), limit=(steps, end))


# rule in the file -> (our params, {optax kwarg: our param name}).
_OURS = {
    'sgd_momentum': (momentum.Momentum.Params(), {'momentum': 'alpha'}),
    'adam_b1': (adam.Adam.Params(), {'b1': 'beta1', 'b2': 'beta2',
                                     'eps': 'epsilon'}),
    'adamw_b2_wd': (adam.AdamW.Params(), {
        'b1': 'beta1', 'b2': 'beta2', 'eps': 'epsilon',
        'weight_decay': 'decoupled_weight_decay'}),
    'lion_b1': (lion.Lion.Params(), {
        'b1': 'beta1', 'b2': 'beta2',
        'weight_decay': 'decoupled_weight_decay'}),
    'rmsprop_decay_momentum': (rmsprop.RMSProp.Params(), {
        'decay': 'decay', 'eps': 'epsilon', 'momentum': 'momentum',
        'initial_scale': None}),
    'lamb_b1': (lamb.LAMB.Params(), {
        'b1': 'beta1', 'b2': 'beta2', 'eps': 'epsilon',
        'weight_decay': 'weight_decay'}),
}


def _OurParams(case):
  """Our optimizer params for a recorded case: constants and schedules."""
  p, names = _OURS[case['rule']]
  p = p.Copy()
  scheduled = {}
  for key, value in case['kwargs'].items():
    ours = names[key]
    if ours is None:  # initial_scale=1.0: our RMSProp's ms starts at 1.
      assert value == 1.0
    elif isinstance(value, list):
      scheduled[ours] = _Linear(*value)
    else:
      p.Set(**{ours: value})
  return p.Set(hyper_schedules=scheduled)


_CASES = _DATA['cases']


@pytest.mark.parametrize('case', _CASES, ids=refs.CaseId)
def test_matches_optax_inject_hyperparams(case):
  # float64 too at 1e-6: the rate and the schedule's value arrive as
  # float32 (~1e-8 relative), far below the tolerance over 10 steps.
  refs.AssertMatches(refs.RunOurs(_OurParams(case), case), case, rtol=1e-6)


_XLA_CASES = [c for c in _CASES if c['shape_name'] == 'matrix' and
              c['dtype'] == 'float32' and c['clip']]


@pytest.mark.parametrize('rule', ['sgd_momentum', 'adam_b1'])
def test_scheduled_betas_reach_the_low_precision_slot_path(rule):
  # slot_dtype routes the update through the rule's _Step (slots stored,
  # upcast); with float32 slots it must still follow the schedule as optax
  # does.
  case = refs.Select(_DATA, rule, shape_name='matrix', dtype='float32',
                     clip=None)[0]
  p = _OurParams(case).Set(slot_dtype=tf.float32)
  refs.AssertMatches(refs.RunOurs(p, case), case, rtol=1e-6)


@pytest.mark.parametrize('case', _XLA_CASES, ids=refs.CaseId)
def test_matches_optax_eagerly_and_under_xla(case):
  for mode in ('eager', 'xla'):
    refs.AssertMatches(refs.RunOurs(_OurParams(case), case, mode=mode), case,
                       rtol=1e-6)


# ---- a constant costs nothing ----------------------------------------------

# Ops in the traced Apply of two variables ([3, 2] and [2]), counted at
# 6ad72a6 (before hyper_schedules existed), TF 2.21: (pure-TF path, fused
# path). An unscheduled optimizer must build exactly as many.
_OPS_BEFORE = {
    # Issue 37 (a rule's scalars built once per variable by `_Scalars`,
    # the formula once in `_Step`) removed repeated casts: momentum was 31
    # and 32, adam 39 and 29, adamw 51 and 30. LAMB was 139 and 139: the
    # base reads its two slots with read_value (+1 Identity each, per
    # variable) and its _Step reads the weights once (-1 Identity).
    'momentum': (momentum.Momentum.Params(), 28, 29),
    'adam': (adam.Adam.Params(), 35, 27),
    'adamw': (adam.AdamW.Params(), 47, 28),
    'lion': (lion.Lion.Params(), 45, 20),
    'lamb': (lamb.LAMB.Params().Set(weight_decay=0.01), 141, 141),
    'rmsprop': (rmsprop.RMSProp.Params(), 23, 23),
    'ema': (ema.Ema.Params().Set(optimizer=base.SGD.Params()), 40, 40),
}


def _ApplyGraph(p, fused):
  w = tf.Variable(tf.ones([3, 2]), name='w')
  b = tf.Variable(tf.ones([2]), name='b')
  opt = p.Instantiate()
  opt.Bind([w, b])
  vgs = NestedMap(w=var_grad_lib.VarGrad(w, tf.ones([3, 2])),
                  b=var_grad_lib.VarGrad(b, tf.ones([2])))

  def Step():
    opt.Apply(tf.constant(0.1), vgs)

  with kernels.Active() if fused else kernels.Disabled():
    return tf.function(Step).get_concrete_function().graph


def _OpCount(graph):
  return len(graph.get_operations())


@pytest.mark.parametrize('rule', sorted(_OPS_BEFORE))
def test_unscheduled_optimizer_builds_the_same_graph_as_before(rule):
  p, pure, fused = _OPS_BEFORE[rule]
  assert _OpCount(_ApplyGraph(p, fused=False)) == pure
  if kernels.Unavailable() is None:
    assert _OpCount(_ApplyGraph(p, fused=True)) == fused


def test_hyper_is_the_python_constant_unless_scheduled():
  opt = adam.Adam.Params().Set(
      beta1=0.8, hyper_schedules={'beta2': _Linear(0.9, 0.99, 9)}
  ).Instantiate()
  assert opt.Hyper('beta1') == 0.8 and isinstance(opt.Hyper('beta1'), float)
  assert opt.scheduled_hyperparams == ['beta2']
  value = opt.Hyper('beta2', tf.float64)
  assert value.dtype == tf.float64 and float(value) == pytest.approx(0.9)
  # A scheduled constant adds ops: the count above would see a schedule.
  p = momentum.Momentum.Params().Set(
      hyper_schedules={'alpha': _Linear(0.9, 0.9, 1)})
  assert _OpCount(_ApplyGraph(p, fused=False)) > _OPS_BEFORE['momentum'][1]


@pytest.mark.parametrize('p, fused_op', [
    (momentum.Momentum.Params().Set(
        hyper_schedules={'alpha': _Linear(0.5, 0.9, 4)}),
     'TfLearnerMultiApplyMomentum'),
    (adam.AdamW.Params().Set(hyper_schedules={
        'beta1': _Linear(0.95, 0.9, 4), 'beta2': _Linear(0.99, 0.999, 4),
        'decoupled_weight_decay': _Linear(0.0, 0.1, 4)}),
     'TfLearnerMultiApplyAdam'),
])
def test_scheduled_values_reach_the_fused_kernel(p, fused_op):
  if kernels.Unavailable() is not None:
    pytest.skip(kernels.Unavailable())
  types = collections.Counter(
      op.type for op in _ApplyGraph(p, fused=True).get_operations())
  assert types[fused_op] == 1


@pytest.mark.parametrize('p', [
    adam.Adam.Params().Set(hyper_schedules={
        'beta1': _Linear(0.5, 0.9, 2), 'beta2': _Linear(0.9, 0.99, 2)}),
    momentum.Momentum.Params().Set(hyper_schedules={
        'alpha': _Linear(0.2, 0.9, 2)}),
    rmsprop.RMSProp.Params().Set(hyper_schedules={
        'decay': _Linear(0.5, 0.9, 2), 'momentum': _Linear(0.1, 0.5, 2)}),
], ids=['adam', 'momentum', 'rmsprop'])
def test_lazy_sparse_update_of_every_row_equals_the_dense_update(p):
  # The sparse kernels take the scheduled values too: a lazy update whose
  # rows cover the variable is the dense update (3 steps, own num_updates).
  p = p.Copy().Set(lazy_sparse_updates=True)
  g = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], np.float32)
  out = []
  for sparse in (True, False):
    w = tf.Variable(np.ones([3, 2], np.float32), name='w')
    opt = p.Instantiate().Bind([w])
    grad = (tf.IndexedSlices(tf.constant(g), tf.constant([0, 1, 2]),
                             tf.constant([3, 2])) if sparse else
            tf.constant(g))
    for _ in range(3):
      opt.Apply(0.1, NestedMap(w=var_grad_lib.VarGrad(w, grad)))
    out.append(w.numpy())
  np.testing.assert_allclose(out[0], out[1], rtol=1e-6)
  assert not np.allclose(out[0], 1.0)


# ---- the step: the learner's -----------------------------------------------


def _Build(opt_params, w0, global_step=None, lr_schedule=None):
  """(task with one variable w = w0, bound Learner: lr 0.1 x lr_schedule,
  constant by default)."""
  task = refs._Weights.Params().Set(  # pylint: disable=protected-access
      init=np.asarray(w0, np.float32)).Instantiate()
  lp = Learner.Params().Set(name='loss', learning_rate=0.1,
                            lr_schedule=lr_schedule or ConstantOne.Params(),
                            optimizer=opt_params.Copy())
  if global_step is not None:
    lp.lr_schedule_step = 'global_step'
  lrn = lp.Instantiate()
  lrn.Bind(task.vars, global_step=global_step)
  return task, lrn


def _Steps(task, lrn, g, n):
  """`n` learner steps with the gradient `g`; returns w after them."""
  for _ in range(n):
    with learner_lib.GradientTape():
      loss = tf.reduce_sum(task.theta.w * tf.constant(g, tf.float32))
    lrn.Apply({'loss': (loss, 1.0)}, task.vars)
  return task.vars.w.numpy()


def test_schedule_reads_the_learner_step_num_updates_by_default():
  # SGD, lr 0.1, wd scheduled 0, 0.1, 0.2 at updates 0, 1, 2; w0 = 1, g = 1:
  # w1 = 1 - 0.1 - 0 = 0.9; w2 = 0.9 - 0.1 - 0.1*0.1*0.9 = 0.791.
  p = base.SGD.Params().Set(
      hyper_schedules={'decoupled_weight_decay': _Linear(0.0, 0.2, 2)})
  task, lrn = _Build(p, [1.0])
  np.testing.assert_allclose(_Steps(task, lrn, [1.0], 2), [0.791], rtol=1e-6)


def test_schedule_reads_the_global_step_with_lr_schedule_step_global_step():
  # The learner's lr_schedule reads global step 4: so does the wd schedule
  # (0.1 from step 3 on): w1 = 1 - 0.1*1 - 0.1*0.1*1 = 0.89.
  p = base.SGD.Params().Set(hyper_schedules={
      'decoupled_weight_decay': PiecewiseConstantSchedule.Params().Set(
          boundaries=[3], values=[0.0, 0.1])})
  task, lrn = _Build(p, [1.0], global_step=tf.Variable(4, dtype=tf.int64))
  np.testing.assert_allclose(_Steps(task, lrn, [1.0], 1), [0.89], rtol=1e-6)


def test_one_cycle_rate_and_momentum_as_pytorch_one_cycle_lr():
  # PyTorch's OneCycleLR with cycle_momentum over SGD(momentum): lr_t from
  # OneCycle, momentum_t from OneCycleMomentum, both at update t; PyTorch's
  # SGD (v = mu v + g; w -= lr v) is our Momentum. numpy runs the recursion
  # with the schedules' values.
  cycle = dict(total_steps=10, pct_start=0.3)
  lr_s = schedules.OneCycle.Params().Set(**cycle).Instantiate()
  mom_p = schedules.OneCycleMomentum.Params().Set(**cycle)
  mom_s = mom_p.Instantiate()
  g = np.array([0.5, -1.0, 2.0], np.float32)
  task, lrn = _Build(
      momentum.Momentum.Params().Set(hyper_schedules={'alpha': mom_p}),
      [1.0, 2.0, 3.0], lr_schedule=schedules.OneCycle.Params().Set(**cycle))
  w, v = np.array([1.0, 2.0, 3.0]), np.zeros(3)
  for t in range(10):
    v = float(mom_s.Value(t)) * v + g
    w = w - 0.1 * float(lr_s.Value(t)) * v
  assert float(mom_s.Value(0)) == pytest.approx(0.95)
  assert min(float(mom_s.Value(t)) for t in range(10)) == pytest.approx(
      0.85)  # At the rate's peak.
  # float32 weights: within 1e-6 of the largest weight (one entry is small).
  np.testing.assert_allclose(_Steps(task, lrn, g, 10), w, rtol=0,
                             atol=1e-6 * np.abs(w).max())


def test_under_accumulation_the_step_counts_applied_updates():
  # As above through GradientAccumulation(num_batches=2): 4 micro-steps are
  # 2 updates, seeing wd 0 and 0.1 (not the micro-step count): w = 0.791.
  p = accumulation.GradientAccumulation.Params().Set(
      num_batches=2, optimizer=base.SGD.Params().Set(hyper_schedules={
          'decoupled_weight_decay': _Linear(0.0, 0.2, 2)}))
  task, lrn = _Build(p, [1.0])
  np.testing.assert_allclose(_Steps(task, lrn, [1.0], 4), [0.791], rtol=1e-6)
  assert int(lrn.num_updates.numpy()) == 2


def test_ema_decay_schedule_through_hyper_schedules():
  # Ema(SGD lr 0.1), decay 0 then 0.5 (linear over 1 update); w0 = 1, g = 1.
  # Update 1: w = 0.9, avg = 0*1 + 1*0.9 = 0.9. Update 2: w = 0.8,
  # avg = 0.5*0.9 + 0.5*0.8 = 0.85.
  p = ema.Ema.Params().Set(optimizer=base.SGD.Params(), hyper_schedules={
      'decay': _Linear(0.0, 0.5, 1)})
  task, lrn = _Build(p, [1.0])
  np.testing.assert_allclose(_Steps(task, lrn, [1.0], 2), [0.8], rtol=1e-6)
  avg = lrn.optimizer.GetAverage(task.vars.w)
  np.testing.assert_allclose(avg.numpy(), [0.85], rtol=1e-6)


def test_lookahead_alpha_through_hyper_schedules():
  # Lookahead(SGD lr 0.1, k = 1), alpha 0.5 then 1.0 (linear over 1 update);
  # w0 = 0, g = 1. Update 1: fast -0.1, slow = 0 + 0.5 * -0.1 = -0.05 = w.
  # Update 2: fast -0.15, slow = -0.05 + 1.0 * (-0.15 + 0.05) = -0.15.
  p = lookahead.Lookahead.Params().Set(
      optimizer=base.SGD.Params(), k=1,
      hyper_schedules={'alpha': _Linear(0.5, 1.0, 1)})
  task, lrn = _Build(p, [0.0])
  np.testing.assert_allclose(_Steps(task, lrn, [1.0], 1), [-0.05], rtol=1e-6)
  np.testing.assert_allclose(_Steps(task, lrn, [1.0], 1), [-0.15], rtol=1e-6)
  # A constant alpha 0.5 gives -0.05, then -0.05 + 0.5 * -0.1 = -0.1.
  task, lrn = _Build(p.Copy().Set(hyper_schedules={}), [0.0])
  np.testing.assert_allclose(_Steps(task, lrn, [1.0], 2), [-0.1], rtol=1e-6)


def test_resume_from_a_checkpoint_continues_the_schedule(tmp_path):
  # The schedules hold no state: the restored num_updates is their step, so
  # 2 steps, save, restore, 2 steps equal 4 steps bit for bit.
  case = refs.Select(_DATA, 'adam_b1', shape_name='vector', dtype='float32',
                     clip=None)[0]
  p, g = _OurParams(case), case['grads'][0]
  task, lrn = _Build(p, case['init'])
  want = _Steps(task, lrn, g, 4)
  task, lrn = _Build(p, case['init'])
  _Steps(task, lrn, g, 2)
  path = tf.train.Checkpoint(task=task, lrn=lrn).save(str(tmp_path / 'c'))
  task, lrn = _Build(p, np.zeros_like(want))
  tf.train.Checkpoint(task=task, lrn=lrn).restore(path).assert_consumed()
  assert int(lrn.num_updates.numpy()) == 2
  np.testing.assert_array_equal(_Steps(task, lrn, g, 2), want)


# ---- params: text round trip and refusals ------------------------------------


def test_text_round_trip_of_hyper_schedules():
  p = adam.AdamW.Params().Set(hyper_schedules={
      'beta1': _Linear(0.95, 0.85, 100),
      'decoupled_weight_decay': PiecewiseConstantSchedule.Params().Set(
          boundaries=[10], values=[0.0, 0.01])})
  text = p.ToText()
  q = adam.AdamW.Params().FromText(text)
  assert q.ToText() == text
  assert q.hyper_schedules['beta1'].limit == (100, 0.85)
  opt = q.Instantiate()
  assert opt.scheduled_hyperparams == ['beta1', 'decoupled_weight_decay']
  assert float(opt.Hyper('beta1')) == pytest.approx(0.95)


@pytest.mark.parametrize('p, words', [
    (momentum.Momentum.Params().Set(hyper_schedules={'beta1': _Linear(
        0.1, 0.2, 3)}),
     r"Momentum 'optimizer': hyper_schedules\['beta1'\] names no schedulable "
     r"param of Momentum. Use one of 'decoupled_weight_decay', 'alpha'."),
    (adam.Adam.Params().Set(hyper_schedules={'epsilon': _Linear(
        0.1, 0.2, 3)}),
     r"hyper_schedules\['epsilon'\] names no schedulable param of Adam. Use "
     r"one of 'decoupled_weight_decay', 'beta1', 'beta2'."),
    (adam.Adam.Params().Set(hyper_schedules=[('beta1', None)]),
     r"hyper_schedules=\[\('beta1', None\)\] is not a dict"),
    (adam.Adam.Params().Set(hyper_schedules={'beta1': 0.9}),
     r"hyper_schedules\['beta1'\]=0.9 is not schedule params"),
    (adam.Adam.Params().Set(hyper_schedules={'beta1': _Linear(1.0, 0.9, 5)}),
     r"hyper_schedules\['beta1'\] \(LinearSchedule\) gives beta1=1 at step "
     r"0, which is outside \[0, 1\) \(beta1 = 1 divides"),
    (momentum.Momentum.Params().Set(hyper_schedules={'alpha': _Linear(
        0.5, 1.5, 5)}),
     r"gives alpha=1.5 at step 5, which is outside \[0, 1\)"),
    (base.SGD.Params().Set(hyper_schedules={
        'decoupled_weight_decay': _Linear(0.0, -0.1, 5)}),
     r"gives decoupled_weight_decay=-0.1 at step 5, which is not >= 0"),
    (ema.Ema.Params().Set(optimizer=base.SGD.Params(), hyper_schedules={
        'decoupled_weight_decay': _Linear(0.0, 0.1, 5)}),
     r"names no schedulable param of Ema. Use one of 'decay'."),
    (ema.Ema.Params().Set(optimizer=base.SGD.Params(), hyper_schedules={
        'decay': _Linear(0.0, 0.1, 5)}, decay_schedule=_Linear(0.0, 0.1, 5)),
     r"decay_schedule and hyper_schedules\['decay'\] are both set"),
    (composite.Composite.Params().Set(
        optimizer_map={'w': (base.SGD.Params(), 1.0)},
        hyper_schedules={'decoupled_weight_decay': _Linear(0.0, 0.1, 5)}),
     r"names no schedulable param of Composite. It schedules none"),
])
def test_refusals_name_the_key_the_value_and_the_fix(p, words):
  with pytest.raises(ValueError, match=words):
    p.Instantiate()


def test_factory_keyword_and_its_text_round_trip():
  fn = get_optimizer_fn('momentum', learning_rate=0.1, momentum=0.9,
                        hyper_schedules={'alpha': _Linear(0.5, 0.9, 4)})
  p = Learner.Params().Set(name='loss', optimizer_fn=fn)
  text = p.ToText()
  q = Learner.Params().FromText(text)
  assert q.ToText() == text
  opt = q.Instantiate().optimizer
  assert opt.scheduled_hyperparams == ['alpha']
  assert float(opt.Hyper('alpha')) == pytest.approx(0.5)


def test_unscheduled_default_is_an_empty_dict_on_every_optimizer():
  for p in (base.SGD.Params(), adam.Adam.Params(), ema.Ema.Params()):
    assert p.hyper_schedules == {}
