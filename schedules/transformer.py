"""Transformer ("Noam") schedules: linear warmup, then inverse-sqrt decay."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat


class TransformerSchedule(BaseSchedule):
  """Linear warmup to warmup_steps, then inverse-power decay.

  With s the effective step and W = warmup_steps * worker_replicas,
  d = decay_factor:
    Value = model_dim**-0.5 * min((s + 1) * W**-(1 + d), (s + 1)**-d)
  which with the default d = 0.5 is Lingvo's (and Vaswani et al.'s)
  model_dim**-0.5 * min((s+1) * W**-1.5, (s+1)**-0.5): finite at step 0,
  peak at s = W - 1. The effective step s is the step with, in order:
  `start_step` subtracted (clamped at 0), wrapped modulo `cyclical_step` if
  set (the warmup and decay restart every cyclical_step steps), and clamped
  at `decay_end` if set (the value stays flat from there). Steps count
  applied updates. The step is converted to float64 before any arithmetic,
  so an int64 step works in every mode.

  `decay_factor`, `start_step` and `cyclical_step` are extensions; their
  defaults give Lingvo's values exactly.

  Source: Vaswani et al., "Attention Is All You Need", NeurIPS 2017, eq. 3;
  Lingvo `lingvo/core/schedule.py` TransformerSchedule.

  Raises:
    ValueError: at construction, if warmup_steps, model_dim,
      worker_replicas or decay_factor is not positive, start_step is
      negative, or decay_end / cyclical_step is set and not positive.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 4000, 'Applied updates of the linear warmup '
             '(times worker_replicas); > 0.')
    p.Define('model_dim', 512, 'Model dimension; the value is scaled by '
             'model_dim**-0.5.')
    p.Define('worker_replicas', 1, 'Number of worker replicas; multiplies '
             'warmup_steps.')
    p.Define('decay_end', None, 'If set, the effective step stops growing at '
             'decay_end (the value is flat from there).')
    p.Define('decay_factor', 0.5, 'Exponent d of the (s+1)**-d decay; 0.5 is '
             'the inverse square root of the paper.')
    p.Define('start_step', 0, 'The schedule counts from this step; earlier '
             'steps give its value at step 0.')
    p.Define('cyclical_step', None, 'If set, the effective step is taken '
             'modulo cyclical_step, restarting warmup and decay.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    for name in ('warmup_steps', 'model_dim', 'worker_replicas',
                 'decay_factor'):
      self._CheckPositive(name)
    self._CheckPositive('start_step', allow_zero=True)
    for name in ('decay_end', 'cyclical_step'):
      if p.Get(name) is not None:
        self._CheckPositive(name)

  def FProp(self, theta, step):
    p = self.params
    if p.start_step:
      step = tf.maximum(step - tf.constant(int(p.start_step), tf.int64),
                        tf.constant(0, tf.int64))
    if p.cyclical_step is not None:
      step = tf.math.floormod(step, tf.constant(int(p.cyclical_step),
                                                tf.int64))
    s = StepAsFloat(step)
    if p.decay_end is not None:
      s = tf.minimum(s, float(p.decay_end))
    w = float(p.warmup_steps * p.worker_replicas)
    d = float(p.decay_factor)
    return float(p.model_dim)**-0.5 * tf.minimum(
        (s + 1.0) * w**-(1.0 + d), tf.pow(s + 1.0, -d))

  def Boundaries(self):
    p = self.params
    out = {int(p.start_step + p.warmup_steps * p.worker_replicas - 1)}
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
    if not (isinstance(p.warmup_init_fraction, (int, float)) and
            0 <= p.warmup_init_fraction <= 1):
      self._Fail('warmup_init_fraction', 'must be in [0, 1]',
                 'Set e.g. 0.0 or 0.1.')

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
