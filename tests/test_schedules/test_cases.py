"""Every case of docs/cases/schedules.md, with its id in the test name."""

import math

import numpy as np
import pytest
import tensorflow as tf

import schedules as sch


def Values(schedule, steps):
  """Evaluates `schedule` eagerly at each Python-int step."""
  return np.array([schedule.Value(s).numpy() for s in steps])


def Build(cls, **kw):
  return cls.Params().Set(**kw).Instantiate()


def Lin(start, limit):
  return sch.LinearSchedule.Params().Set(start=start, limit=limit)


def test_s1_constant_and_constant_one():
  s = Build(sch.Constant, value=5)
  np.testing.assert_allclose(Values(s, [0, 10, 100, 10**6]), [5.0] * 4)
  one = sch.ConstantOne.Params().Instantiate()
  np.testing.assert_allclose(Values(one, [0, 10, 100, 10**6]), [1.0] * 4)
  assert s.Value(3).dtype == tf.float32


def test_s2_piecewise_constant_boundary_takes_next_value():
  s = Build(sch.PiecewiseConstantSchedule, boundaries=[300000, 400000, 500000],
            values=[1, 0.1, 0.01, 0.001])
  np.testing.assert_allclose(
      Values(s, [299999, 300000, 399999, 499999, 599999]),
      [1.0, 0.1, 0.1, 0.01, 0.001], rtol=1e-5)


@pytest.mark.parametrize('kind', ['int', 'int32', 'int64'])
def test_s3_piecewise_constant_same_for_all_step_types(kind):
  s = Build(sch.PiecewiseConstantSchedule, boundaries=(1000, 2000, 3000),
            values=(1e-3, 2e-4, 3e-5, 4e-6))
  conv = {'int': int, 'int32': lambda x: tf.constant(x, tf.int32),
          'int64': lambda x: tf.constant(x, tf.int64)}[kind]
  steps = [0, 999, 1000, 1001, 1999, 2000, 3000, 4000]
  got = [s.Value(conv(x)).numpy() for x in steps]
  np.testing.assert_allclose(
      got, [1e-3, 1e-3, 2e-4, 2e-4, 2e-4, 3e-5, 4e-6, 4e-6], rtol=1e-5)


def test_s4_continuous_schedule_half_life_and_min():
  s = Build(sch.ContinuousSchedule, start_step=1000, half_life_steps=100,
            min=0.1)
  np.testing.assert_allclose(
      Values(s, [0, 500, 1000, 1050, 1100, 1200, 1300, 1400, 2000]),
      [1.0, 1.0, 1.0, 0.70711, 0.5, 0.25, 0.125, 0.1, 0.1], rtol=1e-5)
  # v(s) = 2 v(s + 100) on [1000, 1200).
  steps = list(range(1000, 1200, 25))
  np.testing.assert_allclose(Values(s, steps),
                             2 * Values(s, [x + 100 for x in steps]),
                             rtol=1e-5)


def test_s5_continuous_schedule_initial_value():
  s = Build(sch.ContinuousSchedule, initial_value=2.0, start_step=1000,
            half_life_steps=100)
  np.testing.assert_allclose(Values(s, [0, 1000, 1100, 1200, 1300]),
                             [2.0, 2.0, 1.0, 0.5, 0.25], rtol=1e-5)


def test_s6_continuous_schedule_defaults():
  s = sch.ContinuousSchedule.Params().Instantiate()
  np.testing.assert_allclose(
      Values(s, [400000, 500000, 600000, 1064386, 2000000]),
      [1, 0.5, 0.25, 0.01, 0.01], rtol=1e-5)


def test_s7_stepwise_exponential():
  s = Build(sch.StepwiseExponentialSchedule, decay=0.5,
            num_steps_per_decay=1000)
  np.testing.assert_allclose(Values(s, [0, 999, 1000, 1999, 2000, 3500]),
                             [1, 1, 0.5, 0.5, 0.25, 0.125], rtol=1e-5)


