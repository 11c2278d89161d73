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

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper
from learner.optimizers.base import BaseOptimizer
from params import NestedMap
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


def _AverageScalars(update, dtype, b1, wd):
  """The scalars both rules share, for variables of `dtype`.

  lr_z, c and 1 - c from the update's float64 values (`StepScalars`), the
  interpolation b1 and 1 - b1 (Python floats made constants of `dtype`
  directly), the weight decay wd (a constant; `decay_on` the Python bool
  wd != 0) and `first` (bool scalar: z and x start from y).
  """
  c = tf.cast(update.c, dtype)
  return NestedMap(lr_z=tf.cast(update.lr_z, dtype), c=c, one_minus_c=1. - c,
                   b1=tf.constant(b1, dtype),
                   one_minus_b1=tf.constant(1. - b1, dtype),
                   wd=tf.constant(wd, dtype), decay_on=bool(wd),
                   first=update.first)


def _Average(s, w, u, slots, decay, new):
  """The z, x, y update from the direction u (module docstring).

  Args:
    s: the rule's `_Scalars`; w: the weights y (a variable or tensor); u:
      the direction before the rate; slots: {'z', 'x', ...: values};
      decay: Python bool, add wd * y to u; new: the direction's new slots.

  Returns:
    (y_new, new slots): the new weights (the rule declares
    STEP_GIVES_WEIGHTS: y - (y - y_new) is not y_new bit for bit).
  """
  y = tf.identity(w)
  if decay:
    u = u + s.wd * y
  # Before the first update z and x are the weights then (not at Bind: a
  # warm start assigns the weights after the learners are built).
  z_old = tf.where(s.first, y, slots['z'])
  x_old = tf.where(s.first, y, slots[EVAL_SLOT])
  z_new = z_old - s.lr_z * u
  x_new = s.one_minus_c * x_old + s.c * z_new
  y_new = s.b1 * x_new + s.one_minus_b1 * z_new
  new = dict(new)
  new['z'], new[EVAL_SLOT] = z_new, x_new
  return y_new, new


class _ScheduleFree(BaseOptimizer):
  """What schedule-free SGD and AdamW share: warmup, average, y/z/x slots.

  The update's float64 scalars (lr_z, c; `StepScalars`) are computed once
  per `Apply` from the checkpointed `lr_max` and `weight_sum`
  (`_BeginUpdate`), which are stored after the update (`_EndUpdate`).
  Each subclass writes its `_Scalars` and its `_Step` (its direction u,
  then the shared z, x, y update); one fused op updates every variable
  (the 'schedule_free' accelerator: TfLearnerMultiApplyScheduleFree*,
  kernels/multi_tensor_rules.cc) where it can run, else the base's
  per-variable `_Step` (the same numbers).
  Sparse gradients are densified. The eval weights follow Ema's protocol:
  `EvalAverages()`, `EvalAverageClasses(p)`, `GetAverage(var)`,
  `AverageCheckpointKeySuffix(var)`, `SwapAverages()`.
  """

  ELEMENTWISE = True
  STEP_GIVES_WEIGHTS = True
  DECAY_IN_STEP = True  # wd * y is added to the direction u (`_Average`).
  EVAL_WEIGHTS_LABEL = 'schedule-free average x'
  WEIGHT_SLOTS = ('z', EVAL_SLOT)  # ZeRO-1 fills each shard's at Bind.
  FIRST_UPDATE_SLOTS = WEIGHT_SLOTS  # Under XLA: kernels/first_update.py.

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
    if p.slot_dtype is not None:
      raise ValueError(
          '%s: slot_dtype=%s is not supported by %s: its slot x holds the '
          'eval weights, which eval and export restore into the variables '
          'from the checkpoint as they are. Set slot_dtype=None.' %
          (checks.Where(self), tf.as_dtype(p.slot_dtype).name,
           type(self).__name__))
    self._lr_max = self.CreateVariable('lr_max', [], init=0.0,
                                       trainable=False, dtype=_SCALAR_DTYPE)
    self._weight_sum = self.CreateVariable(
        'weight_sum', [], init=0.0, trainable=False, dtype=_SCALAR_DTYPE)

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

  def _BeginUpdate(self, lr, vgs, grad_scale):
    """The base's NestedMap plus this update's `StepScalars` (lr_z, c,
    lr_max, weight_sum), t = num_updates + 1 (int64) and `first` (bool
    scalar: no update was applied yet). A variable without a gradient
    keeps its y, z, x; the average's weight still advances."""
    del vgs
    lr_z, c, lr_max, total = self.StepScalars(lr)
    return NestedMap(lr=lr, grad_scale=grad_scale, lr_z=lr_z, c=c,
                     lr_max=lr_max, weight_sum=total,
                     t=self.num_updates + 1,
                     first=tf.equal(self.num_updates, 0))

  def _EndUpdate(self, update, ops):
    """Stores lr_max and weight_sum after the update."""
    with tf.control_dependencies([o for o in ops if o is not None]):
      return [self._lr_max.assign(update.lr_max),
              self._weight_sum.assign(update.weight_sum)]

  def _Decays(self, w):
    """True if decoupled_weight_decay acts on the variable `w` (inside u)."""
    return bool(self.params.decoupled_weight_decay) and self._decay_mask.get(
        var_grad_lib.VarName(w), True)

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
      is not an int >= 0, weight_lr_power or r is negative, warmup_form
      is not 'optax' or 'reference', or slot_dtype is set (x, a slot, is
      the eval weights).
  """

  ACCELERATOR = 'schedule_free'

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

  def _Scalars(self, update, dtype):
    p = self.params
    return _AverageScalars(update, dtype, float(p.momentum),
                           p.decoupled_weight_decay or 0.0)

  def _Step(self, s, w, g, slots):
    """u = g, then the shared z, x, y update (`_Average`)."""
    return _Average(s, w, g, slots, self._Decays(w), {})


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

  ACCELERATOR = 'schedule_free'

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

  def _CreateSlots(self, var):
    return dict(super()._CreateSlots(var), v=None)

  def _Scalars(self, update, dtype):
    """The shared scalars (b1 = beta1) plus b2, 1 - b2, the bias
    correction 1 - b2^t and epsilon."""
    p = self.params
    s = _AverageScalars(update, dtype, float(p.beta1),
                        p.decoupled_weight_decay or 0.0)
    # 1 - beta2^t in float64, then rounded once (in float32, 1 - 0.999 would
    # carry float32(0.999)'s error, 5e-5 relative).
    s.correction = tf.cast(1. - tf.pow(tf.constant(p.beta2, tf.float64),
                                       tf.cast(update.t, tf.float64)), dtype)
    s.b2 = tf.constant(p.beta2, dtype)
    s.one_minus_b2 = tf.constant(1. - p.beta2, dtype)
    s.epsilon = tf.constant(p.epsilon, dtype)
    return s

  def _Step(self, s, w, g, slots):
    """u = g / (sqrt(v_new / (1 - b2^t)) + eps), then the shared z, x, y
    update (`_Average`)."""
    v_new = s.b2 * slots['v'] + s.one_minus_b2 * g * g
    u = g / (tf.sqrt(v_new / s.correction) + s.epsilon)
    return _Average(s, w, u, slots, self._Decays(w), {'v': v_new})
