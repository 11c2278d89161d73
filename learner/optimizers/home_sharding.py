"""ZeRO-1 by home replica: whole-tensor rules' state sharded per variable.

`Learner.shard_optimizer_state=True` with a rule that declares
`WHOLE_TENSOR = True` (its `_Step` on a variable reads only that variable:
Muon's Newton-Schulz, Adafactor's factored statistics, LAMB's trust ratio,
SOAP's eigenbases): each variable gets a home replica, which alone keeps its
slots and computes its update, at full shape, with the rule's own `_Step`;
the updated weights reach every replica by one all-gather. A flat slice
(sharded_state.py, the elementwise rules) cannot serve such a rule: its
step needs the whole tensor. Source: Rajbhandari et al., "ZeRO", SC 2020
(stage 1), partitioned by tensor as in Microsoft's DeepSpeed/Dion
distributed Muon (one owner per matrix).

Partition: the learner's variables, in bind order, are sorted by the rule's
`ShardCost(var)` (largest first; ties keep bind order) and each goes to the
replica with the least cost so far (the lowest id on a tie): the greedy
"longest processing time" rule, so a replica's cost is at most
total / N + the largest variable's cost. The default cost is the bytes of
the variable's slots (Adafactor: its factored rows and columns; LAMB: m
and v); Muon declares its Newton-Schulz FLOPs, SOAP its eigenbasis work.

State: per slot dtype, one per-replica (ON_READ) flat buffer of S
elements, S the largest replica's sum of home slot sizes; replica r's copy
holds the slots of r's home variables one after another (zero padding to
S). So a replica holds only home state (plus < one replica's imbalance of
padding), which ON_READ variables, equal in shape on every replica, allow.

One update, on replica r (inside `strategy.run`, no merge_call): the
learner's pipeline has run on the all-reduced full gradients (norms, clip,
the skip decision), so every replica holds the full weights and gradients;
r runs the rule's `_ApplyOne` on each home variable, on a stand-in holding
the weight tensor (the updated value is kept, not written) and stand-ins
for its slots (slices of the buffer read once, written once after); packs
its home weights, flat, into a vector of P elements (P the largest
replica's sum, zero padded); one all-gather (`CollectiveGatherV2`, as the
flat shards) gives [N P] on every replica, and each variable is written
from its home's segment. The arithmetic is the unsharded run's on the
same full tensors: bit-identical where the graph is the same.

Checkpoints: each slot of each variable is saved under the unsharded key
and shape (`_HomeSlotView`: the buffers all-gathered at save, the home's
segment sliced; at restore each home writes its segment), so checkpoints
restore across replica counts (2 -> 1, 1 -> 2) and on one device.

bfloat16 weights with a float32 master (`master_weights`, issue 38.3):
the master is one more slot of its variable, homed with the others in the
float32 buffer (made from the weights at Bind, as unsharded; the rule's
other slots follow it into float32 unless slot_dtype). The home runs
`_ApplyOne` on the weight's stand-in, which takes the unsharded master path
(low_precision.ApplyToMaster: the rule on the master, then the master
rounded to the weight's dtype, to nearest or stochastically with the seed
of num_updates and the variable's name, both the unsharded ones), so the
gathered weights are the rounded ones. The all-gather packs per gather
dtype: bfloat16 weights travel in the float32 vector beside float32 ones
(exactly: float32 holds every bfloat16), one collective for both.
slot_dtype=bfloat16 slots are homed in a bfloat16 buffer; int8 needs an
elementwise rule anyway.
"""

import math
import weakref

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.kernels import low_precision

HOME_REASON = 'sharded optimizer state (ZeRO-1, home replicas)'


def SlotBytes(rule, var):
  """Bytes of the slots `rule` keeps for `var`: its `_CreateSlots` (the
  shapes of the initial values, in `slot_dtype`, float32 beside a master,
  or var's dtype) and, with master_weights on a 16-bit var, the float32
  master."""
  return sum(_NumElements(var, init) * dtype.size
             for _, dtype, init in SlotEntries(rule, var))


def SlotEntries(rule, var):
  """[(slot name, storage dtype, initial value)] of `var` as the unsharded
  BaseOptimizer.CreateSlotVariables makes them: first the float32 master
  (initial value: `var` itself, upcast when made) when
  low_precision.HasMaster, then `_CreateSlots` in slot_dtype, else float32
  beside a master, else var's dtype."""
  entries = []
  follow = var.dtype
  if low_precision.HasMaster(rule, var):
    follow = low_precision.MASTER_DTYPE
    entries.append((low_precision.MASTER_SLOT, follow, var))
  dtype = tf.as_dtype(rule.params.slot_dtype or follow)
  for name, init in rule._CreateSlots(var).items():  # pylint: disable=protected-access
    entries.append((name, dtype, init))
  return entries


