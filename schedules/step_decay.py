"""StepDecay: multiply by a factor every N steps or at listed boundaries."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule


class StepDecay(BaseSchedule):
  """Multiplies by `factor` every `step_size` steps, or at each boundary.

  k = number of decays so far:
    step_size > 0:  k = floor(min(step, total_steps) / step_size) (integer
                    division of the int64 step; total_steps=0 means no end)
    boundaries:     k = number of boundaries <= step (a step equal to a
                    boundary is already decayed, as PiecewiseConstantSchedule)
  Value(step) = max(factor ** k, alpha). Negative steps give 1. Clamped:
  after the last boundary (or total_steps) the value never changes again,
  and it never goes below the floor `alpha`. Steps count applied updates.

  Source: the step schedule of He et al., "Deep Residual Learning for Image
  Recognition", CVPR 2016 (x0.1 at fixed epochs).

  Raises:
    ValueError: at construction, if neither or both of step_size and
      boundaries are given, boundaries are not strictly increasing,
      step_size or total_steps is negative, factor is not in (0, 1], or
      alpha is negative.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('step_size', 0, 'Decay every this many applied updates; 0 to '
             'use boundaries instead.')
    p.Define('boundaries', [], 'Strictly increasing steps (applied updates) '
             'at which to decay; used when step_size is 0.')
    p.Define('factor', 0.1, 'Multiplier applied at each decay; in (0, 1].')
    p.Define('alpha', 0.0, 'Floor of the value (>= 0).')
    p.Define('total_steps', 0, 'With step_size: no decay after this many '
             'applied updates; 0 means no end.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('step_size', allow_zero=True)
    self._CheckPositive('total_steps', allow_zero=True)
    self._CheckPositive('alpha', allow_zero=True)
    boundaries = self._CheckBoundaries('boundaries')
    if bool(p.step_size) == bool(boundaries):
      self._Fail('step_size', 'and boundaries=%r: exactly one must be given'
                 % (boundaries,),
                 'Set step_size > 0 with boundaries=[], or step_size=0 with '
                 'a list of boundaries.')
    self._CheckRange('factor', 0, 1, low_open=True, example=0.1)

  def FProp(self, theta, step):
    p = self.params
    step = tf.maximum(step, tf.constant(0, tf.int64))
    if p.step_size:
      if p.total_steps:
        step = tf.minimum(step, tf.constant(int(p.total_steps), tf.int64))
      k = tf.math.floordiv(step, tf.constant(int(p.step_size), tf.int64))
    else:
      x = tf.cast(step, tf.float64)
      k = tf.add_n([tf.cast(x >= float(b), tf.int64) for b in p.boundaries])
    value = tf.pow(tf.constant(float(p.factor), tf.float64),
                   tf.cast(k, tf.float64))
    return tf.maximum(value, float(p.alpha))

  def Boundaries(self):
    p = self.params
    if p.step_size:
      return [int(p.total_steps)] if p.total_steps else []
    return [int(b) for b in p.boundaries]
