"""WarmupStableDecay, CosineWithRestarts, OneCycle(Momentum): values by hand,
against Keras and against a transcription of PyTorch's OneCycleLR; cases
S31-S33 of docs/cases/schedules.md."""

import math

import numpy as np
import pytest
import tensorflow as tf

import schedules as sch


def Values(p, steps):
  s = p.Copy().Instantiate()
  return np.array([s.Value(t).numpy() for t in steps], np.float64)


def Wsd(**kw):
  return sch.WarmupStableDecay.Params().Set(**kw)


def test_s31_wsd_linear_cosine_and_1_sqrt_cooldowns_by_hand():
  # W=4: 0.25, 0.5, 0.75, 1 at steps 0..3; stable to step 11; cooldown
  # c=12..T=20 (D=8), s=(step-12)/8; final 0.
  steps = [0, 1, 3, 4, 11, 12, 14, 16, 18, 19, 20, 25]
  s = np.array([0, 0, 0, 0, 0, 0, 2, 4, 6, 7, 8, 8]) / 8.0
  ramp = [0.25, 0.5, 1.0, 1.0, 1.0]
  for shape, f in [('linear', lambda s: 1 - s),
                   ('cosine', lambda s: 0.5 * (1 + np.cos(np.pi * s))),
                   ('1-sqrt', lambda s: 1 - np.sqrt(s))]:
    want = ramp + list(f(s[5:]))
    want[-2:] = [0.0, 0.0]
    got = Values(Wsd(warmup_steps=4, total_steps=20, decay_steps=8,
                     decay_shape=shape), steps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=shape)
  # 1-sqrt at a quarter of the cooldown: 1 - 0.5 = 0.5 (step 14).
  got = Values(Wsd(warmup_steps=4, total_steps=20, decay_steps=8), [14])
  np.testing.assert_allclose(got, [0.5], rtol=1e-6)


def test_s31_wsd_final_value_and_warmup_init():
  # warmup_init 0.2: 0.2 + 0.8 * step / 4; floor 0.1: 0.1 + 0.9 * (1 - s).
  got = Values(Wsd(warmup_steps=4, warmup_init=0.2, total_steps=12,
                   decay_steps=4, decay_shape='linear', final_value=0.1),
               [0, 2, 4, 7, 8, 10, 12, 13])
  np.testing.assert_allclose(
      got, [0.2, 0.6, 1.0, 1.0, 1.0, 0.55, 0.1, 0.1], rtol=1e-6)


def test_s31_wsd_boundaries_for_the_plot():
  s = Wsd(warmup_steps=4, total_steps=20, decay_steps=8).Instantiate()
  assert s.Boundaries() == [3, 12, 20]


