"""Inverse-square-root decays, with and without a linear ramp."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import NumReplicasInSync
from schedules.base_schedule import StepAsFloat


class SqrtDecay(BaseSchedule):
  """Inverse square root decay after a flat start.

  Value(step) = multiplier * rsqrt(max(step - offset, warmup_steps)): flat at
  multiplier / sqrt(warmup_steps) until warmup_steps (+ offset), then
  multiplier / sqrt(step - offset). Steps count applied updates.
  Differs from Lingvo (docs/lingvo.md): warmup_steps=0 is refused even
  with a negative offset, where Lingvo's value stays finite.
  Source: Lingvo `lingvo/core/schedule.py` SqrtDecay.

  Raises:
    ValueError: at construction, if warmup_steps <= 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 10000, 'Applied updates of the flat start; > 0.')
    p.Define('multiplier', 1.0, 'Scale of the value.')
    p.Define('offset', 0.0, 'Steps subtracted before the decay.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckPositive('warmup_steps')
    self._CheckNumber('multiplier')
    self._CheckNumber('offset')

  def FProp(self, theta, step):
    p = self.params
    s = StepAsFloat(step) - float(p.offset)
    return p.multiplier * tf.math.rsqrt(tf.maximum(s, float(p.warmup_steps)))

  def Boundaries(self):
    return [int(self.params.warmup_steps + self.params.offset)]


class SqrtDecayToZero(BaseSchedule):
  """Inverse square root decay shifted and scaled to reach 0 at final_steps.

  With W = warmup_steps, F = final_steps, s = min(max(step, W), F):
    Value = starting_lr * (s**-0.5 - F**-0.5) / (W**-0.5 - F**-0.5)
  so it is flat at starting_lr until W, follows the inverse square root
  shifted down, and is 0 at F. Steps count applied updates.

  Departure from Lingvo (docs/lingvo.md): Lingvo's formula keeps decreasing
  after final_steps and goes negative (a negative rate trains uphill; its
  defaults give -0.0023 at step 400000); here the step is clamped at
  final_steps, so the value is exactly 0 from F on. Before F the values
  are Lingvo's. final_steps <= warmup_steps is refused (Lingvo's value then
  rises after W, or divides by zero).
  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` SqrtDecayToZero (same
  params and defaults).

  Raises:
    ValueError: at construction, if warmup_steps <= 0 (Lingvo: "Must be >
      0") or final_steps <= warmup_steps.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 10000.0, 'Applied updates of the flat start; '
             '> 0.')
    p.Define('starting_lr', 0.01, 'Value during the flat start.')
    p.Define('final_steps', 100000.0, 'Applied update at which the value '
             'reaches 0 and stays there; > warmup_steps.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('warmup_steps')
    self._CheckPositive('final_steps')
    self._CheckNumber('starting_lr')
    if not p.final_steps > p.warmup_steps:
      self._Fail('final_steps', 'must be > warmup_steps=%r' %
                 p.warmup_steps, 'Train for longer than the flat start.')

  def FProp(self, theta, step):
    p = self.params
    w, f = float(p.warmup_steps), float(p.final_steps)
    s = tf.clip_by_value(StepAsFloat(step), w, f)
    value = (p.starting_lr * (tf.math.rsqrt(s) - f**-0.5) /
             (w**-0.5 - f**-0.5))
    return tf.maximum(value, 0.0)

  def Boundaries(self):
    return [int(self.params.warmup_steps), int(self.params.final_steps)]


class LinearRampupSqrtDecay(BaseSchedule):
  """Linear ramp to `peak` at warmup_steps, then inverse square root decay.

  With s = max(step, 1) and W = warmup_steps:
    Value = peak * min(s / W, sqrt(W / s))
  so step 0 already gives peak / W (the value of step 1), the peak is at W,
  and the value halves every 4x steps after it. Steps count applied updates.
  Differs from Lingvo (docs/lingvo.md): warmup_steps=0 is refused (Lingvo's
  value is then 0 at every step).
  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` LinearRampupSqrtDecay (same
  params, order and defaults).

  Raises:
    ValueError: at construction, if warmup_steps <= 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('peak', 1.0, 'Value at warmup_steps.')
    p.Define('warmup_steps', 4000, 'Applied updates of the linear ramp; > 0.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckPositive('warmup_steps')
    self._CheckNumber('peak')

  def FProp(self, theta, step):
    p = self.params
    r = tf.maximum(StepAsFloat(step), 1.0) / float(p.warmup_steps)
    return p.peak * tf.minimum(r, tf.math.rsqrt(r))

  def Boundaries(self):
    return [int(self.params.warmup_steps)]


class LinearRampupSqrtDecayByBatchSizeAndReplicas(BaseSchedule):
  """Transformer warmup/decay with the warmup measured in examples.

  With W = warmup_examples / (batch_size * num_replicas) steps:
    Value = min((step + 1) * W**-1.5, (step + 1)**-0.5)
  (0 for step <= -1), peak sqrt(batch_size * num_replicas / warmup_examples)
  at step W - 1. Steps count applied updates; batch_size is per replica.
  Differs from Lingvo (docs/lingvo.md): a step below -1 gives 0 (Lingvo:
  NaN); num_replicas None or 0 is the strategy's replica count.
  Source: Lingvo `lingvo/core/schedule.py`
  LinearRampupSqrtDecayByBatchSizeAndReplicas.

  Raises:
    ValueError: at construction, if batch_size is not positive, num_replicas
      is negative, or warmup_examples is not positive.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_examples', 256 * 2**20, 'Examples seen during the '
             'linear warmup; > 0.')
    p.Define('batch_size', None, 'Per-replica batch size (examples); must be '
             'set.')
    p.Define('num_replicas', None, 'Number of replicas; None or 0 uses the '
             'current tf.distribute strategy\'s num_replicas_in_sync at '
             'construction (Lingvo: the cluster\'s).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('warmup_examples')
    if p.batch_size is None:
      self._Fail('batch_size', 'must be set', 'Set the per-replica batch '
                 'size, e.g. batch_size=128.')
    self._CheckPositive('batch_size')
    if p.num_replicas:  # None or 0 infers, as Lingvo's `if p.num_replicas`.
      self._CheckPositive('num_replicas')
      self._num_replicas = p.num_replicas
    else:
      self._num_replicas = NumReplicasInSync()
    self._warmup = p.warmup_examples / (p.batch_size * self._num_replicas)

  def FProp(self, theta, step):
    s1 = tf.maximum(StepAsFloat(step) + 1.0, 0.0)
    return tf.minimum(s1 * self._warmup**-1.5, tf.pow(s1, -0.5))

  def Boundaries(self):
    return [int(round(self._warmup)) - 1]
