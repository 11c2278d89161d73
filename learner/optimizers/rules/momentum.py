"""Momentum (heavy ball) and Nesterov momentum, with Lingvo/TF1 semantics.

  v <- alpha * v + g;  w <- w - lr * v
  use_nesterov:  w <- w - lr * (g + alpha * v)   (v already updated)

Source: Polyak, "Some methods of speeding up the convergence of iteration
methods", 1964; Sutskever et al., ICML 2013 (Nesterov form); reference
implementation TF's ResourceApplyMomentum, as Lingvo 0.14.2 wraps it.
Plain SGD (w <- w - lr * g) is `SGD` in learner/optimizers/base.py.
"""

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import DefineLingvoBaseParams
from params import NestedMap
from params import checks


class Momentum(BaseOptimizer):
  """Momentum with Lingvo/TF1 semantics (TF's ResourceApplyMomentum).

  v <- alpha * v + g;  w <- w - lr * v
  use_nesterov: w <- w - lr * (g + alpha * v)  (v already updated).
  The rate multiplies the whole velocity, so a drop in lr takes effect at
  once (unlike Keras' SGD(momentum), where v absorbs the rate).
  Slot: 'momentum' (zeros). Sparse: ResourceSparseApplyMomentum; lazy by
  default (`lazy_sparse_updates=True`), as TF1's MomentumOptimizer that
  Lingvo wraps: rows absent from a sparse gradient keep their velocity and
  do not move.

  Folded gradient scale (`fold_grad_scale`, default True): when the learner
  applies `c_t * g` (its clip scale, under accumulation times 1/sum(weight))
  through `ApplyScaled`, the scaled gradient is never materialised. The
  slot holds u = v / s with a checkpointed scalar s (`grad_scale_state`),
  and one fused kernel per variable computes u <- (alpha * s_prev / s_t) u
  + g and w <- w - (lr * s_t) u with s_t = c_t: exactly v_t = alpha v +
  c_t g and w -= lr v_t (to float32 rounding of the two scalars). Use
  `Velocity(var)` for v (GetSlots(var)['momentum'] is u; it equals v while
  no scale other than 1 was applied, e.g. without clipping). s_t is kept
  in [1e-30, 1e30] (the Learner's scales lie inside: a finite global norm
  is below ~2.6e19). An update that covers only some bound variables, a
  lazy sparse update, Nesterov momentum or fold_grad_scale=False keep s
  and multiply the gradient by c_t / s instead.
  Source: Polyak 1964; Sutskever et al., ICML 2013 (Nesterov form); the
  fold is this project's (benchmarks/README.md, tf_fused_folded); Lingvo
  0.14.2 `lingvo/core/optimizer.py` Momentum (same params and defaults;
  `fold_grad_scale` is an extension that does not change the numbers).
  Differs from Lingvo: alpha >= 1 is refused (below), and as every update
  rule (BaseOptimizer, docs/lingvo.md).
  Schedulable (`hyper_schedules`, BaseOptimizer): alpha (the value at the
  learner's step multiplies the velocity of that update, as optax's
  inject_hyperparams(sgd)(momentum=schedule); the fold above still holds,
  with alpha_t in place of alpha, and the fused kernel takes it as a
  scalar tensor) and decoupled_weight_decay.

  Raises:
    ValueError: at construction, if alpha is not a finite number in [0, 1)
      (Lingvo accepts alpha >= 1, whose velocity grows without bound;
      docs/lingvo.md).
  """

  SUPPORTS_LAZY_SPARSE = True
  ELEMENTWISE = True
  ACCELERATOR = 'momentum'
  SCHEDULABLE_PARAMS = BaseOptimizer.SCHEDULABLE_PARAMS + ('alpha',)

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse Momentum.
    p.Define('alpha', 0.9, 'Momentum coefficient alpha in [0, 1).')
    p.Define('use_nesterov', False, 'Use Nesterov momentum.')
    p.Define(
        'fold_grad_scale', True,
        'Fold a gradient scale given to ApplyScaled (the learner\'s clip '
        'scale) into the kernel\'s scalar inputs: the slot then holds '
        'v / grad_scale_state (see the class docstring; Velocity(var) gives '
        'v). False materialises the scaled gradient and keeps slot = v.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(alpha=checks.Real(
        0, 1, high_open=True, example=0.9,
        why='alpha >= 1 lets the velocity grow without bound'))
    return specs

  def __init__(self, params):
    super().__init__(params)
    self._scale_state = self.CreateVariable(
        'grad_scale_state', [], init=1.0, trainable=False, dtype=tf.float32)

  @property
  def grad_scale_state(self):
    """float32 variable s: the momentum slot holds v / s (checkpointed)."""
    return self._scale_state

  def Velocity(self, var):
    """The velocity v of a bound variable (slot * grad_scale_state)."""
    slot = self.GetSlots(var)['momentum']
    return tf.cast(slot.read_value(), var.dtype) * tf.cast(
        self._scale_state.read_value(), var.dtype)

  def _CreateSlots(self, var):
    return {'momentum': None}

  def _BeginUpdate(self, lr, vgs, grad_scale):
    """Decides the fold (class docstring): the velocity's factor and rate.

    Returns the base's NestedMap plus `momentum` (alpha_t s_prev / s_t when
    folded, else alpha_t), `lr_s` (lr s_t) and `scale_state` (s_t); its
    `grad_scale` is what the gradient still gets multiplied by: None when
    folded, else c_t / s_prev.
    """
    p = self.params
    names = set(var_grad_lib.VarName(vg.var) for vg in vgs)
    lazy = p.lazy_sparse_updates and any(
        isinstance(vg.grad, tf.IndexedSlices) for vg in vgs)
    fold = (p.fold_grad_scale and not p.use_nesterov and not lazy and
            p.slot_dtype is None and names == set(self.bound_variables))
    c = (tf.constant(1.0) if grad_scale is None else
         tf.cast(grad_scale, tf.float32))
    s_prev = self._scale_state.read_value()
    alpha = self.Hyper('alpha')
    if fold:
      s_new = tf.clip_by_value(c, 1e-30, 1e30)
      factor = None
      mom = alpha * s_prev / s_new
    else:
      s_new = s_prev
      factor = c / s_prev
      mom = tf.convert_to_tensor(alpha, tf.float32)
    return NestedMap(lr=lr, grad_scale=factor, momentum=mom,
                     lr_s=lr * s_new, scale_state=s_new)

  def _EndUpdate(self, update, ops):
    """Stores s_t after the update."""
    with tf.control_dependencies([o for o in ops if o is not None]):
      return [self._scale_state.assign(update.scale_state, read_value=False)]

  def _Scalars(self, update, dtype):
    return NestedMap(lr=tf.cast(update.lr_s, dtype),
                     momentum=tf.cast(update.momentum, dtype),
                     use_nesterov=self.params.use_nesterov)

  def _Step(self, s, w, g, slots):
    del w
    v = s.momentum * slots['momentum'] + g
    step = g + s.momentum * v if s.use_nesterov else v
    return s.lr * step, {'momentum': v}
