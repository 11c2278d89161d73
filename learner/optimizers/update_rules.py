"""Optimizers: Momentum, Adam, AdamW, Adagrad, RMSProp, AdaDelta, Adafactor,
LAMB, Lion (and SGD, re-exported from base_optimizer).

Each turns `(lr, var_grads)` into an update (see `BaseOptimizer`). Where TF
has a fused kernel (`tf.raw_ops.ResourceApply*`, `ResourceSparseApply*`) it is
used; Adafactor, LAMB, Lion and Adam's lazy sparse update are written out.

Every optimizer counts its applied updates in `num_updates`; the step `t`
used for bias correction is `num_updates + 1` at the time of the update.
Sparse gradients give the dense result unless `lazy_sparse_updates=True`
(then only the rows in the batch move, slots included, for the optimizers
with a sparse update; the others densify, which the class docstring says).

The classes named as Lingvo's (SGD, Momentum, Adam, Adagrad, RMSProp,
AdaDelta) take Lingvo 0.14.2's params and defaults and compute its (TF1
optimizers') numbers, including `lazy_sparse_updates` defaulting to TF1's
behaviour per class (lazy for all but Adam); docs/lingvo.md lists the few
deliberate differences.
"""

import numbers
import re

import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import DefineLingvoBaseParams
from learner.optimizers.base import SGD  # pylint: disable=unused-import
from params import checks


def _C(x, var):
  """Casts a Python number or tensor to the dtype of `var`."""
  return tf.cast(x, var.dtype)


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

  Raises:
    ValueError: at construction, if alpha is not a finite number in [0, 1)
      (Lingvo accepts alpha >= 1, whose velocity grows without bound;
      docs/lingvo.md).
  """

  SUPPORTS_LAZY_SPARSE = True
  APPLY_TAKES_GRAD_SCALE = True

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
    self._fold = None  # (momentum, lr, grad factor) during Apply.

  @property
  def grad_scale_state(self):
    """float32 variable s: the momentum slot holds v / s (checkpointed)."""
    return self._scale_state

  def Velocity(self, var):
    """The velocity v of a bound variable (slot * grad_scale_state)."""
    slot = self.GetSlots(var)['momentum']
    return slot.read_value() * tf.cast(self._scale_state.read_value(),
                                       slot.dtype)

  def _CreateSlots(self, var):
    return {'momentum': None}

  @tf.autograph.experimental.do_not_convert
  def Apply(self, lr, var_grads, _grad_scale=None):
    """BaseOptimizer.Apply with the gradient scale folded where possible."""
    p = self.params
    lr = tf.convert_to_tensor(lr, tf.float32)
    present = [vg for vg in var_grads.Flatten() if vg.grad is not None]
    names = set(var_grad_lib.VarName(vg.var) for vg in present)
    lazy = p.lazy_sparse_updates and any(
        isinstance(vg.grad, tf.IndexedSlices) for vg in present)
    fold = (p.fold_grad_scale and not p.use_nesterov and not lazy and
            names == set(self._bound))
    c = (tf.constant(1.0) if _grad_scale is None else
         tf.cast(_grad_scale, tf.float32))
    s_prev = self._scale_state.read_value()
    if fold:
      s_new = tf.clip_by_value(c, 1e-30, 1e30)
      factor = None
      mom = p.alpha * s_prev / s_new
    else:
      s_new = s_prev
      factor = c / s_prev
      mom = tf.constant(p.alpha, tf.float32)
    self._fold = (mom, lr * s_new, factor)
    try:
      op = super().Apply(lr, var_grads)
    finally:
      self._fold = None
    with tf.control_dependencies([op] if op is not None else []):
      assign = self._scale_state.assign(s_new)
    return None if tf.executing_eagerly() else tf.group(op, assign)

  def _Scalars(self, var, grad):
    mom, lr_s, factor = self._fold
    if factor is not None:
      grad = _ScaleValues(grad, _C(factor, var))
    return _C(mom, var), _C(lr_s, var), grad

  def _ApplyDense(self, lr, var, grad, slots):
    p = self.params
    mom, lr_s, grad = self._Scalars(var, grad)
    return tf.raw_ops.ResourceApplyMomentum(
        var=var.handle, accum=slots['momentum'].handle, lr=lr_s,
        grad=grad, momentum=mom, use_locking=False,
        use_nesterov=p.use_nesterov)

  def _ApplyDenseMulti(self, lr, variables, grads, slots, grad_scale,
                       wd_rate, decay):
    """One TfLearnerMultiApplyMomentum with `_Scalars`' factors folded in."""
    del lr, grad_scale  # Momentum.Apply passes them in self._fold.
    mom, lr_s, factor = self._fold
    return kernels.ApplyMomentum(
        variables, [s['momentum'] for s in slots], grads, lr_s, mom, factor,
        wd_rate, decay, self.params.use_nesterov)

  def _ApplySparse(self, lr, var, grad, slots):
    p = self.params
    mom, lr_s, grad = self._Scalars(var, grad)
    return tf.raw_ops.ResourceSparseApplyMomentum(
        var=var.handle, accum=slots['momentum'].handle, lr=lr_s,
        grad=grad.values, indices=grad.indices, momentum=mom,
        use_locking=False, use_nesterov=p.use_nesterov)


