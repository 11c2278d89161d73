"""Warmup: a linear ramp in front of any schedule."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import ConstantOne


class Warmup(BaseSchedule):
  """A linear ramp over warmup_steps in front of the child `schedule`.

  With W = warmup_steps, c = the child's value at its step (the step minus W,
  clamped at 0, if shift_decay, else the step itself):
    warmup_init None:  Value = min(1, max(0, (step + 1) / W)) * c
                       the first update (step 0) already trains with c / W
                       and the full value c is reached at step W - 1.
    warmup_init set:   Value = warmup_init + min(1, max(0, step / W)) *
                       (c - warmup_init), an absolute value at step 0 ramping
                       to the child's value at step W.
  From W on the value is the child's. With shift_decay=True the child counts
  from 0 after the warmup (its whole decay happens after the ramp; during
  the ramp its step-0 value is the target); with False it sees the absolute
  step (decay boundaries stay where they were written). W = 0 is no warmup.
  Steps count applied updates.

  Source: Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
  1 Hour", 2017, section 2.2 (gradual warmup).

  Raises:
    ValueError: at construction, if warmup_steps is negative or not an int,
      or `schedule` is not a schedule's params.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('schedule', ConstantOne.Params(), 'Params of the schedule that '
             'follows the warmup (the child).')
    p.Define('warmup_steps', 0, 'Length of the ramp in applied updates; '
             '>= 0, 0 means no warmup.')
    p.Define('warmup_init', None, 'None: ramp as (step + 1) / warmup_steps '
             'of the child. A number: absolute value at step 0, ramping '
             'linearly to the child\'s value at warmup_steps.')
    p.Define('shift_decay', True, 'If True the child sees step - '
             'warmup_steps (clamped at 0), so it starts after the warmup; if '
             'False it sees the absolute step.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if isinstance(p.warmup_steps, bool) or not isinstance(p.warmup_steps, int):
      self._Fail('warmup_steps', 'must be an int',
                 'Give a whole number of applied updates.')
    self._CheckPositive('warmup_steps', allow_zero=True)
    self._CheckRange('warmup_init', none_ok=True, example=0.0)
    self._CheckScheduleParams('schedule')
    self._CreateScheduleChild('schedule', p.schedule)

  def FProp(self, theta, step):
    p = self.params
    w = int(p.warmup_steps)
    if p.shift_decay and w:
      child_step = tf.maximum(step - tf.constant(w, tf.int64),
                              tf.constant(0, tf.int64))
    else:
      child_step = step
    c = self._ChildValue(self.schedule, theta.schedule, child_step)
    if not w:
      return c
    x = tf.cast(step, tf.float64)
    if p.warmup_init is None:
      ramp = tf.clip_by_value((x + 1.0) / w, 0.0, 1.0)
      return ramp * c
    ramp = tf.clip_by_value(x / w, 0.0, 1.0)
    return p.warmup_init + ramp * (c - p.warmup_init)

  def Boundaries(self):
    p = self.params
    w = int(p.warmup_steps)
    child = self.schedule.Boundaries()
    if p.shift_decay:
      child = [b + w for b in child]
    out = set(child)
    if w:
      out.add(w - 1 if p.warmup_init is None else w)
    return sorted(out)
