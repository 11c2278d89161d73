"""Properties over every schedule: step types, modes, text round-trip, shape.

The catalog below builds every exported schedule class (some twice, with
their options); the parametrized tests run over all of it.
"""

import numpy as np
import pytest
import tensorflow as tf

import schedules as sch
from schedules import plot


def Lin(start, limit):
  return sch.LinearSchedule.Params().Set(start=start, limit=limit)


def Const(v):
  return sch.Constant.Params().Set(value=v)


CATALOG = {
    'Constant': Const(5.0),
    'ConstantOne': sch.ConstantOne.Params(),
    'PiecewiseConstantSchedule': sch.PiecewiseConstantSchedule.Params().Set(
        boundaries=[10, 20], values=[1.0, 0.1, 0.01]),
    'PolynomialSchedule': sch.PolynomialSchedule.Params().Set(
        power=2, start=(0, 1.0), limit=(40, 0.1), origin='limit'),
    'LinearSchedule': Lin((10, 0.1), (60, 1.0)),
    'ExponentialSchedule': sch.ExponentialSchedule.Params().Set(
        start=(10, 1.0), limit=(60, 0.1)),
    'ContinuousSchedule': sch.ContinuousSchedule.Params().Set(
        start_step=10, half_life_steps=20, min=0.1),
    'StepwiseExponentialSchedule': sch.StepwiseExponentialSchedule.Params(
    ).Set(decay=0.5, num_steps_per_decay=7),
    'CombinedMinimumSchedule': sch.CombinedMinimumSchedule.Params().Set(
        schedules=[Lin((0, 0.0), (20, 1.0)),
                   sch.CosineDecay.Params().Set(total_steps=100)]),
    'PiecewiseSchedule': sch.PiecewiseSchedule.Params().Set(
        boundaries=[20], schedules=[
            Lin((0, 0.0), (20, 2.0)),
            sch.CosineSchedule.Params().Set(initial_value=2.0,
                                            total_steps=40)]),
    'CycleSchedule': sch.CycleSchedule.Params().Set(
        steps=[5, 3], schedules=[Const(1.0), Lin((0, 0.5), (100, 0.0))]),
    'CosineSchedule_cyclical': sch.CosineSchedule.Params().Set(
        initial_value=2.0, final_value=0.5, total_steps=30, cyclical=True),
    # Lingvo 0.14.2's half_cycle=False (with cyclical): a 2*T period.
    'CosineSchedule_half_cycle': sch.CosineSchedule.Params().Set(
        total_steps=30, cyclical=True, half_cycle=False),
    'LinearRampupCosineSchedule': sch.LinearRampupCosineSchedule.Params().Set(
        warmup_steps=10, initial_value=3.0, final_value=1.0, total_steps=80),
    'CosineDecay': sch.CosineDecay.Params().Set(total_steps=50, alpha=0.1),
    'StepDecay_step_size': sch.StepDecay.Params().Set(
        step_size=10, factor=0.5, total_steps=35),
    'StepDecay_boundaries': sch.StepDecay.Params().Set(
        boundaries=[10, 30], factor=0.1, alpha=0.005),
    'TransformerSchedule': sch.TransformerSchedule.Params().Set(
        warmup_steps=20, model_dim=16, decay_end=100),
    'TransformerSchedule_cyclical': sch.TransformerSchedule.Params().Set(
        warmup_steps=8, model_dim=16, start_step=3, cyclical_step=50,
        decay_factor=-1.0),
    'TransformerScheduleNoWarmUp': sch.TransformerScheduleNoWarmUp.Params(
    ).Set(decay_start=20, model_dim=16),
    'TransformerMLPerfSchedule': sch.TransformerMLPerfSchedule.Params().Set(
        warmup_steps=20, warmup_init_fraction=0.1, model_dim=16),
    'SqrtDecay': sch.SqrtDecay.Params().Set(warmup_steps=20, offset=5.0),
    'SqrtDecayToZero': sch.SqrtDecayToZero.Params().Set(
        warmup_steps=20.0, final_steps=100.0, starting_lr=0.5),
    'LinearRampupSqrtDecay': sch.LinearRampupSqrtDecay.Params().Set(
        warmup_steps=20, peak=2.0),
    'LinearRampupSqrtDecayByBatchSizeAndReplicas':
        sch.LinearRampupSqrtDecayByBatchSizeAndReplicas.Params().Set(
            warmup_examples=2000, batch_size=10, num_replicas=10),
    'LinearRampupExponentialDecayScaledByNumSplitSchedule':
        sch.LinearRampupExponentialDecayScaledByNumSplitSchedule.Params().Set(
            warmup=10, decay_start=80, decay_end=160, min=0.1, max=1.5,
            num_splits=2),
    'LinearRampupExponentialDecay': sch.LinearRampupExponentialDecay.Params(
    ).Set(warmup=10, decay_start=40, decay_end=80, min=0.01),
    'LinearRampupPiecewiseConstantSchedule':
        sch.LinearRampupPiecewiseConstantSchedule.Params().Set(
            boundaries=[40, 64, 80, 96], lrs=[1, 0.1, 0.01, 0.001],
            num_splits=8),
    'LinearRampupDecaySchedule': sch.LinearRampupDecaySchedule.Params().Set(
        peak=10, end=60),
    'AnnealingSchedule': sch.AnnealingSchedule.Params().Set(
        init=2.0, lower_bound=0.1, factor=0.9),
    'InverseSigmoid': sch.InverseSigmoid.Params().Set(k=10.0),
    'EmaDecaySchedule': sch.EmaDecaySchedule.Params().Set(ema_decay=0.99),
    'DevBasedSchedule': sch.DevBasedSchedule.Params().Set(window=5),
    'Warmup': sch.Warmup.Params().Set(
        warmup_steps=10, schedule=sch.CosineDecay.Params().Set(
            total_steps=50, alpha=0.1)),
    'Warmup_init_no_shift': sch.Warmup.Params().Set(
        warmup_steps=10, warmup_init=0.05, shift_decay=False,
        schedule=sch.StepDecay.Params().Set(boundaries=[30], factor=0.1)),
    'LinearScaling': sch.LinearScaling.Params().Set(
        batch_size=32, num_replicas=2, num_batches=4, rule='sqrt',
        schedule=Const(0.5)),
    'ResNet50Schedule': sch.ResNet50Schedule(
        steps_per_epoch=10, batch_size=64, num_replicas=2, num_batches=2,
        warmup_epochs=1, decay='cosine', total_epochs=9)[1],
    'WarmupStableDecay_1_sqrt': sch.WarmupStableDecay.Params().Set(
        warmup_steps=10, total_steps=100, decay_steps=20, final_value=0.05),
    'WarmupStableDecay_cosine_init': sch.WarmupStableDecay.Params().Set(
        warmup_steps=10, warmup_init=0.1, total_steps=60, decay_steps=30,
        decay_shape='cosine'),
    'CosineWithRestarts': sch.CosineWithRestarts.Params().Set(
        first_decay_steps=10, t_mul=2.0, m_mul=0.8, alpha=0.1),
    'OneCycle': sch.OneCycle.Params().Set(total_steps=100),
    'OneCycle_three_phase_linear': sch.OneCycle.Params().Set(
        total_steps=60, three_phase=True, anneal_strategy='linear'),
    'OneCycleMomentum': sch.OneCycleMomentum.Params().Set(total_steps=100),
    'KerasSchedule': sch.KerasSchedule.FromKeras(
        tf.keras.optimizers.schedules.ExponentialDecay(
            initial_learning_rate=1.0, decay_steps=10, decay_rate=0.5)),
}

