"""The all-reduce of gradients under tf.distribute: the one place for it.

Learners call `WeightedAllReduce` once per applied update (before clipping,
docs/DESIGN.md "One training step, as data"): every replica contributes
`weight_r * grad_r` and `weight_r`, and gets back `sum_r weight_r * grad_r`
and `sum_r weight_r`, so each replica clips and applies the same global
gradient `sum weight*grad / sum weight`, also when replicas see batches of
different sizes.

Implementation: one `CollectiveReduceV2` over all tensors packed into a
single float32 vector (one collective per update, however many variables).
The collective op is used directly, not `ReplicaContext.all_reduce`,
because the latter needs a `merge_call`, which MirroredStrategy refuses
inside `tf.cond` - and under gradient accumulation the all-reduce lives in
the branch of the micro-step that applies, so that a micro-step that only
accumulates has no collective at all.

When `strategy.run` executes eagerly (no tf.function) the strategy's own
`ReplicaContext.all_reduce` is used: there is no graph and an eager tf.cond
runs its branch as plain Python, so its merge_call is allowed there.

`ReduceScatterSum` gives each replica only its flat slice of the packed
sum (one all-to-all, then a local sum: TF 2.21 has no CPU reduce-scatter
kernel). `ScatteredMean` is `AllReduceMean` for ZeRO-1's flat slices (the
learner asks `update_step.MeanOverReplicas` which one to run) and
`ScatteredNorms` the global norm from the slices.

`AnyReplica` is the other collective: the learner's skip flags, ORed over
the replicas in one small all-reduce per applied update, so that all
replicas skip or apply together (docs/distributed.md, "One decision for
all replicas").

Outside a replica context, or with one replica, everything here is the
identity.
"""

import threading

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-direct-tensorflow-import

from learner import gradient_pipeline as pipeline
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
from schedules.base_schedule import NumReplicasInSync

# Registry of collective group keys, one per set of devices (explicit,
# process-wide: the collective runtime requires one key per device group).
_GROUP_KEY_BASE = 1000000
_LOCK = threading.Lock()
_GROUP_KEYS = {}
_INSTANCE_COUNTERS = {}
_ORDERING_TOKENS = {}


def NumReplicas():
  """Replicas that run this code in sync: 1 outside a replica context.

  Returns:
    Python int. It is > 1 only inside `strategy.run` of a strategy with
    several replicas (where `Learner.Apply` must be called).
  """
  if not tf.distribute.has_strategy():
    return 1
  if tf.distribute.in_cross_replica_context():
    return 1
  return NumReplicasInSync()


def _Keys():
  """(group_key, instance_key, ordering token) for this replica's next one.

  Every replica traces the same Learner code in the same order, so the n-th
  collective of each replica gets the same instance key.
  """
  strategy = tf.distribute.get_strategy()
  devices = tuple(strategy.extended.worker_devices)
  ctx = tf.distribute.get_replica_context()
  replica_id = tf.get_static_value(ctx.replica_id_in_sync_group)
  if replica_id is None:
    raise RuntimeError(
        'cross_replica: the replica id is not static; WeightedAllReduce '
        'needs a strategy whose replica ids are known at trace time '
        '(MirroredStrategy).')
  with _LOCK:
    if devices not in _GROUP_KEYS:
      _GROUP_KEYS[devices] = _GROUP_KEY_BASE + len(_GROUP_KEYS)
    group_key = _GROUP_KEYS[devices]
    counter_key = (group_key, int(replica_id))
    instance = _INSTANCE_COUNTERS.get(counter_key, 0) + 1
    _INSTANCE_COUNTERS[counter_key] = instance
  # replica_id is global (MultiWorkerMirrored: task * local devices + local
  # index); worker_devices lists only this worker's devices.
  return group_key, instance, _OrderingToken(
      devices[int(replica_id) % len(devices)])


def _OrderingToken(device):
  """A resource on `device` that orders this device's collectives.

  Without a resource input, automatic control dependencies chain every
  stateful op of the function in program order, so replica 1's collective
  would wait for replica 0's, which waits for replica 1's: a deadlock. With
  a per-device token only collectives of the same device are ordered (as
  TF's own CollectiveReplicaLauncher does). The token is created outside
  the strategy's variable creator (not mirrored, not checkpointed).
  """
  with _LOCK:
    token = _ORDERING_TOKENS.get(device)
    if token is None:
      with tf.init_scope(), tf.device(device):
        token = resource_variable_ops.ResourceVariable(
            0.0, trainable=False, name='cross_replica_ordering_token')
      _ORDERING_TOKENS[device] = token
  return token


