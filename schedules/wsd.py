"""Warmup-stable-decay (WSD): a ramp, a constant rate, a short cooldown.

  W = warmup_steps, T = total_steps, D = decay_steps, c = T - D (cooldown
  start), f = final_value, s = (step - c) / D in [0, 1]:
    step < W:           ramp (as Warmup): (step + 1) / W, or with
                        warmup_init set, warmup_init + (1 - warmup_init)
                        * step / W
    W <= step < c:      1                                   (stable)
    c <= step < T:      f + (1 - f) * shape(s)               (cooldown)
    step >= T:          f
  shape(s) = 1 - s (linear), (1 + cos(pi s)) / 2 (cosine), 1 - sqrt(s)
  ('1-sqrt', the cooldown Haegele et al. find best).

Source: Haegele, Bakouch, Kosson, Ben Allal, Von Werra, Jaggi, "Scaling
Laws and Compute-Optimal Training Beyond Fixed Training Durations", NeurIPS
2024 (section 3: WSD with a 1-sqrt cooldown of 10-20 % of the run matches
cosine); Hu et al., "MiniCPM", 2024 (the name WSD).
"""

import math

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat

DECAY_SHAPES = ('linear', 'cosine', '1-sqrt')


def CooldownShape(shape, s):
  """shape(s) of a cooldown: float64 tensor s in [0, 1] -> float64 in [0, 1].

  Args:
    shape: one of DECAY_SHAPES.
    s: the fraction of the cooldown done (0 at its start, 1 at its end).
  """
  if shape == 'linear':
    return 1.0 - s
  if shape == 'cosine':
    return 0.5 * (1.0 + tf.cos(math.pi * s))
  return 1.0 - tf.sqrt(s)


class WarmupStableDecay(BaseSchedule):
  """Warmup, a constant (stable) phase, and a cooldown ending at total_steps.

  A multiplier of the learner's `learning_rate` (1 in the stable phase):
    step < W:        (step + 1) / W (warmup_init None: the first update
                     already trains; 1 is reached at step W - 1), or
                     warmup_init + (1 - warmup_init) * step / W
    W <= step < c:   1, with c = total_steps - decay_steps
    c <= step < T:   final_value + (1 - final_value) * shape((step - c) / D)
    step >= T:       final_value
  with shape 'linear' (1 - s), 'cosine' ((1 + cos(pi s)) / 2) or '1-sqrt'
  (1 - sqrt(s)). Steps count applied updates (the learner's step). Because
  the stable phase is flat, the same run can be cooled down from any of its
  checkpoints: resume with a larger or smaller total_steps (the cooldown
  then starts at the new total_steps - decay_steps).
  Source: Haegele et al., "Scaling Laws and Compute-Optimal Training Beyond
  Fixed Training Durations", NeurIPS 2024 (1-sqrt cooldown); Hu et al.,
  "MiniCPM", 2024.

  Raises:
    ValueError: at construction, if total_steps <= 0, warmup_steps or
      decay_steps is negative or not an int, warmup_steps + decay_steps >
      total_steps, decay_shape is not one of DECAY_SHAPES, or final_value /
      warmup_init is not a finite number in [0, 1].
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 0, 'Length of the linear ramp in applied '
             'updates; >= 0 (0: no warmup).')
    p.Define('warmup_init', None, 'None: the ramp is (step + 1) / '
             'warmup_steps. A number in [0, 1]: the value at step 0, ramping '
             'linearly to 1 at warmup_steps.')
    p.Define('total_steps', 0, 'Applied updates at the end of the cooldown; '
             '> 0.')
    p.Define('decay_steps', 0, 'Length of the cooldown in applied updates, '
             'ending at total_steps; >= 0 (0: no cooldown).')
    p.Define('decay_shape', '1-sqrt', "Cooldown shape: 'linear', 'cosine' "
             "or '1-sqrt' (Haegele et al. 2024's best).")
    p.Define('final_value', 0.0, 'Value at total_steps and after, in '
             '[0, 1].')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    for name in ('warmup_steps', 'decay_steps'):
      self._CheckInt(name, low=0, example=100)
    self._CheckInt('total_steps', low=1, example=1000)
    self._CheckRange('final_value', 0.0, 1.0, example=0.0)
    self._CheckRange('warmup_init', 0.0, 1.0, none_ok=True, example=0.0)
    if p.decay_shape not in DECAY_SHAPES:
      self._Fail('decay_shape', 'is not a cooldown shape',
                 'Set one of %s.' % ', '.join(repr(s) for s in DECAY_SHAPES))
    if p.warmup_steps + p.decay_steps > p.total_steps:
      self._Fail('total_steps', 'is less than warmup_steps (%d) + '
                 'decay_steps (%d)' % (p.warmup_steps, p.decay_steps),
                 'Set total_steps >= %d, or shorten the phases.' %
                 (p.warmup_steps + p.decay_steps))

  def FProp(self, theta, step):
    p = self.params
    x = StepAsFloat(step)
    w, d, t = int(p.warmup_steps), int(p.decay_steps), int(p.total_steps)
    value = tf.constant(1.0, tf.float64)
    if w:
      if p.warmup_init is None:
        ramp = tf.clip_by_value((x + 1.0) / w, 0.0, 1.0)
      else:
        ramp = p.warmup_init + (1.0 - p.warmup_init) * tf.clip_by_value(
            x / w, 0.0, 1.0)
      value = ramp
    if d:
      s = tf.clip_by_value((x - (t - d)) / d, 0.0, 1.0)
      cool = p.final_value + (1.0 - p.final_value) * CooldownShape(
          p.decay_shape, s)
      value = tf.where(x >= t - d, cool, value)
    return tf.where(x >= t, tf.constant(p.final_value, tf.float64), value)

  def Boundaries(self):
    p = self.params
    out = {int(p.total_steps) - int(p.decay_steps), int(p.total_steps)}
    if p.warmup_steps:
      out.add(int(p.warmup_steps) - (1 if p.warmup_init is None else 0))
    return sorted(out)
