"""Replica-local training: what Easgd and LocalSgd share.

Under tf.distribute every other optimizer here trains one set of weights:
the learner all-reduces the gradients (learner/cross_replica.py) and every
replica applies the same update, so the copies of a MirroredVariable stay
bit-identical. A replica-local wrapper (class flag `REPLICA_LOCAL = True`)
turns that off on purpose:

  * the learner does NOT all-reduce the gradients: each replica r applies
    the inner optimizer to its own copy x_r of every bound variable with the
    gradient of its own batch (the copies of the MirroredVariable diverge;
    the inner optimizer's slots, also mirrored variables, diverge with them);
  * the learner's gradient pipeline acts per replica: L1/L2, the global-norm
    clip (the norm of this replica's gradient) and the grad_norm_tracker
    (fed this replica's norm; its state is replica-local and not saved per
    replica) see one replica's gradient;
  * the skip decision stays global: each replica's skip flags (non-finite
    loss or gradient, clip-to-zero, tracker) are ORed over the replicas in
    the learner's one small collective (cross_replica.AnyReplica), so all
    replicas skip or apply together and `num_updates` is the same on every
    replica. The synchronizations below are collectives that every replica
    must enter at the same update; a per-replica skip would let the update
    counts drift apart and deadlock the next one;
  * every `tau` applied updates the wrapper synchronizes the copies with one
    all-reduce (cross_replica.AllReduceSum, given by the learner): Easgd's
    elastic step, LocalSgd's average. Between synchronizations no
    collective moves the weights.

The weights to evaluate (Easgd's center, LocalSgd's last average) are the
BaseAveraging copies (`_averages`: one mirrored variable per bound variable,
identical on every replica), so eval, evaler, export and train_and_eval read
them with nothing else to register (wrapper.BaseAveraging).

Checkpoints: a MirroredVariable saves only its primary copy, so each
replica-local variable (the bound variables and every variable of the inner
optimizer) also gets a `ReplicaCopies` object in this wrapper's
`_replica_copies`, which saves all the replicas' copies as one tensor of
shape [N, ...] (row r: replica r, in the strategy's global replica order;
gathered with `strategy.gather`, a collective under MultiWorkerMirrored) and
restores row r into replica r's copy, after the variable's own restore (a
registered checkpoint saver: TF runs those last). A save costs one gather
of the weights and the inner optimizer's state per save (N times their
size in the file). A resume on the same number of replicas is
bit-identical; a different number is refused (one line).

`ReplicaLocalVariables()` lists the variables whose copies differ on
purpose, for `distribution.AssertReplicasIdentical(..., replica_local=...)`,
which keeps checking every other variable.

Only the learner's own optimizer may be replica-local (not inside a
Composite, another wrapper or a gradient accumulation): `Configure`
refuses the rest, because the learner's all-reduce is all or nothing, and
gives the top one the learner's collectives (learner/cross_replica.py,
a layer above this one).
"""

import contextlib

import tensorflow as tf
from tensorflow.python.saved_model import registration  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.trackable import base as trackable_lib  # pylint: disable=g-direct-tensorflow-import

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper
from params import checks

# The attribute naming the ReplicaCopies objects in a checkpoint
# ('<wrapper path>/_replica_copies/<sanitized name>/.ATTRIBUTES/replicas').
_COPIES_ATTR = '_replica_copies'
_COPIES_KEY = 'replicas'


def _Copies(var):
  """This process's copies of `var` (a MirroredVariable's values, or [var])."""
  values = getattr(var, 'values', None)
  return list(values) if values else [var]


def _StrategyOf(var):
  """The strategy `var` was created under, or None (plain variable)."""
  if hasattr(var, 'values') and hasattr(var, 'distribute_strategy'):
    return var.distribute_strategy
  return None