def _ScaleValues(grad, factor):
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(grad.values * factor, grad.indices,
                            grad.dense_shape)
  return grad * factor


class Adam(BaseOptimizer):
  """Adam in TF's form (ResourceApplyAdam).

  t = num_updates + 1
  m <- beta1 * m + (1 - beta1) * g;   v <- beta2 * v + (1 - beta2) * g^2
  w <- w - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon)
  The bias correction is folded into the step size, so `epsilon` is the
  "epsilon hat" of Kingma & Ba (end of section 2), added to sqrt(v) before
  bias correction; it equals the paper's epsilon times sqrt(1 - beta2^t).
  Slots: 'm', 'v' (zeros). Lazy sparse update (`lazy_sparse_updates`):
  only the rows in the batch move (TF1's LazyAdam); no fused kernel exists,
  so it is written with gathers and scatters. The default is dense, as
  TF1's AdamOptimizer (which Lingvo wraps) decays every row's m and v.
  epsilon defaults to Lingvo's 1e-6; Keras's Adam has the same formula with
  epsilon 1e-7 (set epsilon=1e-7 for Keras's numbers). `ParamsA()` and
  `ParamsB()` are Lingvo's presets.
  Source: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR
  2015, Algorithm 1; Lingvo 0.14.2 `lingvo/core/optimizer.py` Adam (same
  params, defaults and presets).
  Differs from Lingvo (docs/lingvo.md): beta1^t and beta2^t are computed
  from num_updates (Lingvo: TF1 beta-power variables; equal to float32
  rounding, ~1e-6 after 5 steps); beta1 = 1, beta2 = 1 and epsilon = 0
  are refused (below); and as every update rule (BaseOptimizer).

  Raises:
    ValueError: at construction, if beta1 or beta2 is not a finite number in
      [0, 1) (beta1 = 1 gives NaN weights, beta2 = 1 no learning) or epsilon
      is not > 0 (0/0 where a gradient is 0); docs/lingvo.md.
  """

  SUPPORTS_LAZY_SPARSE = True

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.Define('beta1', 0.9, 'Decay of the first moment estimate.')
    p.Define('beta2', 0.999, 'Decay of the second moment estimate.')
    p.Define('epsilon', 1e-6,
             'Epsilon hat: added to sqrt(v) (not bias corrected).')
    return p

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

  def _Powers(self, var):
    p = self.params
    t = tf.cast(self.num_updates + 1, var.dtype)
    return tf.pow(_C(p.beta1, var), t), tf.pow(_C(p.beta2, var), t)

  def _ApplyDense(self, lr, var, grad, slots):
    p = self.params
    b1p, b2p = self._Powers(var)
    return tf.raw_ops.ResourceApplyAdam(
        var=var.handle, m=slots['m'].handle, v=slots['v'].handle,
        beta1_power=b1p, beta2_power=b2p, lr=_C(lr, var),
        beta1=_C(p.beta1, var), beta2=_C(p.beta2, var),
        epsilon=_C(p.epsilon, var), grad=grad, use_locking=False)

  def _ApplyDenseMulti(self, lr, variables, grads, slots, grad_scale,
                       wd_rate, decay):
    """One TfLearnerMultiApplyAdam; grad_scale * g computed in the op."""
    p = self.params
    var = variables[0]
    b1p, b2p = self._Powers(var)
    scalars = (b1p, b2p, _C(lr, var), _C(p.beta1, var), _C(p.beta2, var),
               _C(p.epsilon, var))
    factor = None if grad_scale is None else _C(grad_scale, var)
    return kernels.ApplyAdam(variables, [s['m'] for s in slots],
                             [s['v'] for s in slots], grads, scalars, factor,
                             wd_rate, decay)

  def _ApplySparse(self, lr, var, grad, slots):
    p = self.params
    b1p, b2p = self._Powers(var)
    lr_t = _C(lr, var) * tf.sqrt(1. - b2p) / (1. - b1p)
    idx, g = grad.indices, grad.values
    m_rows = p.beta1 * tf.gather(slots['m'], idx) + (1. - p.beta1) * g
    v_rows = p.beta2 * tf.gather(slots['v'], idx) + (1. - p.beta2) * g * g
    ops = [
        slots['m'].scatter_update(tf.IndexedSlices(m_rows, idx)),
        slots['v'].scatter_update(tf.IndexedSlices(v_rows, idx)),
        var.scatter_sub(tf.IndexedSlices(
            lr_t * m_rows / (tf.sqrt(v_rows) + p.epsilon), idx)),
    ]
    return tf.group(ops) if not tf.executing_eagerly() else None


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


