"""Polynomial and linear interpolation between two points (Lingvo's)."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat


class PolynomialSchedule(BaseSchedule):
  """Polynomial interpolation between (x0, y0) = `start` and (x1, y1) = `limit`.

  With r = (step - x0) / (x1 - x0):
    step < x0:  y0
    step >= x1: y1
    otherwise:  y0 + f(r) * (y1 - y0), where
                f(r) = r**power            (origin='start', Lingvo's default)
                f(r) = 1 - (1 - r)**power  (origin='limit').
  With start=(0, 1), limit=(T, 0) and origin='limit' this is the textbook
  polynomial decay (1 - t/T)**power, computed from the step alone (no
  compounding from earlier steps). Steps count applied updates.

  Source: Lingvo `lingvo/core/schedule.py` PolynomialSchedule.

  Raises:
    ValueError: at construction, if `start` or `limit` is not a pair of
      numbers, if x0 >= x1 ('start' after 'limit'), if `origin` is not
      'start' or 'limit', or if `power` is not a number > 0 (a power <= 0
      is infinite or a jump at `start`; Lingvo accepts it).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('power', 1, 'Polynomial power (a number).')
    p.Define('start', (0, 1.), '(x0, y0): step x0 (applied updates) and value '
             'y0; the value before x0 is y0.')
    p.Define('limit', (1, 1.), '(x1, y1): step x1 (applied updates) and value '
             'y1; the value from x1 on is y1. x1 must be > x0.')
    p.Define('origin', 'start', 'Origin of the polynomial: "start" '
             '(y0 + r**power (y1-y0)) or "limit" (y1 - (1-r)**power (y1-y0)).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    for name in ('start', 'limit'):
      self._CheckStepValuePair(name)
    self._CheckStartBeforeLimit()
    if p.origin not in ('start', 'limit'):
      self._Fail('origin', 'must be "start" or "limit"',
                 'Set origin="start" or origin="limit".')
    # r**power at r = 0 is infinite for power < 0, and 0**0 = 1 would jump
    # to y1 at the first step; Lingvo checks nothing here.
    self._CheckRange('power', low=0, low_open=True, example=2)

  def FProp(self, theta, step):
    p = self.params
    x = StepAsFloat(step)
    x0, y0 = float(p.start[0]), float(p.start[1])
    x1, y1 = float(p.limit[0]), float(p.limit[1])
    r = tf.clip_by_value((x - x0) / (x1 - x0), 0.0, 1.0)
    if p.origin == 'start':
      f = tf.pow(r, float(p.power))
    else:
      f = 1.0 - tf.pow(1.0 - r, float(p.power))
    y = y0 + f * (y1 - y0)
    return tf.where(x < x0, tf.constant(y0, tf.float64),
                    tf.where(x >= x1, tf.constant(y1, tf.float64), y))

  def Boundaries(self):
    return sorted({int(self.params.start[0]), int(self.params.limit[0])})


class LinearSchedule(PolynomialSchedule):
  """Linear interpolation between `start` and `limit` (PolynomialSchedule, power 1).

  Value(step) = y0 before x0, y1 from x1 on, linear in between.
  Source: Lingvo `lingvo/core/schedule.py` LinearSchedule.

  Raises:
    ValueError: as PolynomialSchedule.
  """

  @classmethod
  def Params(cls):
    return super().Params().Set(power=1)