def _NumElements(var, init):
  """Elements of a slot whose initial value is `init` (None, a number or a
  tensor)."""
  if init is None or isinstance(init, (int, float)):
    return int(var.shape.num_elements())
  return int(tf.TensorShape(init.shape).num_elements())


def Homes(costs, num_replicas):
  """The home replica of each cost (greedy, largest first; module doc).

  Args:
    costs: list of non-negative numbers, one per variable in bind order.
    num_replicas: N >= 1.

  Returns:
    list of ints in [0, N), one per cost.
  """
  load = [0.0] * num_replicas
  homes = [0] * len(costs)
  for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
    r = min(range(num_replicas), key=lambda r: (load[r], r))
    homes[i] = r
    load[r] += costs[i]
  return homes


def NewtonSchulzFlops(fan_in, fan_out, steps):
  """FLOPs of `steps` quintic Newton-Schulz iterations on a [fan_in,
  fan_out] matrix (rules/muon.py NewtonSchulz, on the wide side): per step
  X X^T (2 r^2 c), A A (2 r^3) and (b A + c A A) X (2 r^2 c), r <= c."""
  r, c = min(fan_in, fan_out), max(fan_in, fan_out)
  return steps * (4 * r * r * c + 2 * r ** 3)


class _Slot:
  """Where one slot of one home variable lies in its replica's buffer."""

  def __init__(self, var_index, name, shape, offset):
    self.var_index = var_index
    self.name = name
    self.shape = shape
    self.size = int(tf.TensorShape(shape).num_elements())
    self.offset = offset


class _Buffer:
  """One slot dtype's per-replica flat buffer and its layout.

  Args:
    dtype: the slots' storage dtype.
    entries: per replica, list of (var index, slot name, shape, initial
      value or None), in order.
    path: the rule's path (the variable's name).
  """

  def __init__(self, dtype, entries, path):
    self.dtype = dtype
    self.slots = []  # Per replica: list of _Slot.
    for rows in entries:
      offset, mine = 0, []
      for i, name, shape, _ in rows:
        mine.append(_Slot(i, name, shape, offset))
        offset += mine[-1].size
      self.slots.append(mine)
    self.size = max(1, max(sum(s.size for s in m) for m in self.slots))
    with tf.init_scope():
      self.var = tf.Variable(
          tf.zeros([self.size], dtype), trainable=False,
          name='%s/zero_home_%s' % (path, dtype.name),
          synchronization=tf.VariableSynchronization.ON_READ,
          aggregation=tf.VariableAggregation.NONE)
    self.strategy = tf.distribute.get_strategy()
    self._gather = tf.function(
        lambda rows: GatherLocalRows(self.strategy, rows))  # Traced once.
    with tf.init_scope():
      for r, copy in zip(self.LocalReplicaIds(), self.Copies()):
        with tf.device(copy.device):
          copy.assign(self.Pack([tf.cast(init, dtype)
                                 for _, _, _, init in entries[r]], r))

  def Copies(self):
    """This process's copies of the buffer, in local replica order."""
    values = getattr(self.var, 'values', None)
    return list(values) if values else [self.var]

  def LocalReplicaIds(self):
    """The global replica ids of this process's replicas, in local order."""
    ids = self.strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(ctx.replica_id_in_sync_group))
    return [int(i) for i in self.strategy.experimental_local_results(ids)]

  def Pack(self, values, replica):
    """[size]: replica's slot `values` (in its order) flat, zero padded."""
    parts = [tf.reshape(v, [-1]) for v in values]
    pad = self.size - sum(s.size for s in self.slots[replica])
    if pad or not parts:
      parts.append(tf.zeros([pad], self.dtype))
    return tf.concat(parts, axis=0)

  def Find(self, var_index, name, home):
    """The _Slot of variable `var_index`'s slot `name` (on its `home`)."""
    return next(s for s in self.slots[home]
                if s.var_index == var_index and s.name == name)

  def Gathered(self):
    """[N * size]: every replica's buffer, in replica order (a collective
    on every worker under MultiWorkerMirroredStrategy; `GatherLocalRows`)."""
    return self._gather(tf.stack([c.read_value() for c in self.Copies()]))


