"""AdEMAMix: Adam's update plus a slow, large-weighted second momentum.

  t = num_updates + 1
  m1 <- beta1 m1 + (1 - beta1) g;   m2 <- beta3 m2 + (1 - beta3) g
  nu <- beta2 nu + (1 - beta2) g^2
  m1_hat = m1 / (1 - beta1^t);   nu_hat = nu / (1 - beta2^t)
  w <- w - lr (m1_hat + alpha m2) / (sqrt(nu_hat) + epsilon)
  With decoupled weight decay (the base's): also w <- w - lr wd w_old.

Source: Pagliardini, Ablin & Grangier, "The AdEMAMix Optimizer: Better,
Faster, Older", ICLR 2025, arXiv:2409.03137, Algorithm 1 (m2 is not bias
corrected; the paper's lambda theta term is lr-scaled, as the base's
decay). optax.contrib.ademamix gives the same numbers
(tests/test_optimizers/test_ademamix.py). Fused kernel:
TfLearnerMultiApplyAdEMAMix (kernels/multi_tensor_rules.cc), the same
numbers bit for bit.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks


class AdEMAMix(BaseOptimizer):
  """AdEMAMix: a fast EMA (beta1, bias corrected) plus alpha times a slow
  one (beta3, not bias corrected), over Adam's sqrt(nu_hat) + epsilon.

  Formula: the module docstring. Slots: 'm1', 'm2', 'nu' (zeros). Weight
  decay: the base's `decoupled_weight_decay`, w <- w - lr wd w_old (the
  paper's and optax's convention). Lazy sparse updates (only the rows in
  the batch move): `lazy_sparse_updates=True`.
  Schedulable (`hyper_schedules`, BaseOptimizer): alpha and beta3 (the
  paper warms both up), beta1, beta2 and decoupled_weight_decay. With a
  scheduled beta the bias correction uses the current value raised to t.
  Source: Pagliardini, Ablin & Grangier, arXiv:2409.03137, Algorithm 1.
  Defaults: optax.contrib.ademamix's (0.2.8; its lower-level
  scale_by_ademamix has alpha 6.0).

  Raises:
    ValueError: at construction, if beta1, beta2 or beta3 is not a finite
      number in [0, 1), alpha is not >= 0 or epsilon is not > 0 (a bool,
      NaN or inf is refused too; the message names the param).
  """

  SUPPORTS_LAZY_SPARSE = True
  ELEMENTWISE = True
  ACCELERATOR = 'ademamix'  # Fused: kernels/multi_tensor_rules.cc.
  NONNEGATIVE_SLOTS = ('nu',)  # slot_dtype=tf.int8: the unsigned map.
  SCHEDULABLE_PARAMS = BaseOptimizer.SCHEDULABLE_PARAMS + (
      'beta1', 'beta2', 'beta3', 'alpha')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.9, 'Decay of the fast first moment m1.')
    p.Define('beta2', 0.999, 'Decay of the second moment nu.')
    p.Define('beta3', 0.9999, 'Decay of the slow first moment m2.')
    p.Define('alpha', 5.0, 'Weight of the slow moment m2 in the step.')
    p.Define('epsilon', 1e-8, 'Added to sqrt(nu_hat) (bias corrected).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, high_open=True, example=0.9,
                          why='beta1 = 1 divides by 1 - beta1^t = 0'),
        beta2=checks.Real(0, 1, high_open=True, example=0.999,
                          why='beta2 = 1 divides by 1 - beta2^t = 0'),
        beta3=checks.Real(0, 1, high_open=True, example=0.9999,
                          why='beta3 = 1 keeps m2 at 0'),
        alpha=checks.Real(0, example=5.0),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 gives 0/0 = NaN where a gradient is 0'))
    return specs

  def _CreateSlots(self, var):
    return {'m1': None, 'm2': None, 'nu': None}

  def _Scalars(self, update, dtype):
    """lr, epsilon, alpha, the betas and their complements (1 - beta taken
    before rounding to `dtype`), the bias corrections 1 - beta^t (t =
    num_updates + 1, in float64, then rounded: as optax); scheduled params
    at their value now. A Python number becomes a `dtype` tensor directly
    (tf.cast would round it to float32 first)."""
    def Value(x, d=dtype):
      return tf.convert_to_tensor(x, d)
    s = NestedMap(lr=tf.cast(update.lr, dtype),
                  epsilon=Value(self.params.epsilon),
                  alpha=Value(self.Hyper('alpha', dtype)))
    for name in ('beta1', 'beta2', 'beta3'):
      b = self.Hyper(name, dtype)
      s[name], s['one_minus_' + name] = Value(b), Value(1. - b)
    t = tf.cast(self.num_updates + 1, tf.float64)
    for k, name in (('correction1', 'beta1'), ('correction2', 'beta2')):
      b = Value(self.Hyper(name, tf.float64), tf.float64)
      s[k] = tf.cast(1. - tf.pow(b, t), dtype)
    return s

  def _Step(self, s, w, g, slots):
    del w
    m1 = s.beta1 * slots['m1'] + s.one_minus_beta1 * g
    m2 = s.beta3 * slots['m2'] + s.one_minus_beta3 * g
    nu = s.beta2 * slots['nu'] + s.one_minus_beta2 * tf.square(g)
    numer = m1 / s.correction1 + s.alpha * m2
    denom = tf.sqrt(nu / s.correction2) + s.epsilon
    return s.lr * numer / denom, {'m1': m1, 'm2': m2, 'nu': nu}
