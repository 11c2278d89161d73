"""Piecewise-constant values between step boundaries (Lingvo's)."""

import tensorflow as tf

from params import checks

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat


def PiecewiseConstant(step, boundaries, values):
  """Returns values[i] for the interval of `step` (Lingvo's side of a boundary).

  values[0] before boundaries[0]; values[i] for boundaries[i-1] <= step <
  boundaries[i]; values[-1] from boundaries[-1] on. A step equal to a
  boundary already takes the next value.

  Args:
    step: int64 scalar tensor.
    boundaries: strictly increasing Python numbers (ints or floats).
    values: len(boundaries) + 1 float64 scalar tensors or Python numbers.

  Returns:
    A float64 scalar tensor.
  """
  x = StepAsFloat(step)
  result = tf.convert_to_tensor(values[0], tf.float64)
  for b, v in zip(boundaries, values[1:]):
    result = tf.where(x >= float(b), tf.convert_to_tensor(v, tf.float64),
                      result)
  return result


class PiecewiseConstantSchedule(BaseSchedule):
  """Piecewise-constant values: values[i] on [boundaries[i-1], boundaries[i]).

  A step equal to a boundary already takes the later value (Lingvo's
  convention: boundaries=[10], values=[1, 0.1] gives 0.1 at step 10). Note
  that Keras' `tf.keras.optimizers.schedules.PiecewiseConstantDecay` takes
  the earlier value at a boundary (1 at step 10), so a Keras config moved
  here changes one step earlier. Steps count applied updates. Works with
  Python-int, int32 and int64 steps alike; boundaries may be floats (as
  LinearRampupPiecewiseConstantSchedule makes them).

  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` PiecewiseConstantSchedule
  (same params, defaults and values). Departure (docs/lingvo.md): equal
  neighbouring boundaries, accepted by Lingvo, are refused here.

  Raises:
    ValueError: at construction, if boundaries are not strictly increasing
      or len(values) != len(boundaries) + 1.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('boundaries', None, 'Strictly increasing steps (applied updates) '
             'at which the value changes.')
    p.Define('values', None, 'The values of the len(boundaries) + 1 '
             'intervals.')
    return p

  def __init__(self, params):
    super().__init__(params)
    boundaries = self._CheckBoundaries('boundaries')
    values = self._CheckListOf('values',
                               lambda v: not checks.Real().Problem(v),
                               'finite numbers', '[1.0, 0.1, 0.01]')
    self._CheckCount('values', values, len(boundaries) + 1,
                     'len(boundaries) + 1 = %d' % (len(boundaries) + 1),
                     'Give exactly one value per interval: one more value '
                     'than boundaries.')

  def FProp(self, theta, step):
    p = self.params
    return PiecewiseConstant(step, list(p.boundaries or []),
                             [float(v) for v in p.values])

  def Boundaries(self):
    return [int(b) for b in (self.params.boundaries or [])]