def test_s12_transformer_no_warmup_exact_at_decay_start():
  s = Build(sch.TransformerScheduleNoWarmUp, decay_start=4000, model_dim=512)
  peak = 1 / math.sqrt(512 * 4000)  # 6.987712e-4
  np.testing.assert_allclose(peak, 6.987712e-4, rtol=1e-6)
  np.testing.assert_allclose(Values(s, [0, 1, 1000, 3999]), [peak] * 4,
                             rtol=1e-6, atol=0)
  np.testing.assert_allclose(Values(s, [4000, 4500, 5000]),
                             [6.98684e-4, 6.58735e-4, 6.24937e-4],
                             rtol=1e-6, atol=0)


def test_s13_polynomial_origin_start_and_limit():
  s = Build(sch.PolynomialSchedule, power=2, start=(0, 0.), limit=(20000, 2.))
  np.testing.assert_allclose(Values(s, [0, 5000, 10000, 20000]),
                             [0, 0.125, 0.5, 2.0], rtol=1e-5)
  assert s.Value(42).shape.rank == 0
  s = Build(sch.PolynomialSchedule, power=2, start=(0, 0.), limit=(20000, 2.),
            origin='limit')
  np.testing.assert_allclose(Values(s, [0, 5000, 10000, 15000, 20000]),
                             [0, 0.875, 1.5, 1.875, 2.0], rtol=1e-5)


def test_s14_linear():
  s = Build(sch.LinearSchedule, start=(100, 0.1), limit=(200, 1.))
  np.testing.assert_allclose(
      Values(s, [0, 10, 20, 100, 120, 150, 200, 250]),
      [0.1, 0.1, 0.1, 0.1, 0.28, 0.55, 1.0, 1.0], rtol=1e-5)


def test_s15_exponential():
  s = Build(sch.ExponentialSchedule, start=(100, 1.), limit=(200, 0.1))
  np.testing.assert_allclose(Values(s, [0, 100, 120, 150, 200, 300]),
                             [1, 1, 0.6309573, 0.3162277, 0.1, 0.1],
                             rtol=1e-5)


def test_s16_combined_minimum():
  s = Build(sch.CombinedMinimumSchedule, schedules=[
      Lin((0, 1.), (2000000, 8.)),
      Lin((2000000, 8.), (4000000, 8.)),
      sch.ExponentialSchedule.Params().Set(start=(4000000, 8.),
                                           limit=(8000000, 0.5))])
  np.testing.assert_allclose(
      Values(s, range(0, 10000000, 1000000)),
      [1, 4.5, 8, 8, 8, 4, 2, 1, 0.5, 0.5], rtol=1e-5)


def test_s18_linear_rampup_exponential_decay():
  s = Build(sch.LinearRampupExponentialDecay, warmup=100, decay_start=200,
            decay_end=300, max=1, min=0.01)
  np.testing.assert_allclose(
      Values(s, [0, 10, 20, 100, 120, 150, 200, 250, 300, 350]),
      [0, 0.1, 0.2, 1, 1, 1, 1, 0.1, 0.01, 0.01], rtol=1e-5, atol=1e-7)


def test_s19_linear_rampup_sqrt_decay():
  s = Build(sch.LinearRampupSqrtDecay, peak=2, warmup_steps=100)
  np.testing.assert_allclose(
      Values(s, [0, 10, 50, 100, 200, 500, 1000]),
      [0.02, 0.2, 1, 2, 1.414, 0.894, 0.632], rtol=1e-3)


def test_s20_linear_rampup_sqrt_decay_by_batch_size_and_replicas():
  s = Build(sch.LinearRampupSqrtDecayByBatchSizeAndReplicas,
            warmup_examples=100000, batch_size=100, num_replicas=10)
  np.testing.assert_allclose(Values(s, [-1, 49, 99, 399, 1599]),
                             [0, 0.05, 0.1, 0.05, 0.025], rtol=1e-5)


def test_s21_ema_decay_schedule():
  s = Build(sch.EmaDecaySchedule, ema_decay=0.9999)
  np.testing.assert_allclose(
      Values(s, [0, 10, 25000, 50000, 75000, 100000, 125000]),
      [0.1, 0.55, 0.99964017, 0.99982005, 0.99988, 0.9999, 0.9999], rtol=1e-5)