class Adagrad(BaseOptimizer):
  """Adagrad (TF's ResourceApplyAdagradV2).

  a <- a + g^2;  w <- w - lr * g / (sqrt(a) + epsilon)
  Slot: 'accumulator' (initial_accumulator_value, Lingvo's default 1.0).
  With the default epsilon=0 this is TF1's AdagradOptimizer, which Lingvo
  wraps (no epsilon); `epsilon` is an extension (Keras adds 1e-7). Sparse:
  ResourceSparseApplyAdagradV2, lazy by default as in TF1 (for Adagrad a
  lazy and a dense update give the same numbers).
  Source: Duchi, Hazan & Singer, JMLR 2011; Lingvo 0.14.2
  `lingvo/core/optimizer.py` Adagrad (same params, defaults, validation).
  Differs from Lingvo: no `optimizer/adagrad_accum_<var>` summary, and as
  every update rule (BaseOptimizer, docs/lingvo.md).

  Raises:
    ValueError: at construction if initial_accumulator_value <= 0 (as TF1's
      AdagradOptimizer) or epsilon < 0.
  """

  SUPPORTS_LAZY_SPARSE = True

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse Adagrad.
    p.Define('initial_accumulator_value', 1.0,
             'Starting value of the squared-gradient accumulator (> 0).')
    p.Define('epsilon', 0.0, 'Added to sqrt(accumulator); 0 is TF1/Lingvo, '
             'Keras uses 1e-7.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        initial_accumulator_value=checks.Real(
            0, low_open=True, example=0.1,
            why='TF1 and Lingvo refuse it too'),
        epsilon=checks.Real(0, example=1e-7))
    return specs

  def _CreateSlots(self, var):
    return {'accumulator': float(self.params.initial_accumulator_value)}

  def _ApplyDense(self, lr, var, grad, slots):
    return tf.raw_ops.ResourceApplyAdagradV2(
        var=var.handle, accum=slots['accumulator'].handle, lr=_C(lr, var),
        epsilon=_C(self.params.epsilon, var), grad=grad, use_locking=False,
        update_slots=True)

  def _ApplySparse(self, lr, var, grad, slots):
    return tf.raw_ops.ResourceSparseApplyAdagradV2(
        var=var.handle, accum=slots['accumulator'].handle, lr=_C(lr, var),
        epsilon=_C(self.params.epsilon, var), grad=grad.values,
        indices=grad.indices, use_locking=False, update_slots=True)


