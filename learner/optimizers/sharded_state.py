"""ZeRO-1: the optimizer state sharded across the replicas of a strategy.

`Learner.shard_optimizer_state=True` (docs/distributed.md, "Sharded
optimizer state (ZeRO-1)"): under a tf.distribute strategy with N > 1
replicas in sync, each replica keeps and updates 1/N of its learner's
optimizer slots and the updated weights are gathered back, so every
replica ends the step with the unsharded run's full weights. Source:
Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", SC 2020 (stage 1: optimizer state partitioning).

Partition (flat slices): the learner's variables of one dtype, in bind
order, are one flat vector of n elements, zero padded to N * s (s =
ceil(n / N)); replica r owns elements [r s, (r + 1) s): static slices, and
the padding (< N elements) is the only imbalance.

One update, on replica r (inside `strategy.run`, no merge_call):
  1. The learner's pipeline runs as unsharded on the all-reduced full
     gradient (one packed all-reduce, learner/cross_replica.py): norms,
     clip, the skip decision agreed over the replicas, L1/L2, all exact.
     Or, when it can, on g_r reduce-scattered (update_step.ScatterReason).
  2. The gradient shard g_r (unless given) and the weight shard w_r are
     sliced out of the full gradients and weights (static slices).
  3. The rule's `Apply` (BaseOptimizer: the rule's `_Step`, or its raw
     op, on one variable) updates a per-replica shard variable holding
     w_r, with slots of shape [s] (ON_READ variables: one copy per device,
     each replica's own shard). The rule asks this module through its
     public `UseStateSharding` contract: `Bind` and `Apply` below.
  4. One all-gather (`CollectiveGatherV2`) of the updated w_r gives the
     full flat weights; each variable is written from its slice.

Checkpoints: each slot of each variable is saved under the key and with
the full shape the unsharded slot has (`_SlotView` gathers the replicas'
shards at save and slices them at restore), so a checkpoint restores on
any replica count and the evaler and export read it as any other.

8-bit state (`slot_dtype=tf.int8`, kernels/quantized_state.py): a replica
quantizes its [s] shard in blocks of slot_block_size inside the shard. The
checkpoint holds per variable each element's code and its block's absmax
(`_QuantizedSlotView`: keys `<slot>/.ATTRIBUTES/codes`, `.../absmax`), so a
restore on the same replica count is bit-identical, one on another count
requantizes once; it restores under ZeRO-1 only (unsharded keys differ).

`ELEMENTWISE` rules are sliced (schedule-free's x, z too), `WHOLE_TENSOR`
ones homed per variable (home_sharding.py).
Wrappers between an optional outermost GradientAccumulation and the rule:
`SHARDS_WITH_RULE` (Ema, Lookahead, SWA: copies in the flat layout,
sharded_wrappers.py) or `SHARDS_INNER` (Lars). Others: refused in one line.
"""

import contextlib
import math
import re
import weakref

import tensorflow as tf

from learner.optimizers import cautious as cautious_lib
from learner.optimizers import home_sharding
from learner.optimizers import rules as rules_lib
from learner.optimizers.kernels import low_precision
from learner.optimizers.kernels import quantized_state
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper as wrapper_lib
from params import NestedMap

SHARDED_REASON = 'sharded optimizer state (ZeRO-1)'


def RuleToShard(path, optimizer):
  """The update rule a learner shards, below its shardable wrappers.

  The chain: an optional outermost GradientAccumulation, then wrappers that
  declare `SHARDS_WITH_RULE` (Ema, Lookahead, SWA: their copies move
  elementwise, sharded_wrappers.py) or `SHARDS_INNER` (Lars), then the rule.

  Args:
    path: the learner's path, for the message.
    optimizer: the learner's built optimizer.

  Returns:
    The BaseOptimizer whose slots get sharded: an elementwise rule (flat
    slices) or a WHOLE_TENSOR rule (home replicas, home_sharding.py).

  Raises:
    ValueError: one line naming the optimizer that cannot be sharded and
      why (a wrapper that declares neither flag; a rule that is neither
      ELEMENTWISE nor WHOLE_TENSOR; averaging copies above a WHOLE_TENSOR
      rule, which the flat layout they share cannot hold).
  """
  wrappers, rule = Chain(optimizer)
  cls = type(rule)
  why = None
  if rule.inner_optimizers:
    why = 'a wrapper whose own state is not sharded'
  elif not (cls.ELEMENTWISE or cls.WHOLE_TENSOR):
    why = ('it declares neither ELEMENTWISE nor WHOLE_TENSOR (its step reads '
           'more than one variable, or its state changes outside the step)')
  elif wrappers and not cls.ELEMENTWISE:
    why = ('%s keeps its copies in the flat slices of an elementwise rule, '
           'and this rule is homed whole (WHOLE_TENSOR)' %
           type(wrappers[0]).__name__)
  if why:
    raise ValueError('%s: shard_optimizer_state=True with %s: %s. Set '
                     'shard_optimizer_state=False.' % (path, cls.__name__,
                                                       why))
  return rule


