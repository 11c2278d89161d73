"""BaseOptimizer: turns (lr, var_grads) into an update of the variables.

Contract (docs/DESIGN.md, "Optimizer"):
  * `Bind(vmap)` creates every slot for the variables the optimizer will
    update, at once (never lazily at the first step), so a checkpoint
    restores slots before training.
  * `Apply(lr, var_grads)` applies one update: `lr` a float32 scalar tensor
    (already scheduled by the learner), `var_grads` a NestedMap of
    `VarGrad(var, grad)`; entries whose grad is None are left alone.
  * `num_updates` counts applied updates in a checkpointed int64 variable.
  * Decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
    Regularization", ICLR 2019): `w <- w - lr * wd * w_old`, with the
    scheduled rate and the weights from before this step's update.
  * Sparse gradients (tf.IndexedSlices): duplicate indices are merged first;
    with `lazy_sparse_updates=False` they are densified (same result as a
    dense gradient); `lazy_sparse_updates=True` updates only the rows
    present (TF1 semantics) through `_ApplySparse`, for optimizers with
    SUPPORTS_LAZY_SPARSE. The base default is False; the Lingvo-named
    classes set TF1's choice (True for SGD, Momentum, Adagrad, RMSProp,
    AdaDelta; False for Adam).
    Under XLA (`jit_compile=True`) sparse gradients are always densified.

Subclasses implement `_CreateSlots(var)` -> {slot_name: initial value or
None} and `_ApplyDense(lr, var, grad, slots)`; optionally `_ApplySparse`
(merged tf.IndexedSlices) with `SUPPORTS_LAZY_SPARSE = True`. Wrappers
around one inner optimizer (Lars, Ema, GradientAccumulation) derive from
`wrapper.BaseWrapper`; Composite and KerasOptimizer override `Bind` and
`Apply` themselves.

Low-precision optimizer state (`slot_dtype`, e.g. tf.bfloat16): the slots
are stored in that dtype while the update runs in the variable's dtype:
each step reads a slot, upcasts it, computes the rule's step (`_DenseStep`,
the same formula as the rule's kernel) and stores the new slot rounded to
nearest, or stochastically (`slot_stochastic_rounding`;
learner/optimizers/kernels/low_precision.py). Such an update takes the
pure-TF path (no fused kernel: the kernels hold float32 slots) and
densifies sparse gradients (no lazy update). Rules that implement `_DenseStep`: SGD (no
slots), Momentum, Adam, AdamW, Adagrad; other rules and wrappers refuse it.
Idea: Gupta et al., "Deep Learning with Limited Numerical Precision", ICML
2015 and Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training",
2019 (bfloat16 optimizer state with float32 math).

Averages of the weights to evaluate on (Ema, Lookahead's slow weights,
SWA: the `wrapper.BaseAveraging` wrappers) are found by asking the
optimizer tree: `EvalAverages()` on a built optimizer, `EvalAverageClasses(p)`
on params; both are empty here and delegated by wrappers to their inner
optimizers.

Scheduled hyperparameters (learner/optimizers/hyper.py): `hyper_schedules`
= {param name: BaseSchedule params} for the names in the class's
`SCHEDULABLE_PARAMS`; a rule reads such a param with `self.Hyper(name)`
(never `p.<name>`), which is the Python constant when unscheduled (the
same graph as before) and the schedule's value at the learner's step when
scheduled. Here: 'decoupled_weight_decay'.
"""

import re

from absl import logging
import tensorflow as tf

from params import BaseLayer
from params import NestedMap
from params import checks
from learner.optimizers import hyper as hyper_lib
from learner.optimizers import kernels
from learner.optimizers.kernels import low_precision
from learner.optimizers import var_grad as var_grad_lib


