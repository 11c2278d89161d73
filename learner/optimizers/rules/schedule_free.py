"""Schedule-free SGD and AdamW: no decay schedule, evaluation on an average.

  t = num_updates + 1;  W = warmup_steps;  warm(s) = min(s, W) / W (1 if W = 0)
  lr_avg = lr * warm(t)
  lr_z   = lr * warm(t - 1)   (warmup_form 'optax')
         = lr * warm(t)       (warmup_form 'reference')
  lr_max <- max(lr_max, lr_avg);  weight = t^r * lr_max^weight_lr_power
  weight_sum <- weight_sum + weight;  c = weight / weight_sum  (0 if 0 / 0)
  u = g                                                       (SGD)
  v <- beta2 v + (1 - beta2) g^2;  u = g / (sqrt(v / (1 - beta2^t)) + eps)
                                                              (AdamW)
  u <- u + wd * y              (decoupled_weight_decay, on the current y)
  z <- z - lr_z * u
  x <- (1 - c) x + c z
  y <- b1 x + (1 - b1) z       (b1: `momentum` of SGD, `beta1` of AdamW)

A warmup given by the learner's lr_schedule instead (warmup_steps 0)
reaches the z step and the average at the same t, as the reference does.

The model variable holds y, where the gradient is taken; x is the sequence
to evaluate on. Both z and x are slots, made at Bind and set to the
weights at the first update (so a warm start, which assigns the weights
after the optimizer is built, is what z and x start from).
Keeping x (rather than deriving it as (y - (1 - b1) z) / b1, as optax does)
costs one more weight-sized buffer and is what lets the read-only jobs
(eval, evaler, export) restore the eval weights straight from a checkpoint
key without building the optimizer (docs/DESIGN.md, "Checkpoint").

Source: Defazio, Yang, Mehta, Mishchenko, Khaled, Cutkosky, "The Road Less
Scheduled", NeurIPS 2024 (arXiv:2405.15682), Algorithm 1 and eq. 8 (the
lr_max^p weighting); reference implementations optax 0.2.8
`optax.contrib.schedule_free_sgd` / `schedule_free_adamw` (warmup_form
'optax': its inner step reads the warmup at t - 1, the average at t; no `r`,
so r = 0 gives its numbers) and facebookresearch/schedule_free
`SGDScheduleFree` / `AdamWScheduleFree` (warmup_form 'reference': both at t).
"""

import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper
from learner.optimizers.base import BaseOptimizer
from params import checks

# The slot of the eval weights x. Its name is part of the checkpoint key of
# the eval weights ('<optimizer path>/_slots/<variable>/x/...'), which the
# read-only jobs look up: renaming it breaks the checkpoints written before.
EVAL_SLOT = 'x'
WARMUP_FORMS = ('optax', 'reference')
# The dtype of the step's scalars (lr_max, weight_sum, c): float64, so that
# c = weight / weight_sum is exact to 1e-16 in long runs and float64
# weights get float64 numbers (the rate itself arrives as float32).
_SCALAR_DTYPE = tf.float64


def _Cast(x, var):
  """`x` (a Python number or a tensor) in `var`'s dtype.

  A Python number becomes a constant of that dtype directly (tf.cast of a
  Python float goes through float32: 0.999 would be 0.99900001 in float64).
  """
  if isinstance(x, (int, float)):
    return tf.constant(x, var.dtype)
  return tf.cast(x, var.dtype)


