"""Simplified AdEMAMix: one undamped momentum plus alpha times the gradient.

  t = num_updates + 1
  m <- beta1 m + g              (a sum, no (1 - beta1) factor, no correction)
  nu <- beta2 nu + (1 - beta2) g^2;   nu_hat = nu / (1 - beta2^t)
  w <- w - lr (m + alpha g) / (sqrt(nu_hat) + epsilon)
  With decoupled weight decay (the base's): also w <- w - lr wd w_old.

Source: Morwani et al., "Connections between Schedule-Free
Optimizers, AdEMAMix, and Accelerated SGD Variants", arXiv:2502.02431
(2025): AdEMAMix's two EMAs folded into one slow momentum that is not
normalised, so one m replaces m1 and m2 and alpha needs no warmup; alpha
= 0 is Adam with a rescaled rate and beta1. optax.contrib.
simplified_ademamix (0.2.8) gives the same numbers
(tests/test_optimizers/test_simplified_ademamix.py); its eps_root (inside
the square root, default 0) is not offered here. Fused kernel:
TfLearnerMultiApplySimplifiedAdEMAMix (kernels/multi_tensor_rules.cc),
the same numbers bit for bit.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks


class SimplifiedAdEMAMix(BaseOptimizer):
  """Simplified AdEMAMix: (m + alpha g) over Adam's sqrt(nu_hat) + epsilon,
  m an undamped sum decaying by beta1 (no bias correction).

  Formula: the module docstring. Slots: 'm', 'nu' (zeros). Weight decay:
  the base's `decoupled_weight_decay`, w <- w - lr wd w_old (optax's
  add_decayed_weights before the rate: the same). epsilon is added outside
  the square root, after nu's bias correction (optax's eps; its eps_root
  is 0 here). Lazy sparse updates: `lazy_sparse_updates=True`.
  Schedulable (`hyper_schedules`, BaseOptimizer): alpha, beta1, beta2 and
  decoupled_weight_decay; a scheduled beta2 is bias corrected by its
  current value raised to t. Defaults: optax.contrib.simplified_ademamix's
  (0.2.8: beta1 0.99, beta2 0.95, alpha 0, epsilon 1e-8). Note the step
  is about 1 / (1 - beta1) times Adam's: scale the rate down.

  Raises:
    ValueError: at construction, if beta1 or beta2 is not a finite number
      in [0, 1), alpha is not >= 0 or epsilon is not > 0 (the message
      names the param).
  """

  SUPPORTS_LAZY_SPARSE = True
  ELEMENTWISE = True
  ACCELERATOR = 'simplified_ademamix'  # Fused: kernels/multi_tensor_rules.cc.
  NONNEGATIVE_SLOTS = ('nu',)  # slot_dtype=tf.int8: the unsigned map.
  SCHEDULABLE_PARAMS = BaseOptimizer.SCHEDULABLE_PARAMS + (
      'beta1', 'beta2', 'alpha')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.99, 'Decay of the momentum m (an undamped sum).')
    p.Define('beta2', 0.95, 'Decay of the second moment nu.')
    p.Define('alpha', 0.0, 'Weight of the current gradient added to m.')
    p.Define('epsilon', 1e-8, 'Added to sqrt(nu_hat) (bias corrected).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, high_open=True, example=0.99,
                          why='beta1 = 1 lets m grow without bound'),
        beta2=checks.Real(0, 1, high_open=True, example=0.95,
                          why='beta2 = 1 divides by 1 - beta2^t = 0'),
        alpha=checks.Real(0, example=0.0),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 gives 0/0 = NaN where a gradient is 0'))
    return specs

  def _CreateSlots(self, var):
    return {'m': None, 'nu': None}

  def _Scalars(self, update, dtype):
    """lr, epsilon, alpha, beta1, beta2 and 1 - beta2 (taken before
    rounding to `dtype`), the correction 1 - beta2^t (t = num_updates + 1,
    in float64, then rounded: as optax); scheduled params at their value
    now. A Python number becomes a `dtype` tensor directly."""
    def Value(x, d=dtype):
      return tf.convert_to_tensor(x, d)
    b2 = self.Hyper('beta2', dtype)
    s = NestedMap(lr=tf.cast(update.lr, dtype),
                  epsilon=Value(self.params.epsilon),
                  alpha=Value(self.Hyper('alpha', dtype)),
                  beta1=Value(self.Hyper('beta1', dtype)),
                  beta2=Value(b2), one_minus_beta2=Value(1. - b2))
    t = tf.cast(self.num_updates + 1, tf.float64)
    b2 = Value(self.Hyper('beta2', tf.float64), tf.float64)
    s.correction2 = tf.cast(1. - tf.pow(b2, t), dtype)
    return s

  def _Step(self, s, w, g, slots):
    del w
    m = s.beta1 * slots['m'] + g
    nu = s.beta2 * slots['nu'] + s.one_minus_beta2 * tf.square(g)
    denom = tf.sqrt(nu / s.correction2) + s.epsilon
    return s.lr * (m + s.alpha * g) / denom, {'m': m, 'nu': nu}
