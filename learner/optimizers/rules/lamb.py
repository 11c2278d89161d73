"""LAMB: Adam with a per-variable trust ratio.

  r = (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + epsilon) + weight_decay*w
  w <- w - lr * (||w|| / ||r||) * r

Source: You et al., "Large Batch Optimization for Deep Learning: Training
BERT in 76 minutes", ICLR 2020, Algorithm 2; written out (no fused kernel).
"""

import re

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks


def _TrustRatio(w_norm, u_norm):
  """w_norm / u_norm, or 1 when either norm is zero (LAMB eq. in Alg. 2)."""
  ok = tf.logical_and(w_norm > 0., u_norm > 0.)
  return tf.where(ok, w_norm / tf.where(ok, u_norm, 1.), tf.ones_like(w_norm))


class LAMB(BaseOptimizer):
  """LAMB: Adam with a per-variable trust ratio.

  t = num_updates + 1
  m <- beta1 m + (1-beta1) g;  v <- beta2 v + (1-beta2) g^2
  r = (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + epsilon) + weight_decay*w
  w <- w - lr * (||w|| / ||r||) * r   (ratio 1 when either norm is 0)
  `weight_decay` is LAMB's own decay inside the trust ratio (not scaled by
  lr separately); `decoupled_weight_decay` is still available on top.
  Variables matching `exclude_from_weight_decay` get no weight_decay term;
  those matching `exclude_from_layer_adaptation` use ratio 1 (BERT's LAMB
  excludes 'LayerNorm' and 'bias' from both).
  Sparse gradients are densified. Slots: 'm', 'v' (zeros).
  Schedulable (`hyper_schedules`, BaseOptimizer): beta1, beta2,
  weight_decay and decoupled_weight_decay; a scheduled beta's bias
  correction is 1 - beta_t^t (the current value, as optax's
  inject_hyperparams).
  Source: You et al., "Large Batch Optimization for Deep Learning: Training
  BERT in 76 minutes", ICLR 2020, Algorithm 2 (phi = identity).

  Raises:
    ValueError: at construction, if beta1 or beta2 is not in [0, 1) (1
      divides by 0), epsilon <= 0, weight_decay < 0 (a bool, NaN or inf is
      refused too; docs/lingvo.md, as Adam), or a regex of the exclude lists
      does not compile; the message names the param.
  """

  # The trust ratio reads ||w|| and ||r|| of the whole variable: ZeRO-1
  # homes each on one replica (home_sharding.py; exact, no partial norms).
  WHOLE_TENSOR = True
  SCHEDULABLE_PARAMS = BaseOptimizer.SCHEDULABLE_PARAMS + (
      'beta1', 'beta2', 'weight_decay')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.9, 'Decay of the first moment.')
    p.Define('beta2', 0.999, 'Decay of the second moment.')
    p.Define('epsilon', 1e-6, 'Added to the bias-corrected sqrt(v).')
    p.Define('weight_decay', 0.0, 'LAMB weight decay lambda inside r.')
    p.Define('exclude_from_weight_decay', [],
             'Regexes (re.search on variable names) of variables without the '
             'weight_decay term.')
    p.Define('exclude_from_layer_adaptation', [],
             'Regexes of variables whose trust ratio is fixed at 1.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, high_open=True, example=0.9,
                          why='beta1 = 1 divides by 1 - beta1^t = 0'),
        beta2=checks.Real(0, 1, high_open=True, example=0.999,
                          why='beta2 = 1 divides by 1 - beta2^t = 0'),
        epsilon=checks.Real(0, low_open=True, example=1e-6,
                            why='0 gives 0/0 = NaN where a gradient is 0'),
        weight_decay=checks.Real(0, example=0.01))
    return specs

  def __init__(self, params):
    super().__init__(params)
    for key in ('exclude_from_weight_decay', 'exclude_from_layer_adaptation'):
      checks.CheckRegexList(self, key, self.params.Get(key))

  def _Matches(self, var, regexes):
    name = var_grad_lib.VarName(var)
    return any(re.search(r, name) for r in regexes)

  def _CreateSlots(self, var):
    return {'m': None, 'v': None}

  def _Scalars(self, update, dtype):
    """lr, the betas (scheduled: their value now), the bias corrections'
    beta^t (t = num_updates + 1) and weight_decay, for variables of
    `dtype`. An unscheduled beta or weight_decay stays a Python number (so
    `beta * m` takes it at full precision, as before)."""
    b1 = self.Hyper('beta1', dtype)
    b2 = self.Hyper('beta2', dtype)
    t = tf.cast(self.num_updates + 1, dtype)
    return NestedMap(lr=tf.cast(update.lr, dtype), beta1=b1, beta2=b2,
                     beta1_power=tf.pow(tf.cast(b1, dtype), t),
                     beta2_power=tf.pow(tf.cast(b2, dtype), t),
                     weight_decay=self.Hyper('weight_decay', dtype))

  def _Step(self, s, w, g, slots):
    """LAMB on a whole variable `w` (its norm and name are read: the trust
    ratio and the exclude lists)."""
    p = self.params
    m = s.beta1 * slots['m'] + (1. - s.beta1) * g
    v = s.beta2 * slots['v'] + (1. - s.beta2) * tf.square(g)
    w_old = tf.identity(w)
    m_hat = m / (1. - s.beta1_power)
    v_hat = v / (1. - s.beta2_power)
    r = m_hat / (tf.sqrt(v_hat) + p.epsilon)
    if not self._Matches(w, p.exclude_from_weight_decay):
      r += s.weight_decay * w_old
    ratio = 1.
    if not self._Matches(w, p.exclude_from_layer_adaptation):
      ratio = _TrustRatio(tf.norm(w_old), tf.norm(r))
    return s.lr * ratio * r, {'m': m, 'v': v}
