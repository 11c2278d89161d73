"""Lingvo 0.14.2's schedule tests, ported: same params, same expected numbers.

Every test below re-expresses one test of Lingvo's
`lingvo/core/schedule_test.py` (class LearningRateScheduleTest, at the
tensorflow/lingvo commit whose schedule.py is byte-identical to the 0.14.2
wheel's) and names it in its docstring. Differences in the harness only:
  * Lingvo evaluates `Value()` under `GlobalStepContext(step)`; here the
    step is passed as `Value(step)`.
  * A Lingvo test cluster of gpus=N / tpus=N (mode sync, trainer_client)
    means N splits; here `num_splits=N` / `num_replicas=N` is set.
  * DevBasedSchedule reads the evaler's history file in Lingvo; here the
    same (step, metric) records go through `UpdateWithMetric`.
Lingvo's `assertAllClose` default is rtol = atol = 1e-6 (tf.test); the same
tolerances are used unless Lingvo's test gives its own. Lingvo's expected
values were computed by Lingvo in float32; ours are float64 rounded to
float32, which agrees to well within those tolerances.
"""

import math

import numpy as np

import schedules as sch


def Values(schedule, steps):
  return np.array([schedule.Value(s).numpy() for s in steps], np.float64)


def Build(cls, **kw):
  return cls.Params().Set(**kw).Instantiate()


def Lin(start, limit):
  return sch.LinearSchedule.Params().Set(start=start, limit=limit)


def Close(got, want, rtol=1e-6, atol=1e-6):
  np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_constant():
  """schedule_test.py testConstant."""
  Close(Values(Build(sch.Constant, value=5), [0, 10, 100, 1000000]), [5.0] * 4)


def test_constant_one():
  """schedule_test.py testConstantOne."""
  Close(Values(Build(sch.ConstantOne), [0, 10, 100, 1000000]), [1.0] * 4)


def test_piecewise_constant():
  """schedule_test.py testPiecewiseConstant."""
  s = Build(sch.PiecewiseConstantSchedule, boundaries=[300000, 400000, 500000],
            values=[1.0, 0.1, 0.01, 0.001])
  Close(Values(s, [299999, 399999, 499999, 599999]), [1.0, 0.1, 0.01, 0.001])


def test_continuous_schedule():
  """schedule_test.py testContinuousSchedule."""
  s = Build(sch.ContinuousSchedule, start_step=1000, half_life_steps=100,
            min=0.1)
  Close(Values(s, [0, 500, 1000, 1100, 1200, 1300, 1400, 2000]),
        [1.0, 1.0, 1.0, 0.5, 0.25, 0.125, 0.1, 0.1])
  for step in range(1000, 1200, 25):
    a, b, c = Values(s, [step, step + 10, step + 100])
    assert a > b
    Close(a, 2 * c)


def test_continuous_schedule_can_override_start():
  """schedule_test.py testContinuousSchedule_CanOverrideStart."""
  s = Build(sch.ContinuousSchedule, initial_value=2.0, start_step=1000,
            half_life_steps=100)
  Close(Values(s, [0, 1000, 1100, 1200, 1300]), [2.0, 2.0, 1.0, 0.5, 0.25])


def test_stepwise_exponential_schedule():
  """schedule_test.py testStepwiseExponentialSchedule."""
  s = Build(sch.StepwiseExponentialSchedule, decay=0.5,
            num_steps_per_decay=1000)
  Close(Values(s, [0, 999, 1000, 1999, 2000]), [1, 1, .5, .5, .25])


_TRANSFORMER_STEPS = [0, 1000, 2000, 3000, 4000, 4500, 5000]


def _CheckPeakAndLinearWarmup(s):
  """The peak and linearity checks shared by Lingvo's Transformer tests."""
  v3990, v4000, v4010 = Values(s, [3990, 4000, 4010])
  assert v4000 > v3990 and v4000 > v4010
  for step in range(300, 4000, 200):
    lo, mid, hi = Values(s, [step - 10, step, step + 10])
    Close(2 * mid, lo + hi)