def GatherCopies(var):
  """All replicas' copies of `var` as one tensor of shape [N, *var.shape].

  Row r is global replica r's copy (under MultiWorkerMirroredStrategy the
  other workers' rows come through `strategy.gather`, a collective every
  worker must run; saving a checkpoint does). A plain variable gives
  [1, *shape].

  Args:
    var: a tf.Variable or a MirroredVariable.

  Returns:
    A Tensor of var.dtype, exact copies (no arithmetic).
  """
  strategy = _StrategyOf(var)
  if strategy is None:
    return tf.expand_dims(var.read_value(), 0)
  per_replica = strategy.run(lambda: tf.expand_dims(tf.identity(var), 0))
  return strategy.gather(per_replica, axis=0)


def ScatterCopies(var, stacked):
  """Sets replica r's copy of `var` to `stacked[r]`, for every local replica.

  Args:
    var: as `GatherCopies`.
    stacked: Tensor [N, *var.shape] (what `GatherCopies` returned).

  Raises:
    ReplicaCountError (a ValueError): if N is not this strategy's number
      of replicas (the checkpoint was written with another replica count).
  """
  _CheckCount(var, stacked)
  strategy = _StrategyOf(var)
  if strategy is None:
    var.assign(stacked[0])
    return

  def _Assign():
    ctx = tf.distribute.get_replica_context()
    var.assign(tf.gather(stacked, ctx.replica_id_in_sync_group))

  strategy.run(_Assign)


class ReplicaCountError(ValueError):
  """A checkpoint holds the copies of another number of replicas."""


def CheckpointReplicaCount(reader):
  """The replica count whose copies a checkpoint holds, or None.

  Read from the shapes of its `ReplicaCopies` keys
  ('.../_replica_copies/<name>/.ATTRIBUTES/replicas', [N, ...]), without
  restoring anything, so a trainer can refuse a resume on another count
  before it writes a file.

  Args:
    reader: a `tf.train.load_checkpoint` reader of the checkpoint.

  Returns:
    N (int), or None when the checkpoint has no replica-local copies.
  """
  counts = sorted({int(shape[0]) for key, shape in
                   reader.get_variable_to_shape_map().items()
                   if '/%s/' % _COPIES_ATTR in key and key.endswith(
                       '/.ATTRIBUTES/' + _COPIES_KEY) and shape})
  return counts[-1] if counts else None


def CheckResumeReplicaCount(learners, checkpoint_path, num_replicas):
  """Refuses to resume EASGD / local SGD on another replica count.

  A replica-local optimizer saves each replica's copy, so its checkpoint
  restores only on as many replicas as wrote it. Checked on the
  checkpoint's shapes (`CheckpointReplicaCount`), so a trainer can refuse
  before it writes a file (no events file, no params.txt). A checkpoint
  that cannot be read is left to the restore to report.

  Args:
    learners: the task's built learners.
    checkpoint_path: the checkpoint the run would resume from, or None.
    num_replicas: this run's `strategy.num_replicas_in_sync`.

  Raises:
    ReplicaCountError: one line naming the checkpoint, both counts and
      the fixes, when a learner's optimizer is replica-local and the
      checkpoint holds the copies of another number of replicas.
  """
  if not checkpoint_path or not any(IsReplicaLocal(l.optimizer)
                                    for l in learners):
    return
  try:
    saved = CheckpointReplicaCount(tf.train.load_checkpoint(checkpoint_path))
  except (tf.errors.OpError, ValueError):  # Damaged: the restore says so.
    return
  if saved and saved != num_replicas:
    raise ReplicaCountError(
        'Checkpoint %s holds the copies of %d replicas of a replica-local '
        'optimizer (EASGD / local SGD) but this run has %d; nothing was '
        'written. Resume it on %d replicas (e.g. --cpu_devices=%d or %d '
        'workers), or train on %d in a new --logdir; --mode=eval, evaler '
        'and export read its center on any count.' % (
            checkpoint_path, saved, num_replicas, saved, saved, saved,
            num_replicas))