class RMSProp(BaseOptimizer):
  """RMSProp with TF1's (Lingvo's) semantics (ResourceApply[Centered]RMSProp).

  ms <- decay * ms + (1 - decay) * g^2
  centered: mg <- decay * mg + (1 - decay) * g;  denom = ms - mg^2
  mom <- momentum * mom + lr * g / sqrt(denom + epsilon);  w <- w - mom
  epsilon is inside the square root and the rate inside the momentum
  accumulator. The mean-square slot 'ms' starts at 1.0, as in TF1's
  RMSPropOptimizer (so the first steps are small: ms = 1 + ...);
  'mom' (and 'mg' when centered) start at zero. Defaults are Lingvo's:
  decay 0.9, momentum 0.9, epsilon 1.0.
  `keras_semantics=True` starts 'ms' at zero instead, as Keras's RMSprop
  (whose update is otherwise this one: epsilon inside the sqrt, rate inside
  the momentum; its defaults are momentum 0, epsilon 1e-7, set them too).
  Sparse: ResourceSparseApply[Centered]RMSProp, lazy by default as in TF1.
  Source: Tieleman & Hinton, COURSERA Neural Networks lecture 6.5, 2012;
  centered form: Graves, "Generating Sequences With RNNs", 2013, eq. 38-45;
  Lingvo 0.14.2 `lingvo/core/optimizer.py` RMSProp (same params and
  defaults; `centered` and `keras_semantics` are extensions, off by
  default).
  Differs from Lingvo: the slots are 'ms' and 'mom' (TF1: 'rms',
  'momentum'); decay > 1 and momentum >= 1 are refused (below); and as
  every update rule (BaseOptimizer, docs/lingvo.md).

  Raises:
    ValueError: at construction, if decay is not in [0, 1], momentum is not
      in [0, 1) or epsilon < 0; a bool, NaN or inf is refused too (the
      message names the param; docs/lingvo.md).
  """

  SUPPORTS_LAZY_SPARSE = True

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse RMSProp.
    p.Define('decay', 0.9, 'Decay (Keras: rho) of the mean square.')
    p.Define('momentum', 0.9, 'Momentum coefficient.')
    p.Define('epsilon', 1.0, 'Added to the mean square inside the sqrt.')
    p.Define('centered', False,
             'Normalise by the centered second moment (variance estimate).')
    p.Define('keras_semantics', False, 'If True the mean-square slot starts '
             'at 0 (Keras); if False at 1 (TF1 and Lingvo).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        decay=checks.Real(0, 1, example=0.9),
        momentum=checks.Real(0, 1, high_open=True, example=0.9,
                             why='momentum >= 1 lets the update grow '
                             'without bound'),
        epsilon=checks.Real(0, example=1.0))
    return specs

  def _CreateSlots(self, var):
    slots = {'ms': 0.0 if self.params.keras_semantics else 1.0, 'mom': None}
    if self.params.centered:
      slots['mg'] = None
    return slots

  def _Args(self, lr, var, slots):
    p = self.params
    args = dict(var=var.handle, ms=slots['ms'].handle,
                mom=slots['mom'].handle, lr=_C(lr, var),
                rho=_C(p.decay, var), momentum=_C(p.momentum, var),
                epsilon=_C(p.epsilon, var), use_locking=False)
    if p.centered:
      args['mg'] = slots['mg'].handle
    return args

  def _ApplyDense(self, lr, var, grad, slots):
    args = self._Args(lr, var, slots)
    if self.params.centered:
      return tf.raw_ops.ResourceApplyCenteredRMSProp(grad=grad, **args)
    return tf.raw_ops.ResourceApplyRMSProp(grad=grad, **args)

  def _ApplySparse(self, lr, var, grad, slots):
    args = self._Args(lr, var, slots)
    if self.params.centered:
      return tf.raw_ops.ResourceSparseApplyCenteredRMSProp(
          grad=grad.values, indices=grad.indices, **args)
    return tf.raw_ops.ResourceSparseApplyRMSProp(
        grad=grad.values, indices=grad.indices, **args)