def test_transformer_schedule():
  """schedule_test.py testTransformerSchedule."""
  s = Build(sch.TransformerSchedule, warmup_steps=4000, model_dim=512)
  Close(Values(s, _TRANSFORMER_STEPS),
        [1.74693e-07, 0.000174867, 0.00034956, 0.000524253, 0.000698684,
         0.000658735, 0.000624937], rtol=1e-5, atol=1e-10)
  _CheckPeakAndLinearWarmup(s)


def test_transformer_schedule_custom_decay_factor():
  """schedule_test.py testTransformerSchedule_CustomDecayFactor.

  decay_factor is Lingvo's exponent: -0.8 gives (s+1)**-0.8 after warmup.
  """
  s = Build(sch.TransformerSchedule, warmup_steps=4000, model_dim=512,
            decay_factor=-0.8)
  Close(Values(s, _TRANSFORMER_STEPS),
        [1.450966e-08, 1.452417e-05, 2.903383e-05, 4.354349e-05,
         5.802700e-05, 5.281020e-05, 4.854221e-05], rtol=1e-5, atol=1e-12)
  _CheckPeakAndLinearWarmup(s)


def test_transformer_schedule_with_decay_end():
  """schedule_test.py testTransformerScheduleWithDecayEnd."""
  s = Build(sch.TransformerSchedule, warmup_steps=4000, model_dim=512,
            decay_end=5000)
  Close(Values(s, [0, 3000, 5000]), [1.74693e-07, 0.000524253, 0.000624937],
        rtol=1e-5, atol=1e-10)
  _CheckPeakAndLinearWarmup(s)
  v4999, v5000, v5001, v6000 = Values(s, [4999, 5000, 5001, 6000])
  assert v4999 > v5000
  assert v5001 == v5000 and v6000 == v5000


def test_transformer_schedule_with_start_step():
  """schedule_test.py testTransformerScheduleWithStartStep.

  The warmup follows the real step; only the decay is translated left.
  """
  ref = Build(sch.TransformerSchedule, warmup_steps=3000, model_dim=512)
  s = Build(sch.TransformerSchedule, warmup_steps=3000, model_dim=512,
            start_step=1000)
  # Lingvo's expected values are rounded to 3 digits (default tolerance).
  Close(Values(s, range(0, 4001, 1000)),
        [0, 0.000269, 0.000538, 0.000699, 0.000625])
  steps = list(range(3000, 8000, 1000))
  Close(Values(s, steps), Values(ref, [t + 1000 for t in steps]))


def test_transformer_schedule_no_warmup():
  """schedule_test.py testTransformerScheduleNoWarmUp."""
  s = Build(sch.TransformerScheduleNoWarmUp, decay_start=4000, model_dim=512)
  base = Build(sch.TransformerSchedule, warmup_steps=4000, model_dim=512)
  Close(Values(s, [0, 1000, 2000, 3000, 4000]), [0.000698684] * 5)
  Close(Values(s, [4500, 5000]), [0.000658735, 0.000624937])
  Close(Values(s, [4000, 4010, 5000]), Values(base, [4000, 4010, 5000]))


def test_transformer_schedule_cycle():
  """schedule_test.py testTransformerScheduleCycle.

  warmup_steps=0 is accepted (no warmup). Lingvo's loop,
  range(0, 1000, 10_000), visits step 0 only; the steps after it are ours,
  from the same definition cyc(step) = ref(step % 3000).
  """
  ref = Build(sch.TransformerSchedule, warmup_steps=0)
  cyc = Build(sch.TransformerSchedule, warmup_steps=0, cyclical_step=3000)
  Close(Values(cyc, [0]), Values(ref, [0]))
  Close(Values(ref, [0]), [512**-0.5])  # min(inf, 1**-0.5) / sqrt(512).
  steps = [1, 2999, 3000, 4500, 9001]
  Close(Values(cyc, steps), Values(ref, [t % 3000 for t in steps]))