class _ScheduleFree(BaseOptimizer):
  """What schedule-free SGD and AdamW share: warmup, average, y/z/x slots.

  Subclasses give `_Interpolation()` (b1) and `_Direction(...)` (u).
  `Apply` is written out: the step's scalars (lr_z, c) are computed once
  per update from the checkpointed `lr_max` and `weight_sum`; then one
  fused op updates every variable (TfLearnerMultiApplyScheduleFree*,
  kernels/multi_tensor_rules.cc) where it can run, else `_UpdateOne` per
  variable (the same numbers).
  Sparse gradients are densified. The eval weights follow Ema's protocol:
  `EvalAverages()`, `EvalAverageClasses(p)`, `GetAverage(var)`,
  `AverageCheckpointKeySuffix(var)`, `SwapAverages()`.
  """

  APPLY_TAKES_GRAD_SCALE = True
  EVAL_WEIGHTS_LABEL = 'schedule-free average x'

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 0,
             'Updates of linear warmup of the rate (counted in num_updates); '
             '0: none.')
    p.Define('warmup_form', 'optax',
             "'optax': the z step reads the warmup at t - 1 and the average "
             "at t (optax.contrib); 'reference': both at t (the authors' "
             'PyTorch code).')
    p.Define('weight_lr_power', 2.0,
             'p of the average weight t^r * lr_max^p (down-weights the '
             'warmup iterates).')
    p.Define('r', 0.0, 'r of the average weight t^r * lr_max^p (polynomial '
             'weighting; optax has none: 0).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        warmup_steps=checks.Int(0, example=100),
        weight_lr_power=checks.Real(0, example=2.0),
        r=checks.Real(0, example=0.0))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.warmup_form not in WARMUP_FORMS:
      raise ValueError(
          '%s: warmup_form=%r is not known. Set warmup_form to one of %s.' %
          (checks.Where(self), p.warmup_form, list(WARMUP_FORMS)))
    self._lr_max = self.CreateVariable('lr_max', [], init=0.0,
                                       trainable=False, dtype=_SCALAR_DTYPE)
    self._weight_sum = self.CreateVariable(
        'weight_sum', [], init=0.0, trainable=False, dtype=_SCALAR_DTYPE)

  def _Interpolation(self):
    """b1 (a Python float in (0, 1))."""
    raise NotImplementedError

  def _Direction(self, var, grad, slots, t):
    """(u, ops): the inner step direction (before the rate) and its ops."""
    raise NotImplementedError

  def _CreateSlots(self, var):
    value = tf.identity(var.read_value())
    return {'z': value, EVAL_SLOT: value}

  def StepScalars(self, lr):
    """(lr_z, c, new lr_max, new weight_sum): float64 scalars of this update.

    Args:
      lr: float32 scalar, the learner's scheduled rate.
    """
    p = self.params
    lr = tf.cast(lr, _SCALAR_DTYPE)
    t = tf.cast(self.num_updates + 1, _SCALAR_DTYPE)
    w = float(max(p.warmup_steps, 1))
    warm = lambda s: tf.minimum(s, w) / w if p.warmup_steps else 1.0
    lr_avg = lr * warm(t)
    lr_z = lr * warm(t - 1.) if p.warmup_form == 'optax' else lr_avg
    lr_max = tf.maximum(self._lr_max.read_value(), lr_avg)
    weight = tf.pow(t, p.r) * tf.pow(lr_max, p.weight_lr_power)
    total = self._weight_sum.read_value() + weight
    c = tf.where(total > 0., weight / tf.where(total > 0., total, 1.), 0.)
    return lr_z, c, lr_max, total

  @tf.autograph.experimental.do_not_convert
  def Apply(self, lr, var_grads, _grad_scale=None, _measure=None):
    """Applies one schedule-free update; returns the op (None when eager).

    Args:
      lr: float32 scalar, the scheduled rate.
      var_grads: NestedMap of VarGrad; grad None leaves the variable alone
        (its y, z, x do not move; the average's weight still advances).
      _grad_scale: internal (ApplyScaled): None or a float32 scalar
        multiplying every gradient.
      _measure: internal (the learner's var_norm/all): None, or a
        kernels.WeightMeasure the fused op measures y into.

    Raises:
      ValueError: if a variable was not bound with `Bind`.
    """
    lr = tf.convert_to_tensor(lr, tf.float32)
    present = [vg for vg in var_grads.Flatten() if vg.grad is not None]
    for vg in present:
      self._CheckBound(vg.var)
    lr_z, c, lr_max, total = self.StepScalars(lr)
    t = self.num_updates + 1
    fused, op = self._FusedApply(present, lr_z, c, t, _grad_scale, _measure)
    ops = [op] if fused else []
    for vg in ([] if fused else present):
      grad = tf.convert_to_tensor(vg.grad)  # Sums duplicate sparse rows.
      if _grad_scale is not None:
        grad = kernels.ScaleGradient(grad, _grad_scale)
      ops.extend(self._UpdateOne(vg.var, grad, lr_z, c, t))
    with tf.control_dependencies([o for o in ops if o is not None]):
      ops += [self._lr_max.assign(lr_max), self._weight_sum.assign(total)]
    return self._FinishApply(ops)

  def FusedApplyReason(self, vgs):
    """None if the update of `vgs` runs as one fused op, else why not (str).

    The fused op (kernels/multi_tensor_rules.cc) repeats `_UpdateOne` with
    the class's own `_Direction`; a subclass that changes either keeps the
    pure-TF path, as do low-precision slots and everything
    `kernels.Unsupported` refuses (XLA, a strategy, a GPU, float64).
    """
    owner = next(k for k in type(self).__mro__
                 if '_FusedDirectionScalars' in vars(k))
    if owner is _ScheduleFree:
      return 'no fused kernel for this rule'
    for name in ('_Direction', '_UpdateOne', '_Interpolation'):
      if getattr(type(self), name) is not getattr(owner, name):
        return '%s overrides %s of %s' % (type(self).__name__, name,
                                          owner.__name__)
    if self.params.slot_dtype is not None:
      return 'slot_dtype=%s (the fused kernels hold slots in the variable ' \
             'dtype)' % tf.as_dtype(self.params.slot_dtype).name
    return kernels.Unsupported([vg.var for vg in vgs], [
        vg.grad.values if isinstance(vg.grad, tf.IndexedSlices) else vg.grad
        for vg in vgs])

  def _FusedDirectionScalars(self, var, t):
    """The direction's float32 scalars for the fused op ([] for SGD)."""
    raise NotImplementedError

  def _FusedApply(self, vgs, lr_z, c, t, grad_scale, measure):
    """(fused, op): every variable's z, x, y update in one op, if it can
    run (`FusedApplyReason`); the same numbers as `_UpdateOne` bit for bit
    (tests/test_optimizers/test_rule_kernels.py). fused False: nothing ran."""
    reason = self.FusedApplyReason(vgs) if vgs else 'no gradient'
    kernels.LogPath('%s update' % type(self).__name__, reason)
    if reason:
      return False, None
    variables = [vg.var for vg in vgs]
    var = variables[0]
    wd = self.params.decoupled_weight_decay or 0.0
    decay = [bool(wd) and self._decay_mask.get(var_grad_lib.VarName(v), True)
             for v in variables]
    b1 = self._Interpolation()
    c = _Cast(c, var)
    scalars = [_Cast(lr_z, var), c, 1. - c, _Cast(b1, var),
               _Cast(1. - b1, var), _Cast(wd, var)]
    scalars += self._FusedDirectionScalars(var, t)
    slots = [self.GetSlots(v) for v in variables]
    vs = [s['v'] for s in slots] if 'v' in slots[0] else None
    factor = None if grad_scale is None else tf.cast(grad_scale, var.dtype)
    return True, kernels.ApplyScheduleFree(
        variables, [s['z'] for s in slots], [s[EVAL_SLOT] for s in slots],
        vs, [tf.convert_to_tensor(vg.grad) for vg in vgs],
        tf.equal(self.num_updates, 0), scalars, factor, decay, measure)

  def _UpdateOne(self, var, grad, lr_z, c, t):
    """The ops of one variable's z, x, y update (see the module docstring)."""
    slots = self.GetSlots(var)
    z, x = slots['z'], slots[EVAL_SLOT]
    b1 = self._Interpolation()
    u, ops = self._Direction(var, grad, slots, t)
    y = var.read_value()
    wd = self.params.decoupled_weight_decay
    if wd and self._decay_mask.get(var_grad_lib.VarName(var), True):
      u = u + _Cast(wd, var) * y
    # Before the first update z and x are the weights then (not at Bind: a
    # warm start assigns the weights after the learners are built).
    first = tf.equal(self.num_updates, 0)
    z_old = tf.where(first, y, z.read_value())
    x_old = tf.where(first, y, x.read_value())
    z_new = z_old - _Cast(lr_z, var) * u
    c = _Cast(c, var)
    x_new = (1. - c) * x_old + c * z_new
    y_new = b1 * x_new + (1. - b1) * z_new
    return ops + [z.assign(z_new), x.assign(x_new), var.assign(y_new)]

  # ---- the eval weights (Ema's protocol) -----------------------------------

  def EvalAverages(self):
    """[this optimizer]: evaluation swaps x into the variables."""
    return [self]

  @classmethod
  def EvalAverageClasses(cls, p):
    """[this class] (from params, nothing built)."""
    del p
    return [cls]

  @classmethod
  def AverageCheckpointKeySuffix(cls, var):
    """The end of the checkpoint key of `var`'s eval weights x (a str).

    A tf.train.Checkpoint holding this optimizer saves x under
    '<optimizer path>/_slots/<sanitized name>/x/.ATTRIBUTES/VARIABLE_VALUE';
    this returns everything from '/_slots/' on.

    Args:
      var: a variable (or its name, a str).
    """
    name = var if isinstance(var, str) else var_grad_lib.VarName(var)
    return '/_slots/%s/%s/.ATTRIBUTES/VARIABLE_VALUE' % (
        var_grad_lib.SanitizedName(name), EVAL_SLOT)

  def GetAverage(self, var):
    """The eval weights x (a variable) of the bound variable `var`."""
    return self.GetSlots(var)[EVAL_SLOT]

  def SwapAverages(self):
    """Context manager: the variables hold x inside, y again after.

    Eager only (around evaluation). Swapping twice restores both exactly.
    Before the first update x is the weights: nothing is swapped.

    Raises:
      RuntimeError: if called inside a tf.function.
    """
    return wrapper.SwapEagerly(self, self._Swap)

  def _Swap(self):
    if int(self.num_updates.numpy()) == 0:
      return
    for var in self.bound_variables.values():
      x = self.GetAverage(var)
      value = tf.identity(var.read_value())
      var.assign(x.read_value())
      x.assign(value)