def Chain(optimizer):
  """([the wrappers that declare SHARDS_WITH_RULE, outermost first], the
  first other optimizer that is not a SHARDS_INNER wrapper) below an
  optional outermost GradientAccumulation.
  """
  node = optimizer
  if type(node).IS_ACCUMULATION:
    node = node.optimizer
  wrappers = []
  while node.inner_optimizers:
    if type(node).SHARDS_WITH_RULE:
      wrappers.append(node)
    elif not (isinstance(node, wrapper_lib.BaseWrapper) and
              type(node).SHARDS_INNER):
      break
    node = node.optimizer
  return wrappers, node


def ShardableRuleNames():
  """The registered rules (rules.RULES) sliced by flat slices, by name."""
  return [r.cls.__name__ for r in rules_lib.RULES if r.cls.ELEMENTWISE]


def DefineParams(p):
  """Defines the Learner's ZeRO-1 params on `p` (in place)."""
  p.Define(
      'shard_optimizer_state', False,
      'ZeRO-1: with N > 1 replicas each keeps and updates 1/N of the '
      'optimizer slots (flat slices of ELEMENTWISE rules; a home replica '
      'per variable for WHOLE_TENSOR ones: Muon, Adafactor, LAMB, SOAP) and '
      'the updated weights are all-gathered; the same numbers as False. '
      'Others are refused in one line (docs/distributed.md, "Sharded '
      'optimizer state (ZeRO-1)"). No-op with one replica.')
  p.Define(
      'scatter_clipped_gradients', False,
      'Flat-slice ZeRO-1: reduce-scatter the gradients also when the global '
      'norm clips or tracks them (summed slice by slice: the update may '
      'differ from unsharded in the last bit). False all-reduces them then '
      '(docs/distributed.md, "Gradient communication").')
  return p


def Install(path, optimizer, p, all_gather):
  """Makes the learner's rule shard its state when bound under N > 1.

  The rule keeps a `ShardedState` through its public contract
  (`BaseOptimizer.UseStateSharding`; not tracked, so its variables are not
  checkpointed under names of their own): the rule's `Bind` and `Apply` ask
  it. With one replica at `Bind` the rule binds as usual.

  Args:
    path: the learner's path (messages).
    optimizer: the learner's built optimizer.
    p: the learner's params (shard_optimizer_state, check_finite_weights).
    all_gather: callable(tensor [s]) -> [N * s], the replicas' tensors
      concatenated in replica order (learner/cross_replica.py AllGather;
      passed in: this layer does not import the learner's).

  Returns:
    The ShardedState, or None when shard_optimizer_state is False.

  Raises:
    ValueError: as `RuleToShard`; or check_finite_weights is True (its
      tentative update runs before the replicas agree, so one replica could
      enter the weights' all-gather alone).
  """
  if not p.shard_optimizer_state:
    return None
  if p.check_finite_weights:
    raise ValueError(
        '%s: shard_optimizer_state=True with check_finite_weights=True: the '
        'tentative update of check_finite_weights runs before the replicas '
        'agree to apply, and a sharded update all-gathers the weights, which '
        'needs every replica. Set one of them False.' % path)
  rule = RuleToShard(path, optimizer)
  if type(rule).ELEMENTWISE:  # Eval weights, if any, are slots (gathered).
    state = ShardedState(rule, all_gather)
  else:
    state = home_sharding.HomeState(rule, all_gather)
  rule.UseStateSharding(state)
  return state


