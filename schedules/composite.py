"""Schedules made of sub-schedules: minimum, pieces in sequence, cycles."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.piecewise import PiecewiseConstant
from schedules.polynomial import LinearSchedule


class CombinedMinimumSchedule(BaseSchedule):
  """The minimum of several schedules, each seeing the same step.

  Value(step) = min_i schedules[i].Value(step).
  Differs from Lingvo (docs/lingvo.md): a default-named child is renamed
  `schedules_<i>` (variable names only).
  Source: Lingvo `lingvo/core/schedule.py` CombinedMinimumSchedule.

  Raises:
    ValueError: at construction, if `schedules` is empty or holds something
      other than schedule params.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('schedules', [LinearSchedule.Params()],
             'A non-empty list of schedule params; the value is their '
             'minimum at each step.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CreateScheduleChildren('schedules',
                                 self._CheckScheduleList('schedules'))

  def FProp(self, theta, step):
    ys = [self._ChildValue(s, t, step)
          for s, t in zip(self.schedules, theta.schedules)]
    return tf.reduce_min(tf.stack(ys))

  def Boundaries(self):
    return sorted({b for s in self.schedules for b in s.Boundaries()})


class PiecewiseSchedule(BaseSchedule):
  """Sub-schedules in sequence; each sees the step relative to its start.

  schedules[i] runs on [boundaries[i-1], boundaries[i]) (schedules[0] from
  step 0) and is evaluated at step - boundaries[i-1] (0 for the first), so
  a piece counts from 0 wherever it is placed. A step equal to a boundary
  already belongs to the next piece. Steps count applied updates.
  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` PiecewiseSchedule (same
  params and defaults). Departure (docs/lingvo.md): Lingvo passes the
  relative step only through its global-step context, so a Value(step)
  call with an explicit step gives its sub-schedules the absolute step;
  here they always see the relative step (Lingvo's Learner path).

  Raises:
    ValueError: at construction, if boundaries are negative or not strictly
      increasing (Lingvo accepts equal neighbours; docs/lingvo.md), or
      len(schedules) != len(boundaries) + 1.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('boundaries', None, 'Strictly increasing, non-negative steps '
             '(applied updates) between the sub-schedules.')
    p.Define(
        'schedules', None, 'A list of len(boundaries) + 1 schedule params. '
        'schedules[i] runs from boundaries[i-1] (inclusive) to boundaries[i] '
        '(exclusive) and sees the step relative to its start.')
    return p

  def __init__(self, params):
    super().__init__(params)
    boundaries = self._CheckBoundaries('boundaries')
    if boundaries and boundaries[0] < 0:
      self._Fail('boundaries', 'must be >= 0', 'Use non-negative steps.')
    scheds = self._CheckScheduleList('schedules')
    if len(scheds) != len(boundaries) + 1:
      self._Fail('schedules', 'has %d entries but len(boundaries) + 1 = %d' %
                 (len(scheds), len(boundaries) + 1),
                 'Give one schedule per interval: one more than boundaries.')
    self._CreateScheduleChildren('schedules', scheds)

  def FProp(self, theta, step):
    p = self.params
    starts = [0] + [int(b) for b in (p.boundaries or [])]
    values = []
    for start, sched, sched_theta in zip(starts, self.schedules,
                                         theta.schedules):
      relative = tf.maximum(step - tf.constant(start, tf.int64),
                            tf.constant(0, tf.int64))
      values.append(self._ChildValue(sched, sched_theta, relative))
    return PiecewiseConstant(step, starts[1:], values)

  def Boundaries(self):
    starts = [0] + [int(b) for b in (self.params.boundaries or [])]
    out = set(starts[1:])
    for start, sched in zip(starts, self.schedules):
      out.update(start + b for b in sched.Boundaries())
    return sorted(out)


class CycleSchedule(BaseSchedule):
  """Sub-schedules in a repeating cycle.

  The cycle has period sum(steps); schedules[i] is active for steps[i] steps
  of each period, in order. With `pass_absolute_step` (the default, as in
  Lingvo) each sub-schedule is evaluated at the absolute step; without it
  at the step modulo the period (the position in the current cycle, not
  relative to the sub-schedule's own start). Steps count applied updates.
  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` CycleSchedule (same
  params, defaults and values).

  Raises:
    ValueError: at construction, if len(schedules) != len(steps) or a step
      count is not a positive integer.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('schedules', None, 'A list of schedule params, run in turn.')
    p.Define('steps', None, 'How many steps (applied updates, positive ints) '
             'each schedule runs per cycle.')
    p.Define('pass_absolute_step', True, 'If True the sub-schedules see the '
             'absolute step; if False the step modulo sum(steps).')
    return p

  def __init__(self, params):
    super().__init__(params)
    scheds = self._CheckScheduleList('schedules')
    steps = self._CheckListOf('steps', lambda s: isinstance(s, int) and s > 0,
                              'positive ints', '[1000, 500]')
    self._CheckCount('steps', steps, len(scheds),
                     'there are %d schedules' % len(scheds),
                     'Give one step count per schedule.')
    self._CreateScheduleChildren('schedules', scheds)
    self._period = sum(steps)
    ends = []
    for s in steps:
      ends.append((ends[-1] if ends else 0) + s)
    self._boundaries = ends[:-1]

  def FProp(self, theta, step):
    relative = tf.math.floormod(step, tf.constant(self._period, tf.int64))
    seen = step if self.params.pass_absolute_step else relative
    values = [self._ChildValue(s, t, seen)
              for s, t in zip(self.schedules, theta.schedules)]
    return PiecewiseConstant(relative, self._boundaries, values)

  def Boundaries(self):
    return list(self._boundaries)