class _Value:
  """A stand-in for a variable or slot inside one replica's update.

  Holds a tensor; `assign` and `assign_sub` replace it (nothing is
  written: HomeState writes the results once); `name` is the unsharded
  one, so decay masks, exclude regexes and stochastic-rounding seeds read
  the same name as unsharded.
  """

  def __init__(self, name, value):
    self.name = name
    self.value = value
    self.dtype = value.dtype
    self.shape = value.shape

  def read_value(self):
    return self.value

  def assign(self, value, read_value=False):
    del read_value
    self.value = tf.cast(value, self.dtype)
    return self.value

  def assign_sub(self, delta, read_value=False):
    del read_value
    self.value = self.value - tf.cast(delta, self.dtype)
    return self.value


tf.register_tensor_conversion_function(
    _Value, lambda v, dtype=None, name=None, as_ref=False: (
        v.value if dtype is None else tf.cast(v.value, dtype)))


def _ReplicaId():
  """This replica's static id in the sync group (0 outside one)."""
  ctx = tf.distribute.get_replica_context()
  if ctx is None or ctx.num_replicas_in_sync <= 1:
    return 0
  rid = tf.get_static_value(ctx.replica_id_in_sync_group)
  if rid is None:
    raise RuntimeError('shard_optimizer_state needs static replica ids '
                       '(MirroredStrategy, MultiWorkerMirroredStrategy).')
  return int(rid)


class _Plan:
  """The bound variables (in bind order) and each one's home replica; a
  plain object, so tf.Module does not list the model's variables as this
  state's."""

  def __init__(self, variables, homes):
    self.variables = list(variables)
    self.homes = list(homes)