def _CheckCount(var, stacked):
  """Raises ReplicaCountError unless stacked.shape[0] is this run's count."""
  strategy = _StrategyOf(var)
  n = strategy.num_replicas_in_sync if strategy is not None else 1
  if int(stacked.shape[0]) != n:
    raise ReplicaCountError(
        'Replica-local variable %r: the checkpoint holds the copies of %d '
        'replicas but this run has %d. Resume EASGD / local SGD training '
        'with %d replicas (the eval jobs read the center on any count).' %
        (var.name, int(stacked.shape[0]), n, int(stacked.shape[0])))


class ReplicaCopies(trackable_lib.Trackable):
  """Checkpoints every replica's copy of one replica-local variable.

  Saved as one tensor [N, *shape] (`GatherCopies`) under the key
  '<path of this object>/.ATTRIBUTES/replicas' (the path ends in
  '_replica_copies/<sanitized variable name>'), and restored row by row
  into the replicas' copies (`ScatterCopies`). The variable is not a
  dependency of this object: its primary copy is saved where it lives, and
  its own restore writes that value to every copy. So that this restore
  comes after it whatever the order of the keys, these objects are saved
  and restored by a registered checkpoint saver, which TF runs after every
  ordinary restore (`_SaveCopies` / `_RestoreCopies`).

  Args:
    var: the tf.Variable / MirroredVariable.
  """

  def __init__(self, var):
    self._var = var
    # Traced once each (an eager strategy.run per save would warn and be
    # slow); not tracked.
    self.__dict__['_fns'] = {}

  @property
  def variable(self):
    """The variable whose copies this object saves."""
    return self._var

  def Gather(self):
    """`GatherCopies(variable)`, in a tf.function traced once."""
    fns = self.__dict__['_fns']
    if 'gather' not in fns:
      fns['gather'] = tf.function(lambda: GatherCopies(self._var),
                                  autograph=False)
    return fns['gather']()

  def Scatter(self, stacked):
    """`ScatterCopies(variable, stacked)`, in a tf.function.

    Raises:
      ValueError: as `ScatterCopies` (checked before tracing).
    """
    _CheckCount(self._var, stacked)
    fns = self.__dict__['_fns']
    if 'scatter' not in fns:
      fns['scatter'] = tf.function(
          lambda value: ScatterCopies(self._var, value), autograph=False)
    fns['scatter'](stacked)


def _Key(object_name):
  return '%s/.ATTRIBUTES/%s' % (object_name, _COPIES_KEY)


def _SaveCopies(trackables, file_prefix):
  """The registered save: one [N, ...] tensor per ReplicaCopies (SaveV2).

  Args:
    trackables: {object path: ReplicaCopies}.
    file_prefix: str tensor, where TF wants this shard.

  Returns:
    `file_prefix` (the shard TF merges into the checkpoint).
  """
  items = sorted(trackables.items())  # The same gather order on every worker.
  tf.raw_ops.SaveV2(
      prefix=file_prefix, tensor_names=[_Key(n) for n, _ in items],
      shape_and_slices=[''] * len(items),
      tensors=[t.Gather() for _, t in items])
  return file_prefix


def _RestoreCopies(trackables, merged_prefix):
  """The registered restore: reads each [N, ...] tensor, scatters its rows."""
  items = sorted(trackables.items())
  values = tf.raw_ops.RestoreV2(
      prefix=merged_prefix, tensor_names=[_Key(n) for n, _ in items],
      shape_and_slices=[''] * len(items),
      dtypes=[t.variable.dtype for _, t in items])
  for (_, t), value in zip(items, values):
    t.Scatter(value)


registration.register_checkpoint_saver(
    package='tf_learner', name='ReplicaCopies',
    predicate=lambda x: isinstance(x, ReplicaCopies),
    save_fn=_SaveCopies, restore_fn=_RestoreCopies)


