"""MADGRAD: momentumized, adaptive, dual-averaged gradient method.

Per element, k = num_updates (0 at the first update), lr the learner's
rate:
  lambda_k = (lr + epsilon) sqrt(k + 1)
  s_{k+1} = s_k + lambda_k g_k                    s_0 = 0
  nu_{k+1} = nu_k + lambda_k g_k^2                nu_0 = 0
  z_{k+1} = x0 - s_{k+1} / (nu_{k+1}^(1/3) + epsilon)
  w_{k+1} = (1 - momentum) z_{k+1} + momentum w_k
with x0 the weights at the first update. With decoupled weight decay (the
base's): also w <- w - lr wd w_old.

Source: Defazio & Jelassi, "Adaptivity without Compromise: A
Momentumized, Adaptive, Dual Averaged Gradient Method for Stochastic
Optimization", JMLR 2022 (arXiv:2101.11075), Algorithm 1 (lr + epsilon as
the reference PyTorch implementation, facebookresearch/madgrad).
optax.contrib.madgrad (0.2.8) gives the same numbers
(tests/test_optimizers/test_madgrad.py); its `weight_decay` (an L2 term
added to the gradient) is the learner's `l2_regularizer_weight` here.
Fused kernel: TfLearnerMultiApplyMADGRAD (kernels/multi_tensor_rules.cc),
the same numbers but for the cube root (TF's Pow to float32 rounding).
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks


class MADGRAD(BaseOptimizer):
  """MADGRAD: dual averaging with a cube-root denominator, then momentum
  as an average of the iterates (module docstring).

  Slots: 'x0' (the weights at the first update: taken then, not at Bind,
  so ZeRO-1's shards and weights restored after Bind count), 's' (the
  weighted sum of gradients), 'grad_sum_sq' (nu). Elementwise: ZeRO-1
  shards it. The learner's rate enters the sums (lambda_k), so a schedule
  on it weights later gradients less, as optax's. Defaults:
  optax.contrib.madgrad's (0.2.8: momentum 0.9, eps 1e-6; optax has no
  default rate, the reference implementation's is 1e-2).

  Raises:
    ValueError: at construction, if momentum is not in [0, 1) or epsilon
      is not > 0 (the message names the param).
  """

  ELEMENTWISE = True
  FIRST_UPDATE_SLOTS = ('x0',)  # Under XLA: kernels/first_update.py.
  ACCELERATOR = 'madgrad'  # Fused: kernels/multi_tensor_rules.cc.

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('momentum', 0.9,
             'Weight of the previous weights in the average with z.')
    p.Define('epsilon', 1e-6,
             'Added to the rate and to the cube root of nu.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        momentum=checks.Real(0, 1, high_open=True, example=0.9,
                             why='momentum = 1 never moves the weights'),
        epsilon=checks.Real(0, low_open=True, example=1e-6,
                            why='0 gives 0/0 = NaN where a gradient is 0'))
    return specs

  def _CreateSlots(self, var):
    return {'x0': None, 's': None, 'grad_sum_sq': None}

  def _Scalars(self, update, dtype):
    """lambda_k (in float64, then rounded), epsilon, momentum, 1 -
    momentum (taken before rounding) and `first` (bool: the first update,
    when x0 is taken)."""
    p = self.params
    k = tf.cast(self.num_updates, tf.float64)
    lam = (tf.cast(update.lr, tf.float64) + p.epsilon) * tf.sqrt(k + 1.)
    return NestedMap(lr=tf.cast(update.lr, dtype),
                     lamb=tf.cast(lam, dtype),
                     epsilon=tf.constant(p.epsilon, dtype),
                     momentum=tf.constant(p.momentum, dtype),
                     one_minus_momentum=tf.constant(1. - p.momentum, dtype),
                     first=tf.equal(self.num_updates, 0))

  def _Step(self, s, w, g, slots):
    w = tf.convert_to_tensor(w)
    x0 = tf.where(s.first, w, slots['x0'])
    grad_sum_sq = slots['grad_sum_sq'] + s.lamb * tf.square(g)
    s_sum = slots['s'] + s.lamb * g
    sigma = tf.pow(grad_sum_sq, tf.constant(1. / 3., g.dtype)) + s.epsilon
    z = x0 - s_sum / sigma
    new = s.one_minus_momentum * z + s.momentum * w
    return w - new, {'x0': x0, 's': s_sum, 'grad_sum_sq': grad_sum_sq}