def test_transformer_mlperf_schedule():
  """schedule_test.py testTransformerMLPerfSchedule."""
  s = Build(sch.TransformerMLPerfSchedule, warmup_steps=4000,
            warmup_init_fraction=.3, model_dim=512)
  base = Build(sch.TransformerSchedule, warmup_steps=4000, model_dim=512)
  warm = list(range(0, 4001, 1000))
  Close(Values(s, warm), .3 * 0.000698684 + .7 * Values(base, warm))
  Close(Values(s, [4000, 4010, 5000]), Values(base, [4000, 4010, 5000]))


def test_polynomial_schedule():
  """schedule_test.py testPolynomialLRSchedule."""
  s = Build(sch.PolynomialSchedule, power=2, start=(0, 0.),
            limit=(20000, 2.))
  Close(Values(s, [0, 10000, 20000]), [0.0, 0.5, 2.0])  # 2 * 0.5**2 = 0.5.
  assert s.Value(42).shape == ()


def test_polynomial_limit_origin_schedule():
  """schedule_test.py testPolynomialLimitOriginLRSchedule."""
  s = Build(sch.PolynomialSchedule, power=2, start=(0, 0.),
            limit=(20000, 2.), origin='limit')
  # 2 * (1 - (1 - r)**2) for r = 0, 1/4, 1/2, 3/4, 1.
  Close(Values(s, [0, 5000, 10000, 15000, 20000]),
        [0, 0.875, 1.5, 1.875, 2.0])
  assert s.Value(42).shape == ()


_SIX_PHASES = [1.0, 4.5, 8.0, 8.0, 8.0, 4.0, 2.0, 1.0, 0.5, 0.5]
_TEN_STEPS = list(range(0, 10000000, 1000000))


def test_combined_minimum_schedule():
  """schedule_test.py testCombinedLRSchedule."""
  s = Build(sch.CombinedMinimumSchedule, schedules=[
      Lin((0., 1.), (2000000, 8.)), Lin((2000000., 8.), (4000000, 8.)),
      sch.ExponentialSchedule.Params().Set(start=(4000000., 8.),
                                           limit=(8000000, 0.5))])
  Close(Values(s, _TEN_STEPS), _SIX_PHASES)


def _NumSplitSchedule(**kw):
  return Build(sch.LinearRampupExponentialDecayScaledByNumSplitSchedule,
               decay_start=32000000, decay_end=64000000, min=0.5, **kw)


def test_linear_rampup_exponential_decay_scaled_by_num_split():
  """schedule_test.py testLinearRampupExponentialDecayScaledByNumSplitSchedule
  (cluster gpus=8: num_splits=8)."""
  Close(Values(_NumSplitSchedule(warmup=250000, num_splits=8), _TEN_STEPS),
        _SIX_PHASES)


def test_linear_rampup_exponential_decay_scaled_by_num_split_warmup_init():
  """schedule_test.py
  testLinearRampupExponentialDecayScaledByNumSplitScheduleWarmUpInit."""
  s = _NumSplitSchedule(warmup=250000, warmup_init=0, num_splits=8)
  Close(Values(s, _TEN_STEPS), [0] + [4.0, 8.0] + _SIX_PHASES[3:])


def test_linear_rampup_exponential_decay_scaled_by_num_split_with_cap():
  """schedule_test.py
  testLinearRampupExponentialDecayScaledByNumSplitScheduleWithCap and
  ...WithNumSplits (num_splits=8 overrides the cluster's 32 splits; both
  expect the same values)."""
  s = _NumSplitSchedule(warmup=250000, max=5.0, num_splits=8)
  Close(Values(s, _TEN_STEPS),
        [1.0, 4.5, 5.0, 5.0, 5.0, 4.0, 2.0, 1.0, 0.5, 0.5])


