"""Step-keyed seeds for random layers: dropout a resumed run repeats.

A train step's random draws (dropout masks) must be a pure function of the
step, as the rate is (docs/DESIGN.md, "Schedule"), so that a run stopped
and resumed from a checkpoint draws exactly the masks of the uninterrupted
run, and two runs with the same params are the same run. TF's stateful
random ops (`tf.nn.dropout`) count their calls in the process instead, and
that count restarts at a resume. Lingvo does the same with its
`DeterministicDropoutLayer` (seeds from the global step).

`BaseTask` opens `StepSeeds(global_step)` around its train step; a random
layer asks `NextSeed(layer_seed)` for a stateless seed [2] int64 tensor:
(layer_seed + 1000003 * k, global_step), where k counts that layer's draws
in the traced step (a layer used twice gets two masks). Outside a
`StepSeeds` scope `NextSeed` returns None and layers keep their stateful
op.
"""

import contextlib
import threading

import tensorflow as tf

_STATE = threading.local()
_CALL_STRIDE = 1000003


@contextlib.contextmanager
def StepSeeds(step):
  """Within: `NextSeed` gives stateless seeds keyed by `step`.

  Args:
    step: int scalar (a Python int or an integer tensor, e.g. the task's
      global_step read at the start of the train step).
  """
  previous = getattr(_STATE, 'scope', None)
  _STATE.scope = (tf.cast(step, tf.int64), {})
  try:
    yield
  finally:
    _STATE.scope = previous


def NextSeed(layer_seed):
  """A [2] int64 seed for the next draw of the layer seeded `layer_seed`.

  Args:
    layer_seed: int, the layer's own seed (its random_seed, or a hash of
      its path), the same in every run of the same params.

  Returns:
    None outside a `StepSeeds` scope; else the tensor [layer_seed +
    1000003 * k, step], k = how many seeds this layer seed has been given
    in the scope before (0 for its first draw).
  """
  scope = getattr(_STATE, 'scope', None)
  if scope is None:
    return None
  step, counts = scope
  k = counts.get(layer_seed, 0)
  counts[layer_seed] = k + 1
  return tf.stack([tf.constant(int(layer_seed) + _CALL_STRIDE * k, tf.int64),
                   step])


def Snapshot():
  """The state of the open `StepSeeds` scope, for `Replay`; None outside one.

  Returns:
    (step int64 scalar tensor, a copy of the draw counts {layer_seed: k}),
    or None when no scope is open.
  """
  scope = getattr(_STATE, 'scope', None)
  if scope is None:
    return None
  step, counts = scope
  return step, dict(counts)


@contextlib.contextmanager
def Replay(snapshot):
  """Within: `NextSeed` repeats the seeds it gave after `Snapshot()`.

  A rematerialized layer (params/remat.py) runs its forward pass a second
  time in the backward pass; replaying the snapshot taken before the first
  run gives every random layer inside it the same seeds, so the same masks.
  The scope that was open before is restored on exit, its counts unchanged.

  Args:
    snapshot: a `Snapshot()` result (not None).
  """
  step, counts = snapshot
  previous = getattr(_STATE, 'scope', None)
  _STATE.scope = (step, dict(counts))
  try:
    yield
  finally:
    _STATE.scope = previous