def IsReplicaLocal(optimizer):
  """True if `optimizer` (a BaseOptimizer) is a replica-local wrapper."""
  return type(optimizer).REPLICA_LOCAL


def DigestedWeights(optimizer):
  """{id(bound variable): its evaluated copy} for a replica-local optimizer.

  The weights of Easgd and LocalSgd differ between replicas on purpose;
  their evaluated copies (the center, the averages) are what the workers
  must agree on, so the trainer's weights digest compares those instead.

  Args:
    optimizer: a BaseOptimizer (a learner's top optimizer).

  Returns:
    dict; empty when `optimizer` is not replica-local.
  """
  if not type(optimizer).REPLICA_LOCAL:
    return {}
  return {id(var): optimizer.GetAverage(var)
          for var in optimizer.bound_variables.values()}


def Configure(where, optimizer, collectives):
  """The learner's check and set-up: is `optimizer` replica-local?

  Refuses a replica-local wrapper anywhere but at the top, and gives the
  top one the learner's collectives (this layer does not import them).

  Args:
    where: how messages name the owner (e.g. "Learner 'loss'").
    optimizer: the learner's optimizer.
    collectives: what has `AllReduceSum(tensors)` and `NumReplicas()`
      (the module learner/cross_replica.py).

  Returns:
    True if `optimizer` itself is replica-local (the learner then does not
    all-reduce the gradients).

  Raises:
    ValueError: if one is found below the top (inside a Composite, another
      wrapper or a gradient accumulation), naming it.
  """
  stack = list(getattr(optimizer, 'inner_optimizers', []))
  while stack:
    opt = stack.pop()
    if IsReplicaLocal(opt):
      raise ValueError(
          '%s: %s %r is inside %s; a replica-local wrapper (Easgd, LocalSgd) '
          'turns off the learner\'s gradient all-reduce for every variable, '
          'so it must be the learner\'s optimizer itself. Make it the '
          'outermost optimizer (no gradient accumulation, Composite or other '
          'wrapper around it).' % (where, type(opt).__name__, opt.path,
                                   type(optimizer).__name__))
    stack.extend(getattr(opt, 'inner_optimizers', []))
  if not IsReplicaLocal(optimizer):
    return False
  optimizer.UseCollectives(collectives)
  return True


class _OneReplica:
  """The collectives of one replica: the identity."""

  @staticmethod
  def AllReduceSum(tensors):
    return list(tensors)

  @staticmethod
  def NumReplicas():
    return 1


