"""ZeRO-1 for the wrappers' state: averaging copies and accumulators sharded.

A wrapper that declares `SHARDS_WITH_RULE = True` (wrapper.BaseWrapper;
Ema, Lookahead and SWA, through wrapper.BaseAveraging) above a sharded
elementwise rule (sharded_state.py) keeps its per-variable copies (the
average, the slow weights) as flat shards in the rule's layout: per dtype
one ON_READ variable [s], replica r holding elements [r s, (r + 1) s) of the
copies' flat concatenation, as the rule's slots. Per replica the copies take
1/N of their unsharded bytes (plus the padding, < N elements).

Its move is elementwise (`BaseAveraging._ApplyAndMove`: `move(w, copy)` ->
(new copy, new weights or None)), so it runs on replica r's shard of the
new weights after the rule's step and before the weights' all-gather
(`ShardedState.AfterStep`): a Lookahead synchronization that sets the
weights to the slow copy needs no gather of its own, and the numbers are
the unsharded ones element for element.

Checkpoints keep the unsharded format: each copy is saved under its
unsharded key ('<wrapper>/_averages/<name>/...') and shape by a
sharded_state._SlotView, so a checkpoint restores on any replica count and
the read-only jobs (eval, evaler, export) read it as any other. `GetAverage`
returns that view: its `read_value()` gathers the full copy and its
`assign()` writes each replica's part, so `SwapAverages()` (the trainer's
evaluations) swaps the gathered copies in and back.
GradientAccumulation with sync_on_apply=False (every micro-batch already
all-reduced) keeps only the replica's slice of its sums in the same layout
(`WrapperShards.AddSlices`), all-gathered once per window (`Gathered`) for
the learner's pipeline; saved under the unsharded keys by the same views.
Source: Rajbhandari et al., "ZeRO", SC 2020 (stage 1), applied to the
wrappers' state.
"""

import tensorflow as tf

from learner.optimizers import sharded_state
from learner.optimizers import var_grad as var_grad_lib

# pylint: disable=protected-access


def Install(path, optimizer, p, all_gather):
  """`sharded_state.Install`, then the wrappers' copies in the same layout.

  Every wrapper between an optional outermost GradientAccumulation and the
  rule that declares `SHARDS_WITH_RULE` gets a `WrapperShards` of the
  rule's ShardedState (`ShardCopiesWith`, its contract), before `Bind`; so
  does that accumulation with sync_on_apply=False
  (`ShardAccumulatorsWith`: each replica keeps its slice of the sums), for
  an elementwise rule (flat slices; a WHOLE_TENSOR rule's accumulators stay
  full size).

  Args and Returns: as `sharded_state.Install` (the ShardedState or None).

  Raises:
    ValueError: as `sharded_state.Install`.
  """
  state = sharded_state.Install(path, optimizer, p, all_gather)
  # A WHOLE_TENSOR rule's home state (home_sharding.py) has no flat layout:
  # RuleToShard refuses averaging wrappers above it, and its accumulators
  # stay full size.
  if isinstance(state, sharded_state.ShardedState):
    for wrapper in sharded_state.Chain(optimizer)[0]:
      wrapper.ShardCopiesWith(WrapperShards(state))
    if (type(optimizer).IS_ACCUMULATION and
        not optimizer.params.sync_on_apply):
      optimizer.ShardAccumulatorsWith(WrapperShards(state))
  return state


