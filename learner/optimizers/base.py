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
  * Sparse gradients (tf.IndexedSlices): duplicate indices merged, then
    densified, or with `lazy_sparse_updates=True` (rules with
    SUPPORTS_LAZY_SPARSE; the Lingvo-named classes take TF1's default) only
    the rows present are updated; under XLA always densified.

A rule is one formula (docs/DESIGN.md, "Where things go": a new optimizer):
a subclass writes `Params()`, `_CreateSlots(var)` -> {slot_name: initial
value or None}, `_Scalars(update, dtype)` (the update's scalars: rate, bias
corrections, scheduled betas) and `_Step(s, w, g, slots)` -> (delta,
new_slots), and declares `ELEMENTWISE` when one element's step reads only
that element. Every way of applying it is derived here, once, from those:

  rule (`_Step`) x storage (`slot_dtype`: slots read upcast, stored
  rounded; kernels/low_precision.py) x sharding (ZeRO-1 flat shards or
  home tensors, `UseStateSharding`) x apply path (a whole variable; the
  rows of a lazy sparse gradient; one fused op over all variables or a raw
  TF op: the rule's `ACCELERATOR` in kernels/accelerators.py, which holds
  no formula, only the mapping of the scalars to the kernel). The pure-TF
  path goes through `_ApplyItems`, where a rule may act on all of the
  variables one replica steps at once (Muon's same-shape batches).

A scaled gradient (`ApplyScaled`, the learner's clip scale) is folded into
the kernel when the accelerator can (every fused op; SGD's alpha), else
multiplied in; a rule may take the scale over in `_BeginUpdate`
(Momentum's folded velocity) and store per-update state in `_EndUpdate`.
Wrappers around one inner optimizer (Lars, Ema, GradientAccumulation)
derive from `wrapper.BaseWrapper`; Composite and KerasOptimizer override
`Bind` and `Apply` themselves (no `_Step`: `slot_dtype` is refused).

Storage options, all in kernels/low_precision.py: `slot_dtype` (slots
stored low-precision, the math in the variable's dtype; tf.int8 is 8-bit
blockwise state, Dettmers et al., ICLR 2022: kernels/quantized_state.py,
the unsigned map for a rule's `NONNEGATIVE_SLOTS`) and `master_weights` (a
float32 master of each 16-bit variable); the masks of
learner/optimizers/cautious.py act on `_Step`'s delta. Each takes the
pure-TF path (no accelerator) and densifies sparse gradients.

Averages to evaluate on (Ema, Lookahead, SWA: `wrapper.BaseAveraging`)
are found by asking the optimizer tree (`EvalAverages()`,
`EvalAverageClasses(p)`; empty here, delegated by wrappers).
Scheduled hyperparameters (hyper.py): `hyper_schedules` = {param: schedule
params} for names in `SCHEDULABLE_PARAMS`, read as `self.Hyper(name)` (the
Python constant when unscheduled); here 'decoupled_weight_decay'.
"""

import contextlib
import re

from absl import logging
import tensorflow as tf

from params import BaseLayer
from params import NestedMap
from params import checks
from learner.optimizers import cautious as cautious_lib
from learner.optimizers import home_sharding
from learner.optimizers import hyper as hyper_lib
from learner.optimizers import rule_flags
from learner.optimizers import kernels
from learner.optimizers.kernels import accelerators
from learner.optimizers.kernels import first_update
from learner.optimizers.kernels import low_precision
from learner.optimizers import var_grad as var_grad_lib


class BaseOptimizer(rule_flags.RuleFlags, hyper_lib.ScheduledHyperparams,
                    BaseLayer):
  """Base class of optimizers and optimizer wrappers.

  Class attribute SUPPORTS_LAZY_SPARSE: True when `lazy_sparse_updates`
  updates only the rows present (var and slots; an ELEMENTWISE rule);
  otherwise it is ignored and sparse gradients are densified.

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
      or wrapper without `_Step`; `cautious` / `cautious_weight_decay` as
      cautious.CheckParams refuses; `Apply` on a variable not bound.
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
        '(bfloat16 halves the slot bytes of float32 variables). tf.int8: '
        '8-bit blockwise state (ELEMENTWISE rules): each slot is int8 codes '
        'plus a float32 absmax per slot_block_size elements with the '
        'dynamic quantization map (Dettmers et al. 2022; 0.254x the bytes '
        'of float32 slots at 256), dequantized for the update and '
        'requantized after it (kernels/quantized_state.py). Pure-TF '
        'path, sparse gradients densified. Update rules only (a `_Step`) '
        '(not wrappers).')
    p.Define(
        'slot_block_size', low_precision.DEFAULT_BLOCK_SIZE,
        'With slot_dtype=tf.int8: elements per quantization block B (one '
        'float32 absmax each, over the flattened slot; the last block is '
        'padded with zeros for the max only). Smaller B: finer scales, '
        '4/B more bytes per element.')
    p.Define(
        'slot_stochastic_rounding', False,
        'With slot_dtype=tf.bfloat16: round the stored slots stochastically '
        '(unbiased; seeded by num_updates and the slot\'s name) instead of '
        'to nearest, so updates smaller than bfloat16\'s spacing (Adam\'s '
        'v decay) are kept on average (kernels/low_precision.py).')
    low_precision.DefineMasterParams(p)  # master_weights (bfloat16 weights).
    p.Define(
        'lazy_sparse_updates', False,
        'For tf.IndexedSlices gradients: if True only rows present in the '
        'batch are updated (their slots too), as in TF1; if False the '
        'gradient is densified, identical to a dense gradient. The Lingvo-'
        'named classes default to TF1\'s choice (True except for Adam).')
    return cautious_lib.DefineParams(p)

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['decoupled_weight_decay'] = checks.Real(0, example=0.01)
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    checks.CheckRegexList(self, 'weight_decay_exclude', p.weight_decay_exclude)
    has_step = type(self)._Step is not BaseOptimizer._Step
    low_precision.CheckParams(self, has_step)
    if 'use_bf16_gradients_ar' in p and p.use_bf16_gradients_ar:
      raise ValueError(
          '%s: use_bf16_gradients_ar=True (Lingvo: all-reduce gradients in '
          'bfloat16) is not supported. Leave it False; for bfloat16 '
          'communication use mixed precision (docs/lingvo.md).' % self.path)
    if p.lazy_sparse_updates and not type(self).SUPPORTS_LAZY_SPARSE:
      logging.warning(
          '%s: lazy_sparse_updates=True, but %s does not update sparse rows '
          'lazily (they are densified); set lazy_sparse_updates : False on '
          'it to silence this.', self.path, type(self).__name__)
    self._num_updates = self.CreateVariable(
        'num_updates', [], init=0, trainable=False, dtype=tf.int64)
    self._slots = {}
    self._bound = {}
    self._decay_mask = {}
    self._BuildHyperSchedules(p.hyper_schedules)
    cautious_lib.CheckParams(self, has_step)

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

    Idempotent for variables already bound. With a state sharding
    (`UseStateSharding`) that shards, the slots are its flat shards.
    """
    variables = vmap.Flatten() if isinstance(vmap, NestedMap) else list(vmap)
    new = [v for v in variables if var_grad_lib.VarName(v) not in self._bound]
    sharding = self.__dict__.get('_state_sharding')
    shard_slots = sharding.Bind(self, variables) if sharding else None
    for var in new:
      if shard_slots is not None:
        slots = shard_slots[var_grad_lib.VarName(var)]
      else:
        slots = self.CreateSlotVariables(var)
      self._bound[var_grad_lib.VarName(var)] = var
      self._slots[var_grad_lib.SanitizedName(var_grad_lib.VarName(var))] = (
          slots)
    low_precision.CheckMastersBound(self, list(self._bound.values()))
    self._BindWeightDecay(new)
    return self

  def CreateSlotVariables(self, var, creator=None):
    """{slot name: new tf.Variable} for `var` (`_CreateSlots`' initial
    values, stored in `slot_dtype`), created outside any tf.function; first
    a float32 'master' when master_weights (low_precision.CreateMaster).

    Args:
      var: a variable, or anything with `name`, `dtype` and `shape` (a
        ZeRO-1 shard).
      creator: None, or a variable creator (tf.variable_creator_scope) the
        slots are made under (ZeRO-1: per-replica variables).
    """
    with tf.init_scope(), contextlib.ExitStack() as stack:
      if creator is not None:
        stack.enter_context(tf.variable_creator_scope(creator))
      slots = low_precision.CreateMaster(self, var)
      dtype = low_precision.MASTER_DTYPE if slots else None  # Slots follow.
      slots.update((name, low_precision.CreateSlot(
          '%s/%s/%s' % (self.path, var_grad_lib.VarName(var), name),
          self.params, type(self).NONNEGATIVE_SLOTS, var, init, dtype))
                   for name, init in self._CreateSlots(var).items())
      return slots

  def UseStateSharding(self, sharding):
    """Keeps this rule's state in `sharding` (ZeRO-1; not tracked).

    Called by the learner before `Bind` (sharded_state.Install). The
    sharding's `Bind(rule, variables)` returns {variable name: slots (the
    checkpointed views)} when it shards, else None; its `Apply(vgs,
    step_fn)` runs `step_fn([(var, grad, slots)])` on this replica's part
    (flat shards; home tensors: home_sharding.py) and writes the gathered
    weights; `CheckRule(rule)` raises ValueError for a rule it cannot shard.
    """
    sharding.CheckRule(self)
    self.__dict__['_state_sharding'] = sharding

  def ShardCost(self, var):
    """`var`'s cost that ZeRO-1 homes balance (home_sharding.py): bytes."""
    return home_sharding.SlotBytes(self, var)

  @property
  def state_sharding(self):
    """The sharding given by `UseStateSharding`, or None."""
    return self.__dict__.get('_state_sharding')

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

    Not converted by AutoGraph (no Python control flow on tensors: fast to
    trace). Every way of applying the rule derives from its `_Step`: the
    fused op or a raw TF op of its accelerator, else `_ApplyItems` (`_Step`
    per variable, its rows, or this replica's part: `UseStateSharding`;
    then `var_grads` may be its gradient slices).

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
    sharding = self.__dict__.get('_state_sharding')
    on = sharding is not None and sharding.sharded
    view = sharding.UpdateView(present) if on else present  # Slices: vars.
    for vg in view:
      self._CheckBound(vg.var)
    with self.HyperScope():
      update = self._BeginUpdate(lr, view, _grad_scale)
      if on:
        ops = [sharding.Apply(present, lambda items: self._ApplyItems(
            update, items))]
      else:
        ops = self._ApplyAll(update, present, _measure)
      ops = ops + self._EndUpdate(update, ops)
    return self._FinishApply(ops)

  def _ApplyAll(self, update, present, measure):
    """The update of `present` (VarGrads with a gradient): one fused op
    when the rule's accelerator can run it, else per variable."""
    reason = self.FusedApplyReason(present) if present else 'no gradient'
    if present:
      kernels.LogPath('%s update' % type(self).__name__, reason)
    if reason:
      update.first_taken = first_update.TakeFirstSlots(self, update, present)
      return self._ApplyItems(update, [(vg.var, vg.grad, self.GetSlots(vg.var))
                                       for vg in present])
    variables = [vg.var for vg in present]
    grads = [tf.convert_to_tensor(vg.grad) for vg in present]  # Sums dups.
    on = self.WeightDecayOn()
    wd = self.Hyper('decoupled_weight_decay') if on else 0.0
    decay = [on and self._decay_mask.get(var_grad_lib.VarName(v), True)
             for v in variables]
    wd_rate = tf.cast(update.lr * wd, tf.float32) if on else tf.constant(0.0)
    slots = [self.GetSlots(v) for v in variables]
    s = self._Scalars(update, variables[0].dtype)
    return [self._FusedApply(variables, grads, slots, s, update.grad_scale,
                             wd_rate, decay, measure)]

  def _FusedApply(self, variables, grads, slots, s, grad_scale, wd_rate,
                  decay, measure):
    """The fused update of every variable: the accelerator's `multi` op
    (its arguments). A rule whose entry is `accelerators.Staged` chains the
    stages around its own middle here (Muon's Newton-Schulz)."""
    return self.Accelerator().multi(variables, grads, slots, s, grad_scale,
                                    wd_rate, decay, measure)

  def _ApplyItems(self, update, items):
    """The pure-TF update of `items` [(var, grad, slots)], a list of ops:
    `_ApplyOne` on each. The hook where a rule acts on them all at once
    (Muon: one Newton-Schulz chain per shape); `items` are the update's
    variables, or under ZeRO-1 the ones this replica computes."""
    return [self._ApplyOne(update, var, grad, slots)
            for var, grad, slots in items]

  def FusedApplyReason(self, vgs):
    """None if `Apply(lr, vgs)` runs as one fused op, else why not (str).

    Decided from the rule, the gradients' kinds and dtypes and where the
    step runs (learner/optimizers/kernels); creates no op.

    Args:
      vgs: non-empty list of VarGrad with a gradient each.
    """
    if getattr(self.state_sharding, 'sharded', False):
      return self.state_sharding.REASON
    accelerator, reason = _AcceleratorOf(type(self))
    if reason is None and accelerator.multi is None:
      reason = 'no fused kernel for this rule'
    if reason:
      return reason
    p = self.params
    if cautious_lib.Reason(p):
      return cautious_lib.Reason(p)
    if low_precision.IsQuantized(p.slot_dtype):
      return ('slot_dtype=int8 (8-bit blockwise state: the fused kernels '
              'hold slots in the variable dtype, not codes and scales)')
    if p.slot_dtype is not None:
      return ('slot_dtype=%s (the fused kernels hold slots in the variable '
              'dtype)' % tf.as_dtype(p.slot_dtype).name)
    if any(low_precision.HasMaster(self, vg.var) for vg in vgs):
      return low_precision.MASTER_REASON
    if (p.lazy_sparse_updates and self.SUPPORTS_LAZY_SPARSE and
        any(isinstance(vg.grad, tf.IndexedSlices) for vg in vgs)):
      return 'lazy sparse update (lazy_sparse_updates=True)'
    return kernels.Unsupported([vg.var for vg in vgs], [
        vg.grad.values if isinstance(vg.grad, tf.IndexedSlices) else vg.grad
        for vg in vgs])

  def Accelerator(self):
    """This rule's kernels.ACCELERATORS entry, or None (see `ACCELERATOR`)."""
    return _AcceleratorOf(type(self))[0]

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
    so a rule whose kernel absorbs a scalar factor (every fused op; SGD's
    alpha = lr * grad_scale; Momentum's folded velocity) never materialises
    a scaled copy of the gradients. Wrappers that override `Apply` (Lars,
    Ema, Composite, KerasOptimizer) get the scaled copy and their own
    `Apply`.

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

  # ---- the rule: what a subclass writes -------------------------------------

  def _BeginUpdate(self, lr, vgs, grad_scale):
    """The update's own values, computed once per `Apply` (optional).

    Args:
      lr: float32 scalar, the scheduled rate; vgs: the VarGrads with a
        gradient; grad_scale: None or a float32 scalar multiplying every
        gradient.

    Returns:
      NestedMap with `lr` (the rate decoupled weight decay uses) and
      `grad_scale` (None, or the factor still to multiply the gradients
      by); a rule may add fields its `_Scalars` reads (Momentum's folded
      scale) and may take the scale over (grad_scale None).
    """
    del vgs
    return NestedMap(lr=lr, grad_scale=grad_scale)

  def _EndUpdate(self, update, ops):
    """Ops that run after the update's `ops` (list; [] here). Momentum
    stores its folded scale here."""
    del update, ops
    return []

  def _Scalars(self, update, dtype):
    """The step's scalars for variables of `dtype`: NestedMap (lr here).

    Per update (bias corrections, scheduled betas via `Hyper`); both
    `_Step` and the rule's accelerator read them, so a formula written
    here is written once. Python bools (use_nesterov) may ride along.
    """
    return NestedMap(lr=tf.cast(update.lr, dtype))

  def _Step(self, s, w, g, slots):
    """The rule: one step on values. The only place its formula is written.

    Args:
      s: `_Scalars(update, w.dtype)`.
      w: the weights (a variable or a tensor: read it only if the rule
        needs them), g: the dense gradient, slots: {slot name: value}, all
        of one shape and w's dtype: a whole variable, the rows of a lazy
        sparse gradient (ELEMENTWISE rules only) or a flat shard (ZeRO-1,
        ELEMENTWISE rules only).

    Returns:
      (delta, new_slots): w <- w - delta (w <- delta, the new weights, for
      a rule that declares STEP_GIVES_WEIGHTS), and {slot name: new value}
      for the slots that change.
    """
    raise NotImplementedError('%s must implement _Step.' % type(self).__name__)

  # ---- applying one variable: derived from _Step ----------------------------

  def _ApplyOne(self, update, var, grad, slots, decay_name=None):
    """Applies decoupled weight decay and the update to one variable (to its
    float32 master with master_weights: low_precision.ApplyToMaster).

    Sparse gradients: for a lazy update duplicate indices are merged before
    anything reads the values; otherwise they are densified (which sums
    duplicate rows). Under XLA (`jit_compile=True`), where TF's sparse apply
    kernels and `tf.unique` do not compile, they are always densified,
    whatever `lazy_sparse_updates` says. A lazy sparse update decays only
    the rows present in the batch (as TF Addons' decoupled weight decay
    does for sparse updates); otherwise every row. `update.grad_scale`
    multiplies the gradient: folded into the accelerator's kernel when it
    can, else applied to the (merged) gradient.
    """
    if low_precision.HasMaster(self, var):
      return low_precision.ApplyToMaster(self, update, var, grad, slots)
    grad_scale = update.grad_scale
    upcast = self.params.slot_dtype is not None
    masked = cautious_lib.Reason(self.params) is not None  # The pure-TF path.
    accelerator = self.Accelerator()
    lazy = False
    if isinstance(grad, tf.IndexedSlices):
      lazy = (self.params.lazy_sparse_updates and self.SUPPORTS_LAZY_SPARSE
              and not kernels.InXla() and not upcast and not masked)
      if lazy:
        grad = var_grad_lib.MergeDuplicateIndices(grad)
      else:
        grad = tf.convert_to_tensor(grad)  # Sums duplicate rows.
    decay = None
    if (self.WeightDecayOn() and not type(self).DECAY_IN_STEP and
        self._decay_mask.get(decay_name or var_grad_lib.VarName(var), True)):
      rate = tf.cast(update.lr * self.Hyper('decoupled_weight_decay'),
                     var.dtype)
      if lazy:
        decay = tf.IndexedSlices(rate * tf.gather(var, grad.indices),
                                 grad.indices, grad.dense_shape)
      else:
        decay = rate * tf.identity(var.read_value())
    s = self._Scalars(update, var.dtype)
    if update.get('first_taken'):  # first_update.py: the slots hold w.
      s.first = tf.constant(False)
    if lazy:
      grad = accelerators.Scaled(grad, grad_scale)
      if accelerator is not None and accelerator.sparse is not None:
        op = accelerator.sparse(var, grad, slots, s)
      else:
        op = self._ApplyRows(s, var, grad, slots)
    elif masked:  # The masks decay in _ApplyStep: w <- w - (delta + decay).
      op, decay = self._ApplyStep(
          s, var, accelerators.Scaled(grad, grad_scale), slots, decay), None
    elif upcast or accelerator is None or accelerator.dense is None:
      op = self._ApplyStep(s, var, accelerators.Scaled(grad, grad_scale),
                           slots)
    else:
      op = accelerator.dense(var, grad, slots, s, grad_scale)
    if decay is None:
      return op
    with tf.control_dependencies([op] if op is not None else []):
      if lazy:
        return var.scatter_sub(decay)
      return var.assign_sub(decay)

  def _ApplyStep(self, s, var, grad, slots, decay=None):
    """`_Step` on the whole variable: the slots read (upcast from
    `slot_dtype`), the new slots stored (rounded to it), w -= delta (with
    `cautious` / `cautious_weight_decay`: the masked delta plus `decay`)."""
    values = {k: low_precision.ReadSlot(x, var.dtype)
              for k, x in slots.items()}
    delta, new = self._Step(s, var, grad, values)
    if cautious_lib.Reason(self.params):
      delta = cautious_lib.Masked(self.params, delta, grad, decay)
    ops = [low_precision.StoreSlot(
        slots[k], v, self.params.slot_stochastic_rounding, self.num_updates)
           for k, v in sorted(new.items())]
    ops = [o for o in ops if o is not None]
    with tf.control_dependencies(ops):
      if type(self).STEP_GIVES_WEIGHTS:
        op = var.assign(tf.cast(delta, var.dtype), read_value=False)
      else:
        op = var.assign_sub(tf.cast(delta, var.dtype), read_value=False)
    return None if tf.executing_eagerly() else op

  def _ApplyRows(self, s, var, grad, slots):
    """`_Step` on the rows of a merged tf.IndexedSlices (lazy sparse; an
    ELEMENTWISE rule): gathered, stepped, scattered back."""
    idx = grad.indices
    rows = {k: tf.gather(x, idx) for k, x in slots.items()}
    delta, new = self._Step(s, tf.gather(var, idx), grad.values, rows)
    ops = [slots[k].scatter_update(tf.IndexedSlices(v, idx))
           for k, v in sorted(new.items())]
    if type(self).STEP_GIVES_WEIGHTS:
      ops.append(var.scatter_update(tf.IndexedSlices(delta, idx)))
    else:
      ops.append(var.scatter_sub(tf.IndexedSlices(delta, idx)))
    return tf.group(ops) if not tf.executing_eagerly() else None


def _AcceleratorOf(cls):
  """(accelerator, None) for `cls`, or (None, why it has none).

  A subclass that changes `_Step` or `_Scalars` below the class that named
  the accelerator would silently get the parent's numbers from its kernel,
  so it keeps the pure-TF path.
  """
  owner = next(k for k in cls.__mro__ if 'ACCELERATOR' in vars(k))
  if cls.ACCELERATOR is None:
    return None, 'no fused kernel for this rule'
  for name in ('_Step', '_Scalars', '_BeginUpdate'):
    if getattr(cls, name) is not getattr(owner, name):
      return None, '%s overrides %s of %s' % (cls.__name__, name,
                                              owner.__name__)
  return accelerators.ACCELERATORS[cls.ACCELERATOR], None


def DefineLingvoBaseParams(p):
  """Defines Lingvo 0.14.2's optimizer.Base params on `p` (in place), so a
  ported config that sets them keeps working: `use_bf16_gradients_ar` must
  stay False (refused at construction); `add_summary_in_apply` (the learner
  reports 'learning_rate') and `clear_variable_scope` have no effect."""
  p.Define('use_bf16_gradients_ar', False, 'Lingvo: all-reduce gradients in '
           'bfloat16. Only False is supported here.')
  p.Define('add_summary_in_apply', True, 'Lingvo: write the rate summary in '
           'Apply. No effect here (see the learner\'s learning_rate metric).')
  p.Define('clear_variable_scope', None, 'Lingvo: clear the TF1 variable '
           'scope in Apply. No effect in TF2.')
  return p


class SGD(BaseOptimizer):
  """Plain gradient descent: w <- w - lr * g (TF's ResourceApplyGradientDescent).

  Lazy sparse update: only the rows present move; the default, as TF1's
  GradientDescentOptimizer that Lingvo wraps (for SGD a lazy and a dense
  update give the same numbers). A gradient scale folds into the kernel's
  alpha = lr * scale (kernels/accelerators.py).
  Source: Lingvo 0.14.2 `lingvo/core/optimizer.py` SGD (no params of its
  own; the base params differ, docs/lingvo.md).
  """

  SUPPORTS_LAZY_SPARSE = True
  ELEMENTWISE = True
  ACCELERATOR = 'sgd'

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse SGD.
    return p

  def _Scalars(self, update, dtype):
    del dtype  # lr stays float32: the kernel's alpha = cast(lr * scale).
    return NestedMap(lr=update.lr)

  def _Step(self, s, w, g, slots):
    del w, slots
    return tf.cast(s.lr, g.dtype) * g, {}
