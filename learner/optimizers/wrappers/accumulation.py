"""GradientAccumulation: apply one update every `num_batches` micro-batches.

MoXing's `'batch_gradients'` wrapper (`get_optimizer_wrapper_fn`), with the
weighting of a large batch: every micro-batch adds `weight * grad` and
`weight` (its loss weight: examples or tokens) into accumulators, and the
update applied on the micro-step that completes the window uses
`sum(weight * grad) / sum(weight)`, exactly the gradient of one step on the
union batch (acceptance case C-accum-weighted).

One entry point, `AccumulateOrApply`, runs a micro-step (docs/DESIGN.md,
"One training step, as data"); the Learner calls it once per micro-step:

  1. The micro-batch's gradient is checked (one L2Loss pass): a finite one
     is added as `weight * grad` (with its weight), a non-finite one is
     dropped and counted in `num_dropped_microbatches`. The micro-step
     counter advances.
  2. On the micro-step that completes the window only, the caller's
     `apply_window(window)` gets a `Window`: the sums sum(weight * grad),
     sum(weight), 1 / sum(weight) and the window's dropped count; the
     Learner checks, clips and scales that gradient once and applies it
     through `window.Apply` / `window.ApplyScaled` (the inner optimizer: its
     `num_updates` advances once per applied update). Then the window is
     emptied, also when the caller skipped the update (it is discarded).
  3. Any other micro-step returns the caller's `when_accumulating()`
     outputs (the Learner's zeros, reported with weight 0).

`Apply(lr, var_grads)` is the same entry point with an `apply_window` that
only averages and applies (no clipping, no all-reduce), for standalone use.

Under tf.distribute, `sync_on_apply=True` (the default) keeps the
accumulators per replica (`tf.VariableSynchronization.ON_READ`), so a
micro-step that only accumulates communicates nothing and the sums are
all-reduced once, on the applying micro-step. `sync_on_apply=False`
keeps mirrored accumulators and every micro-batch is all-reduced before it
is added: the same result with num_batches times the traffic. In both, a
non-finite shard (one replica's part of a micro-batch) is dropped on its
replica only, so the update is sum(weight * grad) / sum(weight) over the
window's finite shards, and `num_dropped_microbatches` counts dropped shards,
the same value on every replica (docs/distributed.md, "Gradient accumulation
under a strategy", says exactly when this equals single-process training). A
shard with weight 0 (no example) adds nothing and is not counted as
dropped, even with a NaN gradient. The all-reduce itself is the caller's
(`all_reduce`, the Learner's cross_replica.WeightedAllReduce); this module
only decides when it runs.

The accumulators, the accumulated weight and the micro-step counter are
variables of this layer, so `tf.train.Checkpoint` saves a partial window.
Under ZeRO-1 with sync_on_apply=False (`ShardAccumulatorsWith`,
learner/optimizers/sharded_wrappers.py) each replica adds only its flat
slice of the all-reduced sums (1/N of the accumulators, plus < N padding
elements) and the window's sums are all-gathered once, on the applying
micro-step; they are saved under the same keys and shapes.
"""

from absl import logging
import tensorflow as tf

from learner.optimizers import base as base_optimizer
from learner.optimizers import kernels
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper
from params import checks
from schedules import base_schedule