class HomeState(tf.Module):
  """The home-replica state of one WHOLE_TENSOR rule (module doc).

  The same contract as sharded_state.ShardedState (`Bind`, `Apply`,
  `sharded`, `REASON`, `SlotBytesPerReplica`, `UnshardedSlotBytes`).

  Args:
    rule: the BaseOptimizer whose state is homed.
    all_gather: callable(tensor [P]) -> [N * P], in replica order.
  """

  REASON = HOME_REASON

  def __init__(self, rule, all_gather):
    super().__init__(name='zero_home')
    self._all_gather = all_gather
    self._rule_ref = weakref.ref(rule)  # Not a child: the rule owns this.
    self._buffers = {}  # slot dtype name -> _Buffer (not walked: not Modules).
    self.buffers = []  # Their ON_READ variables (tf.Module.variables).
    self._views = {}
    self._plan = _Plan([], [])
    self.num_replicas = 1

  @property
  def rule(self):
    return self._rule_ref()

  @property
  def sharded(self):
    """True once bound under several replicas."""
    return bool(self._plan.variables)

  @property
  def homes(self):
    """The home replica of each bound variable, in bind order."""
    return list(self._plan.homes)

  def CheckRule(self, rule):
    """Raises ValueError (one line) for a rule whose state is not homed:
    not WHOLE_TENSOR (slot_dtype=int8 needs an elementwise rule: refused
    at construction). master_weights is homed (module doc)."""
    if not type(rule).WHOLE_TENSOR:
      raise ValueError('%s: shard_optimizer_state=True with %s: it is not a '
                       'WHOLE_TENSOR rule. Set shard_optimizer_state=False.' %
                       (rule.path, type(rule).__name__))

  def Bind(self, rule, variables):
    """Homes the rule's slots over the replicas, when N > 1.

    Args:
      rule: the BaseOptimizer given to the constructor.
      variables: list of the variables to bind.

    Returns:
      {variable name: {slot name: checkpointed view}} for every variable,
      or None with one replica (the rule creates its own slots).

    Raises:
      ValueError: after homing, a variable that was not in the first Bind.
    """
    if self._plan.variables:
      known = {id(v) for v in self._plan.variables}
      new = [var_grad_lib.VarName(v) for v in variables if id(v) not in known]
      if new:
        raise ValueError(
            '%s: Bind with variables %s that were not in the first Bind; '
            'with shard_optimizer_state the homes are fixed then. Bind '
            'every variable of the learner at once.' % (rule.path, new))
      return self._views
    n = tf.distribute.get_strategy().num_replicas_in_sync
    if n <= 1:
      return None
    self.num_replicas = n
    with tf.init_scope():
      self._plan = _Plan(variables, Homes(
          [rule.ShardCost(v) for v in variables], n))
      self._MakeBuffers(rule, variables, n)
    self._views = {}
    for i, v in enumerate(variables):
      self._views[var_grad_lib.VarName(v)] = {
          s.name: _HomeSlotView(buf, s)
          for buf in self._buffers.values()
          for s in buf.slots[self._plan.homes[i]] if s.var_index == i}
    return self._views

  def _MakeBuffers(self, rule, variables, n):
    """Creates one _Buffer per slot dtype, each replica's home slots in it
    (a master in the float32 one)."""
    entries = {}  # dtype name -> per replica [(i, name, shape, init)].
    for i, (v, home) in enumerate(zip(variables, self._plan.homes)):
      for name, dtype, init in sorted(SlotEntries(rule, v),
                                      key=lambda e: e[0]):
        rows = entries.setdefault(dtype.name, [[] for _ in range(n)])
        init = _Initial(v, init, dtype)
        rows[home].append((i, name, init.shape.as_list(), init))
    for dtype, rows in sorted(entries.items()):
      self._buffers[dtype] = _Buffer(tf.as_dtype(dtype), rows, rule.path)
    self.buffers = [self._buffers[d].var for d in sorted(self._buffers)]

  def UpdateView(self, var_grads):
    """`var_grads` itself: a homed rule gets whole gradients (the learner
    never reduce-scatters for it, update_step.ScatterReason)."""
    return var_grads

  def Apply(self, var_grads, step_fn):
    """The homed update (module doc); returns the op (None eagerly).

    Args:
      var_grads: list of VarGrad with a gradient (a variable without one
        keeps its weights and slots).
      step_fn: callable([(var, gradient, slots)]) -> list of ops: the
        rule's update of one variable, run on each home variable.
    """
    rule = self.rule
    grads = {id(vg.var): vg.grad for vg in var_grads}
    known = {id(v) for v in self._plan.variables}
    new = [var_grad_lib.VarName(vg.var) for vg in var_grads
           if id(vg.var) not in known]
    if new:
      raise ValueError('%s: Apply with variables %s that were not in the '
                       'first Bind.' % (rule.path, new))
    r = _ReplicaId()
    read = {d: tf.raw_ops.ReadVariableOp(resource=b.var.handle, dtype=b.dtype)
            for d, b in self._buffers.items()}
    stand_ins = {}  # (dtype, slot index) -> _Value.
    weights, items = {}, []
    for i, v in enumerate(self._plan.variables):
      if self._plan.homes[i] != r:
        continue
      name = var_grad_lib.VarName(v)
      weights[i] = _Value(v.name, tf.identity(v.read_value()))
      slots = {}
      for d, buf in self._buffers.items():
        for k, s in enumerate(buf.slots[r]):
          if s.var_index == i:
            value = tf.reshape(read[d][s.offset:s.offset + s.size], s.shape)
            stand_ins[d, k] = _Value('%s/%s/%s:0' % (rule.path, name, s.name),
                                     value)
            slots[s.name] = stand_ins[d, k]
      if id(v) in grads:
        items.append((weights[i], grads[id(v)], slots))
    done = [o for o in step_fn(items) if o is not None]
    with tf.control_dependencies(done):
      writes = [tf.raw_ops.AssignVariableOp(
          resource=buf.var.handle, value=buf.Pack(
              [stand_ins[d, k].value for k in range(len(buf.slots[r]))], r))
                for d, buf in sorted(self._buffers.items())]
      writes += self._GatherWeights(r, weights)
    if tf.executing_eagerly():
      return None
    return tf.group(done + writes)

  def _GatherWeights(self, r, weights):
    """Packs replica r's updated home `weights` ({index: _Value}), gathers
    every replica's, writes each variable from its home's segment: one
    pack and all-gather per gather dtype (`GatherDtype`)."""
    variables, homes = self._plan.variables, self._plan.homes
    writes, by_dtype = [], {}
    for i, v in enumerate(variables):
      by_dtype.setdefault(GatherDtype(v.dtype).name, []).append(i)
    for dtype, indices in sorted(by_dtype.items()):
      per = [[(i, int(variables[i].shape.num_elements())) for i in indices
              if homes[i] == h] for h in range(self.num_replicas)]
      width = max(1, max(sum(n for _, n in p) for p in per))
      parts = [tf.cast(tf.reshape(weights[i].value, [-1]), dtype)
               for i, _ in per[r]]
      pad = width - sum(n for _, n in per[r])
      if pad or not parts:
        parts.append(tf.zeros([pad], dtype))
      mine = tf.ensure_shape(tf.concat(parts, axis=0), [width])
      flat = self._all_gather(mine)
      for h, p in enumerate(per):
        off = h * width
        for i, n in p:
          v = variables[i]
          writes.append(tf.raw_ops.AssignVariableOp(
              resource=v.handle, value=tf.cast(
                  tf.reshape(flat[off:off + n], v.shape), v.dtype)))
          off += n
    return writes

  @property
  def shard_variables(self):
    """[]: no copy of the weights (the homes step the weights' tensors)."""
    return []

  def SlotBytesPerReplica(self):
    """Bytes of the home buffers one replica holds (padding included)."""
    return sum(b.size * b.dtype.size for b in self._buffers.values())

  def UnshardedSlotBytes(self):
    """Bytes the same slots take unsharded, on each replica."""
    return sum(s.size * b.dtype.size for b in self._buffers.values()
               for slots in b.slots for s in slots)

  def LargestVariableSlotBytes(self):
    """The largest one variable's slot bytes (the balance's slack)."""
    per = {}
    for b in self._buffers.values():
      for slots in b.slots:
        for s in slots:
          per[s.var_index] = per.get(s.var_index, 0) + s.size * b.dtype.size
    return max(per.values(), default=0)