def test_s22_linear_rampup_piecewise_constant():
  s = Build(sch.LinearRampupPiecewiseConstantSchedule,
            boundaries=[40, 64, 80, 96], lrs=[1, 0.1, 0.01, 0.001],
            num_splits=8)
  np.testing.assert_allclose(
      Values(s, range(15)),
      [0, 1.6, 3.2, 4.8, 6.4, 8, 8, 8, 0.8, 0.8, 0.08, 0.08, 0.008, 0.008,
       0.008], rtol=1e-5)


def test_s24_linear_rampup_cosine_not_cyclical():
  s = Build(sch.LinearRampupCosineSchedule, warmup_steps=200, initial_value=3,
            final_value=1, total_steps=400000)
  np.testing.assert_allclose(
      Values(s, [0, 100, 200, 100000, 200000, 300000, 399999, 400000,
                 500000]),
      [0, 1.5, 3, 2.70711, 2, 1.29289, 1, 1, 1], rtol=1e-5)


def test_s25_piecewise_schedule_pieces_see_relative_step():
  s = Build(sch.PiecewiseSchedule, boundaries=[20000], schedules=[
      Lin((0, 0.), (20000, 2.)),
      sch.CosineSchedule.Params().Set(initial_value=2, total_steps=40000)])
  np.testing.assert_allclose(
      Values(s, range(0, 70000, 10000)),
      [0, 1, 2, 1.7071068, 1, 0.2928932, 0], rtol=1e-5, atol=1e-7)


def test_s27_annealing_schedule():
  s = Build(sch.AnnealingSchedule, lower_bound=0.5, factor=0.8)
  np.testing.assert_allclose(Values(s, [0, 1, 2, 3, 4]),
                             [1, 0.8, 0.64, 0.512, 0.5], rtol=1e-5)


def test_s27_annealing_init_is_used():
  # Our fix: init is the value at step 0 (Lingvo ignored it).
  s = Build(sch.AnnealingSchedule, init=2.0, lower_bound=0.5, factor=0.5)
  np.testing.assert_allclose(Values(s, [0, 1, 2]), [2.0, 1.0, 0.5], rtol=1e-5)


def test_s29_dev_based_schedule_history():
  s = Build(sch.DevBasedSchedule, tolerance=1, window=2, decay=0.5,
            min_factor=0.2)
  history = [(1, 10), (2, 5), (5, 4), (6, 4), (9, 4), (10, 3.9), (13, 3.0)]
  expected = [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.2]
  got = []
  for step, metric in history:
    s.UpdateWithMetric(step, metric)
    got.append(s.Value(step + 1).numpy())
  np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_s29_dev_based_schedule_state_is_checkpointed(tmp_path):
  p = sch.DevBasedSchedule.Params().Set(tolerance=1, window=2, decay=0.5,
                                        min_factor=0.2)
  a = p.Instantiate()
  for step, metric in [(1, 10), (2, 5), (5, 4)]:
    a.UpdateWithMetric(step, metric)
  path = tf.train.Checkpoint(model=a).save(str(tmp_path / 'ckpt'))
  b = p.Instantiate()
  tf.train.Checkpoint(model=b).restore(path).assert_consumed()
  assert b.Value(0).numpy() == pytest.approx(0.5)
  assert int(b.vars.ref_step.numpy()) == 5
  # The resumed schedule continues the history exactly: (6, 4) keeps 0.5,
  # (9, 4) decays to 0.25.
  for step, metric, want in [(6, 4, 0.5), (9, 4, 0.25)]:
    assert b.UpdateWithMetric(step, metric).numpy() == pytest.approx(want)


def test_s30_sqrt_decay_defaults():
  s = sch.SqrtDecay.Params().Instantiate()
  np.testing.assert_allclose(Values(s, [0, 10000, 40000, 90000]),
                             [0.01, 0.01, 0.005, 0.003333333], rtol=1e-5)


def test_s30_sqrt_decay_to_zero_never_negative():
  s = sch.SqrtDecayToZero.Params().Instantiate()
  np.testing.assert_allclose(
      Values(s, [0, 10000, 25000, 50000, 100000]),
      [0.01, 0.01, 0.004624753, 0.001915635, 0], rtol=1e-5, atol=1e-9)
  later = Values(s, [100001, 150000, 10**6, 10**9])
  np.testing.assert_array_equal(later, [0.0, 0.0, 0.0, 0.0])