class GradientAccumulation(wrapper.BaseWrapper):
  """Accumulates weighted micro-batch gradients; the inner optimizer applies.

  Differs from Lingvo's Accumulator (docs/lingvo.md): the learner clips,
  regularizes and checks the window's weighted mean once per update, and a
  non-finite micro-batch is dropped from the window; Lingvo does all that
  per micro-batch and applies the unweighted mean.

  Raises:
    ValueError: at construction, if `optimizer` is not optimizer params, is
      itself a GradientAccumulation ("accumulation must be the outermost
      wrapper"), if `num_batches` < 1, or if `decoupled_weight_decay` is set
      on the wrapper (set it on the inner optimizer).
  """

  IS_ACCUMULATION = True
  # True for a window that ends on weight, not on a count (DynamicAccumulator):
  # its steps per update are not known ahead, so the trainer cannot turn a
  # schedule length in examples into updates (task_params.ResolveDurations).
  # Declared here, not on BaseOptimizer: only accumulations are asked.
  WINDOW_ENDS_ON_WEIGHT = False
  INNER_OPTIMIZER_DOC = (
      'Params of the inner optimizer that applies the averaged gradient once '
      'per window (e.g. Momentum, or Lars around it).')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'gradient_accumulation'
    p.Define('num_batches', 1,
             'Micro-batches per applied update (window length, in train '
             'steps); >= 1.')
    p.Define(
        'sync_on_apply', True,
        'Under tf.distribute: True keeps per-replica accumulators and '
        'all-reduces once per applied update; False all-reduces every '
        'micro-batch (num_batches times the traffic).')
    p.Define(
        'num_batches_schedule', None,
        'Optional BaseSchedule params: a batch-size ramp. The window that '
        'starts after u applied updates is max(1, round(Value(u))) '
        'micro-batches long (e.g. PiecewiseConstantSchedule(boundaries='
        '[100], values=[2, 8])); num_batches is then only what '
        'MicroBatchesPerUpdate() reports (give the final count).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['num_batches'] = checks.Int(
        1, example=4, why='micro-batches per applied update')
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.sync_on_apply:
      per_replica = dict(synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
    else:
      per_replica = {}
    self._per_replica = per_replica
    self._micro_step = self.CreateVariable(
        'micro_step', [], init=0, trainable=False, dtype=tf.int64)
    self._num_dropped = self.CreateVariable(
        'num_dropped_microbatches', [], init=0, trainable=False,
        dtype=tf.int64)
    self._weight_sum = self.CreateVariable(
        'accum_weight', [], init=0.0, trainable=False, dtype=tf.float32,
        **per_replica)
    self._window_dropped = self.CreateVariable(
        'window_dropped', [], init=0.0, trainable=False, dtype=tf.float32,
        **per_replica)
    self._accums = {}
    self._warned_sync = False
    # A subclass that closes windows on weight has no num_batches_schedule.
    schedule = (p.Get('num_batches_schedule')
                if 'num_batches_schedule' in p else None)
    if schedule is not None:
      cls = getattr(schedule, 'cls', None)
      if not (isinstance(cls, type) and
              issubclass(cls, base_schedule.BaseSchedule)):
        raise ValueError(
            '%s: num_batches_schedule=%r is not a schedule\'s params. Give '
            'e.g. schedules.PiecewiseConstantSchedule.Params().Set('
            'boundaries=[100], values=[2, 8]), or None for a fixed '
            'num_batches.' % (self.path, cls or schedule))
      self.CreateChild('num_batches_schedule', schedule)

  # ---- properties --------------------------------------------------------

  @property
  def num_updates(self):
    """int64 variable: updates applied (the inner optimizer's counter)."""
    return self.optimizer.num_updates

  @classmethod
  def MicroBatchesPerUpdateOf(cls, params):
    """`num_batches`: global steps per applied update (a Python int).

    With `num_batches_schedule` the window length changes with the update
    count (`WindowLength`); this stays `num_batches`, which the trainer's
    schedule-length checks use.
    """
    return int(params.num_batches)

  def WindowLength(self):
    """int64 scalar: micro-batches in the current window.

    `num_batches`, or with `num_batches_schedule` max(1, round(Value(u)))
    at u = num_updates, the applied updates before this window (constant
    through a window, since only the window's last micro-step applies; a
    resume mid-window restores u and the micro-step, so it is exact).
    """
    if self.params.num_batches_schedule is None:
      return tf.constant(self.params.num_batches, tf.int64)
    value = self.num_batches_schedule.Value(self.num_updates)
    return tf.maximum(tf.cast(tf.round(value), tf.int64), 1)

  @property
  def micro_step(self):
    """int64 variable: micro-batches in the current window (0..num_batches)."""
    return self._micro_step

  @property
  def num_dropped_microbatches(self):
    """int64 variable: non-finite micro-batch shards dropped so far.

    A shard is one replica's part of one micro-batch (the micro-batch itself
    with one replica). With one replica it counts at the dropping
    micro-step; under R > 1 replicas it counts on the micro-step that
    completes the window, by the window's count summed over the replicas,
    so every replica holds the same value (equal to the one-replica count
    at every window boundary).
    """
    return self._num_dropped

  @property
  def accumulated_weight(self):
    """float32 variable: sum of the weights added in this window."""
    return self._weight_sum

  def GetAccumulator(self, var):
    """The accumulator variable (sum of weight*grad) of a bound variable."""
    return self._accums[var_grad_lib.VarName(var)]

  def Accumulators(self):
    """Every accumulator variable, in bind order (full size per replica);
    sliced under ZeRO-1 (`ShardAccumulatorsWith`): the ON_READ [shard]
    variable of each dtype."""
    if self._AccumShards() is not None:
      return [v for _, v in sorted(self.__dict__['_accum_shards'].items())]
    return list(self._accums.values())

  @property
  def vars(self):
    """As BaseLayer's, without the checkpointed views of sliced
    accumulators (ZeRO-1; not variables)."""
    out = super().vars
    for key, value in self._private_vars.items():
      if not isinstance(value, tf.Variable):
        del out[key]
    return out

  # ---- binding -----------------------------------------------------------

  def ShardAccumulatorsWith(self, shards):
    """sync_on_apply=False under ZeRO-1: from `Bind` on, each replica keeps
    only its flat slice of the (all-reduced) sums, in the rule's layout
    (sharded_wrappers.WrapperShards; not tracked); the window's sums are
    all-gathered once, on the applying micro-step."""
    self.__dict__['_accum_sharding'] = shards

  def _AccumShards(self):
    """The WrapperShards holding the sliced sums, or None (whole sums)."""
    shards = self.__dict__.get('_accum_sharding')
    return shards if shards is not None and shards.sharded else None

  def Bind(self, vmap):
    """Binds the inner optimizer and creates one accumulator per variable
    (under ZeRO-1 with sync_on_apply=False: checkpointed views of the
    replicas' slices, under the same keys)."""
    super().Bind(vmap)
    sharding = self._AccumShards()
    if sharding is not None and not self._accums:
      self.__dict__['_accum_shards'], views = sharding.CreateCopies(
          self.path, 'accum', from_weights=False)
      for name in self.bound_variables:
        key = var_grad_lib.SanitizedName(name)
        # The unsharded accumulator's name (checkpointer's variable_names).
        views[key].name = '%s/accum_%s' % (self.path, key)
        self._private_vars['accum_' + key] = self._accums[name] = views[key]
    for name, var in self.bound_variables.items():
      if name in self._accums:
        continue
      self._accums[name] = self.CreateVariable(
          'accum_' + var_grad_lib.SanitizedName(name), var.shape.as_list(),
          init=0.0, trainable=False, dtype=var.dtype, **self._per_replica)
    strategy = tf.distribute.get_strategy()
    if strategy.num_replicas_in_sync > 1:
      self.WarnIfSyncEveryStep()
    return self

  def WarnIfSyncEveryStep(self):
    """Logs once that sync_on_apply=False communicates every micro-step."""
    if self.params.sync_on_apply or self._warned_sync:
      return
    self._warned_sync = True
    logging.warning(
        '%s: %s(sync_on_apply=False) under a distribution strategy '
        'all-reduces the gradient of every micro-batch (one all-reduce per '
        'micro-batch instead of one per update). Set sync_on_apply=True to '
        'communicate only on the micro-step that applies.', self.path,
        type(self).__name__)

  # ---- the protocol the learner drives -------------------------------------

  def StepWeight(self, metrics, loss_weight):
    """None: a window of fixed length counts micro-steps, not weight.

    The Learner passes what this returns to `AccumulateOrApply` as
    `step_weight` (DynamicAccumulator reads its weight from `metrics`).
    """
    del metrics, loss_weight
    return None

  def Accumulate(self, weighted_grads, weight, is_finite, num_dropped=None):
    """Adds one micro-batch, or drops it if it is not finite.

    Args:
      weighted_grads: list of (var, weight * grad) pairs; grads are Tensors
        (tf.IndexedSlices are densified) of the variable's shape.
      weight: float32 scalar, the micro-batch's loss weight (summed over
        replicas when the caller all-reduced the grads).
      is_finite: bool scalar; False drops the micro-batch and counts it.
      num_dropped: None, or a float32 scalar: the caller already removed
        that many non-finite shards from `weighted_grads` and `weight` (the
        all-reduced count under sync_on_apply=False); the rest is added and
        the count goes into the window's dropped count.

    Returns:
      The micro-step counter's new value (int64 scalar tensor).
    """
    weight = tf.cast(weight, tf.float32)
    if num_dropped is not None:
      self._window_dropped.assign_add(tf.cast(num_dropped, tf.float32))

    def _Add():
      sharding = self._AccumShards()
      if sharding is not None:  # This replica's slice only.
        sharding.AddSlices(self.__dict__['_accum_shards'], {
            var_grad_lib.VarName(v): tf.convert_to_tensor(wg)
            for v, wg in weighted_grads})
      else:
        for var, wg in weighted_grads:
          acc = self._accums[var_grad_lib.VarName(var)]
          acc.assign_add(tf.cast(tf.convert_to_tensor(wg), acc.dtype))
      self._weight_sum.assign_add(weight)
      return tf.constant(True)

    tf.cond(is_finite, _Add, lambda: self._DropMicroBatch(weight))
    return self._micro_step.assign_add(1)

  def AccumulateScaled(self, var_grads, weight, is_finite):
    """Adds `weight * grad` of one micro-batch, or drops it if not finite.

    The same result as `Accumulate` with pre-multiplied gradients, without
    materialising them: each accumulator is updated by one fused kernel,
    `acc += weight * g` (TF's ResourceApplyGradientDescent with alpha =
    -weight), 12 B/param. Inside a replica context the local accumulator is
    updated (per-replica accumulators under sync_on_apply); in a strategy's
    cross-replica context it falls back to `Accumulate`.

    Args:
      var_grads: list of (var, grad) pairs; grads are dense Tensors of the
        variable's shape (tf.IndexedSlices are densified).
      weight: float scalar, the micro-batch's loss weight.
      is_finite: bool scalar; False drops the micro-batch and counts it.

    Returns:
      The micro-step counter's new value (int64 scalar tensor).
    """
    weight = tf.cast(weight, tf.float32)
    if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
      return self.Accumulate(
          [(v, tf.convert_to_tensor(g) * tf.cast(weight, g.dtype))
           for v, g in var_grads], weight, is_finite)

    def _Add():
      for var, g in var_grads:
        acc = self._accums[var_grad_lib.VarName(var)]
        g = tf.convert_to_tensor(g)
        if g.dtype != acc.dtype:
          g = tf.cast(g, acc.dtype)
        tf.raw_ops.ResourceApplyGradientDescent(
            var=acc.handle, alpha=tf.cast(-weight, acc.dtype), delta=g,
            use_locking=False)
      self._weight_sum.assign_add(weight)
      return tf.constant(True)

    CondAsCall(is_finite, _Add,
                              lambda: self._DropMicroBatch(weight))
    return self._micro_step.assign_add(1)

  def _SelectSums(self, var_grads, weight, is_finite):
    """[where(is_finite, acc - (-weight) * g, acc)] for (var, g) pairs.

    Under XLA, the micro-batch added (or dropped) as a select: one fused
    loop, `_Add`'s numbers (x - (-w) * g is ResourceApplyGradientDescent's
    with alpha = -w); a dropped micro-batch leaves the sums bit for bit.
    """
    sums = []
    for var, g in var_grads:
      acc = self._accums[var_grad_lib.VarName(var)]
      g = tf.convert_to_tensor(g)
      if g.dtype != acc.dtype:
        g = tf.cast(g, acc.dtype)
      value = acc.read_value()
      sums.append(tf.where(is_finite,
                           value - tf.cast(-weight, acc.dtype) * g, value))
    return sums

  def _CountMicroBatch(self, weight, is_finite):
    """The scalars of `_Add` / `_DropMicroBatch`, as selects."""
    counted = tf.logical_and(tf.logical_not(is_finite), weight > 0.0)
    self._weight_sum.assign_add(tf.where(is_finite, weight, 0.0))
    if _CountsAtOnce():
      self._num_dropped.assign_add(tf.cast(counted, tf.int64))
    self._window_dropped.assign_add(tf.cast(counted, tf.float32))

  def _AccumulateChecked(self, variables, grads, weight):
    """Checks one micro-batch and adds `weight * grad` if it is finite.

    One fused op (learner/optimizers/kernels: a finite-check pass, then
    acc += weight * g, the same numbers as `AccumulateScaled`) when it can
    run; else `kernels.SumOfSquaresFinite` and `AccumulateScaled`.

    Args:
      variables: bound variables; grads: aligned dense Tensors.
      weight: float32 scalar.

    Returns:
      The micro-step counter's new value (int64 scalar tensor).
    """
    accs = [self._accums[var_grad_lib.VarName(v)] for v in variables]
    finite = kernels.Accumulate(accs, grads, weight)
    if finite is None:
      return self.AccumulateScaled(list(zip(variables, grads)), weight,
                                   kernels.SumOfSquaresFinite(grads))

    def _Added():
      self._weight_sum.assign_add(weight)
      return tf.constant(True)

    CondAsCall(finite, _Added,
                              lambda: self._DropMicroBatch(weight))
    return self._micro_step.assign_add(1)

  def _DropMicroBatch(self, weight):
    """Counts one dropped (non-finite) micro-batch; returns False.

    An empty one (weight <= 0: no example, e.g. a replica's share of a
    partial last batch, whose mean is NaN) is not counted: it adds
    nothing and weight 0 either way.
    """
    nonempty = weight > 0.0
    if _CountsAtOnce():
      self._num_dropped.assign_add(tf.cast(nonempty, tf.int64))
    self._window_dropped.assign_add(tf.cast(nonempty, tf.float32))
    return tf.constant(False)

  def IsApplyStep(self, micro_step=None):
    """True (bool scalar) when the window is complete after Accumulate."""
    if micro_step is None:
      micro_step = self._micro_step.read_value()
    return micro_step >= self.WindowLength()

  def AccumulatedSums(self, variables):
    """Reads the window: (sums, weight_sum, num_dropped_in_window).

    Args:
      variables: list of bound variables.

    Returns:
      sums: list like `variables` of sum(weight * grad) (local to this
        replica under sync_on_apply); weight_sum and num_dropped_in_window:
        float32 scalars.
    """
    sharding = self._AccumShards()
    if sharding is not None:
      full = sharding.Gathered(self.__dict__['_accum_shards'])
      sums = [full[var_grad_lib.VarName(v)] for v in variables]
    else:
      sums = [self._accums[var_grad_lib.VarName(v)].read_value()
              for v in variables]
    return (sums, self._weight_sum.read_value(),
            self._window_dropped.read_value())

  def _RuntimeZero(self):
    """float32 0 computed at run time from the micro-step counter (>= 0).

    tf.zeros of a static shape is folded into a graph constant by grappler
    (up to 10 MB per tensor), which the assigned variable would then alias,
    so the next in-place add copies every accumulator (and the constants
    hold another copy of them); grappler cannot fold this one.
    """
    return tf.cast(tf.minimum(self._micro_step.read_value(), 0), tf.float32)

  def Zero(self, accumulators=True):
    """Empties the window: accumulators, weight, counter back to zero
    (`accumulators=False`: the scalars only; the caller zeroes them)."""
    zero = self._RuntimeZero()
    accs = self.Accumulators() if accumulators else []
    # In place when the fused op can run (no fresh buffer per accumulator).
    fused = kernels.Zero(accs) if accs else None
    ops = ([fused] if fused is not None else
           [_AssignZero(acc, zero) for acc in accs])
    ops += [_AssignZero(self._weight_sum, zero),
            _AssignZero(self._window_dropped, zero),
            _AssignZero(self._micro_step)]
    return None if tf.executing_eagerly() else tf.group(ops)

  def Reset(self):
    """Discards a partial window (e.g. at an epoch boundary).

    Accumulators, accumulated weight and the micro-step counter become 0;
    counters of dropped micro-batches and updates are kept. Works eagerly,
    in tf.function, and in a strategy's cross-replica context.
    """
    return self.Zero()

  # ---- the entry point ----------------------------------------------------

  @tf.autograph.experimental.do_not_convert
  def AccumulateOrApply(self, var_grads, weight, apply_window,
                        when_accumulating, all_reduce=None, step_weight=None):
    """One micro-step: adds this micro-batch; on the window's last, applies.

    Args:
      var_grads: NestedMap of VarGrad over bound variables, every grad set
        (a Tensor or tf.IndexedSlices, densified here), unscaled.
      weight: float scalar, the micro-batch's loss weight (per replica).
      apply_window: callable(Window) -> a list of tensors, called once, on
        the micro-step that completes the window; it applies the update
        (through `window.Apply` / `window.ApplyScaled`) or skips it. The
        window is emptied after its outputs are computed.
      when_accumulating: zero-argument callable returning tensors of the
        same structure and dtypes, the outputs of any other micro-step.
      all_reduce: None (one replica, or standalone use), or the caller's
        `fn(tensors, weight, extras) -> (summed, weight_sum, extras)`
        summing over the replicas in sync (cross_replica.WeightedAllReduce).
        sync_on_apply=True calls it once, on the window's sums, inside the
        applying branch; False calls it on every micro-batch's weight*grad
        (and warns once).
      step_weight: what this micro-step counts toward the end of a window
        that closes on weight (DynamicAccumulator; `StepWeight`); a window
        of fixed length ignores it.

    Returns:
      (outputs, is_apply): the outputs of the branch taken (a list, or the
      single tensor), and a bool scalar, True on the applying micro-step.

    Both branches run in one tf.cond that is called, not lowered
    (`CondAsCall`): a micro-step that only accumulates runs no op of the
    applying branch, and with sync_on_apply contains no collective.
    """
    del step_weight  # The window has a fixed length here.
    weight = tf.cast(weight, tf.float32)
    vgs = var_grads.Flatten()
    variables = [vg.var for vg in vgs]
    dense = [tf.convert_to_tensor(vg.grad) for vg in vgs]
    if all_reduce is not None and not self.params.sync_on_apply:
      finite = kernels.SumOfSquaresFinite(dense)
      self.WarnIfSyncEveryStep()
      # Per-shard dropping, as with sync_on_apply=True: a non-finite shard
      # contributes zeros and weight 0; the finite shards are kept. An
      # empty shard (weight 0) is not counted as dropped.
      bad = tf.cast(tf.logical_and(tf.logical_not(finite), weight > 0.0),
                    tf.float32)
      weighted = [tf.where(finite, g * tf.cast(weight, g.dtype),
                           tf.zeros_like(g)) for g in dense]
      weight = tf.where(finite, weight, 0.0)
      weighted, weight, (bad,) = all_reduce(weighted, weight, [bad])
      micro_step = self.Accumulate(list(zip(variables, weighted)), weight,
                                   tf.constant(True), num_dropped=bad)
    elif kernels.InXla():
      return self._AccumulateOrApplyXla(var_grads, dense, weight,
                                        apply_window, when_accumulating,
                                        all_reduce)
    else:
      micro_step = self._AccumulateChecked(variables, dense, weight)
    is_apply = self.IsApplyStep(micro_step)
    outputs = CondAsCall(
        is_apply, self._ApplyWindowFn(var_grads, apply_window, all_reduce),
        when_accumulating)
    return outputs, is_apply

  def _ApplyWindowFn(self, var_grads, apply_window, all_reduce,
                     sums_fn=None):
    """The applying branch: `apply_window` on the window, then the window
    is emptied (the accumulators too unless `sums_fn` gives the sums)."""
    sums_reduce = all_reduce if self.params.sync_on_apply else None

    def _ApplyWindow():
      sums = sums_fn() if sums_fn else None
      outputs = apply_window(self._Window(var_grads, sums_reduce, sums))
      flat = tf.nest.flatten(outputs)
      with tf.control_dependencies(flat):
        self.Zero(accumulators=sums_fn is None)
      return tf.nest.pack_sequence_as(outputs, [tf.identity(x) for x in flat])

    return _ApplyWindow

  def _AccumulateOrApplyXla(self, var_grads, dense, weight, apply_window,
                            when_accumulating, all_reduce):
    """`AccumulateOrApply` under XLA: the accumulators outside the cond.

    The applying branch computes the window's sums from the accumulators
    and this micro-batch (`_SelectSums`) without writing them; after the
    cond one select writes every accumulator in place: 0 when the window
    was applied, else acc + weight * g (or acc, dropped). The cond then
    writes no accumulator, so no branch passes one through, which XLA:CPU
    would copy (tests/test_learner/test_learner_xla.py). 12 B/param per
    micro-step; the applying micro-step reads the accumulators and g once
    more.
    """
    pairs = [(vg.var, g) for vg, g in zip(var_grads.Flatten(), dense)]
    finite = kernels.SumOfSquaresFinite(dense)
    self._CountMicroBatch(weight, finite)
    is_apply = self.IsApplyStep(self._micro_step.assign_add(1))
    outputs = CondAsCall(
        is_apply, self._ApplyWindowFn(
            var_grads, apply_window, all_reduce,
            sums_fn=lambda: self._SelectSums(pairs, weight, finite)),
        when_accumulating)
    # The zero is read from the micro-step counter after the cond (which
    # the applying branch resets): the select depends on the cond's
    # outputs, so its in-place write cannot overtake that branch's reads.
    zero = self._RuntimeZero()
    for (var, _), new in zip(pairs, self._SelectSums(pairs, weight, finite)):
      acc = self._accums[var_grad_lib.VarName(var)]
      acc.assign(tf.where(is_apply, tf.cast(zero, acc.dtype), new))
    return outputs, is_apply

  def _Window(self, var_grads, all_reduce, sums=None):
    """The completed window's Window (sums all-reduced if `all_reduce`);
    `sums`, if given, in place of the accumulators' values."""
    vgs = var_grads.Flatten()
    read, wsum, dropped = self.AccumulatedSums(
        [vg.var for vg in vgs] if sums is None else [])
    sums = read if sums is None else sums
    if all_reduce is not None:
      sums, wsum, (dropped,) = all_reduce(sums, wsum, [dropped])
    if not _CountsAtOnce():
      # Under replicas the run's counter moves here, by the window's count
      # of dropped shards summed over the replicas: one value everywhere.
      self._num_dropped.assign_add(tf.cast(dropped, tf.int64))
    window_grads = var_grads.Pack(
        [var_grad_lib.VarGrad(vg.var, s) for vg, s in zip(vgs, sums)])
    return Window(window_grads, wsum, dropped, self.optimizer)

  # ---- standalone use ----------------------------------------------------

  @tf.autograph.experimental.do_not_convert
  def Apply(self, lr, var_grads, weight=1.0):
    """Runs one micro-step without a learner: the entry point, averaging only.

    Args:
      lr: float32 scalar, the rate the inner optimizer uses when it applies.
      var_grads: NestedMap of VarGrad (grad None = no gradient).
      weight: the micro-batch's loss weight (float scalar).

    Returns:
      The update op in graph mode, None eagerly.

    No clipping, no all-reduce: use it through a Learner for those. A
    window whose micro-batches were all dropped applies nothing.
    """
    var_grads = var_grads.Filter(lambda vg: vg.grad is not None)
    for vg in var_grads.Flatten():
      self._CheckBound(vg.var)

    def _ApplyWindow(window):

      def _Inner():
        window.ApplyScaled(lr, window.var_grads, window.grad_scale)
        return tf.constant(True)

      return [tf.cond(window.weight_sum > 0, _Inner,
                      lambda: tf.constant(False))]

    self.AccumulateOrApply(var_grads, weight, _ApplyWindow,
                           lambda: [tf.constant(False)])
    return None if tf.executing_eagerly() else tf.no_op()


class Window:
  """A completed window, as `AccumulateOrApply` hands it to `apply_window`.

  Attributes:
    var_grads: NestedMap like the micro-step's var_grads (same keys) whose
      grads are the window's sums sum(weight * grad), float like each
      variable (summed over replicas when an all_reduce was given).
    weight_sum: float32 scalar sum(weight) of the added micro-batches; 0
      when every one was dropped.
    grad_scale: float32 scalar 1 / weight_sum (0 when weight_sum is 0): the
      window's gradient is grad_scale * sums.
    num_dropped: float32 scalar, micro-batches of this window dropped as
      non-finite.
  """

  def __init__(self, var_grads, weight_sum, num_dropped, inner):
    self.var_grads = var_grads
    self.weight_sum = weight_sum
    self.grad_scale = tf.math.divide_no_nan(tf.constant(1.0), weight_sum)
    self.num_dropped = num_dropped
    self._inner = inner

  def Apply(self, lr, var_grads, _measure=None):
    """The inner optimizer applies `var_grads` (one update); `_measure` as
    in BaseOptimizer.Apply."""
    if _measure is None:
      return self._inner.Apply(lr, var_grads)
    return self._inner.Apply(lr, var_grads, _measure=_measure)

  def ApplyScaled(self, lr, var_grads, grad_scale, _measure=None):
    """The inner optimizer applies `grad_scale * var_grads` (one update),
    folding the scale into its kernel where it can."""
    if _measure is None:
      return self._inner.ApplyScaled(lr, var_grads, grad_scale)
    return self._inner.ApplyScaled(lr, var_grads, grad_scale,
                                   _measure=_measure)

  def FusedApplyReason(self, vgs):
    """The inner optimizer's (BaseOptimizer.FusedApplyReason), or why not."""
    inner = getattr(self._inner, 'FusedApplyReason', None)
    return inner(vgs) if inner else 'no fused kernel for this rule'


def _CountsAtOnce():
  """True with one replica: a dropped micro-batch is counted when dropped.

  Under several replicas in sync it is counted on the window's applying
  micro-step instead (`_Window`), from the all-reduced count, so that
  `num_dropped_microbatches` holds the same value on every replica.
  """
  return tf.distribute.get_strategy().num_replicas_in_sync == 1


def _AssignZero(var, zero=None):
  """Sets `var` to zeros; in cross-replica context, each replica's copy.

  Args:
    var: a variable (possibly distributed).
    zero: optional float32 scalar tensor equal to 0 computed at run time;
      the zeros are then `tf.fill(shape, zero)`, a fresh buffer each step.
  """

  def _Zeros(v):
    if zero is None:
      return tf.zeros(v.shape, v.dtype)
    return tf.fill(v.shape, tf.cast(zero, v.dtype))

  if (tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context()
      and hasattr(var, 'values')):
    return tf.group([v.assign(_Zeros(v)) for v in var.values])
  return var.assign(_Zeros(var))


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