class ScheduleFreeSGD(_ScheduleFree):
  """Schedule-free SGD: u = g (+ wd * y); see the module docstring.

  y <- momentum * x + (1 - momentum) * z after z <- z - lr_z * u and
  x <- (1 - c) x + c z. Slots: 'z', 'x' (the eval weights), both the
  variable's value at Bind. Use a constant rate (warmup_steps for warmup);
  evaluate on x (the trainer and the read-only jobs do, by `SwapAverages`
  and the checkpoint key).
  Source: Defazio et al., "The Road Less Scheduled", NeurIPS 2024,
  Algorithm 1; optax 0.2.8 `contrib.schedule_free_sgd` (default
  warmup_form, r = 0); facebookresearch/schedule_free `SGDScheduleFree`
  (warmup_form='reference').

  Raises:
    ValueError: at construction, if momentum is not in (0, 1), warmup_steps
      is not an int >= 0, weight_lr_power or r is negative, or warmup_form
      is not 'optax' or 'reference'.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('momentum', 0.9,
             'b1: y = b1 x + (1 - b1) z (the paper\'s beta).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['momentum'] = checks.Real(
        0, 1, low_open=True, high_open=True, example=0.9,
        why='the reference refuses 0 and 1 (x and z would decouple from y)')
    return specs

  def _Interpolation(self):
    return float(self.params.momentum)

  def _Direction(self, var, grad, slots, t):
    del var, slots, t
    return grad, []

  def _FusedDirectionScalars(self, var, t):
    del var, t
    return []


class ScheduleFreeAdamW(_ScheduleFree):
  """Schedule-free AdamW: u = g / (sqrt(v_hat) + eps) (+ wd * y).

  v <- beta2 v + (1 - beta2) g^2, v_hat = v / (1 - beta2^t), epsilon added
  after the square root and the bias correction (optax's and the
  reference's form; our Adam adds it before). Then z, x, y as the module
  docstring says, with b1 = beta1. Slots: 'v' (zeros), 'z', 'x'.
  Source: Defazio et al., "The Road Less Scheduled", NeurIPS 2024,
  Algorithm 1 with Adam's second moment; optax 0.2.8
  `contrib.schedule_free_adamw` (default warmup_form, r = 0);
  facebookresearch/schedule_free `AdamWScheduleFree` (warmup_form=
  'reference').

  Raises:
    ValueError: at construction, if beta1 is not in (0, 1), beta2 not in
      [0, 1), epsilon not > 0, or as ScheduleFreeSGD for the shared params.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.9, 'b1: y = b1 x + (1 - b1) z (the paper\'s beta_1).')
    p.Define('beta2', 0.999, 'Decay of the second moment estimate.')
    p.Define('epsilon', 1e-8,
             'Added to sqrt(v_hat) (after the bias correction).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, low_open=True, high_open=True, example=0.9,
                          why='the reference refuses 0 and 1'),
        beta2=checks.Real(0, 1, high_open=True, example=0.999,
                          why='beta2 = 1 divides by 1 - beta2^t = 0'),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 gives 0/0 = NaN where a gradient is 0'))
    return specs

  def _Interpolation(self):
    return float(self.params.beta1)

  def _CreateSlots(self, var):
    return dict(super()._CreateSlots(var), v=None)

  def _Direction(self, var, grad, slots, t):
    p = self.params
    v = slots['v']
    v_new = p.beta2 * v.read_value() + (1. - p.beta2) * grad * grad
    # 1 - beta2^t in float64, then rounded once (in float32, 1 - 0.999 would
    # carry float32(0.999)'s error, 5e-5 relative).
    correction = _Cast(1. - tf.pow(tf.constant(p.beta2, tf.float64),
                                   tf.cast(t, tf.float64)), var)
    u = grad / (tf.sqrt(v_new / correction) + _Cast(p.epsilon, var))
    return u, [v.assign(v_new)]

  def _FusedDirectionScalars(self, var, t):
    """(b2, 1 - b2, 1 - b2^t, eps) as `_Direction` computes them."""
    p = self.params
    correction = _Cast(1. - tf.pow(tf.constant(p.beta2, tf.float64),
                                   tf.cast(t, tf.float64)), var)
    return [_Cast(p.beta2, var), _Cast(1. - p.beta2, var), correction,
            _Cast(p.epsilon, var)]
