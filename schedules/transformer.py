"""Transformer ("Noam") schedules: linear warmup, then inverse-sqrt decay."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat


class TransformerSchedule(BaseSchedule):
  """Linear warmup to warmup_steps, then power-law decay (Lingvo's form).

  With s the effective step, W = warmup_steps * worker_replicas,
  d = decay_factor (an exponent, normally negative) and k = start_step:
    Value = model_dim**-0.5 * min((s + 1) * W**(d - 1), (s + k + 1)**d)
  which with the default d = -0.5 and k = 0 is Vaswani et al.'s
  model_dim**-0.5 * min((s+1) * W**-1.5, (s+1)**-0.5): finite at step 0,
  peak at s = W - 1. The effective step s is the step wrapped modulo
  `cyclical_step` if set (warmup and decay restart every cyclical_step
  steps), then clamped at `decay_end` if set (flat from there).
  `start_step` translates only the decay term to the left: the warmup
  follows the real step (so with k > 0 the decay is reached earlier and
  lower). W = 0 (warmup_steps=0) gives W**(d-1) = inf, i.e. no warmup: the
  value is the decay term from step 0, as in Lingvo. Steps count applied
  updates; arithmetic is in float64 (Lingvo: float32), rounded once to
  float32.

  Source: Vaswani et al., "Attention Is All You Need", NeurIPS 2017, eq. 3;
  Lingvo 0.14.2 `lingvo/core/schedule.py` TransformerSchedule (same params,
  defaults and values; docs/lingvo.md).

  Raises:
    ValueError: at construction, if model_dim is not positive, warmup_steps
      or worker_replicas is negative, decay_factor is not a number,
      start_step is negative, or decay_end / cyclical_step is set and not
      positive (cyclical_step must be an int, as Lingvo asserts).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 4000, 'Applied updates of the linear warmup '
             '(times worker_replicas); >= 0, 0 for no warmup.')
    p.Define('model_dim', 512, 'Model dimension; the value is scaled by '
             'model_dim**-0.5.')
    p.Define('worker_replicas', 1, 'Number of worker replicas; multiplies '
             'warmup_steps.')
    p.Define('decay_end', None, 'If set, the effective step stops growing at '
             'decay_end (the value is flat from there).')
    p.Define('decay_factor', -0.5, 'Exponent d of the decay term '
             '(s + start_step + 1)**d; -0.5 is the inverse square root of the '
             'paper.')
    p.Define('start_step', 0, 'Translates the decay term left in the step '
             'axis: it is evaluated at step + start_step; the warmup uses the '
             'real step.')
    p.Define('cyclical_step', None, 'If set (an int > 0), the effective step '
             'is taken modulo cyclical_step, restarting warmup and decay.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('model_dim')
    for name in ('warmup_steps', 'worker_replicas', 'start_step'):
      self._CheckPositive(name, allow_zero=True)
    self._CheckNumber('decay_factor')
    if p.decay_end is not None:
      self._CheckPositive('decay_end')
    if p.cyclical_step is not None:
      self._CheckPositive('cyclical_step')
      if not isinstance(p.cyclical_step, int):
        self._Fail('cyclical_step', 'must be an int', 'Set e.g. 3000.')

  def FProp(self, theta, step):
    p = self.params
    if p.cyclical_step is not None:
      step = tf.math.floormod(step, tf.constant(p.cyclical_step, tf.int64))
    s = StepAsFloat(step)
    if p.decay_end is not None:
      s = tf.minimum(s, float(p.decay_end))
    w = tf.constant(float(p.warmup_steps * p.worker_replicas), tf.float64)
    d = float(p.decay_factor)
    warmup = (s + 1.0) * tf.pow(w, d - 1.0)  # inf when w = 0 and d < 1.
    decay = tf.pow(s + float(p.start_step) + 1.0, d)
    return float(p.model_dim)**-0.5 * tf.minimum(warmup, decay)

  def Boundaries(self):
    p = self.params
    out = {max(int(p.warmup_steps * p.worker_replicas) - 1, 0)}
    if p.decay_end is not None:
      out.add(int(p.decay_end))
    return sorted(out)


class TransformerScheduleNoWarmUp(BaseSchedule):
  """TransformerSchedule's peak value until decay_start, then its decay.

  With s the step (clamped at decay_end if set) and
  W = decay_start * worker_replicas:
    Value = model_dim**-0.5 * min(min(s + 1, (s + 1)**-0.5), W**-0.5)
  i.e. the constant 1/sqrt(model_dim * W) for steps 0 .. W-1, then
  1/sqrt(model_dim * (s + 1)). Steps count applied updates.
  Source: Lingvo `lingvo/core/schedule.py` TransformerScheduleNoWarmUp.

  Raises:
    ValueError: at construction, if decay_start, model_dim or
      worker_replicas is not positive, or decay_end is set and not positive.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('decay_start', 4000, 'Applied updates (times worker_replicas) '
             'before the decay; sets the peak value.')
    p.Define('decay_end', None, 'If set, the value is flat from this step.')
    p.Define('model_dim', 512, 'Model dimension; the value is scaled by '
             'model_dim**-0.5.')
    p.Define('worker_replicas', 1, 'Number of worker replicas; multiplies '
             'decay_start.')
    return p

  def __init__(self, params):
    super().__init__(params)
    for name in ('decay_start', 'model_dim', 'worker_replicas'):
      self._CheckPositive(name)
    if self.params.decay_end is not None:
      self._CheckPositive('decay_end')

  def FProp(self, theta, step):
    p = self.params
    s = StepAsFloat(step)
    if p.decay_end is not None:
      s = tf.minimum(s, float(p.decay_end))
    peak = float(p.decay_start * p.worker_replicas)**-0.5
    return float(p.model_dim)**-0.5 * tf.minimum(
        tf.minimum(s + 1.0, tf.pow(s + 1.0, -0.5)), peak)

  def Boundaries(self):
    p = self.params
    out = {int(p.decay_start * p.worker_replicas)}
    if p.decay_end is not None:
      out.add(int(p.decay_end))
    return sorted(out)


class TransformerMLPerfSchedule(BaseSchedule):
  """Linear warmup from a fraction of the peak, then inverse-sqrt decay.

  With s the step and W = warmup_steps, f = warmup_init_fraction:
    Value = model_dim**-0.5 * min(1, f + (1 - f) * s / W) * rsqrt(max(s, W))
  so the value is f * peak at step 0 (0 by default, as in Lingvo) and the
  peak model_dim**-0.5 * W**-0.5 at step W. Steps count applied updates.
  Source: Lingvo `lingvo/core/schedule.py` TransformerMLPerfSchedule.

  Raises:
    ValueError: at construction, if warmup_steps or model_dim is not
      positive, or warmup_init_fraction is outside [0, 1].
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 4000, 'Applied updates of the linear warmup; '
             '> 0.')
    p.Define('warmup_init_fraction', 0., 'Fraction of the peak at step 0, '
             'in [0, 1]; 1 keeps the peak during the whole warmup.')
    p.Define('model_dim', 512, 'Model dimension; the value is scaled by '
             'model_dim**-0.5.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('warmup_steps')
    self._CheckPositive('model_dim')
    self._CheckRange('warmup_init_fraction', 0, 1, example=0.1)

  def FProp(self, theta, step):
    p = self.params
    s = StepAsFloat(step)
    w = float(p.warmup_steps)
    f = float(p.warmup_init_fraction)
    warmup = tf.minimum(f + (1.0 - f) * s / w, 1.0)
    return float(p.model_dim)**-0.5 * warmup * tf.math.rsqrt(
        tf.maximum(s, w))

  def Boundaries(self):
    return [int(self.params.warmup_steps)]
