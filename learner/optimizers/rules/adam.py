"""Adam and AdamW.

  t = num_updates + 1
  m <- beta1 * m + (1 - beta1) * g;   v <- beta2 * v + (1 - beta2) * g^2
  w <- w - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon)
  AdamW: the same, plus w <- w - lr * wd * w_old (decoupled weight decay).

Source: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015,
Algorithm 1 (epsilon-hat form, end of section 2); Loshchilov & Hutter,
"Decoupled Weight Decay Regularization", ICLR 2019, Algorithm 2; reference
implementation TF's ResourceApplyAdam, as Lingvo 0.14.2 wraps it.
"""

import numbers

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import DefineLingvoBaseParams
from params import NestedMap
from params import checks


class Adam(BaseOptimizer):
  """Adam in TF's form (ResourceApplyAdam).

  t = num_updates + 1
  m <- beta1 * m + (1 - beta1) * g;   v <- beta2 * v + (1 - beta2) * g^2
  w <- w - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon)
  The bias correction is folded into the step size, so `epsilon` is the
  "epsilon hat" of Kingma & Ba (end of section 2), added to sqrt(v) before
  bias correction; it equals the paper's epsilon times sqrt(1 - beta2^t).
  Slots: 'm', 'v' (zeros). Lazy sparse update (`lazy_sparse_updates`):
  only the rows in the batch move (TF1's LazyAdam): the base runs `_Step`
  on the gathered rows. The default is dense, as
  TF1's AdamOptimizer (which Lingvo wraps) decays every row's m and v.
  epsilon defaults to Lingvo's 1e-6; Keras's Adam has the same formula with
  epsilon 1e-7 (set epsilon=1e-7 for Keras's numbers). `ParamsA()` and
  `ParamsB()` are Lingvo's presets.
  `epsilon_form='optax'` adds epsilon after the bias correction, as optax
  and PyTorch do: w <- w - lr m_hat / (sqrt(v_hat) + epsilon), which is the
  TF form with epsilon hat = epsilon * sqrt(1 - beta2^t) (so the same
  kernels run); with epsilon=1e-8 it gives optax's `adam` / `adamw`
  numbers (tests/test_optimizers/test_adam_family.py).
  Source: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR
  2015, Algorithm 1; Lingvo 0.14.2 `lingvo/core/optimizer.py` Adam (same
  params, defaults and presets).
  Differs from Lingvo (docs/lingvo.md): beta1^t and beta2^t are computed
  from num_updates (Lingvo: TF1 beta-power variables; equal to float32
  rounding, ~1e-6 after 5 steps); beta1 = 1, beta2 = 1 and epsilon = 0
  are refused (below); and as every update rule (BaseOptimizer).
  Schedulable (`hyper_schedules`, BaseOptimizer): beta1, beta2 and
  decoupled_weight_decay. With a scheduled beta the bias correction uses
  the current value raised to t, 1 - beta1_t^t (not the product of the
  past betas), as optax's inject_hyperparams(adam)(b1=schedule) does; the
  fused kernel takes the scheduled betas as scalar tensors.

  Raises:
    ValueError: at construction, if beta1 or beta2 is not a finite number in
      [0, 1) (beta1 = 1 gives NaN weights, beta2 = 1 no learning) or epsilon
      is not > 0 (0/0 where a gradient is 0); docs/lingvo.md; or
      epsilon_form is not 'tf' or 'optax'.
  """

  SUPPORTS_LAZY_SPARSE = True
  ELEMENTWISE = True
  NONNEGATIVE_SLOTS = ('v',)  # slot_dtype=tf.int8: the unsigned map.
  ACCELERATOR = 'adam'
  SCHEDULABLE_PARAMS = BaseOptimizer.SCHEDULABLE_PARAMS + ('beta1', 'beta2')

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.Define('beta1', 0.9, 'Decay of the first moment estimate.')
    p.Define('beta2', 0.999, 'Decay of the second moment estimate.')
    p.Define('epsilon', 1e-6,
             'Epsilon hat: added to sqrt(v) (not bias corrected).')
    p.Define('epsilon_form', 'tf',
             "'tf': epsilon is added to sqrt(v) before the bias correction "
             "(TF, Lingvo, Keras); 'optax': after it, to sqrt(v_hat) "
             '(optax, PyTorch).')
    return p

  EPSILON_FORMS = ('tf', 'optax')

  def __init__(self, params):
    super().__init__(params)
    form = self.params.epsilon_form
    if not isinstance(form, str) or form not in self.EPSILON_FORMS:
      raise ValueError(
          '%s: epsilon_form=%r is not one of %s. Set epsilon_form to one of '
          "them, e.g. 'tf'." % (checks.Where(self), form,
                                list(self.EPSILON_FORMS)))

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, high_open=True, example=0.9,
                          why='beta1 = 1 divides by 1 - beta1^t = 0: NaN '
                          'weights'),
        beta2=checks.Real(0, 1, high_open=True, example=0.999,
                          why='beta2 = 1 makes the step size 0: no '
                          'learning'),
        epsilon=checks.Real(0, low_open=True, example=1e-6,
                            why='0 gives 0/0 = NaN where a gradient is 0'))
    return specs

  @classmethod
  def ParamsA(cls):
    """Lingvo's preset A: beta1 0.9, beta2 0.997, epsilon 1e-9."""
    return cls.Params().Set(beta1=0.9, beta2=0.997, epsilon=1e-9)

  @classmethod
  def ParamsB(cls):
    """Lingvo's preset B: beta1 0.9, beta2 0.98, epsilon 1e-9."""
    return cls.Params().Set(beta1=0.9, beta2=0.98, epsilon=1e-9)

  def _CreateSlots(self, var):
    return {'m': None, 'v': None}

  def _Scalars(self, update, dtype):
    """lr, the betas (scheduled: their value now), beta^t with t =
    num_updates + 1, and the epsilon of the TF form: epsilon, or epsilon
    sqrt(1 - beta2^t) for epsilon_form='optax'."""
    b1 = tf.cast(self.Hyper('beta1', dtype), dtype)
    b2 = tf.cast(self.Hyper('beta2', dtype), dtype)
    t = tf.cast(self.num_updates + 1, dtype)
    b1p, b2p = tf.pow(b1, t), tf.pow(b2, t)
    eps = tf.cast(self.params.epsilon, dtype)
    if self.params.epsilon_form == 'optax':
      eps = eps * tf.sqrt(1. - b2p)
    return NestedMap(lr=tf.cast(update.lr, dtype), beta1=b1, beta2=b2,
                     beta1_power=b1p, beta2_power=b2p, epsilon=eps)

  def _Step(self, s, w, g, slots):
    del w
    m = s.beta1 * slots['m'] + (1. - s.beta1) * g
    v = s.beta2 * slots['v'] + (1. - s.beta2) * tf.square(g)
    lr_t = s.lr * tf.sqrt(1. - s.beta2_power) / (1. - s.beta1_power)
    return lr_t * m / (tf.sqrt(v) + s.epsilon), {'m': m, 'v': v}


class AdamW(Adam):
  """Adam with decoupled weight decay on by default (0.01).

  Exactly `Adam` with `decoupled_weight_decay` (see BaseOptimizer):
  w <- w - lr * adam_step - lr * wd * w_old, with the scheduled rate.
  AdamW is not a Lingvo class: it keeps Keras's AdamW epsilon (1e-7), not
  Lingvo Adam's 1e-6.
  Source: Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR
  2019, Algorithm 2.

  Raises:
    ValueError: decoupled_weight_decay is None or not a number (as Keras's
      AdamW refuses weight_decay=None), instead of silently being Adam; and
      as Adam, beta1 = 1, beta2 = 1 or epsilon = 0 (docs/lingvo.md).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.decoupled_weight_decay = 0.01
    p.epsilon = 1e-7
    return p

  def __init__(self, params):
    wd = params.decoupled_weight_decay
    if wd is None or isinstance(wd, bool) or not isinstance(
        wd, numbers.Real):
      raise ValueError(
          '%s: AdamW decoupled_weight_decay=%r; expected a float >= 0 (the '
          'default is 0.01). Keras\'s AdamW refuses None too; for Adam '
          'without decay use Adam.Params().' % (params.name, wd))
    super().__init__(params)