class _Layout:
  """Where replica r's shard lies in the flat vector of one dtype.

  Args:
    variables: the bound variables of this dtype, in bind order.
    num_replicas: N.
  """

  def __init__(self, variables, num_replicas):
    self.variables = list(variables)
    self.sizes = [int(v.shape.num_elements()) for v in self.variables]
    self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
    self.total = sum(self.sizes)
    self.num_replicas = num_replicas
    self.shard = max(1, math.ceil(self.total / num_replicas))
    self.strategy = tf.distribute.get_strategy()
    # One tf.function per layout, traced once ([local replicas, shard]).
    self._gather = tf.function(
        lambda rows: home_sharding.GatherLocalRows(self.strategy, rows))

  def LocalReplicaIds(self):
    """The global replica ids of this process's replicas, in local order."""
    ids = self.strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(ctx.replica_id_in_sync_group))
    return [int(i) for i in self.strategy.experimental_local_results(ids)]

  def Pieces(self, replica):
    """[(variable index, start, end)] (flat, in the variable) of the shard
    of `replica`, in order; then the padding length."""
    lo, hi = replica * self.shard, (replica + 1) * self.shard
    pieces = []
    for i, (off, size) in enumerate(zip(self.offsets, self.sizes)):
      a, b = max(lo, off), min(hi, off + size)
      if a < b:
        pieces.append((i, a - off, b - off))
    covered = sum(b - a for _, a, b in pieces)
    return pieces, self.shard - covered

  def Slice(self, tensors, replica):
    """Replica's [shard] slice of the flat concatenation of `tensors`."""
    pieces, pad = self.Pieces(replica)
    parts = [tf.reshape(tensors[i], [-1])[a:b] for i, a, b in pieces]
    dtype = self.variables[0].dtype
    if pad:
      parts.append(tf.zeros([pad], dtype))
    return tf.concat(parts, axis=0) if len(parts) > 1 else parts[0]

  def Gathered(self, copies):
    """The full flat vector of an ON_READ shard variable, from every replica.

    Args:
      copies: this process's copies of the variable ([shard] each), in local
        replica order.

    Returns:
      [N * shard] tensor of the variable's dtype: the replicas' shards
      concatenated in replica order (across workers too: one collective, on
      every worker, which must all call this in the same order).
    """
    return self.GatheredValues([c.read_value() for c in copies])

  def GatheredValues(self, values):
    """As `Gathered`, from this process's [shard] tensors (local order)."""
    return self._gather(tf.stack(values))

  def Split(self, flat):
    """The full tensors of every variable from the [N * shard] vector."""
    return [tf.reshape(flat[off:off + size], v.shape)
            for v, off, size in zip(self.variables, self.offsets, self.sizes)]


