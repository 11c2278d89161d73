"""Lion: sign of an interpolated momentum.

  c = beta1 m + (1-beta1) g;  w <- w - lr * sign(c)
  m <- beta2 m + (1-beta2) g

Source: Chen et al., "Symbolic Discovery of Optimization Algorithms",
NeurIPS 2023, Program 1. Fused kernel: TfLearnerMultiApplyLion
(kernels/multi_tensor_rules.cc), the same numbers bit for bit.
"""

import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.rules.common import Cast
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

  def _ApplyDense(self, lr, var, grad, slots):
    b1 = self.Hyper('beta1', var.dtype)
    b2 = self.Hyper('beta2', var.dtype)
    m = slots['m']
    c = b1 * m + (1. - b1) * grad
    ops = [var.assign_sub(Cast(lr, var) * tf.sign(c)),
           m.assign(b2 * m + (1. - b2) * grad)]
    return tf.group(ops) if not tf.executing_eagerly() else None

  def _ApplyDenseMulti(self, lr, variables, grads, slots, grad_scale,
                       wd_rate, decay, measure):
    """One TfLearnerMultiApplyLion over all variables (see BaseOptimizer).

    The scalars are the ones `_ApplyDense` builds (scheduled betas too), so
    the op gives its numbers bit for bit.
    """
    var = variables[0]
    b1 = self.Hyper('beta1', var.dtype)
    b2 = self.Hyper('beta2', var.dtype)
    scalars = (Cast(lr, var), Cast(b1, var), Cast(1. - b1, var),
               Cast(b2, var), Cast(1. - b2, var))
    factor = None if grad_scale is None else Cast(grad_scale, var)
    return kernels.ApplyLion(variables, [s['m'] for s in slots], grads,
                             scalars, factor, wd_rate, decay, measure)
