"""Cosine schedules: Lingvo's CosineSchedule and ramp-up variant, CosineDecay."""

import math

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import NumReplicasInSync
from schedules.base_schedule import StepAsFloat
from schedules.composite import CombinedMinimumSchedule
from schedules.polynomial import LinearSchedule


class CosineSchedule(BaseSchedule):
  """Cosine decay from initial_value to final_value over total_steps.

  With s = step (or step mod total_steps if `cyclical`) and
  gap = initial_value - final_value:
    full cycle (default):  final_value + gap * (1 + cos(pi * min(1, s / T))) / 2
    half_cycle=True:       final_value + gap * cos(pi / 2 * min(1, s / T))
  Without `cyclical` the value stays at final_value from total_steps on;
  with it the decay restarts every total_steps (warm restarts). Steps count
  applied updates. The step is converted to float64 before the division, so
  an int64 step works in every mode.

  Source: Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm
  Restarts", ICLR 2017 (cycles, quarter-wave angle); the 0..pi single cycle
  as in Lingvo `lingvo/core/schedule.py` CosineSchedule.

  Raises:
    ValueError: at construction, if total_steps <= 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('initial_value', 1.0, 'Value at step 0.')
    p.Define('final_value', 0., 'Value at total_steps (and after it unless '
             'cyclical).')
    p.Define('total_steps', 0, 'Applied updates to reach final_value; > 0.')
    p.Define('cyclical', False, 'If True, restart the decay every '
             'total_steps steps instead of staying at final_value.')
    p.Define('half_cycle', False, 'If True, the angle runs from 0 to pi/2 '
             '(value = final + gap * cos(angle)) instead of 0 to pi.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckPositive('total_steps')

  def FProp(self, theta, step):
    p = self.params
    if p.cyclical:
      step = tf.math.floormod(step, tf.constant(int(p.total_steps), tf.int64))
    frac = tf.clip_by_value(StepAsFloat(step) / float(p.total_steps), 0.0, 1.0)
    gap = float(p.initial_value) - float(p.final_value)
    if p.half_cycle:
      return p.final_value + gap * tf.cos(0.5 * math.pi * frac)
    return p.final_value + 0.5 * gap * (1.0 + tf.cos(math.pi * frac))

  def Boundaries(self):
    return [int(self.params.total_steps)]


class LinearRampupCosineSchedule(BaseSchedule):
  """A linear ramp from warmup_init, then cosine decay (the minimum of both).

  Value(step) = min(Linear((0, warmup_init*n) -> (warmup_steps//n,
  initial_value*n)), Cosine(initial_value*n -> final_value*n over
  total_steps//n)) with n = num_splits. With the default warmup_init=0 the
  value is 0 at step 0, as in Lingvo (ported configs keep their values; use
  `Warmup` for a ramp whose first update already trains). Steps count
  applied updates.

  Source: Lingvo `lingvo/core/schedule.py` LinearRampupCosineSchedule.

  Raises:
    ValueError: at construction, if total_steps // num_splits <= 0 or
      warmup_steps < 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_init', 0., 'Value at step 0 (before scaling by '
             'num_splits).')
    p.Define('warmup_steps', 0, 'Applied updates of the linear ramp; >= 0.')
    p.Define('initial_value', 1.0, 'Peak value, start of the cosine.')
    p.Define('final_value', 0., 'Value at total_steps and after.')
    p.Define('total_steps', 0, 'Applied updates to reach final_value; > 0.')
    p.Define(
        'num_splits', 1, 'Scales values up and step counts down by this '
        'factor (batch splitting); <= 0 uses the current tf.distribute '
        'strategy\'s num_replicas_in_sync at construction.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('warmup_steps', allow_zero=True)
    self._CheckPositive('total_steps')
    splits = p.num_splits if p.num_splits > 0 else NumReplicasInSync()
    total = p.total_steps // splits
    if total <= 0:
      self._Fail('total_steps', 'is <= 0 after dividing by num_splits=%d' %
                 splits, 'Use total_steps >= num_splits.')
    scheds = []
    warmup = p.warmup_steps // splits
    if warmup > 0:
      scheds.append(LinearSchedule.Params().Set(
          start=(0, p.warmup_init * splits),
          limit=(warmup, p.initial_value * splits)))
    scheds.append(CosineSchedule.Params().Set(
        initial_value=p.initial_value * splits,
        final_value=p.final_value * splits, total_steps=total))
    self._CreateScheduleChild(
        'combine', CombinedMinimumSchedule.Params().Set(schedules=scheds))

  def FProp(self, theta, step):
    return self._ChildValue(self.combine, theta.combine, step)

  def Boundaries(self):
    return self.combine.Boundaries()


class CosineDecay(BaseSchedule):
  """Cosine decay from 1 to `alpha`, then flat.

  Value(step) = alpha + (1 - alpha) * 0.5 * (1 + cos(pi * min(step,
  total_steps) / total_steps)); negative steps give 1. The value never
  rises again after total_steps and never goes below alpha.

  Steps count applied updates (see docs/DESIGN.md, "Words with one meaning").
  Source: Loshchilov & Hutter, "SGDR", ICLR 2017, eq. 5 without restarts.

  Raises:
    ValueError: at construction, if total_steps <= 0 or alpha is outside
      [0, 1].
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('total_steps', 0,
             'Updates over which the rate decays; must be > 0.')
    p.Define('alpha', 0.0,
             'Final multiplier, as a fraction of the initial one; in [0, 1].')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('total_steps')
    if (isinstance(p.alpha, bool) or not isinstance(p.alpha, (int, float)) or
        not 0 <= p.alpha <= 1):
      self._Fail('alpha', 'must be in [0, 1]', 'Set e.g. alpha=0.01.')

  def FProp(self, theta, step):
    p = self.params
    frac = tf.clip_by_value(StepAsFloat(step) / float(p.total_steps), 0.0, 1.0)
    return p.alpha + (1.0 - p.alpha) * 0.5 * (1.0 + tf.cos(math.pi * frac))

  def Boundaries(self):
    return [int(self.params.total_steps)]