class AdaDelta(BaseOptimizer):
  """AdaDelta (TF's ResourceApplyAdadelta).

  a <- decay * a + (1 - decay) * g^2
  u = sqrt(au + epsilon) / sqrt(a + epsilon) * g
  w <- w - lr * u;  au <- decay * au + (1 - decay) * u^2
  Slots 'accum', 'accum_update' (zeros). With lr = 1 this is the paper's
  method. `decay` is TF1's and Keras's `rho`. Sparse:
  ResourceSparseApplyAdadelta, lazy by default as in TF1.
  Source: Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012, Alg. 1;
  Lingvo 0.14.2 `lingvo/core/optimizer.py` AdaDelta (same params and
  defaults).
  Differs from Lingvo: epsilon = 0 and decay > 1 are refused (below), and
  as every update rule (BaseOptimizer, docs/lingvo.md).

  Raises:
    ValueError: at construction, if decay is not in [0, 1] or epsilon <= 0
      (every update would be 0); a bool, NaN or inf is refused too (the
      message names the param; docs/lingvo.md).
  """

  SUPPORTS_LAZY_SPARSE = True

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse AdaDelta.
    p.Define('decay', 0.95, 'Decay of both accumulators (TF1/Keras: rho).')
    p.Define('epsilon', 1e-8, 'Added inside both square roots.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        decay=checks.Real(0, 1, example=0.95),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 keeps every update at 0'))
    return specs

  def _CreateSlots(self, var):
    return {'accum': None, 'accum_update': None}

  def _Args(self, lr, var, slots):
    p = self.params
    return dict(var=var.handle, accum=slots['accum'].handle,
                accum_update=slots['accum_update'].handle, lr=_C(lr, var),
                rho=_C(p.decay, var), epsilon=_C(p.epsilon, var),
                use_locking=False)

  def _ApplyDense(self, lr, var, grad, slots):
    return tf.raw_ops.ResourceApplyAdadelta(grad=grad,
                                            **self._Args(lr, var, slots))

  def _ApplySparse(self, lr, var, grad, slots):
    return tf.raw_ops.ResourceSparseApplyAdadelta(
        grad=grad.values, indices=grad.indices, **self._Args(lr, var, slots))


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
    step = _C(lr, var)
    if p.multiply_by_parameter_scale:
      step *= tf.maximum(_C(p.epsilon2, var), _Rms(w_old))
    delta = step * u
    if p.beta1:
      delta = p.beta1 * slots['m'] + (1. - p.beta1) * delta
      ops.append(slots['m'].assign(delta))
    ops.append(var.assign_sub(delta))
    return tf.group(ops) if not tf.executing_eagerly() else None



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
  Source: You et al., "Large Batch Optimization for Deep Learning: Training
  BERT in 76 minutes", ICLR 2020, Algorithm 2 (phi = identity).

  Raises:
    ValueError: at construction, if beta1 or beta2 is not in [0, 1) (1
      divides by 0), epsilon <= 0, weight_decay < 0 (a bool, NaN or inf is
      refused too; docs/lingvo.md, as Adam), or a regex of the exclude lists
      does not compile; the message names the param.
  """

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

  def _ApplyDense(self, lr, var, grad, slots):
    p = self.params
    t = tf.cast(self.num_updates + 1, var.dtype)
    m = p.beta1 * slots['m'] + (1. - p.beta1) * grad
    v = p.beta2 * slots['v'] + (1. - p.beta2) * tf.square(grad)
    w_old = tf.identity(var.read_value())
    m_hat = m / (1. - tf.pow(_C(p.beta1, var), t))
    v_hat = v / (1. - tf.pow(_C(p.beta2, var), t))
    r = m_hat / (tf.sqrt(v_hat) + p.epsilon)
    if not self._Matches(var, p.exclude_from_weight_decay):
      r += p.weight_decay * w_old
    ratio = 1.
    if not self._Matches(var, p.exclude_from_layer_adaptation):
      ratio = _TrustRatio(tf.norm(w_old), tf.norm(r))
    ops = [slots['m'].assign(m), slots['v'].assign(v),
           var.assign_sub(_C(lr, var) * ratio * r)]
    return tf.group(ops) if not tf.executing_eagerly() else None



class Lion(BaseOptimizer):
  """Lion: sign of an interpolated momentum.

  c = beta1 m + (1-beta1) g;  w <- w - lr * sign(c)
  m <- beta2 m + (1-beta2) g
  Weight decay is the base class's `decoupled_weight_decay` (the paper's
  lambda, scaled by lr). Sparse gradients are densified. Slot: 'm' (zeros).
  Source: Chen et al., "Symbolic Discovery of Optimization Algorithms",
  NeurIPS 2023, Program 1.

  Raises:
    ValueError: at construction, if beta1 is not in [0, 1] or beta2 is not
      in [0, 1); a bool, NaN or inf is refused too (the message names the
      param).
  """

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
        beta1=checks.Real(0, 1, example=0.9),
        beta2=checks.Real(0, 1, high_open=True, example=0.99,
                          why='beta2 = 1 keeps the momentum at 0'))
    return specs

  def _CreateSlots(self, var):
    return {'m': None}

  def _ApplyDense(self, lr, var, grad, slots):
    p = self.params
    m = slots['m']
    c = p.beta1 * m + (1. - p.beta1) * grad
    ops = [var.assign_sub(_C(lr, var) * tf.sign(c)),
           m.assign(p.beta2 * m + (1. - p.beta2) * grad)]
    return tf.group(ops) if not tf.executing_eagerly() else None