class ShardedState(tf.Module):
  """The shard variables of one rule and its sharded `Apply` (module doc).

  Args:
    rule: the elementwise BaseOptimizer whose state is sharded.
    all_gather: as `Install`'s.
  """

  def __init__(self, rule, all_gather):
    super().__init__(name='zero')
    self._all_gather = all_gather
    self._rule_ref = weakref.ref(rule)  # Not a child: the rule owns this.
    self._layouts = {}  # dtype name -> _Layout.
    self._shards = {}  # dtype name -> ON_READ variable [shard].
    self._views = {}  # variable name -> {slot name: _SlotView}.
    self._after_step = []  # AfterStep's moves, outermost first.
    self.copies = {}  # dtype name -> [a wrapper's ON_READ copy shards].
    self.num_replicas = 1

  @property
  def rule(self):
    return self._rule_ref()

  @property
  def sharded(self):
    """True once bound under several replicas."""
    return bool(self._shards)

  REASON = SHARDED_REASON  # Why no fused op runs (FusedApplyReason).

  def CheckRule(self, rule):
    """Raises ValueError unless `rule` is ELEMENTWISE (and not cautious)."""
    if not type(rule).ELEMENTWISE:
      raise ValueError('%s: %s is not an elementwise rule; its state cannot '
                       'be sharded by flat slices.' % (rule.path,
                                                       type(rule).__name__))
    cautious_lib.CheckShardable(rule)

  def Bind(self, rule, variables):
    """Shards the rule's state over the strategy's replicas, when N > 1.

    Called by the rule's `Bind` (BaseOptimizer) with every variable it is
    asked to bind.

    Args:
      rule: the BaseOptimizer given to the constructor.
      variables: list of the variables to bind.

    Returns:
      {variable name: {slot name: checkpointed view of its part of the
      shard slots}} for every variable (the rule keeps them as its slots),
      or None with one replica (the rule creates its own slots).

    Raises:
      ValueError: after sharding, a variable that was not in the first
        Bind; weight_decay_exclude sparing some variables.
    """
    if self._shards:
      _CheckKnown(rule, self._layouts, variables, 'Bind')
      return self._views
    n = tf.distribute.get_strategy().num_replicas_in_sync
    if n <= 1:
      return None
    _CheckNoDecayExclusion(rule, variables)
    self.num_replicas = n
    by_dtype = {}
    for v in variables:
      by_dtype.setdefault(v.dtype.name, []).append(v)
    for dtype, group in sorted(by_dtype.items()):
      layout = _Layout(group, n)
      self._layouts[dtype] = layout
      with tf.init_scope():
        self._shards[dtype] = tf.Variable(
            tf.zeros([layout.shard], group[0].dtype), trainable=False,
            name='%s/zero_shard_%s' % (rule.path, dtype),
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.NONE)
    self._proxies, self.shard_slots = {}, {}
    for dtype, var in sorted(self._shards.items()):
      self._proxies[dtype] = _ShardVar(var)
      self.shard_slots[dtype] = rule.CreateSlotVariables(
          self._proxies[dtype], creator=_PerReplica)
      for name in (low_precision.MASTER_SLOT,) + type(rule).WEIGHT_SLOTS:
        if name in self.shard_slots[dtype]:
          _FillFromWeights(self.shard_slots[dtype][name],
                           self._layouts[dtype])
    self._views = {}
    for dtype, layout in self._layouts.items():
      for i, v in enumerate(layout.variables):
        self._views[var_grad_lib.VarName(v)] = {
            name: _ViewOf(slot, layout, i)
            for name, slot in self.shard_slots[dtype].items()}
    return self._views

  def Apply(self, var_grads, step_fn):
    """The sharded update (module doc, steps 2-4); returns the op.

    Args:
      var_grads: list of VarGrad with a gradient: every bound variable
        (a flat shard spans variables), or one slice per dtype.
      step_fn: callable([(shard var, gradient shard, shard slots)]) ->
        list of ops: the rule's update of one variable, run on each shard.

    Returns:
      The op (None eagerly).

    Raises:
      ValueError: a bound variable has no gradient.
    """
    rule = self.rule
    replica = _ReplicaId()
    sliced = self.UpdateView(var_grads) is not var_grads  # Dtype keys.
    grads = {vg.var.dtype.name if sliced else id(vg.var): vg.grad
             for vg in var_grads}
    _CheckKnown(rule, self._layouts, [] if sliced else [
        vg.var for vg in var_grads], 'Apply')
    items, ops = [], []
    for dtype, layout in sorted(self._layouts.items()):
      if missing := [var_grad_lib.VarName(v) for v in layout.variables
                     if not sliced and id(v) not in grads]:
        raise ValueError(
            '%s: shard_optimizer_state needs a gradient for every bound '
            'variable (a flat shard spans variables); none for %s. Exclude '
            'them with bprop_variable_exclusion.' % (rule.path, missing))
      shard = self._shards[dtype]
      w = layout.Slice([v.read_value() for v in layout.variables], replica)
      g = grads[dtype] if sliced else layout.Slice(
          [tf.convert_to_tensor(grads[id(v)]) for v in layout.variables],
          replica)
      ops.append(tf.raw_ops.AssignVariableOp(resource=shard.handle, value=w))
      items.append((self._proxies[dtype], g, self.shard_slots[dtype]))
    with tf.control_dependencies([o for o in ops if o is not None]):
      done = [o for o in step_fn(items) if o is not None]
    for move in reversed(self._after_step):  # Innermost wrapper first.
      with tf.control_dependencies(done):
        done = done + [o for o in move(replica) if o is not None]
    writes = []
    with tf.control_dependencies(done):
      for dtype, layout in sorted(self._layouts.items()):
        shard = self._shards[dtype]
        mine = tf.raw_ops.ReadVariableOp(resource=shard.handle,
                                         dtype=shard.dtype)
        # A raw read has no static shape; EnsureShape records it in the
        # graph (benchmarks/memory_table.py counts the gather's bytes).
        mine = tf.ensure_shape(mine, [layout.shard])
        flat = self._all_gather(mine)
        for v, value in zip(layout.variables, layout.Split(flat)):
          writes.append(tf.raw_ops.AssignVariableOp(resource=v.handle,
                                                    value=value))
    if tf.executing_eagerly():
      return None
    return tf.group(done + writes)

  def UpdateView(self, var_grads):
    """`var_grads`; for cross_replica.ScatteredMean's slices (on our
    proxies) VarGrad(v, None) of every variable: what the rule checks as
    bound and its `_BeginUpdate` sees."""
    proxies = {id(p) for p in getattr(self, '_proxies', {}).values()}
    if not var_grads or any(id(vg.var) not in proxies for vg in var_grads):
      return var_grads
    return [var_grad_lib.VarGrad(v, None) for layout in
            self._layouts.values() for v in layout.variables]

  @contextlib.contextmanager
  def AfterStep(self, move):
    """Inside: `move(replica)` (-> ops) runs in the next `Apply` after
    the rule's step on the shards and before the weights' all-gather (a
    wrapper's elementwise move of its copies, sharded_wrappers.py)."""
    self._after_step.append(move)
    try:
      yield
    finally:
      self._after_step.remove(move)

  def ShardProxy(self, dtype):
    """The rule's view (`_ShardVar`) of the weights' shard of `dtype`."""
    return self._proxies[dtype]

  @property
  def layouts(self):
    """{dtype name: _Layout} of the bound variables."""
    return dict(self._layouts)

  @property
  def shard_variables(self):
    """The ON_READ [shard] copies of the weights the rule updates."""
    return [self._shards[d] for d in sorted(self._shards)]

  def SlotBytesPerReplica(self):
    """Bytes of the shard slots one replica holds (shape [shard] each),
    with the shards of the wrappers' copies (Ema, Lookahead, SWA)."""
    return sum(quantized_state.SlotBytes(s)
               for slots in self.shard_slots.values()
               for s in slots.values()) + sum(
                   c.shape.num_elements() * c.dtype.size
                   for cs in self.copies.values() for c in cs)

  def UnshardedSlotBytes(self):
    """Bytes the same slots take unsharded, on each replica: for every
    slot, the element count of its dtype's variables (no padding) times the
    slot's dtype size (8-bit blockwise: codes and one scale per block of
    each variable)."""
    total = 0
    for dtype, slots in self.shard_slots.items():
      for s in slots.values():
        if isinstance(s, quantized_state.QuantizedSlot):
          total += sum(quantized_state.QuantizedBytes(n, s.block_size)
                       for n in self._layouts[dtype].sizes)
        else:
          total += self._layouts[dtype].total * s.dtype.size
    for dtype, copies in self.copies.items():
      total += len(copies) * self._layouts[dtype].total * copies[0].dtype.size
    return total


