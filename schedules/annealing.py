"""Annealing curves for probabilities and decay rates (not learning rates)."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat


class AnnealingSchedule(BaseSchedule):
  """Geometric annealing with a floor.

  Value(step) = max(init * factor ** step, lower_bound). Steps count applied
  updates.

  Departure from Lingvo (docs/lingvo.md): Lingvo's AnnealingSchedule
  requires `init` (asserts it is set) but never uses it, so its value always
  starts at 1. Here `init` is the value at step 0, so no parameter is
  unused; init=1 (Lingvo's tests) gives Lingvo's values. Also, Lingvo
  asserts lower_bound is truthy, so 0 is rejected there and accepted here.

  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` AnnealingSchedule (same
  params and defaults).

  Raises:
    ValueError: at construction, if init is not set or <= 0, lower_bound is
      not set or negative, or factor is not in (0, 1].
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('init', None, 'Value at step 0; must be set (> 0).')
    p.Define('lower_bound', None, 'Floor of the value; must be set (>= 0).')
    p.Define('factor', None, 'Multiplier per step; must be in (0, 1].')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.init is None:
      self._Fail('init', 'must be set', 'Set the value at step 0, e.g. '
                 'init=1.0.')
    self._CheckPositive('init')
    if p.lower_bound is None:
      self._Fail('lower_bound', 'must be set', 'Set e.g. lower_bound=0.01.')
    self._CheckPositive('lower_bound', allow_zero=True)
    self._CheckRange('factor', 0, 1, low_open=True, example=0.99)

  def FProp(self, theta, step):
    p = self.params
    value = p.init * tf.pow(tf.constant(float(p.factor), tf.float64),
                            StepAsFloat(step))
    return tf.maximum(value, float(p.lower_bound))


class InverseSigmoid(BaseSchedule):
  """Inverse sigmoid decay, e.g. for scheduled sampling.

  Value(step) = k / (k + exp(step / k)): k / (k + 1) at step 0, 1/2 at step
  k * ln(k), decaying to 0. Steps count applied updates.
  Source: Bengio et al., "Scheduled Sampling for Sequence Prediction with
  Recurrent Neural Networks", NeurIPS 2015, section 2.4; Lingvo 0.14.2
  `lingvo/core/schedule.py` InverseSigmoid (same params, defaults,
  validation and values).

  Raises:
    ValueError: at construction, if k is not set or k < 1 (as Lingvo).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('k', None, 'Time scale k (>= 1, must be set); larger decays '
             'later.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckRange('k', 1, example=10000)

  def FProp(self, theta, step):
    k = float(self.params.k)
    return k / (k + tf.exp(StepAsFloat(step) / k))


class EmaDecaySchedule(BaseSchedule):
  """EMA decay that grows with the step up to ema_decay.

  Value(step) = min(ema_decay, (1 + step) / (10 + step)) (negative steps
  count as 0): 0.1 at step 0, so early averages follow the weights closely.
  Steps count applied updates.
  Source: `tf.train.ExponentialMovingAverage` with num_updates; Lingvo 0.14.2
  `lingvo/core/schedule.py` EmaDecaySchedule (same params, defaults and
  values for steps >= 0). Departure (docs/lingvo.md): a negative step gives
  0.1 here; Lingvo's formula gives (1+s)/(10+s), e.g. -0.8 at step -5.
  ema_decay > 1 is refused (Lingvo runs it: the cap never binds).

  Raises:
    ValueError: at construction, if ema_decay is not in [0, 1].
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('ema_decay', 0.9999, 'Largest decay, in [0, 1].')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckRange('ema_decay', 0, 1, example=0.9999)

  def FProp(self, theta, step):
    s = tf.maximum(StepAsFloat(step), 0.0)
    return tf.minimum((1.0 + s) / (10.0 + s), float(self.params.ema_decay))
