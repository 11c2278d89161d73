"""LossScale: static or dynamic loss scaling for float16 computation.

float16 has a narrow exponent range (normal numbers 6.1e-5 .. 65504), so the
small gradients of a float16 loss underflow to zero. Multiplying the loss by
a scale S before differentiating and dividing the gradients by S afterwards
keeps them representable. Dynamic scaling picks S: it halves S when a step's
gradients overflow (that step is skipped by the learner) and doubles it
after `growth_interval` consecutive finite steps.

Source: Micikevicius et al., "Mixed Precision Training", ICLR 2018, sec. 3.2;
the dynamic rule as in tf.keras.mixed_precision.LossScaleOptimizer.
"""

import tensorflow as tf

from params import BaseLayer
from params import checks

_MODES = ('fixed', 'dynamic')


class LossScale(BaseLayer):
  """A loss scale held in a checkpointed variable.

  Variables (trainable=False, aggregation NONE: in a tf.distribute replica
  context each replica updates its own copy, with no merge_call, so `Update`
  may run inside tf.cond - as under gradient accumulation - and the copies
  stay equal because every replica passes the same `grads_finite`, as the
  learner does after the all-reduce):
    `loss_scale`: float32 scalar, the current scale S.
    `good_steps`: int64 scalar, consecutive finite steps since S last changed.

  Dynamic rule, per `Update(grads_finite)`:
    finite:     good_steps += 1; if good_steps >= growth_interval:
                S <- S * factor (only if that is finite), good_steps <- 0.
    non-finite: S <- max(S / factor, min_scale), good_steps <- 0.
  Fixed mode: S stays `initial_scale`; `Update` changes nothing.

  Note: `ScaleLoss` casts S to the loss's dtype, as Keras does, so for a
  float16 loss a scale above 65504 becomes inf and makes every step overflow;
  the dynamic rule then brings it back down at once.

  Raises:
    ValueError: at construction, if `mode` is not 'fixed' or 'dynamic',
      `initial_scale` or `min_scale` is not > 0, `growth_interval` is not
      an int >= 1 or `factor` is not > 1 (each finite, not a bool).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'loss_scale'
    p.Define('mode', 'dynamic',
             "'fixed': always `initial_scale`; 'dynamic': adjusted by "
             'Update() (see the class docstring).')
    p.Define('initial_scale', 2.0**15,
             'The scale at the start (the fixed scale in fixed mode); > 0.')
    p.Define('growth_interval', 2000,
             'Dynamic mode: multiply the scale by `factor` after this many '
             'consecutive steps with finite gradients; >= 1.')
    p.Define('factor', 2.0,
             'Dynamic mode: multiplier on growth and divisor on overflow; '
             '> 1.')
    p.Define('min_scale', 1.0,
             'Dynamic mode: the scale never drops below this (as in Keras); '
             '> 0.')
    return p

  @classmethod
  def ParamsFor(cls, loss_scale):
    """The params a Learner's `loss_scale` value asks for.

    Args:
      loss_scale: 'dynamic' (dynamic mode, the defaults), or a number: the
        fixed scale (mode 'fixed', initial_scale=float(loss_scale)).

    Returns:
      This class's params, named 'loss_scale'.
    """
    p = cls.Params().Set(mode='dynamic')
    if loss_scale != 'dynamic':
      p.Set(mode='fixed', initial_scale=float(loss_scale))
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        initial_scale=checks.Real(0, low_open=True, example=2.0**15),
        growth_interval=checks.Int(1, example=2000, why='steps'),
        factor=checks.Real(1, low_open=True, example=2.0),
        min_scale=checks.Real(0, low_open=True, example=1.0))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.mode not in _MODES:
      raise ValueError(
          'LossScale %r: mode=%r is not one of %s. Use \'dynamic\' for '
          'float16 training, or \'fixed\' with initial_scale set.' %
          (self.path, p.mode, list(_MODES)))
    kw = dict(trainable=False,
              aggregation=tf.VariableAggregation.NONE)
    self._loss_scale = self.CreateVariable(
        'loss_scale', [], init=float(p.initial_scale), dtype=tf.float32, **kw)
    self._good_steps = self.CreateVariable(
        'good_steps', [], init=0, dtype=tf.int64, **kw)

  @property
  def scale(self):
    """float32 scalar tensor: the current loss scale S."""
    return self._loss_scale.read_value()

  @property
  def good_steps(self):
    """int64 scalar variable: consecutive finite steps (dynamic mode)."""
    return self._good_steps

  def ScaleLoss(self, loss):
    """Returns loss * S, in the loss's dtype (S cast to it).

    Args:
      loss: a float Tensor of any shape (usually a scalar).
    """
    loss = tf.convert_to_tensor(loss)
    return loss * tf.cast(self._loss_scale, loss.dtype)

  def Unscale(self, grad):
    """Returns grad / S, in grad's dtype.

    Args:
      grad: a float Tensor, a tf.IndexedSlices, or None (returned as is).
        float16/bfloat16 values are divided in float32 and cast back, so a
        scale above the half-precision range still unscales correctly.
    """
    if grad is None:
      return None
    if isinstance(grad, tf.IndexedSlices):
      return tf.IndexedSlices(self._Divide(grad.values), grad.indices,
                              grad.dense_shape)
    return self._Divide(tf.convert_to_tensor(grad))

  def _Divide(self, x):
    inv = 1.0 / self._loss_scale.read_value()
    if x.dtype == tf.float32:
      return x * inv
    if x.dtype == tf.float64:
      return x * tf.cast(inv, tf.float64)
    return tf.cast(tf.cast(x, tf.float32) * inv, x.dtype)

  def UpdateAfterStep(self, has_nan_or_inf, window_finite=None):
    """Feeds a learner step's overflow (and its window's) to `Update`.

    Args:
      has_nan_or_inf: bool scalar tensor, the step saw a NaN/Inf gradient.
      window_finite: None, or a bool scalar tensor: every micro-batch of
        the accumulation window was finite.

    Returns:
      `Update`'s op (None when executing eagerly).
    """
    finite = tf.logical_not(has_nan_or_inf)
    if window_finite is not None:
      finite = tf.logical_and(finite, window_finite)
    return self.Update(finite)

  def Update(self, grads_finite):
    """Adjusts the scale after a step (dynamic mode; fixed: no-op).

    Args:
      grads_finite: bool scalar tensor (or Python bool), True if every
        gradient of the step was finite.

    Returns:
      An op (None when executing eagerly) that performs the update.
    """
    p = self.params
    if p.mode == 'fixed':
      return tf.no_op()
    finite = tf.cast(grads_finite, tf.bool)
    scale = self._loss_scale.read_value()
    good = self._good_steps.read_value() + 1
    grow = tf.logical_and(finite, good >= p.growth_interval)
    grown = scale * p.factor
    grown = tf.where(tf.math.is_finite(grown), grown, scale)
    shrunk = tf.maximum(scale / p.factor, p.min_scale)
    new_scale = tf.where(finite, tf.where(grow, grown, scale), shrunk)
    new_good = tf.where(tf.logical_and(finite, tf.logical_not(grow)), good,
                        tf.zeros_like(good))
    return tf.group(self._loss_scale.assign(new_scale),
                    self._good_steps.assign(new_good))