def _FillFromWeights(slot, layout):
  """Sets each local copy of the shard slot `slot` (master_weights' float32
  master) to its replica's slice of the layout's variables, upcast: the
  master starts from the weights, as unsharded (made at Bind, eagerly)."""
  values = [v.read_value() for v in layout.variables]
  copies = getattr(slot, 'values', None) or [slot]
  for r, copy in zip(layout.LocalReplicaIds(), copies):
    with tf.device(copy.device):
      copy.assign(tf.cast(layout.Slice(values, r), copy.dtype))


def _CheckNoDecayExclusion(rule, variables):
  """Raises ValueError if weight_decay_exclude spares some of `variables`
  (a flat shard gets one decay mask: all decayed or none)."""
  if not rule.WeightDecayOn():
    return
  spared = [var_grad_lib.VarName(v) for v in variables
            if any(re.search(r, var_grad_lib.VarName(v))
                   for r in rule.params.weight_decay_exclude)]
  if spared:
    raise ValueError(
        '%s: shard_optimizer_state=True with weight_decay_exclude=%r, which '
        'spares %s: a flat shard spans variables and is decayed as a whole. '
        'Use a second learner (bprop_variable_filter) for the variables '
        'without decay, or shard_optimizer_state=False.' %
        (rule.path, rule.params.weight_decay_exclude, spared))


