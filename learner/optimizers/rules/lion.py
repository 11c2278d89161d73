"""Lion: sign of an interpolated momentum.

  c = beta1 m + (1-beta1) g;  w <- w - lr * sign(c)
  m <- beta2 m + (1-beta2) g

Source: Chen et al., "Symbolic Discovery of Optimization Algorithms",
NeurIPS 2023, Program 1. Fused kernel: TfLearnerMultiApplyLion
(kernels/multi_tensor_rules.cc), the same numbers bit for bit.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks


class Lion(BaseOptimizer):
  """Lion: sign of an interpolated momentum.

  c = beta1 m + (1-beta1) g;  w <- w - lr * sign(c)
  m <- beta2 m + (1-beta2) g
  Weight decay is the base class's `decoupled_weight_decay` (the paper's
  lambda, scaled by lr). Sparse gradients are densified. Slot: 'm' (zeros).
  Schedulable (`hyper_schedules`, BaseOptimizer): beta1, beta2 and
  decoupled_weight_decay.
  Source: Chen et al., "Symbolic Discovery of Optimization Algorithms",
  NeurIPS 2023, Program 1.

  Raises:
    ValueError: at construction, if beta1 is not in (0, 1] (as Keras's
      Lion: beta1 = 0 would be sign SGD) or beta2 is not in [0, 1); a bool,
      NaN or inf is refused too (the message names the param).
  """

  SCHEDULABLE_PARAMS = BaseOptimizer.SCHEDULABLE_PARAMS + ('beta1', 'beta2')
  ELEMENTWISE = True
  ACCELERATOR = 'lion'

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.9, 'Interpolation of momentum and gradient.')
    p.Define('beta2', 0.99, 'Decay of the momentum.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, low_open=True, example=0.9,
                          why='beta1 = 0 makes Lion sign SGD, as Keras '
                              'refuses'),
        beta2=checks.Real(0, 1, high_open=True, example=0.99,
                          why='beta2 = 1 keeps the momentum at 0'))
    return specs

  def _CreateSlots(self, var):
    return {'m': None}

  def _Scalars(self, update, dtype):
    b1 = self.Hyper('beta1', dtype)
    b2 = self.Hyper('beta2', dtype)
    return NestedMap(
        lr=tf.cast(update.lr, dtype), beta1=tf.cast(b1, dtype),
        one_minus_beta1=tf.cast(1. - b1, dtype), beta2=tf.cast(b2, dtype),
        one_minus_beta2=tf.cast(1. - b2, dtype))

  def _Step(self, s, w, g, slots):
    del w
    m = slots['m']
    c = s.beta1 * m + s.one_minus_beta1 * g
    return (s.lr * tf.sign(c),
            {'m': s.beta2 * m + s.one_minus_beta2 * g})
