"""BaseSchedule: a learning-rate schedule, a pure function of an integer step."""

import tensorflow as tf

from params import BaseLayer


class BaseSchedule(BaseLayer):
  """Base class of schedules: `Value(step)` -> float32 scalar multiplier.

  `step` counts applied updates by default (the learner's `num_updates`; see
  DESIGN.md, "Words with one meaning"). Subclasses implement `FProp(theta,
  step)` where `step` is already an int64 scalar tensor; `Value` converts the
  step and casts the result, so each schedule works eagerly, inside
  `tf.function` and under `jit_compile=True`.
  """

  def Value(self, step):
    """Returns the schedule's value at `step`.

    Args:
      step: a Python int, or an int32/int64 scalar tensor.

    Returns:
      A float32 scalar tensor.

    Raises:
      TypeError: if `step` is a floating point tensor.
    """
    step = ToInt64Step(step)
    return tf.cast(self.FProp(self.theta, step), tf.float32)

  def FProp(self, theta, step):
    """Returns the value at the int64 scalar tensor `step`."""
    raise NotImplementedError('%s must implement FProp(theta, step).' %
                              type(self).__name__)


def ToInt64Step(step):
  """Converts a Python int or an integer scalar tensor to an int64 tensor.

  Raises:
    TypeError: for a floating point or non-scalar step.
  """
  if isinstance(step, (int,)) and not isinstance(step, bool):
    return tf.constant(step, tf.int64)
  step = tf.convert_to_tensor(step)
  if not step.dtype.is_integer:
    raise TypeError('A schedule step must be an integer, got dtype %s.' %
                    step.dtype.name)
  if step.shape.rank not in (None, 0):
    raise TypeError('A schedule step must be a scalar, got shape %s.' %
                    step.shape)
  return tf.cast(step, tf.int64)


class Constant(BaseSchedule):
  """A constant value at every step (Lingvo's `Constant`)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('value', 1.0, 'The constant value.')
    return p

  def FProp(self, theta, step):
    del step
    return tf.constant(self.params.value, tf.float32)


class ConstantOne(Constant):
  """The multiplier 1.0 at every step (Lingvo's `ConstantOne`)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.value = 1.0
    return p