def GatherDtype(dtype):
  """The dtype a tensor of `dtype` travels in through an all-gather:
  float32 for bfloat16 and int32 for int8/uint8 (exact: they hold every
  such value, and the collective kernel takes neither), else itself."""
  dtype = tf.as_dtype(dtype)
  return {tf.bfloat16: tf.float32, tf.int8: tf.int32,
          tf.uint8: tf.int32}.get(dtype, dtype)


def GatherLocalRows(strategy, rows):
  """Every replica's row, from a cross-replica context (checkpoint saves,
  eval swaps): the ZeRO-1 buffers' one gather, flat slices and homes.

  Args:
    strategy: the tf.distribute strategy of the rows.
    rows: [local replicas, size] tensor: this process's replicas' rows in
      local replica order.

  Returns:
    [N * size] tensor of rows.dtype, the replicas' rows in replica order
    (across workers too: one collective that every worker must call in the
    same order); the rows travel in `GatherDtype`. Wrap it in one
    tf.function per buffer: called eagerly, strategy.gather traces a new
    function at every call (a retracing warning, ~1 s per save).
  """
  dtype = rows.dtype
  local = iter(tf.unstack(tf.cast(rows, GatherDtype(dtype)),
                          num=rows.shape[0]))
  per_replica = strategy.experimental_distribute_values_from_function(
      lambda ctx: next(local))
  with strategy.scope():
    return tf.cast(strategy.gather(per_replica, axis=0), dtype)


def _Initial(var, init, dtype):
  """A slot's initial value (None: zeros of var's shape; a number: filled;
  a tensor or the variable itself, a master's: its value), in `dtype`."""
  if init is None:
    return tf.zeros(var.shape, dtype)
  if isinstance(init, (int, float)):
    return tf.fill(var.shape, tf.constant(init, dtype))
  return tf.cast(init, dtype)


class _HomeSlotView(tf.__internal__.tracking.Trackable):
  """One variable's slot, checkpointed as the unsharded slot (module doc).

  Args:
    buf: the _Buffer holding it.
    slot: its _Slot (on its home replica).
  """

  def __init__(self, buf, slot):
    self._buf = buf
    self._slot = slot
    self._home = next(r for r, slots in enumerate(buf.slots) if slot in slots)

  def _serialize_to_tensors(self):
    s = self._slot
    start = self._home * self._buf.size + s.offset
    flat = self._buf.Gathered()
    return {'VARIABLE_VALUE': tf.reshape(flat[start:start + s.size], s.shape)}

  def _restore_from_tensors(self, restored_tensors):
    s = self._slot
    value = tf.cast(tf.reshape(restored_tensors['VARIABLE_VALUE'], [-1]),
                    self._buf.dtype)
    ops = []
    for r, copy in zip(self._buf.LocalReplicaIds(), self._buf.Copies()):
      if r == self._home:
        with tf.device(copy.device):
          ops.append(copy[s.offset:s.offset + s.size].assign(value))
    return tf.group(ops) if ops and not tf.executing_eagerly() else None
