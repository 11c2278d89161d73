"""Exponential schedules: interpolation in log space, half-lives, step decay."""

import math

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat
from schedules.polynomial import LinearSchedule


class ExponentialSchedule(BaseSchedule):
  """Exponential interpolation between `start` (x0, y0) and `limit` (x1, y1).

  Value(step) = y0 before x0, y1 from x1 on, and in between
    exp(log y0 + (step - x0) / (x1 - x0) * (log y1 - log y0)),
  i.e. a straight line in log space. Steps count applied updates.
  Source: Lingvo `lingvo/core/schedule.py` ExponentialSchedule.

  Raises:
    ValueError: at construction, if x0 >= x1 ('start' after 'limit') or if
      y0 or y1 is not positive (the log is undefined), naming the parameter.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('start', (0, 1.), '(x0, y0): step (applied updates) and value '
             '(> 0) where the interpolation starts.')
    p.Define('limit', (1, 0.5), '(x1, y1): step (applied updates, > x0) and '
             'value (> 0) where it ends.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    for name in ('start', 'limit'):
      v = self._CheckStepValuePair(name)
      if not v[1] > 0:
        self._Fail(name, 'has a non-positive value %r; an exponential '
                   'schedule needs values > 0' % (v[1],),
                   'Use a small positive value such as 1e-8 instead of 0, or '
                   'use LinearSchedule.')
    self._CheckStartBeforeLimit()
    self.CreateChild(
        'linear',
        LinearSchedule.Params().Set(
            name='linear',
            start=(p.start[0], math.log(p.start[1])),
            limit=(p.limit[0], math.log(p.limit[1]))))

  def FProp(self, theta, step):
    return tf.exp(self.linear.FProp(theta.get('linear'), step))

  def Boundaries(self):
    return self.linear.Boundaries()


class ContinuousSchedule(BaseSchedule):
  """Continuous exponential decay with a half-life, floored at `min`.

  Value(step) = initial_value * max(0.5 ** ((step - start_step) /
  half_life_steps), min) from start_step on, initial_value before it.
  Steps count applied updates.
  Differs from Lingvo (docs/lingvo.md): min == 1 is accepted (a constant);
  Lingvo's child ExponentialSchedule asserts on it.
  Source: Lingvo `lingvo/core/schedule.py` ContinuousSchedule.

  Raises:
    ValueError: at construction, if half_life_steps <= 0 or min is not in
      (0, 1].
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('initial_value', 1.0, 'Value before and at start_step.')
    p.Define('start_step', 400000,
             'Step (applied updates) where the decay starts.')
    p.Define('half_life_steps', 100000,
             'The value halves every this many steps after start_step.')
    p.Define('min', 0.01, 'Floor of the decay, relative to initial_value; '
             'in (0, 1].')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('half_life_steps')
    self._CheckRange('min', 0, 1, low_open=True, example=0.01)
    self._CheckNumber('initial_value')
    self._CheckNumber('start_step')
    end = p.start_step + p.half_life_steps * math.log(p.min) / math.log(0.5)
    if p.min == 1:
      end = p.start_step + 1
    self.CreateChild(
        'exp',
        ExponentialSchedule.Params().Set(
            name='exp', start=(p.start_step, 1.0), limit=(end, p.min)))

  def FProp(self, theta, step):
    return self.params.initial_value * self.exp.FProp(theta.get('exp'), step)

  def Boundaries(self):
    return self.exp.Boundaries()


class StepwiseExponentialSchedule(BaseSchedule):
  """Multiplies by `decay` every `num_steps_per_decay` steps.

  Value(step) = decay ** floor(step / num_steps_per_decay). For an int
  num_steps_per_decay this is an integer division of the int64 step (exact
  for any step); a float one (e.g. 2.5) divides in float64, as Lingvo
  divides in float32. Steps count applied updates.
  Differs from Lingvo (docs/lingvo.md): decay=0 is refused (Lingvo: 1,
  then 0 from the first decay on).
  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` StepwiseExponentialSchedule
  (same params, defaults and values).

  Raises:
    ValueError: at construction, if num_steps_per_decay <= 0 or decay <= 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('decay', 0.99, 'Decay factor applied at each decay (> 0).')
    p.Define('num_steps_per_decay', 1000,
             'Applied updates between decays (> 0).')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckPositive('num_steps_per_decay')
    self._CheckPositive('decay')

  def FProp(self, theta, step):
    p = self.params
    k = p.num_steps_per_decay
    if isinstance(k, int):
      n = StepAsFloat(tf.math.floordiv(step, tf.constant(k, tf.int64)))
    else:
      n = tf.floor(StepAsFloat(step) / float(k))
    return tf.pow(tf.constant(float(p.decay), tf.float64), n)