@pytest.mark.parametrize('kw, match', [
    (dict(total_steps=0), 'total_steps=0'),
    (dict(total_steps=10, decay_steps=8, warmup_steps=4),
     r'total_steps=10 is less than warmup_steps \(4\) \+ decay_steps \(8\)'),
    (dict(total_steps=10, decay_shape='sqrt'), "decay_shape='sqrt'.*'1-sqrt'"),
    (dict(total_steps=10, final_value=1.5), 'final_value=1.5'),
    (dict(total_steps=10, warmup_steps=2.5), 'warmup_steps=2.5'),
    (dict(total_steps=10, decay_steps=-1), 'decay_steps=-1'),
])
def test_s31_wsd_refuses_bad_params_in_one_line(kw, match):
  with pytest.raises(ValueError, match=match) as e:
    Wsd(**kw).Instantiate()
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('kw', [
    dict(first_decay_steps=10),
    dict(first_decay_steps=7, t_mul=1.0, m_mul=0.5, alpha=0.2),
    dict(first_decay_steps=5, t_mul=1.5, m_mul=0.9, alpha=0.05),
    dict(first_decay_steps=3, t_mul=3.0),
])
def test_s32_cosine_with_restarts_equals_keras(kw):
  keras_kw = dict(kw)
  steps = list(range(0, 200, 1))
  keras = tf.keras.optimizers.schedules.CosineDecayRestarts(
      initial_learning_rate=1.0, **keras_kw)
  want = np.array([float(keras(s)) for s in steps])
  got = Values(sch.CosineWithRestarts.Params().Set(**kw), steps)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_s32_cosine_with_restarts_by_hand():
  # P=4, t_mul=2, m_mul=0.5: periods [0,4), [4,12), [12,28).
  got = Values(sch.CosineWithRestarts.Params().Set(
      first_decay_steps=4, t_mul=2.0, m_mul=0.5), [0, 2, 4, 8, 12, 20])
  np.testing.assert_allclose(got, [1.0, 0.5, 0.5, 0.25, 0.25, 0.125],
                             rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('t_mul, restarts', [
    (2.0, [50, 150, 350, 750, 1550]), (3.0, [50, 200, 650, 2000]),
    (1.0, [50, 100, 350])])
def test_s32_every_restart_is_1_eagerly_in_tf_function_and_under_xla(
    t_mul, restarts):
  # By hand: with P = 50 the restarts are at P (1 + t + ... + t^(i-1)),
  # where the value jumps back to its peak (m_mul 1: exactly 1) and the
  # step before is the end of a cosine (near 0). In tf.function, log(8) /
  # log(2) came out just below 3 and step 350 gave 0 instead of 1 (a
  # fresh user's schedules.plot showed it).
  sched = sch.CosineWithRestarts.Params().Set(
      first_decay_steps=50, t_mul=t_mul).Instantiate()
  graph = tf.function(sched.Value)
  xla = tf.function(sched.Value, jit_compile=True)
  for step in restarts:
    for fn in (sched.Value, graph, xla):
      assert float(fn(tf.constant(step, tf.int64))) == 1.0, (fn, step)
      assert float(fn(tf.constant(step - 1, tf.int64))) < 1e-3, (fn, step)


def test_s32_cosine_with_restarts_refusals():
  for kw, match in [(dict(first_decay_steps=0), 'first_decay_steps=0'),
                    (dict(first_decay_steps=5, t_mul=0.5), 't_mul=0.5'),
                    (dict(first_decay_steps=5, m_mul=0.0), 'm_mul=0.0')]:
    with pytest.raises(ValueError, match=match):
      sch.CosineWithRestarts.Params().Set(**kw).Instantiate()


def TorchOneCycle(total, pct=0.3, strategy='cos', div=25.0, final_div=1e4,
                  three_phase=False, base_m=0.85, max_m=0.95, steps=()):
  """PyTorch 2.x OneCycleLR.get_lr transcribed (max_lr = 1): (lr, m)."""
  init = 1.0 / div
  low = init / final_div
  if three_phase:
    phases = [(pct * total - 1, init, 1.0, max_m, base_m),
              (2 * pct * total - 2, 1.0, init, base_m, max_m),
              (total - 1, init, low, max_m, max_m)]
  else:
    phases = [(pct * total - 1, init, 1.0, max_m, base_m),
              (total - 1, 1.0, low, base_m, max_m)]

  def Anneal(start, end, q):
    if strategy == 'cos':
      return end + (start - end) / 2.0 * (math.cos(math.pi * q) + 1)
    return (end - start) * q + start

  out = []
  for step in steps:
    start = 0
    for i, (end, lr0, lr1, m0, m1) in enumerate(phases):
      if step <= end or i == len(phases) - 1:
        q = (step - start) / (end - start)
        out.append((Anneal(lr0, lr1, q), Anneal(m0, m1, q)))
        break
      start = end
  return np.array(out)


def test_s33_one_cycle_by_hand():
  # T=10, pct 0.3: e1 = 2, e2 = 9; start 0.04, end 4e-6.
  got = Values(sch.OneCycle.Params().Set(total_steps=10), [0, 1, 2, 9])
  np.testing.assert_allclose(got, [0.04, 0.52, 1.0, 4e-6], rtol=1e-5)
  m = Values(sch.OneCycleMomentum.Params().Set(total_steps=10), [0, 1, 2, 9])
  np.testing.assert_allclose(m, [0.95, 0.9, 0.85, 0.95], rtol=1e-6)


@pytest.mark.parametrize('kw', [
    dict(total=100), dict(total=37, pct=0.25, strategy='linear'),
    dict(total=60, three_phase=True), dict(total=50, div=10.0,
                                            final_div=100.0, pct=0.4),
    dict(total=61, three_phase=True, strategy='linear', base_m=0.8,
         max_m=0.9),
])
def test_s33_one_cycle_equals_pytorch_formula(kw):
  steps = list(range(kw['total']))  # PyTorch raises past total_steps.
  want = TorchOneCycle(steps=steps, **kw)
  p = dict(total_steps=kw['total'], pct_start=kw.get('pct', 0.3),
           anneal_strategy=kw.get('strategy', 'cos'),
           div_factor=kw.get('div', 25.0),
           final_div_factor=kw.get('final_div', 1e4),
           three_phase=kw.get('three_phase', False))
  np.testing.assert_allclose(Values(sch.OneCycle.Params().Set(**p), steps),
                             want[:, 0], rtol=1e-5, atol=1e-7)
  m = sch.OneCycleMomentum.Params().Set(
      base_momentum=kw.get('base_m', 0.85), max_momentum=kw.get('max_m', 0.95),
      **p)
  np.testing.assert_allclose(Values(m, steps), want[:, 1], rtol=1e-6)


def test_s33_one_cycle_stays_at_its_end_past_total_steps():
  got = Values(sch.OneCycle.Params().Set(total_steps=10), [9, 10, 50])
  np.testing.assert_allclose(got, [4e-6] * 3, rtol=1e-5)


def test_s33_one_cycle_refusals():
  for cls, kw, match in [
      (sch.OneCycle, dict(total_steps=10, pct_start=1.0), 'pct_start=1.0'),
      (sch.OneCycle, dict(total_steps=3, pct_start=0.1),
       'pct_start=0.1 leaves a phase shorter than one step'),
      (sch.OneCycle, dict(total_steps=10, anneal_strategy='cosine'),
       "anneal_strategy='cosine'"),
      (sch.OneCycleMomentum, dict(total_steps=10, base_momentum=0.96),
       'base_momentum=0.96 is above max_momentum'),
  ]:
    with pytest.raises(ValueError, match=match):
      cls.Params().Set(**kw).Instantiate()
