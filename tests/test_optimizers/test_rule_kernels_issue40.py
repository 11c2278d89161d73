"""Issue 40's fused kernels (AdEMAMix, simplified AdEMAMix, COCOB, MADGRAD)
against their pure-TF path (multi_tensor_rules.cc).

As test_rule_kernels.py: the same steps traced with the fused op (asserted
in the graph) and under `kernels.Disabled()` (asserted absent), bit for
bit, MADGRAD too (its cube root is one formula of plain float32 operations,
`madgrad.CubeRoot`, that the kernel repeats in its order). The steps change
the rate, the clip scale and scheduled hyperparameters.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers.rules import ademamix
from learner.optimizers.rules import cocob
from learner.optimizers.rules import madgrad
from learner.optimizers.rules import simplified_ademamix
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
import test_rule_kernels as base_cases


# The autouse fixture of test_rule_kernels.py: the fused path on, built.
fused_on = base_cases.fused_on
_Linear = base_cases._Linear
_WD = base_cases._WD

# name -> (params, fused op type); all bit for bit.
EXACT = {
    'ademamix': (ademamix.AdEMAMix.Params(), 'TfLearnerMultiApplyAdEMAMix'),
    'ademamix_scheduled_wd': (ademamix.AdEMAMix.Params().Set(
        epsilon=1e-6, hyper_schedules=dict(
            _WD, alpha=_Linear(0.0, 5.0, 4), beta3=_Linear(0.9, 0.999, 4),
            beta1=_Linear(0.8, 0.9, 4))), 'TfLearnerMultiApplyAdEMAMix'),
    'simplified_ademamix': (
        simplified_ademamix.SimplifiedAdEMAMix.Params(),
        'TfLearnerMultiApplySimplifiedAdEMAMix'),
    'simplified_ademamix_alpha_wd': (
        simplified_ademamix.SimplifiedAdEMAMix.Params().Set(
            alpha=2.0, beta1=0.9, hyper_schedules=dict(
                _WD, beta2=_Linear(0.9, 0.99, 4))),
        'TfLearnerMultiApplySimplifiedAdEMAMix'),
    'cocob': (cocob.COCOB.Params(), 'TfLearnerMultiApplyCOCOB'),
    'cocob_alpha_eps': (cocob.COCOB.Params().Set(alpha=2.0, epsilon=1e-3),
                        'TfLearnerMultiApplyCOCOB'),
    'madgrad': (madgrad.MADGRAD.Params(), 'TfLearnerMultiApplyMADGRAD'),
    'madgrad_momentum_wd': (madgrad.MADGRAD.Params().Set(
        momentum=0.5, epsilon=1e-4, hyper_schedules=_WD),
                            'TfLearnerMultiApplyMADGRAD'),
}


@pytest.mark.parametrize('scaled', [True, False])
@pytest.mark.parametrize('rule', sorted(EXACT))
def test_fused_apply_equals_pure_tf(rule, scaled):
  params, op = EXACT[rule]
  fused, ops_f = base_cases._Run(params, 5, fused=True, scaled=scaled)
  plain, ops_p = base_cases._Run(params, 5, fused=False, scaled=scaled)
  assert op in ops_f and op not in ops_p
  base_cases._AssertSame(fused, plain)
  start = base_cases._Values(0)
  assert all(not np.array_equal(fused[k], start[k])
             for k in base_cases.SHAPES)


def _TwoSteps(params, g, fused, lr=0.1):
  """Two steps on one vector (g, then -g reversed); the state as numpy."""
  with kernels.Active() if fused else kernels.Disabled():
    w = tf.Variable(np.linspace(-1, 1, g.size).astype(np.float32), name='w')
    opt = params.Copy().Set(name='opt').Instantiate()
    opt.Bind([w])

    def Step(x):
      opt.Apply(tf.constant(lr), NestedMap(w=VarGrad(w, x)))

    step = tf.function(Step)
    step(tf.constant(g))
    step(tf.constant(-g[::-1]))
    return base_cases._State({'w': w}, opt)


@pytest.mark.parametrize('rule', sorted(EXACT))
def test_zeros_and_nan_give_tf_numbers(rule):
  # tf.maximum keeps a NaN from either side, tf.abs(-0) is +0, the cube
  # root of 0 is 0: the kernels' selects must agree (NaN compares equal in
  # the asserts).
  params, _ = EXACT[rule]
  g = np.zeros(40, np.float32)
  g[1], g[2], g[3], g[4] = -0.0, np.nan, 1.0, -2.0
  fused, plain = (_TwoSteps(params, g, f) for f in (True, False))
  base_cases._AssertSame(fused, plain)
  assert np.isnan(fused['w'][2]) and np.isfinite(fused['w'][0])


def test_madgrad_cube_root_over_the_float_range():
  # nu = lambda g^2 from 0 and underflowing (g = 1e-25) to 1e36 (g = 1e18),
  # and inf (g = 1e20: g^2 overflows): the kernel's root (CubeRoot) against
  # the pure-TF formula, through w, bit for bit. momentum 0: w = x0 - s /
  # (nu^(1/3) + eps).
  g = np.array([0.0] + [s * 10.0 ** k for k in range(-25, 19)
                        for s in (1.0, -3.7)] + [1e20], np.float32)
  params = madgrad.MADGRAD.Params().Set(momentum=0.0, epsilon=1e-30)
  fused, plain = (_TwoSteps(params, g, f, lr=1.0) for f in (True, False))
  base_cases._AssertSame(fused, plain)
  # By hand, one step at g = 8, lr 1: lambda = 1 + 1e-30 = 1 in float64.
  with kernels.Active():
    w = tf.Variable([0.25], name='w')
    opt = params.Copy().Set(name='o').Instantiate()
    opt.Bind([w])
    opt.Apply(tf.constant(1.0), NestedMap(w=VarGrad(w, tf.constant([8.0]))))
  # nu = 64, root 4, s = 8: w = 0.25 - 8 / 4 = -1.75.
  np.testing.assert_array_equal(w.numpy(), [-1.75])


@pytest.mark.parametrize('rule', ['madgrad', 'madgrad_momentum_wd'])
def test_madgrad_odd_sizes_and_wide_gradients_bitwise(rule):
  # Sizes off every vector width (1, 7, 1001, 3 x 37 x 5) and gradients
  # from 1e-20 to 1e15, so nu spans the float range: six steps, rate and
  # clip scale changing, both paths' states bit for bit.
  params, _ = EXACT[rule]
  shapes = {'a': (1,), 'b': (7,), 'c': (1001,), 'd': (3, 37, 5)}
  rng = np.random.default_rng(5)
  init = {k: rng.standard_normal(s).astype(np.float32)
          for k, s in shapes.items()}
  grads = [{k: (rng.standard_normal(s) * 10.0 ** rng.uniform(-20, 15, s))
                .astype(np.float32) for k, s in shapes.items()}
           for _ in range(6)]
  states = []
  for fused in (True, False):
    with kernels.Active() if fused else kernels.Disabled():
      ws = {k: tf.Variable(v, name=k) for k, v in init.items()}
      opt = params.Copy().Set(name='opt').Instantiate()
      opt.Bind(list(ws.values()))

      @tf.function
      def Step(g, lr, scale):
        opt.ApplyScaled(lr, NestedMap(
            {k: VarGrad(ws[k], g[k]) for k in shapes}), scale)

      for i, g in enumerate(grads):
        args = ({k: tf.constant(v) for k, v in g.items()},
                tf.constant(0.01 * (i + 1)), tf.constant(1.0 / (i + 1)))
        Step(*args)
      ops = base_cases._Ops(Step.get_concrete_function(*args))
      assert ('TfLearnerMultiApplyMADGRAD' in ops) == fused
      states.append(base_cases._State(ws, opt))
  base_cases._AssertSame(*states)
  assert all(np.isfinite(states[0][k]).all() for k in shapes)


@pytest.mark.parametrize('rule', ['cocob', 'madgrad_momentum_wd'])
def test_checkpoint_written_by_one_path_restores_into_the_other(rule,
                                                                tmp_path):
  # x0 is taken at the first update: by the fused op on one side, by the
  # pure-TF path on the other, then the other path continues.
  params, _ = EXACT[rule]
  ref, _ = base_cases._Run(params, 3, fused=False, scaled=True)
  for first_fused in (True, False):
    with kernels.Active() if first_fused else kernels.Disabled():
      variables, opt = base_cases._Build(params)
      step = base_cases._StepFn(variables, opt)
      step(*base_cases._Inputs(0, True))
      step(*base_cases._Inputs(1, True))
    path = tf.train.Checkpoint(v=variables, opt=opt).save(
        str(tmp_path / ('%s%d' % (rule, first_fused))))
    with kernels.Disabled() if first_fused else kernels.Active():
      variables2, opt2 = base_cases._Build(params)
      tf.train.Checkpoint(v=variables2, opt=opt2).restore(
          path).assert_consumed()
      base_cases._StepFn(variables2, opt2)(*base_cases._Inputs(2, True))
    base_cases._AssertSame(base_cases._State(variables2, opt2), ref)


@pytest.mark.parametrize('rule', ['ademamix', 'cocob', 'madgrad'])
def test_weight_measure_equals_the_sum_squares_op_bitwise(rule):
  params, _ = EXACT[rule]
  variables, opt = base_cases._Build(params)
  ws = list(variables.values())
  _, total, _ = kernels.HalfSumSquares([tf.identity(w) for w in ws])
  measure = kernels.WeightMeasure()
  grads = base_cases._Values(7)
  opt.Apply(tf.constant(0.01), NestedMap(
      {k: VarGrad(variables[k], tf.constant(grads[k]))
       for k in base_cases.SHAPES}), _measure=measure)
  assert measure.variables == {id(w) for w in ws}
  assert float(measure.Total()) == float(total) != 0.0


@pytest.mark.parametrize('rule', ['ademamix', 'simplified_ademamix'])
def test_lazy_sparse_update_keeps_the_pure_tf_path(rule):
  # A setting the kernels cannot run (rows of a tf.IndexedSlices): the
  # base's reason, and _Step on the rows (rows without a gradient stay).
  params, op = EXACT[rule]
  params = params.Copy().Set(name='opt', lazy_sparse_updates=True)
  w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3), name='w')
  opt = params.Instantiate()
  opt.Bind([w])
  grad = tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 2]),
                          tf.constant([4, 3]))
  assert opt.FusedApplyReason([VarGrad(w, grad)]) == (
      'lazy sparse update (lazy_sparse_updates=True)')

  @tf.function
  def Step():
    opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, grad)))

  assert op not in base_cases._Ops(Step.get_concrete_function())
  Step()
  np.testing.assert_array_equal(w.numpy()[[1, 3]], [[3, 4, 5], [9, 10, 11]])
  assert not np.array_equal(w.numpy()[0], [0, 1, 2])


@pytest.mark.parametrize('rule', ['cocob', 'madgrad'])
def test_float64_variables_keep_the_pure_tf_path(rule):
  params, _ = EXACT[rule]
  opt = params.Copy().Set(name='opt').Instantiate()
  w = tf.Variable(tf.ones([3], tf.float64), name='w')
  opt.Bind([w])
  reason = opt.FusedApplyReason([VarGrad(w, tf.ones([3], tf.float64))])
  assert 'not a float32 resource variable' in reason