def test_linear_rampup_exponential_decay_scaled_by_num_split_no_warmup():
  """schedule_test.py
  testLinearRampupExponentialDecayScaledByNumSplitScheduleNoWarmUp."""
  s = _NumSplitSchedule(warmup=0, num_splits=8)
  Close(Values(s, _TEN_STEPS), [8.0] * 5 + [4.0, 2.0, 1.0, 0.5, 0.5])


def test_linear_rampup_exponential_decay_scaled_by_num_split_exp_only():
  """schedule_test.py
  testLinearRampupExponentialDecayScaledByNumSplitScheduleExpOnly."""
  s = Build(sch.LinearRampupExponentialDecayScaledByNumSplitSchedule,
            warmup=0, decay_start=0, decay_end=32000000, min=0.5,
            num_splits=8)
  Close(Values(s, range(0, 6000000, 1000000)),
        [8.0, 4.0, 2.0, 1.0, 0.5, 0.5])


def test_linear_rampup_sqrt_decay():
  """schedule_test.py testLinearRampupSqrtDecay (Lingvo's atol 1e-3)."""
  s = Build(sch.LinearRampupSqrtDecay, warmup_steps=100, peak=2.0)
  Close(Values(s, [0, 10, 50, 100, 200, 500, 1000]),
        [0.02, 0.2, 1.0, 2.0, 1.414, 0.894, 0.632], atol=1e-3)


def test_linear_rampup_sqrt_decay_by_batch_size_and_replicas():
  """schedule_test.py testLinearRampupSqrtDecayByBatchSizeAndReplicasSchedule
  (cluster gpus=10: num_replicas=10)."""
  s = Build(sch.LinearRampupSqrtDecayByBatchSizeAndReplicas,
            warmup_examples=100000, batch_size=100, num_replicas=10)
  Close(Values(s, [-1, 49, 99, 399, 1599]), [0.0, 0.05, 0.1, 0.05, 0.025])


def test_ema_decay_schedule():
  """schedule_test.py testEmaDecaySchedule."""
  s = Build(sch.EmaDecaySchedule, ema_decay=0.9999)
  Close(Values(s, range(0, 130000, 25000)),
        [0.1, 0.99964017, 0.99982005, 0.99988, 0.9999, 0.9999])


def test_dev_based_schedule():
  """schedule_test.py testDevBasedSchedule (history via UpdateWithMetric).

  Lingvo's variable names (LRSched/cur_factor/var:0) differ: docs/lingvo.md.
  """
  s = Build(sch.DevBasedSchedule, tolerance=1.0, window=2, decay=0.5,
            min_factor=0.20)
  history = [(1, 10.0), (2, 5.0), (5, 4.0), (6, 4.0), (9, 4.0), (10, 3.9),
             (13, 3.0)]
  got = []
  for step, metric in history:
    s.UpdateWithMetric(step, metric)
    got.append(float(s.Value(0).numpy()))
  Close(got, [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.20])


def test_linear_rampup_piecewise_constant_schedule():
  """schedule_test.py testLinearRampupPiecewiseConstantSchedule (tpus=8)."""
  s = Build(sch.LinearRampupPiecewiseConstantSchedule,
            boundaries=[40, 64, 80, 96], lrs=[1.0, 0.1, 0.01, 0.001],
            num_splits=8)
  Close(Values(s, range(15)),
        [0.0, 1.6, 3.2, 4.8, 6.4, 8.0, 8.0, 8.0, 0.8, 0.8, 0.08, 0.08, 0.008,
         0.008, 0.008])


_C1 = math.cos(math.pi / 4) + 2.   # 2.7071068
_C3 = math.cos(math.pi * 3 / 4) + 2.   # 1.2928932
_C5 = math.cos(math.pi * 5 / 4) + 2.   # 1.2928932


def _Cosine(**kw):
  return Build(sch.CosineSchedule, initial_value=3.0, final_value=1.0,
               total_steps=400000, **kw)


