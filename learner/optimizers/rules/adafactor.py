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
from learner.optimizers.rules.common import Cast
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

  def _ApplyDense(self, lr, var, grad, slots):
    p = self.params
    t = tf.cast(self.num_updates + 1, var.dtype)
    beta2 = 1. - tf.pow(t, -p.decay_rate)
    sq = tf.square(grad) + p.epsilon1
    w_old = tf.identity(var.read_value())
    ops = []
    if self._Factored(var):
      vr = beta2 * slots['vr'] + (1. - beta2) * tf.reduce_mean(sq, -1)
      vc = beta2 * slots['vc'] + (1. - beta2) * tf.reduce_mean(sq, -2)
      ops += [slots['vr'].assign(vr), slots['vc'].assign(vc)]
      row = tf.math.rsqrt(vr / tf.reduce_mean(vr, -1, keepdims=True))
      col = tf.math.rsqrt(vc)
      u = grad * tf.expand_dims(row, -1) * tf.expand_dims(col, -2)
    else:
      v = beta2 * slots['v'] + (1. - beta2) * sq
      ops.append(slots['v'].assign(v))
      u = grad * tf.math.rsqrt(v)
    if p.clipping_threshold:
      u /= tf.maximum(1., _Rms(u) / p.clipping_threshold)
    step = Cast(lr, var)
    if p.multiply_by_parameter_scale:
      step *= tf.maximum(Cast(p.epsilon2, var), _Rms(w_old))
    delta = step * u
    if p.beta1:
      delta = p.beta1 * slots['m'] + (1. - p.beta1) * delta
      ops.append(slots['m'].assign(delta))
    ops.append(var.assign_sub(delta))
    return tf.group(ops) if not tf.executing_eagerly() else None
