"""The shape of the seeds' schedules and the options beyond the cases.

Continuity at warmup/decay joins, the peak at the documented step, values
clamped beyond the end, and hand-computed values of each option.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

import schedules as sch
from learner.training.cluster import distribution


def Values(schedule, steps):
  return np.array([schedule.Value(s).numpy() for s in steps], np.float64)


def Build(cls, **kw):
  return cls.Params().Set(**kw).Instantiate()


def Cosine(total, alpha=0.0):
  return sch.CosineDecay.Params().Set(total_steps=total, alpha=alpha)


# ---- Warmup -------------------------------------------------------------------


def test_warmup_shift_decay_child_starts_after_the_ramp():
  s = Build(sch.Warmup, warmup_steps=10, schedule=Cosine(100, alpha=0.1))
  v = Values(s, [0, 9, 10, 60, 110, 500])
  # Ramp (step + 1) / 10 of the child's step-0 value 1; then the child at
  # step - 10: cosine(50/100) = 0.1 + 0.9 * 0.5 = 0.55 at 60, alpha at 110.
  np.testing.assert_allclose(v, [0.1, 1.0, 1.0, 0.55, 0.1, 0.1], rtol=1e-6)


def test_warmup_without_shift_child_sees_absolute_step():
  s = Build(sch.Warmup, warmup_steps=10, shift_decay=False,
            schedule=Cosine(100))
  cos = lambda t: 0.5 * (1 + math.cos(math.pi * t / 100))
  np.testing.assert_allclose(
      Values(s, [0, 4, 9, 10, 50, 100]),
      [0.1 * cos(0), 0.5 * cos(4), cos(9), cos(10), 0.5, 0.0],
      rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize('shift', [True, False])
@pytest.mark.parametrize('init', [None, 0.0, 0.3])
def test_warmup_continuous_at_join_and_peak_at_documented_step(shift, init):
  w = 50
  s = Build(sch.Warmup, warmup_steps=w, warmup_init=init, shift_decay=shift,
            schedule=Cosine(1000))
  steps = np.arange(0, 3 * w)
  v = Values(s, steps)
  # The ramp rises by 1/w per step; the join adds no bigger jump.
  assert np.max(np.abs(np.diff(v))) <= 1.0 / w + 1e-6
  peak_step = int(steps[np.argmax(v)])
  if shift:
    # Full value reached at w - 1 without warmup_init, at w with it.
    assert peak_step == (w - 1 if init is None else w)
    np.testing.assert_allclose(v[peak_step], 1.0, rtol=1e-6)
  assert np.all(np.diff(v[w:]) <= 1e-7)  # Only the decay after the ramp.


def test_warmup_zero_steps_is_the_child():
  s = Build(sch.Warmup, warmup_steps=0, schedule=Cosine(10))
  np.testing.assert_allclose(Values(s, [0, 5, 10]), [1.0, 0.5, 0.0],
                             atol=1e-7)


# ---- StepDecay and CosineDecay: clamped, monotone, floored ---------------------


def test_step_decay_every_step_size_clamped_at_total_steps():
  s = Build(sch.StepDecay, step_size=10, factor=0.5, total_steps=35)
  np.testing.assert_allclose(
      Values(s, [-5, 0, 9, 10, 19, 20, 30, 35, 40, 1000, 10**9]),
      [1, 1, 1, 0.5, 0.5, 0.25, 0.125, 0.125, 0.125, 0.125, 0.125],
      rtol=1e-6)


def test_step_decay_boundaries_with_floor():
  s = Build(sch.StepDecay, boundaries=[10, 30, 50], factor=0.1, alpha=0.005)
  # 1, 0.1, 0.01, then 0.001 floored at 0.005.
  np.testing.assert_allclose(
      Values(s, [0, 9, 10, 29, 30, 49, 50, 10**7]),
      [1, 1, 0.1, 0.1, 0.01, 0.01, 0.005, 0.005], rtol=1e-6)


def test_cosine_decay_values_clamp_and_floor():
  s = Build(sch.CosineDecay, total_steps=100, alpha=0.2)
  # alpha + (1 - alpha) * 0.5 * (1 + cos(pi * t / 100)).
  want = [0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * min(t, 100) / 100))
          for t in [0, 25, 50, 75, 100]]
  np.testing.assert_allclose(Values(s, [0, 25, 50, 75, 100]), want, rtol=1e-6)
  np.testing.assert_allclose(Values(s, [101, 1000, 10**9]), [0.2] * 3,
                             rtol=1e-6)
  v = Values(s, range(0, 400, 7))
  assert np.all(np.diff(v) <= 1e-7) and np.min(v) >= 0.2 - 1e-7


# ---- Lingvo schedules: peaks, clamps, options ----------------------------------


def test_transformer_peak_at_warmup_and_linear_before():
  s = Build(sch.TransformerSchedule, warmup_steps=4000, model_dim=512)
  v = Values(s, [3998, 3999, 4000])
  assert v[1] > v[0] and v[1] > v[2]  # (s + 1) = W at step 3999.
  # Lingvo's test values.
  np.testing.assert_allclose(Values(s, [1000, 4000, 4500, 5000]),
                             [0.000174867, 0.000698684, 0.000658735,
                              0.000624937], rtol=1e-5)
  for step in range(300, 4000, 700):
    a, b, c = Values(s, [step - 10, step, step + 10])
    np.testing.assert_allclose(2 * b, a + c, rtol=1e-6)


def test_transformer_decay_end_is_flat_after():
  s = Build(sch.TransformerSchedule, warmup_steps=4000, model_dim=512,
            decay_end=5000)
  v = Values(s, [4999, 5000, 5001, 6000, 10**8])
  assert v[0] > v[1]
  np.testing.assert_allclose(v[1:], [0.000624937] * 4, rtol=1e-5)


def test_transformer_start_step_cyclical_step_and_decay_factor():
  # Lingvo 0.14.2 schedule.py TransformerSchedule: decay_factor d is the
  # exponent (-1 here) and start_step k shifts only the decay term:
  # 16**-0.5 * min((s+1) * 8**(d-1), (s+k+1)**d), s = step mod 50.
  base = Build(sch.TransformerSchedule, warmup_steps=8, model_dim=16,
               decay_factor=-1.0)
  s = Build(sch.TransformerSchedule, warmup_steps=8, model_dim=16,
            decay_factor=-1.0, start_step=3, cyclical_step=50)
  cyc = np.array([0, 3, 10, 52, 53, 60]) % 50
  np.testing.assert_allclose(
      Values(s, [0, 3, 10, 52, 53, 60]),
      0.25 * np.minimum((cyc + 1) / 64, 1 / (cyc + 4)), rtol=1e-6)
  # d = -1: 16**-0.5 * min((s+1) / 8**2, 1 / (s+1)).
  np.testing.assert_allclose(Values(base, [0, 7, 15]),
                             [0.25 / 64, 0.25 / 8, 0.25 / 16], rtol=1e-6)


def test_transformer_mlperf_warmup_from_fraction():
  s = Build(sch.TransformerMLPerfSchedule, warmup_steps=100,
            warmup_init_fraction=0.1, model_dim=4)
  # 4**-0.5 * min(1, 0.1 + 0.9 s / 100) / sqrt(max(s, 100)).
  np.testing.assert_allclose(Values(s, [0, 50, 100, 400]),
                             [0.5 * 0.1 / 10, 0.5 * 0.55 / 10, 0.5 / 10,
                              0.5 / 20], rtol=1e-6)


def test_cosine_schedule_cyclical_restarts_and_half_cycle():
  cyc = Build(sch.CosineSchedule, initial_value=2.0, final_value=0.5,
              total_steps=30, cyclical=True)
  full = lambda t: 0.5 + 1.5 * 0.5 * (1 + math.cos(math.pi * t / 30))
  np.testing.assert_allclose(Values(cyc, [0, 15, 29, 30, 45, 75]),
                             [full(0), full(15), full(29), 2.0, full(15),
                              full(15)], rtol=1e-6)
  # Lingvo 0.14.2 schedule.py CosineSchedule: cyclical with half_cycle=False
  # runs the angle on (period 2 pi): down over 30 steps, back up over 30.
  half = Build(sch.CosineSchedule, total_steps=30, cyclical=True,
               half_cycle=False)
  np.testing.assert_allclose(Values(half, [0, 10, 15, 30, 45, 60]),
                             [1.0, 0.5 * (1 + math.cos(math.pi / 3)), 0.5,
                              0.0, 0.5, 1.0], rtol=1e-6, atol=1e-7)


def test_linear_rampup_cosine_continuous_at_warmup_join():
  s = Build(sch.LinearRampupCosineSchedule, warmup_steps=200,
            initial_value=3, final_value=1, total_steps=400000)
  v = Values(s, [198, 199, 200, 201, 202])
  assert np.max(np.abs(np.diff(v))) <= 3 / 200 + 1e-6
  assert int(np.argmax(Values(s, range(150, 260)))) + 150 == 200


def test_cycle_schedule_switches_and_repeats():
  s = Build(sch.CycleSchedule, steps=[5, 3], schedules=[
      sch.Constant.Params().Set(value=1.0),
      sch.LinearSchedule.Params().Set(start=(0, 0.5), limit=(100, 0.0))])
  # Period 8: steps 0-4 the constant, 5-7 the linear at the absolute step.
  np.testing.assert_allclose(
      Values(s, [0, 4, 5, 7, 8, 13, 20]),
      [1, 1, 0.5 * 0.95, 0.5 * 0.93, 1, 0.5 * 0.87, 1], rtol=1e-6)


def test_inverse_sigmoid_values():
  s = Build(sch.InverseSigmoid, k=10.0)
  want = [10 / (10 + math.exp(t / 10)) for t in [0, 23, 100]]
  np.testing.assert_allclose(Values(s, [0, 23, 100]), want, rtol=1e-6)


@pytest.mark.parametrize('key,cls,kw,end,final', [
    ('sqrt_to_zero', sch.SqrtDecayToZero, {}, 100000, 0.0),
    ('polynomial', sch.PolynomialSchedule,
     dict(power=2, start=(0, 1.0), limit=(4, 0.1), origin='limit'), 4, 0.1),
    ('exponential', sch.ExponentialSchedule,
     dict(start=(100, 1.), limit=(200, 0.1)), 200, 0.1),
    ('rampup_decay', sch.LinearRampupDecaySchedule, dict(peak=100, end=300),
     300, 0.0),
    ('cosine', sch.CosineSchedule, dict(total_steps=50, final_value=0.3), 50,
     0.3),
    ('no_warmup_decay_end', sch.TransformerScheduleNoWarmUp,
     dict(decay_start=4000, model_dim=512, decay_end=5000), 5000,
     0.000624937),
])
def test_value_clamped_beyond_the_end(key, cls, kw, end, final):
  s = Build(cls, **kw)
  v = Values(s, [end, end + 1, 2 * end, 10**9])
  np.testing.assert_allclose(v, [final] * 4, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize('cls,kw,peak_step', [
    (sch.LinearRampupSqrtDecay, dict(peak=2, warmup_steps=100), 100),
    (sch.LinearRampupDecaySchedule, dict(peak=100, end=300), 100),
    (sch.TransformerMLPerfSchedule, dict(warmup_steps=100, model_dim=4), 100),
    (sch.LinearRampupSqrtDecayByBatchSizeAndReplicas,
     dict(warmup_examples=100000, batch_size=100, num_replicas=10), 99),
])
def test_peak_at_documented_step(cls, kw, peak_step):
  s = Build(cls, **kw)
  steps = np.arange(0, 3 * peak_step)
  assert int(steps[np.argmax(Values(s, steps))]) == peak_step


# ---- LinearScaling and the ResNet-50 recipe -------------------------------------


def test_linear_scaling_counts_replicas_and_micro_batches():
  child = sch.Constant.Params().Set(value=0.5)
  s = Build(sch.LinearScaling, batch_size=32, num_replicas=2, num_batches=4,
            schedule=child)
  assert s.global_batch_size == 256 and s.scale == 1.0
  s = Build(sch.LinearScaling, batch_size=64, num_replicas=4, num_batches=2,
            schedule=child)
  # 64 * 4 * 2 = 512 examples per update: k = 2.
  np.testing.assert_allclose(Values(s, [0, 100]), [1.0, 1.0], rtol=1e-6)
  s = Build(sch.LinearScaling, global_batch_size=1024, rule='sqrt',
            schedule=child)
  np.testing.assert_allclose(Values(s, [0]), [0.5 * 2.0], rtol=1e-6)


def test_linear_scaling_num_replicas_none_reads_the_strategy():
  strategy = distribution.CreateStrategy('mirrored')
  with strategy.scope():
    s = Build(sch.LinearScaling, batch_size=128)
  assert s.global_batch_size == 256 and s.scale == 1.0
  s = Build(sch.LinearScaling, batch_size=128)  # Outside: one replica.
  assert s.scale == 0.5


def test_resnet50_recipe_step_decay_in_applied_updates():
  # 100 batches per epoch, accumulation of 2: 50 applied updates per epoch.
  # Global batch 64 * 4 * 2 = 512: k = 2.
  lr, p = sch.ResNet50Schedule(steps_per_epoch=100, batch_size=64,
                               num_replicas=4, num_batches=2)
  assert lr == 0.1
  s = p.Instantiate()
  # Warmup 5 epochs = 250 updates: (step + 1) / 250 * 2 ; then 2, x0.1 at
  # epochs 30, 60, 80 = updates 1500, 3000, 4000 (absolute steps).
  np.testing.assert_allclose(
      Values(s, [0, 124, 249, 250, 1499, 1500, 3000, 4000, 10**6]),
      [2 / 250, 1.0, 2.0, 2.0, 2.0, 0.2, 0.02, 0.002, 0.002], rtol=1e-5)
  assert s.Boundaries() == [249, 1500, 3000, 4000]


def test_resnet50_recipe_cosine_starts_after_warmup():
  lr, p = sch.ResNet50Schedule(steps_per_epoch=10, global_batch_size=256,
                               warmup_epochs=2, decay='cosine',
                               total_epochs=12, alpha=0.0)
  s = p.Instantiate()
  # 20 warmup updates, then cosine over 100 updates, k = 1.
  np.testing.assert_allclose(Values(s, [0, 19, 20, 70, 120, 500]),
                             [0.05, 1.0, 1.0, 0.5, 0.0, 0.0], atol=1e-6)


def test_epochs_to_updates():
  assert sch.EpochsToUpdates(5, steps_per_epoch=100, num_batches=4) == 125
  assert sch.EpochsToUpdates(0.5, steps_per_epoch=10) == 5


# ---- DevBasedSchedule ------------------------------------------------------------


def test_dev_based_maximise_and_value_under_xla():
  # Lingvo 0.14.2's param is metric_history (minimize), not metric_mode.
  s = Build(sch.DevBasedSchedule, window=2, decay=0.5, min_factor=0.1,
            **{'metric_history.minimize': False})
  xla = tf.function(s.Value, jit_compile=True)
  # Accuracy 0.5 @1, 0.6 @2 (better), 0.6 @5 (not better, 5 - 2 >= 2: decay).
  for step, acc, want in [(1, 0.5, 1.0), (2, 0.6, 1.0), (5, 0.6, 0.5)]:
    s.UpdateWithMetric(step, acc)
    assert xla(tf.constant(step, tf.int64)).numpy() == pytest.approx(want)
  # The mode argument overrides params: a lower value is now the better one.
  s.UpdateWithMetric(6, 0.1, mode='minimize')
  assert int(s.vars.best_step.numpy()) == 6


def test_dev_based_update_inside_tf_function():
  s = Build(sch.DevBasedSchedule, tolerance=1, window=2, decay=0.5,
            min_factor=0.2)
  update = tf.function(s.UpdateWithMetric)
  got = [float(update(tf.constant(st, tf.int64), tf.constant(m, tf.float32)))
         for st, m in [(1, 10.), (2, 5.), (5, 4.), (6, 4.), (9, 4.)]]
  np.testing.assert_allclose(got, [1.0, 1.0, 0.5, 0.5, 0.25], rtol=1e-6)


def test_dev_based_under_mirrored_strategy_same_factor_on_every_replica():
  strategy = distribution.CreateStrategy('mirrored')
  with strategy.scope():
    s = Build(sch.DevBasedSchedule, window=2, decay=0.5)

  @tf.function
  def PerReplicaValue(step):
    return strategy.experimental_local_results(
        strategy.run(lambda: s.Value(step)))

  # No improvement from step 1 to 4: 4 - 1 >= 2, one decay.
  for step in (1, 2, 4):
    s.UpdateWithMetric(step, 10.0)
  got = [v.numpy() for v in PerReplicaValue(tf.constant(4, tf.int64))]
  np.testing.assert_allclose(got, [0.5, 0.5])
  with strategy.scope():  # Updating inside the scope works too.
    s.UpdateWithMetric(7, 10.0)
  got = [v.numpy() for v in PerReplicaValue(tf.constant(7, tf.int64))]
  np.testing.assert_allclose(got, [0.25, 0.25])
