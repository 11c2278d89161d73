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

  With T = total_steps and gap = initial_value - final_value:
    Value = final_value + gap * (1 + cos(pi * r / T)) / 2
    r = min(step, T)          if not cyclical (flat at final_value from T)
    r = step mod T            if cyclical and half_cycle (restart every T)
    r = step                  if cyclical and not half_cycle (2T period:
                              down over T steps, back up over the next T)
  So `half_cycle` only matters with `cyclical`. Steps count applied updates;
  arithmetic is in float64 (Lingvo: float32), rounded once to float32.

  Source: Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm
  Restarts", ICLR 2017 (restarts); Lingvo 0.14.2 `lingvo/core/schedule.py`
  CosineSchedule (same params, defaults and values; docs/lingvo.md).

  Raises:
    ValueError: at construction, if total_steps <= 0 (Lingvo asserts it in
      Value()).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('initial_value', 1.0, 'Value at step 0.')
    p.Define('final_value', 0., 'Value at total_steps (and after it unless '
             'cyclical).')
    p.Define('total_steps', 0, 'Applied updates to reach final_value; > 0.')
    p.Define('cyclical', False, 'If False, stay at final_value from '
             'total_steps on; if True, the value cycles (see half_cycle).')
    p.Define('half_cycle', True, 'Only used if cyclical: True restarts at '
             'initial_value every total_steps (angle period pi); False lets '
             'the value rise back over the next total_steps (period 2 pi).')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckPositive('total_steps')
    self._CheckNumber('initial_value')
    self._CheckNumber('final_value')

  def FProp(self, theta, step):
    p = self.params
    total = int(p.total_steps)
    if not p.cyclical:
      step = tf.minimum(step, tf.constant(total, tf.int64))
    elif p.half_cycle:
      step = tf.math.floormod(step, tf.constant(total, tf.int64))
    angle = math.pi * StepAsFloat(step) / float(p.total_steps)
    gap = float(p.initial_value) - float(p.final_value)
    return p.final_value + 0.5 * gap * (1.0 + tf.cos(angle))

  def Boundaries(self):
    return [int(self.params.total_steps)]


class LinearRampupCosineSchedule(BaseSchedule):
  """A linear ramp from warmup_init, then cosine decay (the minimum of both).

  Value(step) = min(Linear((0, warmup_init*n) -> (warmup_steps//n,
  initial_value*n)), Cosine(initial_value*n -> final_value*n over
  total_steps//n, cyclical)) with n = num_splits; with `cyclical` the
  cosine restarts every total_steps//n steps (the ramp is not repeated: it
  is above the cosine after step warmup_steps//n). With warmup_init=0 the
  value is 0 at step 0, as in Lingvo (ported configs keep their values; use
  `Warmup` for a ramp whose first update already trains). Steps count
  applied updates.

  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` LinearRampupCosineSchedule
  (same params and defaults). Departure (docs/lingvo.md): warmup_steps // n
  == 0 is accepted here (pure cosine); Lingvo's Value() raises for it.

  Raises:
    ValueError: at construction, if total_steps // num_splits <= 0 or
      warmup_steps < 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_init', 0, 'Value at step 0 (before scaling by '
             'num_splits).')
    p.Define('warmup_steps', 0, 'Applied updates of the linear ramp; >= 0.')
    p.Define('initial_value', 1.0, 'Peak value, start of the cosine.')
    p.Define('final_value', 0., 'Value at total_steps and after.')
    p.Define('total_steps', 0, 'Applied updates to reach final_value; > 0.')
    p.Define('cyclical', False, 'If True, the cosine restarts at the peak '
             'every total_steps // num_splits steps (CosineSchedule with '
             'cyclical and half_cycle); if False it stays at final_value.')
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
    for name in ('warmup_init', 'initial_value', 'final_value'):
      self._CheckNumber(name)
    self._CheckInt('num_splits', example=1)
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
        final_value=p.final_value * splits, total_steps=total,
        cyclical=p.cyclical))
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
    self._CheckRange('alpha', 0, 1, example=0.01)

  def FProp(self, theta, step):
    p = self.params
    frac = tf.clip_by_value(StepAsFloat(step) / float(p.total_steps), 0.0, 1.0)
    return p.alpha + (1.0 - p.alpha) * 0.5 * (1.0 + tf.cos(math.pi * frac))

  def Boundaries(self):
    return [int(self.params.total_steps)]