def _CheckKnown(rule, layouts, variables, where):
  """Raises ValueError naming the `variables` outside the sharded layout
  (the flat shards are fixed at the first Bind)."""
  known = {id(v) for layout in layouts.values() for v in layout.variables}
  new = [var_grad_lib.VarName(v) for v in variables if id(v) not in known]
  if new:
    raise ValueError(
        '%s: %s with variables %s that were not in the first Bind; with '
        'shard_optimizer_state the flat shards are fixed then. Bind every '
        'variable of the learner at once.' % (rule.path, where, new))


def _PerReplica(next_creator, **kwargs):
  """Variable creator: a per-replica (ON_READ, never aggregated) variable,
  so each replica's copy holds its own shard."""
  kwargs.update(synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.NONE)
  return next_creator(**kwargs)


class _ShardVar:
  """The rule's view of an ON_READ shard variable: not Trackable.

  The rule binds it (its `_bound` dict, checkpointed, would otherwise
  save the shard under a key of its own); it offers what an update rule
  uses of a variable: name, dtype, shape, handle (this replica's copy in
  a replica context), read_value, assign_sub and assign.
  """

  def __init__(self, var):
    self._var = var
    self.name = var.name
    self.dtype = var.dtype
    self.shape = var.shape

  @property
  def handle(self):
    return self._var.handle

  def read_value(self):
    """This replica's shard; zeros outside a replica context (a slot's
    initial value at Bind: WEIGHT_SLOTS are filled from the weights)."""
    if tf.distribute.in_cross_replica_context():
      return tf.zeros(self.shape, self.dtype)
    return tf.raw_ops.ReadVariableOp(resource=self.handle, dtype=self.dtype)

  def assign_sub(self, delta, read_value=False):
    del read_value
    return tf.raw_ops.AssignSubVariableOp(resource=self.handle,
                                          value=tf.cast(delta, self.dtype))

  def assign(self, value, read_value=False):
    """Writes this replica's shard (master_weights: the rounded master)."""
    del read_value
    return tf.raw_ops.AssignVariableOp(resource=self.handle,
                                       value=tf.cast(value, self.dtype))


def _ShardVarToTensor(value, dtype=None, name=None, as_ref=False):
  """Tensor conversion of a _ShardVar: its value (a rule's `_Step` may read
  the weights it is given)."""
  del name, as_ref
  out = value.read_value()
  return out if dtype is None else tf.cast(out, dtype)


tf.register_tensor_conversion_function(_ShardVar, _ShardVarToTensor)


def _ReplicaId():
  """This replica's static id in the sync group (0 outside one)."""
  ctx = tf.distribute.get_replica_context()
  if (not tf.distribute.has_strategy() or ctx is None or
      ctx.num_replicas_in_sync <= 1):
    return 0
  rid = tf.get_static_value(ctx.replica_id_in_sync_group)
  if rid is None:
    raise RuntimeError('shard_optimizer_state needs static replica ids '
                       '(MirroredStrategy, MultiWorkerMirroredStrategy).')
  return int(rid)