def AllReduceSum(tensors):
  """Sums each tensor over the replicas, in one collective op.

  Args:
    tensors: list of float Tensors (any shapes, float dtypes).

  Returns:
    A list like `tensors` of the sums over replicas, same shapes and dtypes.
    The identity with one replica or outside a replica context.
  """
  n = NumReplicas()
  if n <= 1 or not tensors:
    return list(tensors)
  flat = [tf.reshape(tf.cast(t, tf.float32), [-1]) for t in tensors]
  sizes = [tf.size(t) for t in flat]
  packed = tf.concat(flat, axis=0) if len(flat) > 1 else flat[0]
  if tf.executing_eagerly():
    # Eager strategy.run (replica threads, no graph, no cond to refuse a
    # merge_call): the strategy's own all-reduce.
    summed = tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, packed)
  else:
    group_key, instance_key, token = _Keys()
    summed = tf.raw_ops.CollectiveReduceV2(
        input=packed, group_size=n, group_key=group_key,
        instance_key=instance_key, ordering_token=[token.handle],
        merge_op='Add', final_op='Id')
  parts = tf.split(summed, sizes) if len(flat) > 1 else [summed]
  return [tf.cast(tf.reshape(p, tf.shape(t)), t.dtype)
          for p, t in zip(parts, tensors)]


def AllGather(tensor):
  """Concatenates each replica's `tensor` along axis 0, in replica order.

  One `CollectiveGatherV2` (the ZeRO-1 sharded optimizer state,
  learner/optimizers/sharded_state.py, gathers the updated weight shards
  with it); no merge_call, as `AllReduceSum`. Eagerly, the strategy's own
  all_gather.

  A bfloat16 tensor (master_weights' bfloat16 weights) is gathered as
  float32, which holds it exactly (the collective takes no bfloat16), and
  cast back.

  Args:
    tensor: a Tensor of rank >= 1, the same shape on every replica.

  Returns:
    A Tensor of shape [num_replicas * d0, ...]: replica 0's rows first.
    `tensor` itself with one replica or outside a replica context.
  """
  n = NumReplicas()
  if n <= 1:
    return tensor
  if tensor.dtype == tf.bfloat16:
    return tf.cast(AllGather(tf.cast(tensor, tf.float32)), tf.bfloat16)
  if tf.executing_eagerly():
    return tf.distribute.get_replica_context().all_gather(tensor, axis=0)
  group_key, instance_key, token = _Keys()
  return tf.raw_ops.CollectiveGatherV2(
      input=tensor, group_size=n, group_key=group_key,
      instance_key=instance_key, ordering_token=[token.handle])