class BaseReplicaLocal(wrapper.BaseAveraging):
  """Base of Easgd and LocalSgd: replica copies synchronized every tau.

  A subclass implements `_Synchronize()` (the ops of one synchronization,
  run after every tau-th applied update, on every replica together).

  Raises:
    ValueError: at construction, if tau is not an int >= 1, or mode is not
      'sync' ('async', MoXing's asynchronous mode, is refused: TF2's
      collectives are synchronous), or as `BaseWrapper`.
  """

  REPLICA_LOCAL = True
  INNER_OPTIMIZER_DOC = ('Params of the inner optimizer: it updates each '
                         'replica\'s own copy with that replica\'s gradient.')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('tau', 4,
             'Communication period, in applied updates (this wrapper\'s '
             'num_updates): the replicas synchronize after every tau-th '
             'update; an int >= 1.')
    p.Define('mode', 'sync',
             '\'sync\' only: every replica synchronizes at the same update '
             '(one all-reduce). MoXing\'s \'async\' mode is refused.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['tau'] = checks.Int(1, example=4, why='updates between syncs')
    return specs

  def __init__(self, params):
    super().__init__(params)
    mode = self.params.mode
    if mode != 'sync':
      raise ValueError(
          '%s: mode=%r is not supported%s. Set mode=\'sync\' (the paper\'s '
          'synchronous form, every replica at the same update).' % (
              checks.Where(self), mode,
              ': the asynchronous form needs a parameter server that each '
              'worker talks to at its own pace, and TF2\'s collectives '
              '(MirroredStrategy, MultiWorkerMirroredStrategy) are '
              'synchronous' if mode == 'async' else ''))
    self._replica_copies = {}  # Named by _COPIES_ATTR in checkpoints.

  def Bind(self, vmap):
    """Binds; creates the averages and a ReplicaCopies per local variable."""
    super().Bind(vmap)
    for var in self.ReplicaLocalVariables():
      key = var_grad_lib.SanitizedName(var_grad_lib.VarName(var))
      if key not in self._replica_copies:
        self._replica_copies[key] = ReplicaCopies(var)
    return self

  def ReplicaLocalVariables(self):
    """The variables whose replica copies differ on purpose.

    The bound variables and every variable of the inner optimizer (slots,
    counters; not the task's global step it may hold, which stays
    mirrored), in a fixed order.
    """
    out, seen = [], {id(self.GlobalStep()), id(self.optimizer.GlobalStep())}
    for var in (list(self.bound_variables.values()) +
                list(self.optimizer.variables)):
      if id(var) not in seen:
        seen.add(id(var))
        out.append(var)
    return out

  def SyncNext(self):
    """bool scalar: whether the next update ends with a synchronization."""
    tau = tf.constant(self.params.tau, tf.int64)
    return tf.equal(tf.math.floormod(self.num_updates + 1, tau), 0)

  def _ApplyWrapped(self, lr, var_grads):
    """The inner update on this replica, then the sync after every tau-th."""
    sync = self.SyncNext()
    op = self.optimizer.Apply(lr, var_grads)
    with tf.control_dependencies([op] if op is not None else []):
      return [op, tf.cond(sync, self._Synchronize, tf.no_op)]

  def _Synchronize(self):
    raise NotImplementedError('%s must implement _Synchronize.' %
                              type(self).__name__)

  def UseCollectives(self, collectives):
    """Takes the learner's collectives (see `Configure`); not tracked."""
    self.__dict__['_collectives'] = collectives

  def _Collectives(self):
    """The learner's collectives; without them, one replica only."""
    collectives = self.__dict__.get('_collectives')
    if collectives is not None:
      return collectives
    ctx = tf.distribute.get_replica_context()
    if ctx is not None and ctx.num_replicas_in_sync > 1:
      raise RuntimeError(
          '%s: a replica-local wrapper under %d replicas needs the '
          'learner\'s collectives; use it as a Learner\'s optimizer.' %
          (self.path, ctx.num_replicas_in_sync))
    return _OneReplica

  def _AllReduceSum(self, tensors):
    """Sums over the replicas in one collective (cross_replica)."""
    return self._Collectives().AllReduceSum(tensors)

  def _NumReplicas(self):
    """Replicas in sync (Python int)."""
    return self._Collectives().NumReplicas()

  def SwapAverages(self):
    """Context manager: every replica's copy holds the average inside.

    On exit each replica's own copy is put back (not the primary copy on
    all of them, which a plain swap of a MirroredVariable would do). Eager
    only, outside `strategy.run`.

    Raises:
      RuntimeError: if called inside a tf.function.
    """
    if not tf.executing_eagerly():
      raise RuntimeError(
          '%s: SwapAverages() swaps values eagerly; call it outside '
          'tf.function, around the evaluation loop.' % self.path)
    return self._SwapCopies()

  @contextlib.contextmanager
  def _SwapCopies(self):
    pairs = self._VarsAndAverages()
    saved = [(copy, tf.identity(copy.read_value()))
             for var, _ in pairs for copy in _Copies(var)]
    for var, avg in pairs:
      value = avg.read_value()
      for copy in _Copies(var):
        copy.assign(value)
    try:
      yield self
    finally:
      for copy, value in saved:
        copy.assign(value)