class _SlotView(tf.__internal__.tracking.Trackable):
  """One variable's part of a sharded slot, checkpointed as the full slot.

  Saved under the key (`<...>/.ATTRIBUTES/VARIABLE_VALUE`) and with the
  shape the unsharded slot of that variable has: `_serialize_to_tensors`
  concatenates the replicas' shards (every local copy of the ON_READ
  shard slot) and slices the variable's part; `_restore_from_tensors`
  writes each copy's part of the full value. So a checkpoint restores on
  any replica count (2 -> 1, 1 -> 2).

  Args:
    slot: the ON_READ shard slot variable ([shard] per replica).
    layout: the _Layout of its dtype.
    index: the variable's index in `layout`.
  """

  def __init__(self, slot, layout, index):
    self._slot = slot
    self._layout = layout
    self._index = index

  def _Copies(self):
    """This process's copies of the shard slot, in local replica order."""
    values = getattr(self._slot, 'values', None)
    return list(values) if values else [self._slot]

  def _serialize_to_tensors(self):
    # The layout's traced all-gather concatenates every replica's shard in
    # replica order, across workers too (one collective per slot and
    # variable under MultiWorkerMirroredStrategy, on every worker).
    flat = self._layout.Gathered(self._Copies())
    return {'VARIABLE_VALUE': tf.identity(self._layout.Split(flat)[
        self._index])}

  def read_value(self):
    """The variable's full value, gathered from every replica's shard
    (eval swaps; a collective: every worker calls it in the same order)."""
    return self._serialize_to_tensors()['VARIABLE_VALUE']

  def assign(self, value):
    """Writes each local replica's part of the full `value` (eager)."""
    return self._restore_from_tensors({'VARIABLE_VALUE': value})

  def _restore_from_tensors(self, restored_tensors):
    value = tf.reshape(restored_tensors['VARIABLE_VALUE'], [-1])
    off = self._layout.offsets[self._index]
    size = self._layout.sizes[self._index]
    ops = []
    for r, copy in zip(self._layout.LocalReplicaIds(), self._Copies()):
      lo, hi = r * self._layout.shard, (r + 1) * self._layout.shard
      a, b = max(lo, off), min(hi, off + size)
      if a < b:
        with tf.device(copy.device):
          ops.append(copy[a - lo:b - lo].assign(value[a - off:b - off]))
    return tf.group(ops) if ops and not tf.executing_eagerly() else None


def _ViewOf(slot, layout, index):
  """The checkpointed view of variable `index`'s part of a shard slot."""
  if isinstance(slot, quantized_state.QuantizedSlot):
    return _QuantizedSlotView(slot, layout, index)
  return _SlotView(slot, layout, index)


class _QuantizedSlotView(tf.__internal__.tracking.Trackable):
  """One variable's part of an 8-bit shard slot (module doc), checkpointed
  as its codes (int8) and each element's block absmax (float32), both of
  the variable's shape.

  Args:
    slot: the QuantizedSlot of ON_READ codes [s] and absmax [ceil(s/B)].
    layout: the _Layout of its dtype.
    index: the variable's index in `layout`.
  """

  def __init__(self, slot, layout, index):
    self._slot = slot
    self._layout = layout
    self._index = index

  def _Copies(self):
    """[(codes, absmax)] of this process's replicas, in local order."""
    codes = getattr(self._slot.codes, 'values', None)
    absmax = getattr(self._slot.absmax, 'values', None)
    if not codes:
      return [(self._slot.codes, self._slot.absmax)]
    return list(zip(codes, absmax))

  def _PerElementScale(self, absmax):
    """[shard] float32: each element's block absmax."""
    block = self._slot.block_size
    return tf.repeat(absmax, block)[:self._layout.shard]

  def _serialize_to_tensors(self):
    copies = self._Copies()
    shape = self._layout.variables[self._index].shape
    codes = self._layout.GatheredValues(
        [tf.cast(c.read_value(), tf.float32) for c, _ in copies])
    scale = self._layout.GatheredValues(
        [self._PerElementScale(a.read_value()) for _, a in copies])
    part = lambda flat: tf.reshape(self._layout.Split(flat)[self._index],
                                   shape)
    return {'codes': tf.cast(part(codes), tf.int8),
            'absmax': tf.identity(part(scale))}

  def _restore_from_tensors(self, restored_tensors):
    codes = tf.reshape(restored_tensors['codes'], [-1])
    scale = tf.reshape(restored_tensors['absmax'], [-1])
    off = self._layout.offsets[self._index]
    size = self._layout.sizes[self._index]
    ops = []
    for r, (c, a) in zip(self._layout.LocalReplicaIds(), self._Copies()):
      lo, hi = r * self._layout.shard, (r + 1) * self._layout.shard
      first, last = max(lo, off), min(hi, off + size)
      if first < last:
        with tf.device(c.device):
          new_c, new_a = self._Piece(
              c.read_value(), a.read_value(), first - lo, last - lo,
              codes[first - off:last - off], scale[first - off:last - off])
          ops += [c.assign(new_c, read_value=False),
                  a.assign(new_a, read_value=False)]
    return tf.group(ops) if ops and not tf.executing_eagerly() else None

  def _Piece(self, codes, absmax, a, b, piece_codes, piece_scale):
    """(codes, absmax) of one copy with elements [a, b) restored: written
    as saved when every element's saved scale is its new block's (same
    replica count), else the copy requantized with them dequantized."""
    slot = self._slot
    blocks = tf.range(a, b) // slot.block_size
    exact_a = tf.tensor_scatter_nd_update(absmax, blocks[:, None],
                                          piece_scale)
    exact_c = tf.concat([codes[:a], piece_codes, codes[b:]], axis=0)
    same = tf.reduce_all(tf.gather(exact_a, blocks) == piece_scale)

    def _Requantized():
      values = quantized_state.Dequantize(codes, absmax, slot.signed,
                                          slot.block_size)
      piece = quantized_state.DequantizeScaled(piece_codes, piece_scale,
                                               slot.signed)
      return quantized_state.Quantize(
          tf.concat([values[:a], piece, values[b:]], axis=0), slot.signed,
          slot.block_size)

    return tf.cond(same, lambda: (exact_c, exact_a), _Requantized)