class BaseOptimizer(hyper_lib.ScheduledHyperparams, BaseLayer):
  """Base class of optimizers and optimizer wrappers.

  Class attribute SUPPORTS_LAZY_SPARSE: True when `_ApplySparse` updates only
  the rows present (var and slots); otherwise `lazy_sparse_updates` is
  ignored and sparse gradients are densified.

  Differs from Lingvo's optimizer.Base (docs/lingvo.md), for every update
  rule: the default `name` is 'optimizer' (Lingvo: the class name);
  `decoupled_weight_decay`, `weight_decay_exclude` and
  `lazy_sparse_updates` are extensions whose defaults give Lingvo's
  numbers; Lingvo's `use_bf16_gradients_ar=True` is refused and
  `add_summary_in_apply` / `clear_variable_scope` have no effect; slots are
  made at `Bind` (Lingvo: at the first apply) under our names; under XLA
  or several replicas a sparse gradient arrives dense (no lazy update); no
  `<name>_lr` summaries (the learner reports `learning_rate`); the API is
  Bind / Apply / ApplyScaled (Lingvo: Apply with a weight, GetOptimizer,
  GetLrScheduleValue).

  Raises:
    ValueError: at construction, a value refused by `ValueChecks()` (a bool,
      NaN, inf or out of range; decoupled_weight_decay must be >= 0), a
      `weight_decay_exclude` regex that does not compile, or a
      `hyper_schedules` that is not a dict, names a param outside
      `SCHEDULABLE_PARAMS`, holds anything but schedule params or leaves the
      param's range at step 0 or a boundary (learner/optimizers/hyper.py),
      or a `slot_dtype` that is not None / a float dtype, or set on a rule
      or wrapper without `_DenseStep`; `Apply` on a variable that was not
      bound.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'optimizer'
    p.Define(
        'decoupled_weight_decay', 0.0,
        'Decoupled weight decay wd: w <- w - lr*wd*w_old each update (uses '
        'the scheduled rate). 0 disables it.')
    p.Define(
        'weight_decay_exclude', [],
        'Regexes (re.search on variable names) of variables that get no '
        'decoupled weight decay, e.g. [\'LayerNorm\', \'bias\'].')
    p.Define(
        'hyper_schedules', {},
        'Schedules of hyperparameters: {param name: BaseSchedule params}, '
        'e.g. {\'beta1\': schedules.LinearSchedule.Params().Set(start=(0, '
        '0.95), limit=(1000, 0.85))}. A scheduled param takes the '
        'schedule\'s value at the learner\'s step (the step its lr_schedule '
        'sees; without a learner, this optimizer\'s num_updates) instead of '
        'its constant. Names: the class\'s SCHEDULABLE_PARAMS. {}: none.')
    p.Define(
        'slot_dtype', None,
        'None: slots in the variable\'s dtype. tf.bfloat16 (or tf.float16, '
        'tf.float32): slots are stored in this dtype, upcast to the '
        'variable\'s dtype for the update and rounded back to nearest '
        '(bfloat16 halves the slot bytes of float32 variables). Pure-TF '
        'path, sparse gradients densified. Only rules with `_DenseStep` '
        '(SGD, Momentum, Adam, AdamW, Adagrad).')
    p.Define(
        'slot_stochastic_rounding', False,
        'With slot_dtype=tf.bfloat16: round the stored slots stochastically '
        '(unbiased; seeded by num_updates and the slot\'s name) instead of '
        'to nearest, so updates smaller than bfloat16\'s spacing (Adam\'s '
        'v decay) are kept on average (kernels/low_precision.py).')
    p.Define(
        'lazy_sparse_updates', False,
        'For tf.IndexedSlices gradients: if True only rows present in the '
        'batch are updated (their slots too), as in TF1; if False the '
        'gradient is densified, identical to a dense gradient. The Lingvo-'
        'named classes default to TF1\'s choice (True except for Adam).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['decoupled_weight_decay'] = checks.Real(0, example=0.01)
    return specs

  SUPPORTS_LAZY_SPARSE = False
  # The params `hyper_schedules` may name: those this class reads through
  # `Hyper(name)` in its update (a subclass extends or empties the tuple).
  SCHEDULABLE_PARAMS = ('decoupled_weight_decay',)
  # True when a subclass's own Apply accepts `_grad_scale` (ApplyScaled then
  # calls it instead of materialising the scaled gradients).
  APPLY_TAKES_GRAD_SCALE = False
  # The features the runtime asks an optimizer's class about, declared here
  # once with their defaults (a subclass sets its own; nothing probes them
  # with getattr). True for gradient accumulation: global steps feed one
  # update (MicroBatchesPerUpdateOf), and it must be the outermost wrapper.
  IS_ACCUMULATION = False
  # True when the step needs a second forward/backward pass at perturbed
  # weights (Sam); the gradient tape finds it (gradient_tape.FindPerturber).
  NEEDS_SECOND_PASS = False
  # True for a wrapper whose replicas train their own copies
  # (wrappers/replica_local.py: Easgd, LocalSgd).
  REPLICA_LOCAL = False
  # How the jobs name the weights evaluated instead of the trained ones
  # (e.g. 'EMA averages'); None: the trained weights are evaluated.
  EVAL_WEIGHTS_LABEL = None

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    checks.CheckRegexList(self, 'weight_decay_exclude', p.weight_decay_exclude)
    low_precision.CheckSlotDtype(self, BaseOptimizer)
    if 'use_bf16_gradients_ar' in p and p.use_bf16_gradients_ar:
      raise ValueError(
          '%s: use_bf16_gradients_ar=True (Lingvo: all-reduce gradients in '
          'bfloat16) is not supported. Leave it False; for bfloat16 '
          'communication use mixed precision (docs/lingvo.md).' % self.path)
    self._num_updates = self.CreateVariable(
        'num_updates', [], init=0, trainable=False, dtype=tf.int64)
    self._slots = {}
    self._bound = {}
    self._decay_mask = {}
    self._BuildHyperSchedules(p.hyper_schedules)

  def WeightDecayOn(self):
    """True if decoupled weight decay is nonzero or scheduled."""
    return bool('decoupled_weight_decay' in self.scheduled_hyperparams or
                self.params.decoupled_weight_decay)

  @property
  def num_updates(self):
    """int64 variable: updates this optimizer applied."""
    return self._num_updates

  def UseGlobalStep(self, global_step):
    """Gives the task's int64 global step to a rule that counts it.

    The learner calls it at Bind on itself and every optimizer below it.
    Rules that count their own updates ignore it; Lingvo-named rules whose
    Lingvo original reads the global step (XLAShardingAdafactor) read it.
    Not tracked: the task checkpoints its global step.
    """
    self.__dict__['_global_step_holder'] = [global_step]

  def GlobalStep(self):
    """The global step given by `UseGlobalStep`, or None."""
    return self.__dict__.get('_global_step_holder', [None])[0]

  # ---- binding ---------------------------------------------------------------

  def Bind(self, vmap):
    """Creates the slots of every variable in `vmap` (NestedMap or list).

    Idempotent for variables already bound.
    """
    variables = vmap.Flatten() if isinstance(vmap, NestedMap) else list(vmap)
    new = []
    for var in variables:
      name = var_grad_lib.VarName(var)
      if name in self._bound:
        continue
      self._bound[name] = var
      new.append(var)
      with tf.init_scope():
        slots = {}
        for slot_name, init in self._CreateSlots(var).items():
          slots[slot_name] = _CreateSlotVariable(self, var, slot_name, init)
        self._slots[var_grad_lib.SanitizedName(name)] = slots
    self._BindWeightDecay(new)
    return self

  def _BindWeightDecay(self, variables):
    p = self.params
    if not self.WeightDecayOn():
      return
    names = [var_grad_lib.VarName(v) for v in variables]
    for regex in p.weight_decay_exclude:
      if not any(re.search(regex, n) for n in names):
        logging.warning(
            '%s: weight_decay_exclude regex %r matches no variable; '
            'variables: %s', self.path, regex, names)
    for n in names:
      self._decay_mask[n] = not any(
          re.search(r, n) for r in p.weight_decay_exclude)

  def _CreateSlots(self, var):
    """Returns {slot_name: initial value (tensor/number) or None for zeros}."""
    del var
    return {}

  def GetSlots(self, var):
    """Returns {slot_name: slot variable} of a bound variable."""
    return self._slots[var_grad_lib.SanitizedName(var_grad_lib.VarName(var))]

  @property
  def bound_variables(self):
    """{variable name: variable} of the variables bound so far."""
    return dict(self._bound)

  # ---- the optimizer tree ----------------------------------------------------

  @property
  def inner_optimizers(self):
    """List of the optimizers this one hands its update to ([] here)."""
    return []

  @classmethod
  def InnerOptimizerParams(cls, p):
    """List of the inner optimizers' params that `p` configures ([] here).

    The params counterpart of `inner_optimizers`, read without building.
    """
    del p
    return []

  def EvalAverages(self):
    """The optimizers in this tree that keep averages of the weights.

    Evaluation swaps the averages in (each returned optimizer has
    `SwapAverages()`, a context manager). An update rule keeps none; a
    wrapper returns its inner optimizers' (Ema adds itself first).

    Returns:
      A list of optimizers, outermost first; [] for none.
    """
    return [a for inner in self.inner_optimizers for a in inner.EvalAverages()]

  @classmethod
  def EvalAverageClasses(cls, p):
    """`EvalAverages` from params: the classes of the averaging optimizers.

    For evaluating a checkpoint without building any optimizer: each
    returned class has `AverageCheckpointKeySuffix(var)`, the end of the
    checkpoint key its averages are saved under.

    Args:
      p: params of this class (anything else in the tree is skipped).

    Returns:
      A list of classes, outermost first; [] for none.
    """
    out = []
    for inner in cls.InnerOptimizerParams(p):
      inner_cls = getattr(inner, 'cls', None)
      if isinstance(inner_cls, type) and issubclass(inner_cls, BaseOptimizer):
        out.extend(inner_cls.EvalAverageClasses(inner))
    return out

  # ---- applying ----------------------------------------------------------

  @tf.autograph.experimental.do_not_convert
  def Apply(self, lr, var_grads, _grad_scale=None, _measure=None):
    """Applies one update; returns the update op (None when eager).

    Not converted by AutoGraph (it has no Python control flow on tensors),
    so tracing it inside any tf.function is fast.

    Args:
      lr: float32 scalar tensor, the scheduled learning rate.
      var_grads: NestedMap of VarGrad(var, grad); grad None means "leave".
      _grad_scale: internal (use `ApplyScaled`): a float32 scalar that
        multiplies every gradient, or None.
      _measure: internal (the learner's var_norm/all): None, or a
        kernels.WeightMeasure that a fused apply op adds sum(w_old^2) / 2
        of the weights it updates to (the pure-TF path adds nothing).

    Raises:
      ValueError: if a variable was not bound with `Bind`.
    """
    lr = tf.convert_to_tensor(lr, tf.float32)
    present = [vg for vg in var_grads.Flatten() if vg.grad is not None]
    for vg in present:
      self._CheckBound(vg.var)
    with self.HyperScope():
      fused, op = self._MultiTensorApply(lr, present, _grad_scale, _measure)
      if fused:
        return self._FinishApply([op])
      return self._FinishApply(
          [self._ApplyOne(lr, vg.var, vg.grad, _grad_scale)
           for vg in present])

  def _MultiTensorApply(self, lr, vgs, grad_scale, measure=None):
    """The whole update as one fused multi-tensor op, when it can run.

    For optimizers with `_ApplyDenseMulti` (SGD, Momentum, Adam, AdamW, Lion,
    Nadam, AMSGrad; schedule-free has its own `_FusedApply`):
    the same numbers as `_ApplyOne` per variable, decoupled weight decay
    included (learner/optimizers/kernels). Sparse gradients are densified
    as `_ApplyOne` does, unless they need a lazy update (then, as under
    XLA, with another dtype, a GPU or a strategy, the pure-TF path runs;
    the path taken is logged once per optimizer class).

    Args:
      lr: float32 scalar; vgs: list of VarGrad with a gradient, all bound;
      grad_scale: float32 scalar multiplying every gradient, or None;
      measure: None or the kernels.WeightMeasure the op measures into.

    Returns:
      (fused, op): fused False means nothing ran (take the pure-TF path).
    """
    if not vgs:
      return False, None
    reason = self.FusedApplyReason(vgs)
    kernels.LogPath('%s update' % type(self).__name__, reason)
    if reason:
      return False, None
    variables = [vg.var for vg in vgs]
    grads = [tf.convert_to_tensor(vg.grad) for vg in vgs]  # Sums duplicates.
    on = self.WeightDecayOn()
    wd = self.Hyper('decoupled_weight_decay') if on else 0.0
    decay = [on and self._decay_mask.get(var_grad_lib.VarName(v), True)
             for v in variables]
    wd_rate = tf.cast(lr * wd, tf.float32) if on else tf.constant(0.0)
    slots = [self.GetSlots(v) for v in variables]
    return True, self._ApplyDenseMulti(lr, variables, grads, slots, grad_scale,
                                       wd_rate, decay, measure)

  def FusedApplyReason(self, vgs):
    """None if `Apply(lr, vgs)` runs as one fused op, else why not (str).

    Decided from the rule, the gradients' kinds and dtypes and where the
    step runs (learner/optimizers/kernels); creates no op.

    Args:
      vgs: non-empty list of VarGrad with a gradient each.
    """
    reason = _NoMultiTensorRule(type(self))
    if reason:
      return reason
    p = self.params
    if p.slot_dtype is not None:
      return ('slot_dtype=%s (the fused kernels hold slots in the variable '
              'dtype)' % tf.as_dtype(p.slot_dtype).name)
    if (p.lazy_sparse_updates and self.SUPPORTS_LAZY_SPARSE and
        any(isinstance(vg.grad, tf.IndexedSlices) for vg in vgs)):
      return 'lazy sparse update (lazy_sparse_updates=True)'
    return kernels.Unsupported([vg.var for vg in vgs], [
        vg.grad.values if isinstance(vg.grad, tf.IndexedSlices) else vg.grad
        for vg in vgs])

  def _ApplyDenseMulti(self, lr, variables, grads, slots, grad_scale,
                       wd_rate, decay, measure):
    """The dense update of all `variables` in one fused op (optional).

    Args:
      lr: float32 scalar; variables, grads (dense float32), slots (dicts as
        GetSlots gives) aligned lists; grad_scale: None or a float32 scalar
        multiplying every gradient; wd_rate: float32 lr * wd; decay: list of
        bool, which variables get decoupled weight decay; measure: None, or
        a kernels.WeightMeasure to pass to the kernel.

    Returns:
      The op (None eagerly). Not overridden: the rule has no fused kernel.
    """
    raise NotImplementedError

  def MicroBatchesPerUpdate(self):
    """Python int: global steps (micro-batches) per applied update: 1 here,
    `num_batches` for gradient accumulation (the runtime asks this)."""
    return type(self).MicroBatchesPerUpdateOf(self.params)

  @classmethod
  def MicroBatchesPerUpdateOf(cls, params):
    """Python int: global steps per applied update of an optimizer built
    from `params` (this class's Params): 1; gradient accumulation says its
    `num_batches`. The one definition: the instance method above and the
    task's schedule-length conversion (before any layer is built) ask it.
    """
    del params  # An update per global step whatever the params.
    return 1

  def _FinishApply(self, ops):
    """Counts one update after `ops`; returns the update op (None eagerly).

    Every `Apply` ends here, so `num_updates` advances once per call, after
    the update, and the return convention is the same for all optimizers.

    Args:
      ops: list of the update's ops (None entries, as eager calls give, are
        skipped).

    Returns:
      tf.group of `ops` and the increment in graph mode; None when eager.
    """
    ops = [o for o in ops if o is not None]
    with tf.control_dependencies(ops):
      inc = self._num_updates.assign_add(1)
    return None if tf.executing_eagerly() else tf.group(ops + [inc])

  @tf.autograph.experimental.do_not_convert
  def ApplyScaled(self, lr, var_grads, grad_scale, _measure=None):
    """Applies one update with every gradient multiplied by `grad_scale`.

    The same update as `Apply(lr, {var: grad_scale * grad})`; the learner
    calls it with its clip scale (and, under accumulation, 1 / sum(weight))
    so an optimizer whose fused kernel can absorb a scalar factor (SGD:
    alpha = lr * grad_scale) never materialises a scaled copy of the
    gradients. Optimizers without such a kernel, and wrappers that override
    `Apply` (Lars, Ema, Composite, KerasOptimizer), get the scaled copy and
    their own `Apply`.

    Args:
      lr: float32 scalar tensor, the scheduled learning rate.
      var_grads: NestedMap of VarGrad(var, grad); grad None means "leave".
      grad_scale: float32 scalar tensor (finite; >= 0 in the learner's use).
      _measure: internal, as in `Apply` (not passed to a wrapper's own
        `Apply`, which has no fused op: `FusedApplyReason` says so).

    Returns:
      The update op (None when eager).

    Raises:
      ValueError: if a variable was not bound with `Bind`.
    """
    if (type(self).Apply is not BaseOptimizer.Apply and
        not type(self).APPLY_TAKES_GRAD_SCALE):
      scaled = var_grads.Transform(
          lambda vg: vg if vg.grad is None else var_grad_lib.VarGrad(
              vg.var, kernels.ScaleGradient(vg.grad, grad_scale)))
      return self.Apply(lr, scaled)
    return self.Apply(lr, var_grads, _grad_scale=grad_scale,
                      _measure=_measure)

  def _CheckBound(self, var):
    """Raises ValueError naming `var` if it was not bound with `Bind`."""
    name = var_grad_lib.VarName(var)
    if name not in self._bound:
      raise ValueError(
          '%s: variable %r was not bound; call Bind() with every variable '
          'before Apply(). Bound: %s' % (self.path, name, sorted(self._bound)))

  def _CheckAllBound(self, var_grads):
    """Raises ValueError (see `_CheckBound`) unless every variable of
    `var_grads` with a gradient (grad not None) was bound."""
    for vg in var_grads.Flatten():
      if vg.grad is not None:
        self._CheckBound(vg.var)

  def _ApplyOne(self, lr, var, grad, grad_scale=None):
    """Applies decoupled weight decay and the update to one variable.

    Sparse gradients: for a lazy update duplicate indices are merged before
    anything reads the values; otherwise they are densified (which sums
    duplicate rows). Under XLA (`jit_compile=True`), where TF's sparse apply
    kernels and `tf.unique` do not compile, they are always densified,
    whatever `lazy_sparse_updates` says. A lazy sparse
    update decays only the rows present in the batch (as TF Addons'
    decoupled weight decay does for sparse updates); otherwise every row.
    `grad_scale` (float32 scalar or None) multiplies the gradient: folded
    into the kernel by `_ApplyDenseScaled` for dense gradients, applied to
    the merged values of a lazy sparse gradient.
    """
    slots = self.GetSlots(var)
    upcast = self.params.slot_dtype is not None
    lazy = False
    if isinstance(grad, tf.IndexedSlices):
      lazy = (self.params.lazy_sparse_updates and self.SUPPORTS_LAZY_SPARSE
              and not kernels.InXla() and not upcast)
      if lazy:
        grad = var_grad_lib.MergeDuplicateIndices(grad)
        if grad_scale is not None:
          grad = kernels.ScaleGradient(grad, grad_scale)
          grad_scale = None
      else:
        grad = tf.convert_to_tensor(grad)  # Sums duplicate rows.
    decay = None
    if (self.WeightDecayOn() and
        self._decay_mask.get(var_grad_lib.VarName(var), True)):
      rate = tf.cast(lr * self.Hyper('decoupled_weight_decay'), var.dtype)
      if lazy:
        decay = tf.IndexedSlices(rate * tf.gather(var, grad.indices),
                                 grad.indices, grad.dense_shape)
      else:
        decay = rate * tf.identity(var.read_value())
    if lazy:
      op = self._ApplySparse(lr, var, grad, slots)
    elif upcast:
      if grad_scale is not None:
        grad = grad * tf.cast(grad_scale, grad.dtype)
      op = self._ApplyUpcast(lr, var, grad, slots)
    elif grad_scale is not None:
      op = self._ApplyDenseScaled(lr, var, grad, slots, grad_scale)
    else:
      op = self._ApplyDense(lr, var, grad, slots)
    if decay is None:
      return op
    with tf.control_dependencies([op] if op is not None else []):
      if lazy:
        return var.scatter_sub(decay)
      return var.assign_sub(decay)

  def _ApplyDense(self, lr, var, grad, slots):
    raise NotImplementedError('%s must implement _ApplyDense.' %
                              type(self).__name__)

  def _DenseStep(self, lr, var, grad, slots):
    """The rule's dense step on values, for low-precision slots (optional).

    Args:
      lr: float32 scalar; var: the variable (read it for w); grad: dense
        gradient in var.dtype; slots: {slot name: current value upcast to
        var.dtype}.

    Returns:
      (delta, new_slots): w <- w - delta (var.dtype), and {slot name: new
      value in var.dtype} for the slots that change. The same numbers as
      `_ApplyDense` up to rounding.
    """
    raise NotImplementedError('%s has no _DenseStep.' % type(self).__name__)

  def _ApplyUpcast(self, lr, var, grad, slots):
    """Reads the slots, upcasts, runs `_DenseStep`, stores them rounded."""
    values = {k: tf.cast(s.read_value(), var.dtype) for k, s in slots.items()}
    delta, new = self._DenseStep(lr, var, grad, values)
    stochastic = self.params.slot_stochastic_rounding
    ops = [low_precision.StoreSlot(slots[k], v, stochastic, self.num_updates)
           for k, v in sorted(new.items())]
    ops = [o for o in ops if o is not None]
    with tf.control_dependencies(ops):
      op = var.assign_sub(delta, read_value=False)
    return None if tf.executing_eagerly() else op

  def _ApplyDenseScaled(self, lr, var, grad, slots, grad_scale):
    """`_ApplyDense` with `grad_scale * grad` (float32 scalar grad_scale).

    The default materialises the scaled gradient; optimizers whose kernel
    can absorb the factor override this (SGD folds it into alpha).
    """
    return self._ApplyDense(lr, var, grad * tf.cast(grad_scale, grad.dtype),
                            slots)

  def _ApplySparse(self, lr, var, grad, slots):
    """Lazy sparse update of the rows in `grad` (merged tf.IndexedSlices).

    Called only when SUPPORTS_LAZY_SPARSE and lazy_sparse_updates are set.
    """
    raise NotImplementedError('%s must implement _ApplySparse.' %
                              type(self).__name__)


def _NoMultiTensorRule(cls):
  """None if `cls` may use its inherited `_ApplyDenseMulti`, else why not.

  A subclass that changes `_ApplyDense` or `_ApplyDenseScaled` below the
  class that wrote `_ApplyDenseMulti` would silently get the parent's
  numbers from the fused op, so it keeps the per-variable path.
  """
  owner = next(k for k in cls.__mro__ if '_ApplyDenseMulti' in vars(k))
  if owner is BaseOptimizer:
    return 'no fused kernel for this rule'
  for name in ('_ApplyDense', '_ApplyDenseScaled'):
    if getattr(cls, name) is not getattr(owner, name):
      return '%s overrides %s of %s' % (cls.__name__, name, owner.__name__)
  return None


def CondAsCall(pred, true_fn, false_fn):
  """tf.cond whose If op runs as a function call (not lowered).

  Args:
    pred: bool scalar tensor.
    true_fn, false_fn: as in tf.cond.

  Returns:
    What tf.cond returns.

  A lowered cond (Switch/Merge, the default in tf.function) still walks
  every op of the branch not taken as dead; for the applying branch of an
  accumulation micro-step that is ~5 ops per variable on every micro-step.
  Run as a call, a micro-step that only accumulates executes just its own
  branch. Eagerly it is the plain tf.cond. Under XLA it is a
  tf.switch_case with `false_fn` as branch 0: XLA:CPU (TF 2.21) keeps a
  variable that a branch passes through unchanged in place only when that
  branch is branch 0 of an indexed conditional (openxla/xla#46314, fixed
  upstream in 2026-07); as a tf.cond it copied every weight and optimizer
  slot in the accumulate-only branch of a micro-step
  (tests/test_learner/test_learner_xla.py).
  """
  if kernels.InXla():
    return tf.switch_case(tf.cast(pred, tf.int32), [false_fn, true_fn])
  out = tf.cond(pred, true_fn, false_fn)
  if tf.executing_eagerly():
    return out
  flat = tf.nest.flatten(out)
  if_ops = set()
  for t in flat:
    op = t.op
    while op.type == 'Identity' and op.inputs:
      op = op.inputs[0].op
    if op.type in ('If', 'StatelessIf'):
      if_ops.add(op)
  from tensorflow.core.framework import attr_value_pb2  # pylint: disable=g-import-not-at-top
  for op in if_ops:
    op._set_attr('_lower_using_switch_merge',  # pylint: disable=protected-access
                 attr_value_pb2.AttrValue(b=False))
  return out


def _CreateSlotVariable(opt, var, slot_name, init):
  """Creates one slot variable like `var` (same shape and placement; the
  optimizer's slot_dtype, or var's dtype)."""
  name = '%s/%s/%s' % (opt.path, var_grad_lib.VarName(var), slot_name)
  slot_dtype = opt.params.slot_dtype
  dtype = var.dtype if slot_dtype is None else tf.as_dtype(slot_dtype)
  if init is None:
    initial = tf.zeros(var.shape, dtype)
  elif isinstance(init, (int, float)):
    initial = tf.fill(var.shape, tf.constant(init, dtype))
  else:
    initial = tf.cast(init, dtype)
  return tf.Variable(initial, name=name, trainable=False)


def CheckInnerOptimizerParams(owner, key, inner_params,
                              owner_is_accumulation=False, fix=None):
  """Raises unless `inner_params` may be wrapped by the wrapper `owner`.

  The one place of the rule "accumulation must be the outermost wrapper":
  every wrapper checks its inner params here at construction (BaseWrapper,
  Composite), and the wrapper factory (get_optimizer_wrapper_fn) when it is
  built.

  Args:
    owner: the wrapper (its class name, or where it is built), for the
      message.
    key: the param holding the inner optimizer (e.g. 'optimizer'), for the
      message.
    inner_params: InstantiableParams of the inner optimizer.
    owner_is_accumulation: True when `owner` is itself a gradient
      accumulation (the fix is then one accumulation, not a reordering).
    fix: optional sentence that ends the accumulation message (how to
      reorder); by default, how to put `owner` inside the accumulation.

  Raises:
    ValueError: if `inner_params` is not optimizer params, or its class is a
      gradient accumulation (`IS_ACCUMULATION = True`): accumulation must be
      the outermost wrapper.
  """
  cls = getattr(inner_params, 'cls', None) if inner_params is not None else None
  if cls is None or not (isinstance(cls, type) and
                         issubclass(cls, BaseOptimizer)):
    raise ValueError(
        '%s: params.%s must be the params of a BaseOptimizer subclass (e.g. '
        'SGD.Params()), got %r.' % (owner, key, cls if cls else inner_params))
  if not cls.IS_ACCUMULATION:
    return
  if owner_is_accumulation:
    raise ValueError(
        '%s: params.%s is %s, another gradient accumulation; accumulation '
        'must be the outermost wrapper. Use one %s with num_batches = the '
        'product.' % (owner, key, cls.__name__, owner))
  if fix is None:
    fix = ('Put %s inside it instead: GradientAccumulation.Params().Set('
           'optimizer=%s.Params().Set(optimizer=...)).' % (owner, owner))
  raise ValueError(
      '%s: params.%s is %s, a gradient accumulation; accumulation must be '
      'the outermost wrapper. %s' % (owner, key, cls.__name__, fix))


def CheckNoWrapperDecay(layer):
  """Raises ValueError if a wrapper's own decoupled_weight_decay is set.

  A wrapper hands the update to inner optimizers, which apply decay
  themselves; setting it on the wrapper would be silently ignored.
  """
  if layer.params.decoupled_weight_decay:
    raise ValueError(
        '%s (%s): decoupled_weight_decay=%r is set on a wrapper; set it on the '
        'inner optimizer (params.optimizer.decoupled_weight_decay) instead.' %
        (layer.path, type(layer).__name__, layer.params.decoupled_weight_decay))


def DefineLingvoBaseParams(p):
  """Defines Lingvo 0.14.2's optimizer.Base params on `p` (in place).

  For the classes under a Lingvo name, so a ported config that sets them
  keeps working. Here: `use_bf16_gradients_ar` must stay False (refused at
  construction otherwise); `add_summary_in_apply` has no effect (the
  learner already reports the rate as the eval metric 'learning_rate');
  `clear_variable_scope` has no effect (TF2 has no variable scopes).
  """
  p.Define('use_bf16_gradients_ar', False, 'Lingvo: all-reduce gradients in '
           'bfloat16. Only False is supported here.')
  p.Define('add_summary_in_apply', True, 'Lingvo: write the rate summary in '
           'Apply. No effect here (see the learner\'s learning_rate metric).')
  p.Define('clear_variable_scope', None, 'Lingvo: clear the TF1 variable '
           'scope in Apply. No effect in TF2.')
  return p


class SGD(BaseOptimizer):
  """Plain gradient descent: w <- w - lr * g (TF's ResourceApplyGradientDescent).

  Lazy sparse update: scatter_sub of lr * g on the rows present; the
  default, as TF1's GradientDescentOptimizer that Lingvo wraps (for SGD a
  lazy and a dense update give the same numbers).
  Source: Lingvo 0.14.2 `lingvo/core/optimizer.py` SGD (no params of its
  own; the base params differ, docs/lingvo.md).
  """

  SUPPORTS_LAZY_SPARSE = True

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse SGD.
    return p

  def _ApplyDense(self, lr, var, grad, slots):
    del slots
    return tf.raw_ops.ResourceApplyGradientDescent(
        var=var.handle, alpha=tf.cast(lr, var.dtype), delta=grad,
        use_locking=False)

  def _ApplyDenseScaled(self, lr, var, grad, slots, grad_scale):
    """w <- w - (lr * grad_scale) * g: the scale folded into alpha."""
    del slots
    return tf.raw_ops.ResourceApplyGradientDescent(
        var=var.handle, alpha=tf.cast(lr * grad_scale, var.dtype),
        delta=grad, use_locking=False)

  def _ApplyDenseMulti(self, lr, variables, grads, slots, grad_scale,
                       wd_rate, decay, measure):
    """One TfLearnerMultiApplySGD: alpha = lr (* grad_scale), as above."""
    del slots
    alpha = lr if grad_scale is None else lr * grad_scale
    return kernels.ApplySGD(variables, grads, alpha, wd_rate, decay, measure)

  def _DenseStep(self, lr, var, grad, slots):
    del slots
    return tf.cast(lr, var.dtype) * grad, {}

  def _ApplySparse(self, lr, var, grad, slots):
    del slots
    return var.scatter_sub(kernels.ScaleGradient(grad, lr))