class WrapperShards:
  """What a wrapper's copies ask of the rule's ShardedState (module doc).

  Args:
    state: the rule's ShardedState (not tracked; sharded once bound under
      N > 1 replicas).
  """

  def __init__(self, state):
    self._state = state

  @property
  def sharded(self):
    """True once the rule was bound under several replicas."""
    return self._state.sharded

  def CreateCopies(self, owner_path, name, from_weights=True):
    """As `CreateCopies` on the rule's state."""
    return CreateCopies(self._state, owner_path, name, from_weights)

  def AddSlices(self, shards, values):
    """Adds this replica's slice of `values` to `shards` (replica context).

    Args:
      shards: {dtype name: ON_READ variable [shard]} (`CreateCopies`).
      values: {variable name: tensor of the variable's shape} for every
        bound variable (an accumulator's micro-batch: all-reduced, so the
        same on every replica).

    Returns:
      list of ops.
    """
    replica = sharded_state._ReplicaId()
    ops = []
    for dtype, var in sorted(shards.items()):
      layout = self._state.layouts[dtype]
      piece = layout.Slice([tf.cast(values[var_grad_lib.VarName(v)], v.dtype)
                            for v in layout.variables], replica)
      ops.append(tf.raw_ops.AssignAddVariableOp(resource=var.handle,
                                                value=piece))
    return ops

  def Gathered(self, shards):
    """{variable name: full tensor} of `shards`, all-gathered (replica
    context: one all-gather per dtype, on every replica)."""
    out = {}
    for dtype, var in sorted(shards.items()):
      layout = self._state.layouts[dtype]
      mine = tf.ensure_shape(sharded_state._ShardVar(var).read_value(),
                             [layout.shard])
      flat = self._state._all_gather(mine)
      for v, value in zip(layout.variables, layout.Split(flat)):
        out[var_grad_lib.VarName(v)] = value
    return out

  def AfterStep(self, shards, move, pred=None):
    """Context manager: the next Apply moves `shards` by `move` (on this
    replica's shards, after the rule's step; `ShardedMove`)."""
    return self._state.AfterStep(ShardedMove(self._state, shards, move, pred))


def CreateCopies(state, owner_path, name, from_weights=True):
  """The sharded copies of a wrapper, starting at the weights (at Bind).

  Args:
    state: the rule's ShardedState, sharded (its layouts made at Bind).
    owner_path: the wrapper's path (variable names).
    name: the copies' name (`AVERAGE_NAME`).
    from_weights: True: copies of the weights (an average, counted in
      `state.copies`, the start-up line's bytes); False: zeros, not counted
      (an accumulation's sums).

  Returns:
    ({dtype name: ON_READ variable [shard]}, {sanitized variable name:
    checkpointed view of that variable's part}).
  """
  shards, views = {}, {}
  for dtype, layout in sorted(state.layouts.items()):
    with tf.init_scope():
      var = tf.Variable(
          tf.zeros([layout.shard], layout.variables[0].dtype),
          trainable=False, name='%s/zero_%s_%s' % (owner_path, name, dtype),
          synchronization=tf.VariableSynchronization.ON_READ,
          aggregation=tf.VariableAggregation.NONE)
      if from_weights:
        sharded_state._FillFromWeights(var, layout)
        state.copies.setdefault(dtype, []).append(var)
    shards[dtype] = var
    for i, v in enumerate(layout.variables):
      key = var_grad_lib.SanitizedName(var_grad_lib.VarName(v))
      views[key] = sharded_state._SlotView(var, layout, i)
  return shards, views


def ShardedMove(state, shards, move, pred=None):
  """The `AfterStep` callable that moves a wrapper's copy shards.

  Args:
    state: the rule's ShardedState.
    shards: {dtype name: the wrapper's ON_READ copy variable [shard]}.
    move: callable(w, copy) -> (new copy, new weights or None), elementwise.
    pred: None, or a bool scalar: move only when it is true.

  Returns:
    callable(replica) -> list of ops, run in a replica context on this
    replica's shards (the weights' shard, `state.ShardProxy(dtype)`, holds
    the rule's new values until the all-gather).
  """
  def _Move(replica):
    del replica  # The shard variables are this replica's copies.

    def _Moves():
      ops = []
      for dtype, var in sorted(shards.items()):
        w = state.ShardProxy(dtype)
        copy = sharded_state._ShardVar(var)
        new_copy, new_w = move(w.read_value(), copy.read_value())
        ops.append(copy.assign(new_copy))
        if new_w is not None:
          ops.append(w.assign(new_w))
      return tf.group(ops)

    return [_Moves() if pred is None else tf.cond(pred, _Moves, tf.no_op)]

  return _Move