def test_cosine_schedule_no_cycle():
  """schedule_test.py testCosineSchedule, case NoCycle (half_cycle default)."""
  Close(Values(_Cosine(cyclical=False), range(0, 600000, 100000)),
        [3.0, _C1, 2.0, _C3, 1.0, 1.0])


def test_cosine_schedule_cycle_by_half():
  """schedule_test.py testCosineSchedule, case CycleByHalf: restart at T."""
  Close(Values(_Cosine(cyclical=True, half_cycle=True),
               range(0, 600000, 100000)),
        [3.0, _C1, 2.0, _C3, 3.0, _C1])


def test_cosine_schedule_cycle_by_full():
  """schedule_test.py testCosineSchedule, case CycleByFull: no restart, the
  angle goes on past pi."""
  Close(Values(_Cosine(cyclical=True, half_cycle=False),
               range(0, 600000, 100000)),
        [3.0, _C1, 2.0, _C3, 1.0, _C5])


def _RampupCosineValues(cyclical):
  s = Build(sch.LinearRampupCosineSchedule, warmup_steps=200,
            initial_value=3.0, final_value=1.0, total_steps=400000,
            cyclical=cyclical, num_splits=1)
  return Values(s, [0, 100, 200, 100000, 200000, 300000, 399999, 400000,
                    500000])


def test_linear_rampup_cosine_schedule():
  """schedule_test.py testLinearRampupCosineSchedule(False)."""
  Close(_RampupCosineValues(False),
        [0.0, 1.5, 3.0, _C1, 2.0, _C3, 1.0, 1.0, 1.0])


def test_linear_rampup_cosine_schedule_cyclical():
  """schedule_test.py testLinearRampupCosineSchedule(True): restart at T."""
  Close(_RampupCosineValues(True),
        [0.0, 1.5, 3.0, _C1, 2.0, _C3, 1.0, 3.0, _C1])


def test_piecewise_schedule():
  """schedule_test.py testPiecewiseSchedule."""
  s = Build(sch.PiecewiseSchedule, boundaries=[20000], schedules=[
      Lin((0, 0.), (20000, 2.)),
      sch.CosineSchedule.Params().Set(initial_value=2.0, total_steps=40000)])
  Close(Values(s, range(0, 70000, 10000)),
        [0.0, 1.0, 2.0, math.cos(math.pi / 4) + 1., 1.0,
         math.cos(math.pi * 3 / 4) + 1., 0.0])


def _Cycle(pass_absolute_step):
  return Build(sch.CycleSchedule, steps=[6, 4],
               pass_absolute_step=pass_absolute_step,
               schedules=[Lin((0, 0.), (10, 1.)),
                          sch.Constant.Params().Set(value=5.0)])


def test_cycle_schedule_relative():
  """schedule_test.py testCycleSchedule, case RelCycle: step 10 is 10 % 10."""
  Close(Values(_Cycle(False), range(0, 13, 2)),
        [0.0, 0.2, 0.4, 5.0, 5.0, 0.0, 0.2])


def test_cycle_schedule_absolute():
  """schedule_test.py testCycleSchedule, case AbsCycle (the default)."""
  Close(Values(_Cycle(True), range(0, 13, 2)),
        [0.0, 0.2, 0.4, 5.0, 5.0, 1.0, 1.0])
  assert sch.CycleSchedule.Params().pass_absolute_step is True


def test_annealing_schedule():
  """schedule_test.py testAnnealingSchedule."""
  s = Build(sch.AnnealingSchedule, init=1, lower_bound=0.5, factor=0.8)
  Close(Values(s, range(5)), [1.0, 0.8, 0.64, 0.512, 0.5])


def test_inverse_sigmoid():
  """schedule_test.py testInverseSigmoid."""
  s = Build(sch.InverseSigmoid, k=10000)
  Close(Values(s, range(0, 200000, 25000)),
        [0.999900, 0.998783, 0.985376, 0.846880, 0.312242, 0.035928,
         0.003050, 0.000251])
