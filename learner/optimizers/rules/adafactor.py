"""Adafactor: factored second moments, update clipping, relative step.

  beta2_t = 1 - t^(-decay_rate);  G = g^2 + epsilon1
  factored: vr, vc <- row / column means of G (EMA with beta2_t)
            u = g / sqrt(vr / mean(vr) * vc)
  else:     v <- EMA of G;  u = g / sqrt(v)
  u <- u / max(1, RMS(u) / clipping_threshold)
  w <- w - lr * max(epsilon2, RMS(w_old)) * u   (beta1 > 0: through m)

Source: Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear
Memory Cost", ICML 2018, Algorithms 4 and 5; written out (no fused kernel).
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import DefineLingvoBaseParams
from learner.optimizers.kernels import shared_ops
from params import NestedMap
from params import checks


def _Rms(x):
  return tf.sqrt(tf.reduce_mean(tf.square(x)))


class Adafactor(BaseOptimizer):
  """Adafactor: factored second moments, update clipping, relative step.

  t = num_updates + 1;  beta2_t = 1 - t^(-decay_rate)
  G = g^2 + epsilon1
  factored (rank >= 2, last two dims >= min_dim_size_to_factor):
    vr <- beta2_t * vr + (1 - beta2_t) * mean(G, axis=-1)
    vc <- beta2_t * vc + (1 - beta2_t) * mean(G, axis=-2)
    u = g / sqrt(vr / mean(vr, -1) [..., None] * vc[..., None, :])
  else: v <- beta2_t * v + (1 - beta2_t) * G;  u = g / sqrt(v)
  u <- u / max(1, RMS(u) / clipping_threshold)          (update clipping)
  step = lr * max(epsilon2, RMS(w_old)) if multiply_by_parameter_scale
         else lr                                          (relative step)
  beta1 > 0: m <- beta1 * m + (1 - beta1) * step * u; w <- w - m
  else:      w <- w - step * u
  The learner's scheduled rate is the paper's rho_t (e.g. use an
  inverse-sqrt schedule for min(1e-2, 1/sqrt(t))). No fused kernel exists;
  sparse gradients are always densified.
  Slots: 'vr', 'vc' (factored) or 'v'; 'm' when beta1 > 0.
  Source: Shazeer & Stern, "Adafactor: Adaptive Learning Rates with
  Sublinear Memory Cost", ICML 2018, Algorithms 4-5 and section 6-8.

  Raises:
    ValueError: at construction, if beta1 is not in [0, 1), decay_rate or
      epsilon1 is not > 0, clipping_threshold or epsilon2 is < 0, or
      min_dim_size_to_factor is not an int >= 0; a bool, NaN or inf is
      refused too (the message names the param).
  """

  # Factored statistics and the update's RMS read the whole variable: ZeRO-1
  # homes each on one replica, balanced by its slots' bytes.
  WHOLE_TENSOR = True

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.0,
             'First-moment decay; 0 keeps no first moment (saves memory).')
    p.Define('decay_rate', 0.8,
             'beta2_t = 1 - t^(-decay_rate), t counting applied updates.')
    p.Define('clipping_threshold', 1.0,
             'Update clipping threshold d (None or 0 disables clipping).')
    p.Define('multiply_by_parameter_scale', True,
             'Relative step: scale the rate by max(epsilon2, RMS(w)).')
    p.Define('factored', True, 'Factor the second moment of matrices.')
    p.Define('min_dim_size_to_factor', 128,
             'Factor only when the last two dimensions are both >= this.')
    p.Define('epsilon1', 1e-30, 'Added to the squared gradient.')
    p.Define('epsilon2', 1e-3, 'Lower bound of the parameter scale RMS(w).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, high_open=True, example=0.9,
                          why='beta1 = 1 keeps the update at 0'),
        decay_rate=checks.Real(0, low_open=True, example=0.8,
                               why='beta2_t = 1 - t^(-decay_rate) must '
                               'rise towards 1'),
        clipping_threshold=checks.Real(0, none_ok=True, example=1.0),
        min_dim_size_to_factor=checks.Int(0, example=128),
        epsilon1=checks.Real(0, low_open=True, example=1e-30,
                             why='0 gives 1/sqrt(0) where a gradient is 0'),
        epsilon2=checks.Real(0, example=1e-3))
    return specs

  def _Factored(self, var):
    p = self.params
    shape = var.shape.as_list()
    return (p.factored and len(shape) >= 2 and
            min(shape[-2:]) >= p.min_dim_size_to_factor)

  def _CreateSlots(self, var):
    shape = var.shape.as_list()
    slots = {}
    if self._Factored(var):
      slots['vr'] = tf.zeros(shape[:-1], var.dtype)
      slots['vc'] = tf.zeros(shape[:-2] + shape[-1:], var.dtype)
    else:
      slots['v'] = None
    if self.params.beta1:
      slots['m'] = None
    return slots

  def _Scalars(self, update, dtype):
    """lr and beta2_t = 1 - t^(-decay_rate), t = num_updates + 1."""
    t = tf.cast(self.num_updates + 1, dtype)
    return NestedMap(lr=tf.cast(update.lr, dtype),
                     beta2=1. - tf.pow(t, -self.params.decay_rate))

  def _Step(self, s, w, g, slots):
    """Adafactor on a whole variable (`w`'s shape decides the factoring;
    its RMS scales the step when multiply_by_parameter_scale)."""
    p = self.params
    beta2 = s.beta2
    sq = tf.square(g) + p.epsilon1
    w_old = tf.identity(w)
    new = {}
    if self._Factored(w):
      new['vr'] = beta2 * slots['vr'] + (1. - beta2) * tf.reduce_mean(sq, -1)
      new['vc'] = beta2 * slots['vc'] + (1. - beta2) * tf.reduce_mean(sq, -2)
      row = tf.math.rsqrt(
          new['vr'] / tf.reduce_mean(new['vr'], -1, keepdims=True))
      col = tf.math.rsqrt(new['vc'])
      u = g * tf.expand_dims(row, -1) * tf.expand_dims(col, -2)
    else:
      new['v'] = beta2 * slots['v'] + (1. - beta2) * sq
      u = g * tf.math.rsqrt(new['v'])
    if p.clipping_threshold:
      u /= tf.maximum(1., _Rms(u) / p.clipping_threshold)
    step = s.lr
    if p.multiply_by_parameter_scale:
      step *= tf.maximum(tf.cast(p.epsilon2, g.dtype), _Rms(w_old))
    delta = step * u
    if p.beta1:
      delta = p.beta1 * slots['m'] + (1. - p.beta1) * delta
      new['m'] = delta
    return delta, new


class XLAShardingAdafactor(Adafactor):
  """Lingvo 0.14.2's Adafactor (`optimizer.XLAShardingAdafactor`).

  Adafactor as above, with Lingvo's params and numbers:
    step = the task's global step (read at the update, before it is
      incremented), not this optimizer's num_updates;
    decay_exponent_pow set: beta2_t = 1 - (step - decay_exponent_offset
      + 1)^(-decay_exponent_pow);
    else (Adam-like):  beta2_t = beta2 (1 - beta2^(t-1)) / (1 - beta2^t),
      t = step + 1;
    factored over the two largest dimensions (the first of equal ones),
      when both are >= min_dim_size_to_factor.
  `clipping_threshold` must be set (Lingvo asserts it); `cond_is_finite`
  True skips a variable's update when its statistics are not finite, as
  Lingvo does (here the learner already skips non-finite steps).
  Source: `lingvo/core/optimizer.py` XLAShardingAdafactor and
  XLAShardingAdafactorOptimizer (after mesh_tensorflow's Adafactor);
  Shazeer & Stern, ICML 2018. Our `Adafactor` is the documented form
  (decay_rate over num_updates, last two dimensions).

  Raises:
    ValueError: at construction, for a beta2 outside [0, 1), a
      decay_exponent_pow outside (0, 1], a clipping_threshold that is None
      or < 1; at the first update, when the learner was bound without the
      task's global step.
  """

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.Delete('decay_rate')
    p.beta1 = 0
    p.Define('beta2', 0.999, 'Adam-like second-moment decay (used when '
             'decay_exponent_pow is None).')
    p.clipping_threshold = None
    p.Define('decay_exponent_pow', None,
             'If set, beta2_t = 1 - (step - offset + 1)^(-pow).')
    p.Define('decay_exponent_offset', 0,
             'Global step at which the pow decay starts.')
    p.Define('cond_is_finite', False,
             'Skip a variable\'s update when its statistics are not finite.')
    p.name = 'Adafactor'
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.pop('decay_rate', None)
    specs.update(
        beta2=checks.Real(0, 1, high_open=True, example=0.999),
        decay_exponent_pow=checks.Real(0, 1, low_open=True, none_ok=True,
                                       example=0.8),
        decay_exponent_offset=checks.Int(example=0),
        clipping_threshold=checks.Real(1, none_ok=True, example=1.0,
                                       why='Lingvo asserts it is set'))
    return specs

  def __init__(self, params):
    super().__init__(params)
    if self.params.clipping_threshold is None:
      raise ValueError(
          '%s: clipping_threshold : None: Lingvo\'s XLAShardingAdafactor '
          'requires it (it asserts); set clipping_threshold=1.0.' %
          self.path)

  def _FactoredDims(self, var):
    p = self.params
    shape = var.shape.as_list()
    if not p.factored or len(shape) < 2:
      return None
    order = sorted(range(len(shape)), key=lambda i: -shape[i])
    if shape[order[1]] < p.min_dim_size_to_factor:
      return None
    return order[0], order[1]

  def _Factored(self, var):
    return self._FactoredDims(var) is not None

  def _CreateSlots(self, var):
    dims = self._FactoredDims(var)
    if dims is None:
      return super()._CreateSlots(var)
    shape = var.shape.as_list()
    slots = {
        'vr': tf.zeros([s for i, s in enumerate(shape) if i != dims[0]],
                       var.dtype),
        'vc': tf.zeros([s for i, s in enumerate(shape) if i != dims[1]],
                       var.dtype)}
    if self.params.beta1:
      slots['m'] = None
    return slots

  def _Scalars(self, update, dtype):
    """lr and Lingvo's beta2_t at the task's global step (class
    docstring).

    Raises:
      ValueError: the learner was bound without the task's global step.
    """
    p = self.params
    gs = self.GlobalStep()
    if gs is None:
      raise ValueError(
          '%s: XLAShardingAdafactor counts the global step, as Lingvo\'s '
          'does: bind its learner with Bind(vmap, global_step=...) (a '
          'task does).' % self.path)
    step = tf.cast(gs.read_value(), dtype)
    if p.decay_exponent_pow:
      beta2 = 1. - tf.pow(step - p.decay_exponent_offset + 1.,
                          -p.decay_exponent_pow)
    else:
      t = step + 1.
      beta2 = p.beta2 * (1. - tf.pow(p.beta2, t - 1.)) / (
          1. - tf.pow(p.beta2, t))
    return NestedMap(lr=tf.cast(update.lr, dtype), beta2=beta2)

  def _Step(self, s, w, g, slots):
    """Lingvo's Adafactor on a whole variable (`w`'s shape decides the
    factored dimensions; its RMS scales the step)."""
    p = self.params
    beta2 = s.beta2
    sq = tf.square(g) + p.epsilon1
    w_old = tf.identity(w)
    dims = self._FactoredDims(w)
    new = {}
    if dims is not None:
      d0, d1 = dims
      new['vr'] = slots['vr'] * beta2 + tf.reduce_mean(sq, d0) * (1. - beta2)
      new['vc'] = slots['vc'] * beta2 + tf.reduce_mean(sq, d1) * (1. - beta2)
      row = tf.math.rsqrt(
          new['vr'] / tf.reduce_mean(new['vr'], -1, keepdims=True))
      col = tf.math.rsqrt(new['vc'])
      u = g * (tf.expand_dims(row, d0) * tf.expand_dims(col, d1))
    else:
      new['v'] = slots['v'] * beta2 + sq * (1. - beta2)
      u = g * tf.math.rsqrt(new['v'])
    u /= tf.maximum(1., _Rms(u) / p.clipping_threshold)
    step = s.lr
    if p.multiply_by_parameter_scale:
      step = tf.maximum(_Rms(w_old), tf.cast(p.epsilon2, g.dtype)) * step
    delta = u * step
    if p.beta1:
      new['m'] = slots['m'] * p.beta1 + delta * (1. - p.beta1)
      delta = new['m']
    if not p.cond_is_finite:
      return delta, new
    # Lingvo's tf.cond: a non-finite statistic keeps the slots and the
    # weights (the slots given back unchanged, a zero delta).
    finite = shared_ops.AllFinite(list(new.values()) + [sq, u, delta])
    kept = {k: tf.where(finite, x, slots[k]) for k, x in new.items()}
    return tf.where(finite, delta, tf.zeros_like(delta)), kept