def ReduceScatterSum(tensors, extras=None):
  """This replica's slice of the sum over replicas of the packed `tensors`.

  The tensors are flattened and concatenated in order into one vector of n
  elements, zero padded to N * s (s = ceil(n / N): the flat layout of
  learner/optimizers/sharded_state.py); replica r gets elements
  [r s, (r + 1) s) of the sum over the replicas of that vector. One
  collective for all the tensors: a `CollectiveAllToAllV2` of the [N, s]
  chunks (replica r receives every replica's chunk r), then a local sum of
  the N received chunks in replica order. TF 2.21 has no CPU kernel for
  `CollectiveReduceScatterV2`; the all-to-all has one (logical CPUs under
  MirroredStrategy and workers under MultiWorkerMirroredStrategy). Each
  replica sends (N - 1) s elements, as a ring reduce-scatter does; with the
  all-gather of the updated slices after it, that is a ring all-reduce's
  traffic (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for
  clusters of workstations", JPDC 2009: reduce-scatter then all-gather).

  Summation: the float32 sum of 2 replicas is a + b, the all-reduce's (a +
  b == b + a exactly); with N > 2 the order is replica 0, 1, ..., N - 1,
  which may round differently from the all-reduce's ring order.

  Eagerly (strategy.run without tf.function), the strategy's all-reduce
  of the vector, then the slice: the same numbers, the full traffic.

  Args:
    tensors: non-empty list of float Tensors (any shapes), all of one dtype;
      summed in float32 (as `AllReduceSum`) and returned in that dtype.
    extras: None, or a list of float32 scalars every replica needs summed
      whole (a weight, a count): appended to each replica's chunk, so they
      ride in the same collective (N x len(extras) more elements).

  Returns:
    A [s] Tensor of the tensors' dtype: this replica's slice of the sum;
    with `extras`, (that slice, [the extras summed over the replicas]).
    With one replica (or outside a replica context) the slice is the whole
    vector ([n], s = n) and the extras are themselves.

  Raises:
    ValueError: `tensors` is empty or mixes dtypes.
  """
  dtypes = sorted({t.dtype.name for t in tensors})
  if len(dtypes) != 1:
    raise ValueError('ReduceScatterSum: tensors must be non-empty and of one '
                     'dtype; got dtypes %s. Call it once per dtype.' % dtypes)
  dtype = tensors[0].dtype
  flat = [tf.reshape(tf.cast(t, tf.float32), [-1]) for t in tensors]
  packed = tf.concat(flat, axis=0) if len(flat) > 1 else flat[0]
  more = [tf.cast(e, tf.float32) for e in (extras or [])]
  n = NumReplicas()
  if n <= 1:
    out = tf.cast(packed, dtype)
    return out if extras is None else (out, more)
  total = sum(int(t.shape.num_elements()) for t in flat)
  shard = max(1, -(-total // n))
  if shard * n > total:
    packed = tf.concat([packed, tf.zeros([shard * n - total])], axis=0)
  chunks = tf.reshape(packed, [n, shard])
  if more:  # Every chunk carries the extras: each replica sums them all.
    chunks = tf.concat([chunks, tf.tile(tf.stack(more)[None], [n, 1])], 1)
  mine = _AllToAllSum(chunks, n)
  out = tf.cast(mine[:shard], dtype)
  if extras is None:
    return out
  return out, (tf.unstack(mine[shard:], num=len(more)) if more else [])


def _AllToAllSum(chunks, n):
  """Row r of the sum over replicas of `chunks` [n, k], on replica r."""
  ctx = tf.distribute.get_replica_context()
  if tf.executing_eagerly():
    summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, chunks)
    return summed[int(tf.get_static_value(ctx.replica_id_in_sync_group))]
  group_key, instance_key, token = _Keys()
  got = tf.raw_ops.CollectiveAllToAllV2(
      input=chunks, group_size=n, group_key=group_key,
      instance_key=instance_key, ordering_token=[token.handle])
  mine = got[0]  # Rows of dim 0: contiguous slices, not copied.
  for r in range(1, n):  # In replica order (not a tree: order documented).
    mine = mine + got[r]
  return mine


def WeightedAllReduce(grads, weight, extras=()):
  """Sums `weight * grad` and `weight` (and extras) over replicas.

  Args:
    grads: list of gradients (dense Tensors or tf.IndexedSlices, which are
      densified) already multiplied by this replica's weight, or None.
    weight: float32 scalar: this replica's total loss weight.
    extras: more float tensors to sum along (e.g. counts of dropped
      micro-batches), in the same collective.

  Returns:
    (summed_grads, summed_weight, summed_extras): lists like the inputs
    (None stays None). Identity with one replica.
  """
  if NumReplicas() <= 1:
    return list(grads), weight, list(extras)
  present = [i for i, g in enumerate(grads) if g is not None]
  dense = [tf.convert_to_tensor(grads[i]) for i in present]
  summed = AllReduceSum(dense + [weight] + list(extras))
  out = list(grads)
  for i, g in zip(present, summed[:len(present)]):
    out[i] = g
  return out, summed[len(present)], summed[len(present) + 1:]


def AnyReplica(flags):
  """For each bool flag: is it True on at least one replica (one collective).

  How the replicas take one decision together (docs/distributed.md, "One
  decision for all replicas"): each replica computes its own flags (e.g.
  "my gradient is not finite", "the tracker rejects this step"), and every
  replica gets back the same answers, so all of them skip or apply the
  same update. All the flags go through one small all-reduce (a float32
  vector of len(flags) 0/1 values, summed), whatever their number.

  Args:
    flags: non-empty list of bool scalar tensors.

  Returns:
    A list like `flags` of bool scalars: the OR over the replicas in sync.
    With one replica (or outside a replica context) the flags themselves,
    and no collective is added.
  """
  flags = [tf.convert_to_tensor(f) for f in flags]
  if NumReplicas() <= 1:
    return flags
  packed = tf.stack([tf.cast(f, tf.float32) for f in flags])
  (summed,) = AllReduceSum([packed])
  return tf.unstack(summed > 0.0, num=len(flags))


def AllReduceMean(var_grads, weight, losses_finite=None):
  """sum(weight * grad) / sum(weight) over the replicas, in one collective.

  A replica whose weight is 0 (no example: its mean loss, and maybe its
  gradient, is NaN) contributes weight 0 and a zero gradient
  (`multiply_no_nan`), and its loss is not checked. The losses' verdict
  rides in the same collective, so every replica gets the same one.

  Args:
    var_grads: NestedMap of VarGrad, this replica's (unweighted) gradients.
    weight: float32 scalar, this replica's loss weight (examples).
    losses_finite: None, or a bool scalar: this replica's losses are finite.

  Returns:
    (var_grads, losses_finite, empty): the mean gradient; None, or a bool
    scalar, True when no replica with examples has a non-finite loss; a
    bool scalar, True when no replica has an example (sum(weight) <= 0: the
    update is skipped, reason 'other').
  """
  vgs = var_grads.Flatten()
  weighted = [tf.math.multiply_no_nan(tf.convert_to_tensor(vg.grad),
                                      tf.cast(weight, vg.grad.dtype))
              for vg in vgs]
  extras = []
  if losses_finite is not None:
    extras = [tf.where(tf.logical_and(weight > 0.0,
                                      tf.logical_not(losses_finite)),
                       1.0, 0.0)]
  summed, wsum, extras = WeightedAllReduce(weighted, weight,
                                                         extras)
  if losses_finite is not None:
    losses_finite = tf.equal(extras[0], 0.0)
  return var_grads.Pack([
      VarGrad(vg.var, tf.math.divide_no_nan(g, tf.cast(wsum, g.dtype)))
      for vg, g in zip(vgs, summed)]), losses_finite, wsum <= 0.0


def ScatteredMean(state, var_grads, weight, losses_finite=None):
  """This replica's slices of sum(weight * grad) / sum(weight).

  As AllReduceMean (a replica with weight 0 contributes
  zeros; the losses' verdict rides along), with one reduce-scatter per
  dtype of the flat layout instead of the all-reduce.

  Args:
    state: the learner's ShardedState (sharded_state.py; bound under N > 1):
      its `layouts` ({dtype name: layout with `.variables`}) and
      `ShardProxy(dtype)` are used.
    var_grads: NestedMap of VarGrad, this replica's unweighted gradients,
      one for every variable of the layouts (else use the all-reduce).
    weight: float32 scalar, this replica's loss weight.
    losses_finite: None, or a bool scalar: this replica's losses are finite.

  Returns:
    (sliced, losses_finite, empty): `sliced` a NestedMap {dtype name:
    VarGrad(the rule's shard proxy of that dtype, [s] mean slice)}; None
    or the bool scalar agreed over the replicas; a bool scalar, True when
    no replica has an example.
  """
  grads = {id(vg.var): vg.grad for vg in var_grads.Flatten()}
  extras = [weight]
  if losses_finite is not None:
    extras.append(tf.where(tf.logical_and(weight > 0.0,
                                          tf.logical_not(losses_finite)),
                           1.0, 0.0))
  slices, summed = {}, None
  for dtype, layout in sorted(state.layouts.items()):
    weighted = [tf.math.multiply_no_nan(
        tf.convert_to_tensor(grads[id(v)]), tf.cast(weight, v.dtype))
                for v in layout.variables]
    if summed is None:
      slices[dtype], summed = ReduceScatterSum(weighted,
                                                             extras)
    else:
      slices[dtype] = ReduceScatterSum(weighted)
  wsum = summed[0]
  if losses_finite is not None:
    losses_finite = tf.equal(summed[1], 0.0)
  sliced = NestedMap({
      dtype: VarGrad(state.ShardProxy(dtype), tf.math.divide_no_nan(
          g, tf.cast(wsum, g.dtype))) for dtype, g in slices.items()})
  return sliced, losses_finite, wsum <= 0.0


def ScatteredNorms(grads, prescale):
  """The global gradient norm from this replica's slices (one collective).

  Args:
    grads: this replica's gradient slices (list of [s] tensors).
    prescale: None or a float32 scalar multiplying the gradient.

  Returns:
    (pipeline.GradNorms(half: the slices' own sum(g^2) / 2, norm: the
    global L2 norm, the same on every replica), {grad_norm/all: norm}).
  """
  half = pipeline.HalfSquaredNorms(grads)
  (total,) = AllReduceSum([tf.add_n(half + [tf.constant(0.)])])
  if prescale is not None:
    total = total * prescale * prescale
  norm = tf.sqrt(2.0 * total)
  return pipeline.GradNorms(half, norm), {pipeline.GRAD_NORM: norm}