def test_s30_linear_rampup_decay_schedule():
  s = Build(sch.LinearRampupDecaySchedule, peak=100, end=300)
  np.testing.assert_allclose(Values(s, [0, 50, 100, 200, 300, 400]),
                             [0, 0.5, 1, 0.5, 0, 0], rtol=1e-5, atol=1e-7)


def test_c_warmup_first_step_trains():
  s = Build(sch.Warmup, warmup_steps=4,
            schedule=sch.Constant.Params().Set(value=1.0))
  np.testing.assert_allclose(Values(s, range(6)),
                             [0.25, 0.5, 0.75, 1.0, 1.0, 1.0], rtol=1e-6)


def test_c_warmup_first_step_with_warmup_init():
  s = Build(sch.Warmup, warmup_steps=4, warmup_init=0.1,
            schedule=sch.Constant.Params().Set(value=1.0))
  # 0.1 + 0.9 * step / 4.
  np.testing.assert_allclose(Values(s, range(6)),
                             [0.1, 0.325, 0.55, 0.775, 1.0, 1.0], rtol=1e-6)


@pytest.mark.parametrize('kind', ['int', 'int32', 'int64'])
def test_c_piecewise_dtype(kind):
  s = Build(sch.PiecewiseConstantSchedule, boundaries=[10, 20],
            values=[1.0, 0.1, 0.01])
  conv = {'int': int, 'int32': lambda x: tf.constant(x, tf.int32),
          'int64': lambda x: tf.constant(x, tf.int64)}[kind]
  got = [s.Value(conv(x)) for x in [0, 9, 10, 11, 20, 21]]
  assert all(v.dtype == tf.float32 for v in got)
  np.testing.assert_allclose([v.numpy() for v in got],
                             [1.0, 1.0, 0.1, 0.1, 0.01, 0.01], rtol=1e-6)


def test_c_int_step_formula_transformer_and_cosine_in_tf_function():
  tr = Build(sch.TransformerSchedule, warmup_steps=4000, model_dim=512)
  cos = Build(sch.CosineSchedule, initial_value=1.0, final_value=0.1,
              total_steps=10000)

  @tf.function
  def Both(step):
    return tr.Value(step), cos.Value(step)

  for step in [0, 1, 3999, 4000, 5000, 12345]:
    t, c = Both(tf.constant(step, tf.int64))
    s = np.float64(step)
    want_t = 512**-0.5 * min((s + 1) * 4000**-1.5, (s + 1)**-0.5)
    want_c = 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(1.0, s / 10000)))
    np.testing.assert_allclose(t.numpy(), want_t, rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), want_c, rtol=1e-6)


def test_c_serialize_transformer_finite_at_step_zero():
  s = sch.TransformerSchedule.Params().Instantiate()
  v = s.Value(0).numpy()
  assert np.isfinite(v) and v > 0
  np.testing.assert_allclose(v, 1.74693e-07, rtol=1e-5)  # Lingvo's test value.


def test_c_polynomial_from_initial_textbook_decay():
  s = Build(sch.PolynomialSchedule, power=2, start=(0, 1.0), limit=(4, 0.0),
            origin='limit')
  # (1 - t/4)**2.
  np.testing.assert_allclose(Values(s, range(6)),
                             [1.0, 0.5625, 0.25, 0.0625, 0.0, 0.0], rtol=1e-6)


def test_c_polynomial_from_initial_with_end_value_no_compounding():
  p = sch.PolynomialSchedule.Params().Set(power=2, start=(0, 1.0),
                                          limit=(4, 0.1), origin='limit')
  fresh = p.Instantiate()
  # Step 3 first, with no earlier calls: 0.1 + 0.9 * (1/4)**2.
  np.testing.assert_allclose(fresh.Value(3).numpy(), 0.15625, rtol=1e-6)
  np.testing.assert_allclose(Values(p.Instantiate(), range(5)),
                             [1.0, 0.60625, 0.325, 0.15625, 0.1], rtol=1e-6)
