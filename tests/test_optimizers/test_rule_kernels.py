"""The newer rules' fused kernels (multi_tensor_rules.cc) against pure TF.

Each rule runs the same steps twice: traced normally (its fused op, asserted
in the graph so no test passes vacuously) and under `kernels.Disabled()`
(the pure-TF path, the op asserted absent), and the weights and slots are
compared bit for bit (np.testing.assert_array_equal): the kernels repeat
the pure-TF path's order of operations. The steps change the rate, the
clip scale and scheduled hyperparameters (weight decay, Lion's betas).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers.kernels import loader
from learner.optimizers.rules import adam_family
from learner.optimizers.rules import lion
from learner.optimizers.rules import schedule_free
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
from schedules.polynomial import LinearSchedule

SHAPES = {'w': (64, 33), 'b': (33,), 'k': (3, 3, 4, 8), 'big': (40000,)}
RATES = (0.05, 0.02, 0.01, 0.03, 0.05)
SCALES = (0.7, 1.0, 0.31, 0.05, 2.0)


@pytest.fixture(autouse=True)
def fused_on(monkeypatch):
  """The default (the switch unset): the fused path on."""
  monkeypatch.delenv(loader.ENV_SWITCH, raising=False)
  if kernels.Unavailable() is not None:
    pytest.fail('the kernels must build here: %s' % kernels.Unavailable())


def _Linear(init, end, steps):
  return LinearSchedule.Params().Set(start=(0, init), limit=(steps, end))


_WD = {'decoupled_weight_decay': _Linear(0.0, 0.2, 4)}

# name -> (params, fused op type)
RULES = {
    'lion': (lion.Lion.Params(), 'TfLearnerMultiApplyLion'),
    'lion_scheduled_wd': (lion.Lion.Params().Set(hyper_schedules=dict(
        _WD, beta1=_Linear(0.95, 0.8, 4), beta2=_Linear(0.9, 0.99, 4))),
                          'TfLearnerMultiApplyLion'),
    'nadam': (adam_family.Nadam.Params(), 'TfLearnerMultiApplyNadam'),
    'nadam_dozat_wd': (adam_family.Nadam.Params().Set(
        momentum_schedule='dozat', epsilon=1e-7, decoupled_weight_decay=0.1,
        hyper_schedules=_WD), 'TfLearnerMultiApplyNadam'),
    'amsgrad': (adam_family.AMSGrad.Params(), 'TfLearnerMultiApplyAMSGrad'),
    'amsgrad_uncorrected_wd': (adam_family.AMSGrad.Params().Set(
        bias_correction_mu=False, bias_correction_nu=False, beta2=0.99,
        decoupled_weight_decay=0.1, hyper_schedules=_WD),
                               'TfLearnerMultiApplyAMSGrad'),
}


def _Values(seed, scale=1.0):
  rng = np.random.default_rng(seed)
  return {k: (rng.standard_normal(s) * scale).astype(np.float32)
          for k, s in SHAPES.items()}


def _Ops(concrete):
  graph = concrete.graph
  types = {op.type for op in graph.get_operations()}
  for f in graph.as_graph_def().library.function:
    types.update(n.op for n in f.node_def)
  return types


def _Build(params):
  variables = {k: tf.Variable(v, name=k) for k, v in _Values(0).items()}
  opt = params.Copy().Set(name='opt').Instantiate()
  opt.Bind(list(variables.values()))
  return variables, opt


def _StepFn(variables, opt, jit=False):
  def Step(grads, lr, scale):
    vgs = NestedMap({k: VarGrad(variables[k], grads[k]) for k in SHAPES})
    if scale is None:
      opt.Apply(lr, vgs)
    else:
      opt.ApplyScaled(lr, vgs, scale)
    return tf.constant(0)
  return tf.function(Step, jit_compile=jit)


def _Inputs(i, scaled):
  grads = {k: tf.constant(v) for k, v in _Values(100 + i).items()}
  scale = tf.constant(SCALES[i]) if scaled else None
  return grads, tf.constant(RATES[i]), scale


def _State(variables, opt):
  out = {k: v.numpy() for k, v in variables.items()}
  out.update({'%s/%s' % (k, n): s.numpy() for k, v in variables.items()
              for n, s in opt.GetSlots(v).items()})
  return out


def _Run(params, steps, fused, scaled, jit=False):
  """(state after `steps` steps, op types of the traced step)."""
  with kernels.Active() if fused else kernels.Disabled():
    variables, opt = _Build(params)
    step = _StepFn(variables, opt, jit)
    ops = _Ops(step.get_concrete_function(*_Inputs(0, scaled)))
    for i in range(steps):
      step(*_Inputs(i, scaled))
  return _State(variables, opt), ops


def _AssertSame(a, b):
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize('scaled', [True, False])
@pytest.mark.parametrize('rule', sorted(RULES))
def test_fused_apply_equals_pure_tf_bitwise(rule, scaled):
  params, op = RULES[rule]
  fused, ops_f = _Run(params, 5, fused=True, scaled=scaled)
  plain, ops_p = _Run(params, 5, fused=False, scaled=scaled)
  assert op in ops_f and op not in ops_p
  _AssertSame(fused, plain)
  start = _Values(0)
  assert all(not np.array_equal(fused[k], start[k]) for k in SHAPES)


def test_lion_by_hand_with_decay():
  # One element, two steps of Lion (beta1 0.9, beta2 0.99, wd 0.5, lr 0.1):
  # m0 = 0, g = 2: c = 0.2 > 0, w = 1 - 0.1 * 1 - 0.05 * 1 = 0.85,
  # m = 0.02; g = -3: c = 0.018 - 0.3 < 0, w = 0.85 + 0.1 - 0.05 * 0.85
  # = 0.9075, m = 0.0198 - 0.03 = -0.0102.
  w = tf.Variable([1.0], name='w')
  opt = lion.Lion.Params().Set(name='opt', decoupled_weight_decay=0.5)
  opt = opt.Instantiate()
  opt.Bind([w])

  @tf.function
  def Step(g):
    opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, g)))

  assert 'TfLearnerMultiApplyLion' in _Ops(
      Step.get_concrete_function(tf.constant([2.0])))
  Step(tf.constant([2.0]))
  np.testing.assert_allclose(w.numpy(), [0.85], rtol=1e-6)
  Step(tf.constant([-3.0]))
  np.testing.assert_allclose(w.numpy(), [0.9075], rtol=1e-6)
  np.testing.assert_allclose(opt.GetSlots(w)['m'].numpy(), [-0.0102],
                             rtol=1e-5)


@pytest.mark.parametrize('rule', ['lion_scheduled_wd', 'nadam_dozat_wd',
                                  'amsgrad'])
def test_checkpoint_written_by_one_path_restores_into_the_other(rule,
                                                                tmp_path):
  params, _ = RULES[rule]
  ref, _ = _Run(params, 3, fused=False, scaled=True)
  for first_fused in (True, False):
    with kernels.Active() if first_fused else kernels.Disabled():
      variables, opt = _Build(params)
      step = _StepFn(variables, opt)
      step(*_Inputs(0, True))
      step(*_Inputs(1, True))
    path = tf.train.Checkpoint(v=variables, opt=opt).save(
        str(tmp_path / ('%s%d' % (rule, first_fused))))
    with kernels.Disabled() if first_fused else kernels.Active():
      variables2, opt2 = _Build(params)
      tf.train.Checkpoint(v=variables2, opt=opt2).restore(
          path).assert_consumed()
      _StepFn(variables2, opt2)(*_Inputs(2, True))
    assert int(opt2.num_updates.numpy()) == 3
    _AssertSame(_State(variables2, opt2), ref)


@pytest.mark.parametrize('rule', ['lion_scheduled_wd', 'nadam', 'amsgrad'])
def test_under_xla_the_pure_tf_path_runs(rule):
  # jit_compile: the custom op cannot compile, so the pure-TF path runs
  # (XLA may fuse and round differently: close, not bitwise).
  params, op = RULES[rule]
  xla, ops = _Run(params, 3, fused=True, scaled=True, jit=True)
  plain, _ = _Run(params, 3, fused=False, scaled=True)
  assert op not in ops
  for k in plain:
    np.testing.assert_allclose(xla[k], plain[k], rtol=2e-5, atol=1e-6,
                               err_msg=k)


@pytest.mark.parametrize('rule', ['lion', 'nadam', 'amsgrad'])
def test_weight_measure_equals_the_sum_squares_op_bitwise(rule):
  params, _ = RULES[rule]
  variables, opt = _Build(params)
  ws = list(variables.values())
  _, total, _ = kernels.HalfSumSquares([tf.identity(w) for w in ws])
  measure = kernels.WeightMeasure()
  grads = _Values(7)
  opt.Apply(tf.constant(0.01), NestedMap(
      {k: VarGrad(variables[k], tf.constant(grads[k])) for k in SHAPES}),
            _measure=measure)
  assert measure.variables == {id(w) for w in ws}
  assert float(measure.Total()) == float(total) != 0.0


def test_a_subclass_that_changes_the_rule_keeps_the_pure_tf_path():
  class Changed(adam_family.Nadam):

    def _Step(self, s, w, g, slots):
      return super()._Step(s, w, g * 2., slots)

  opt = Changed(adam_family.Nadam.Params().Set(name='c'))
  w = tf.Variable([1.0])
  opt.Bind([w])
  reason = opt.FusedApplyReason([VarGrad(w, tf.constant([1.0]))])
  assert reason == 'Changed overrides _Step of Nadam'


def test_shape_mismatch_is_a_clear_error():
  w, m = tf.Variable(tf.zeros([3])), tf.Variable(tf.zeros([4]))
  with pytest.raises(tf.errors.InvalidArgumentError, match='slot group 1'):
    kernels.ApplyLion([w], [m], [tf.ones([3])],
                      [tf.constant(x) for x in (0.1, 0.9, 0.1, 0.99, 0.01)],
                      None, tf.constant(0.0), [False])


SCHEDULE_FREE = {
    'sf_sgd': (schedule_free.ScheduleFreeSGD.Params().Set(
        warmup_steps=2, decoupled_weight_decay=0.01),
               'TfLearnerMultiApplyScheduleFreeSGD'),
    'sf_adamw': (schedule_free.ScheduleFreeAdamW.Params().Set(
        warmup_steps=3, warmup_form='reference', r=1.0,
        decoupled_weight_decay=0.05), 'TfLearnerMultiApplyScheduleFreeAdamW'),
    'sf_adamw_plain': (schedule_free.ScheduleFreeAdamW.Params(),
                       'TfLearnerMultiApplyScheduleFreeAdamW'),
}


@pytest.mark.parametrize('scaled', [True, False])
@pytest.mark.parametrize('rule', sorted(SCHEDULE_FREE))
def test_schedule_free_fused_equals_pure_tf_bitwise(rule, scaled):
  params, op = SCHEDULE_FREE[rule]
  fused, ops_f = _Run(params, 5, fused=True, scaled=scaled)
  plain, ops_p = _Run(params, 5, fused=False, scaled=scaled)
  assert op in ops_f and op not in ops_p
  _AssertSame(fused, plain)
  start = _Values(0)
  assert all(not np.array_equal(fused[k + '/x'], start[k]) for k in SHAPES)


def test_schedule_free_checkpoint_crosses_paths(tmp_path):
  params, _ = SCHEDULE_FREE['sf_adamw']
  ref, _ = _Run(params, 3, fused=False, scaled=True)
  for first_fused in (True, False):
    with kernels.Active() if first_fused else kernels.Disabled():
      variables, opt = _Build(params)
      step = _StepFn(variables, opt)
      step(*_Inputs(0, True))
      step(*_Inputs(1, True))
    path = tf.train.Checkpoint(v=variables, opt=opt).save(
        str(tmp_path / ('sf%d' % first_fused)))
    with kernels.Disabled() if first_fused else kernels.Active():
      variables2, opt2 = _Build(params)
      tf.train.Checkpoint(v=variables2, opt=opt2).restore(
          path).assert_consumed()
      _StepFn(variables2, opt2)(*_Inputs(2, True))
    _AssertSame(_State(variables2, opt2), ref)


def test_schedule_free_subclass_with_another_direction_is_not_fused():
  class Signed(schedule_free.ScheduleFreeSGD):

    def _Step(self, s, w, g, slots):
      return super()._Step(s, w, tf.sign(g), slots)

  opt = Signed(schedule_free.ScheduleFreeSGD.Params().Set(name='s'))
  w = tf.Variable([1.0])
  opt.Bind([w])
  assert opt.FusedApplyReason([VarGrad(w, tf.constant([1.0]))]) == (
      'Signed overrides _Step of ScheduleFreeSGD')


@pytest.mark.parametrize('rule', ['lion', 'amsgrad', 'nadam'])
def test_zeros_and_nan_give_tf_numbers(rule):
  # tf.sign gives +0 for -0 and NaN for NaN; tf.maximum keeps a NaN from
  # either side: the kernels' selects must agree (NaN compares equal in
  # assert_array_equal). A NaN step then a finite one.
  params, _ = RULES[rule]
  g = np.zeros(40, np.float32)
  g[1], g[2], g[3], g[4] = -0.0, np.nan, 1.0, -2.0
  out = []
  for fused in (True, False):
    with kernels.Active() if fused else kernels.Disabled():
      w = tf.Variable(np.linspace(-1, 1, 40).astype(np.float32), name='w')
      opt = params.Copy().Set(name='opt').Instantiate()
      opt.Bind([w])

      def Step(x, w=w, opt=opt):
        opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, x)))

      step = tf.function(Step)
      step(tf.constant(g))
      step(tf.constant(-g[::-1]))
      out.append(_State({'w': w}, opt))
  _AssertSame(out[0], out[1])
  assert np.isnan(out[0]['w'][2]) and np.isfinite(out[0]['w'][0])