STEPS = [0, 1, 3, 9, 10, 11, 19, 20, 21, 33, 59, 60, 99, 100, 250, 123456]


def test_catalog_covers_every_exported_schedule_class():
  exported = {name for name in dir(sch)
              if isinstance(getattr(sch, name), type) and
              issubclass(getattr(sch, name), sch.BaseSchedule) and
              name != 'BaseSchedule'}
  covered = {p.cls.__name__ for p in CATALOG.values()}
  covered |= {'LinearScaling', 'Warmup', 'CosineDecay'}  # ResNet50 recipe.
  assert exported - covered == set()


def Eager(schedule, steps):
  return np.array([schedule.Value(s).numpy() for s in steps])


@pytest.fixture(scope='module')
def built():
  return {k: p.Copy().Instantiate() for k, p in CATALOG.items()}


@pytest.mark.parametrize('key', sorted(CATALOG))
def test_int_int32_int64_steps_agree(built, key):
  s = built[key]
  for step in [0, 1, 10, 20, 59, 100, 123456]:
    a = s.Value(step)
    b = s.Value(tf.constant(step, tf.int32))
    c = s.Value(tf.constant(step, tf.int64))
    assert a.dtype == b.dtype == c.dtype == tf.float32
    assert a.shape.rank == 0
    assert a.numpy() == b.numpy() == c.numpy(), (key, step)
  # The learner passes its int64 num_updates variable itself.
  counter = tf.Variable(59, dtype=tf.int64)
  assert s.Value(counter).numpy() == s.Value(59).numpy()


@pytest.mark.parametrize('key', sorted(CATALOG))
def test_eager_tf_function_and_jit_compile_agree(built, key):
  s = built[key]
  eager = Eager(s, STEPS)
  assert np.all(np.isfinite(eager)), key

  # One trace (and one XLA compilation) per mode: a scalar int64 signature.
  spec = [tf.TensorSpec([], tf.int64)]
  graph = tf.function(s.Value, input_signature=spec)
  xla = tf.function(s.Value, input_signature=spec, jit_compile=True)
  for fn in (graph, xla):
    got = [fn(tf.constant(x, tf.int64)).numpy() for x in STEPS]
    np.testing.assert_allclose(got, eager, rtol=1e-6, atol=0)


@pytest.mark.parametrize('key', sorted(CATALOG))
def test_c_serialize_params_round_trip_and_same_values(built, key):
  p = CATALOG[key]
  text = p.ToText()
  # Params.FromText onto the class's default params, whose nested params may
  # be of other classes (Warmup's default child is ConstantOne).
  q = p.cls.Params().FromText(text)
  assert q == p, q.TextDiff(p)
  assert q.ToText() == text
  assert plot.ScheduleParamsFromText(text) == p
  rebuilt = q.Instantiate()
  steps = [0, 1, 5, 10, 19, 20, 45, 60, 100, 1000]
  np.testing.assert_array_equal(Eager(rebuilt, steps),
                                Eager(built[key], steps))


def test_schedule_has_no_variables_except_dev_based(built):
  for key, s in built.items():
    if key == 'DevBasedSchedule':
      assert sorted(s.vars.keys()) == ['best_step', 'best_value', 'cur_factor',
                                       'num_evals', 'ref_step']
    else:
      assert not tf.nest.flatten(s.vars), key


def test_floating_step_is_refused():
  s = CATALOG['Constant'].Copy().Instantiate()
  with pytest.raises(TypeError, match='integer'):
    s.Value(tf.constant(1.0))
