"""Annealing curves for probabilities and decay rates (not learning rates)."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat


class AnnealingSchedule(BaseSchedule):
  """Geometric annealing with a floor.

  Value(step) = max(init * factor ** step, lower_bound). Steps count applied
  updates.

  Fix of Lingvo's quirk: Lingvo's AnnealingSchedule defines `init` but never
  uses it (the value always starts at 1). Here `init` is the value at step 0
  (default 1.0, which gives Lingvo's values), so no parameter is unused.

  Source: Lingvo `lingvo/core/schedule.py` AnnealingSchedule.

  Raises:
    ValueError: at construction, if init <= 0, lower_bound is not set or
      negative, or factor is not in (0, 1].
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('init', 1.0, 'Value at step 0; > 0.')
    p.Define('lower_bound', None, 'Floor of the value; must be set (>= 0).')
    p.Define('factor', None, 'Multiplier per step; must be in (0, 1].')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('init')
    if p.lower_bound is None:
      self._Fail('lower_bound', 'must be set', 'Set e.g. lower_bound=0.01.')
    self._CheckPositive('lower_bound', allow_zero=True)
    if (isinstance(p.factor, bool) or not isinstance(p.factor, (int, float))
        or not 0 < p.factor <= 1):
      self._Fail('factor', 'must be in (0, 1]', 'Set e.g. factor=0.99.')

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
  Recurrent Neural Networks", NeurIPS 2015, section 2.4; Lingvo
  `lingvo/core/schedule.py` InverseSigmoid.

  Raises:
    ValueError: at construction, if k <= 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('k', 10000.0, 'Time scale k (> 0); larger decays later.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckPositive('k')

  def FProp(self, theta, step):
    k = float(self.params.k)
    return k / (k + tf.exp(StepAsFloat(step) / k))


class EmaDecaySchedule(BaseSchedule):
  """EMA decay that grows with the step up to ema_decay.

  Value(step) = min(ema_decay, (1 + step) / (10 + step)) (negative steps
  count as 0): 0.1 at step 0, so early averages follow the weights closely.
  Steps count applied updates.
  Source: `tf.train.ExponentialMovingAverage` with num_updates; Lingvo
  `lingvo/core/schedule.py` EmaDecaySchedule.

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
    d = self.params.ema_decay
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 1:
      self._Fail('ema_decay', 'must be in [0, 1]', 'Set e.g. 0.9999.')

  def FProp(self, theta, step):
    s = tf.maximum(StepAsFloat(step), 0.0)
    return tf.minimum((1.0 + s) / (10.0 + s), float(self.params.ema_decay))