def StateOf(optimizer):
  """The ShardedState of a learner's built optimizer, or None.

  None when the learner does not set shard_optimizer_state; a state whose
  `sharded` is False when it was bound with one replica.
  """
  return Chain(optimizer)[1].state_sharding


def _FormatBytes(num_bytes):
  """'136 B', '18.77 KiB', '1.23 MiB', '2.00 GiB' (powers of 1024)."""
  if num_bytes < 1024:
    return '%d B' % num_bytes
  for unit in ('KiB', 'MiB', 'GiB'):
    num_bytes /= 1024.0
    if num_bytes < 1024 or unit == 'GiB':
      return '%.2f %s' % (num_bytes, unit)


def ShardedBytesLine(optimizers):
  """The start-up line on the sharded optimizer state, or None.

  Counts the slots actually created (and the averaging wrappers' copies):
  per replica, each slot's [shard] (padding included); unsharded, each
  slot at the full size of its variables. Summed over the learners that
  shard; not counted: the w_r shard copy of the weights, a
  GradientAccumulation's accumulators, the learners that do not shard.

  Args:
    optimizers: the task's learners' built and bound optimizers.

  Returns:
    'Optimizer state sharded over N replicas: <bytes> per replica
    (unsharded <bytes>).', with bytes in B, KiB, MiB or GiB; None when no
    learner's state is sharded (no learner asks, or one replica).
  """
  states = [st for st in (StateOf(o) for o in optimizers)
            if st is not None and st.sharded]
  if not states:
    return None
  return ('Optimizer state sharded over %d replicas: %s per replica '
          '(unsharded %s).' % (
              states[0].num_replicas,
              _FormatBytes(sum(st.SlotBytesPerReplica() for st in states)),
              _FormatBytes(sum(st.UnshardedSlotBytes() for st in states))))


def OneReplicaNotice(learner_params, num_replicas):
  """The NOTICE line for sharding asked with one replica, or None.

  Sharding with one replica keeps the whole state (nothing to split): the
  trainer says so once, so a run that meant to shard is not silently plain.

  Args:
    learner_params: the task's learner params (a list).
    num_replicas: the strategy's num_replicas_in_sync.
  """
  names = [lp.name for lp in learner_params
           if 'shard_optimizer_state' in lp and lp.shard_optimizer_state]
  if num_replicas > 1 or not names:
    return None
  return ('NOTICE: learner(s) %s set shard_optimizer_state but the strategy '
          'has 1 replica: the optimizer state is not sharded. Run with '
          'several replicas (--strategy=mirrored with GPUs or '
          '--cpu_devices=N, or the launcher with --strategy=multi_worker).'
          % ', '.join(names))
