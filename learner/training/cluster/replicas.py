"""Replicas and workers after start-up: agreement, logdirs, peer failures.

`WeightsDigest` / `ReplicaMismatches` / `AssertReplicasIdentical` (replicas
never silently diverge); `WorkerLogdir` / `RemoveWorkerLogdir` (the chief
writes the logdir, other workers a temporary directory, as TF's
multi-worker tutorial documents); `ReportPeerFailure` turns a collective's
error after a peer died into a one-line `PeerFailureError` with the way to
resume. Part of `distribution` (its facade).
"""

import hashlib
import os
import shutil

import numpy as np
import tensorflow as tf

from learner.training.cluster import strategy as strategy_lib


def WeightsDigest(variables):
  """sha256 hex digest of variables' names, dtypes, shapes and values.

  Two workers of a synchronous run end with bit-identical weights; the
  launcher compares their digests (each trainer worker prints
  `Final weights: sha256 <digest>`) instead of reading their checkpoints.

  Args:
    variables: iterable of tf.Variable (mirrored ones read this worker's
      copy).

  Returns:
    str, 64 hex digits; the order of `variables` does not matter.
  """
  digest = hashlib.sha256()
  for var in sorted(variables, key=lambda v: v.name):
    value = np.asarray(var.numpy())
    digest.update(('%s %s %s\n' % (var.name, value.dtype.str,
                                    value.shape)).encode())
    digest.update(np.ascontiguousarray(value).tobytes())
  return digest.hexdigest()


def ReplicaMismatches(variables, replica_local=()):
  """The mirrored variables whose copies differ between this worker's replicas.

  The debug check of docs/distributed.md ("One decision for all
  replicas"): after any step of a synchronous run every replica holds the
  same weights, bit for bit, so this returns [] then. Variables with one
  copy, per-replica ones (synchronization ON_READ, e.g. the accumulators
  of `sync_on_apply`) and the ones listed in `replica_local` are not
  compared. Reads every copy to the host: for tests and debugging, not for
  every step. (Across workers compare `WeightsDigest`.)

  Args:
    variables: iterable of variables (e.g. `task.vars.Flatten()`), mirrored
      or not.
    replica_local: variables trained per replica ON PURPOSE, whose copies
      differ between synchronizations: an Easgd / LocalSgd optimizer's
      `ReplicaLocalVariables()` (docs/distributed.md, "Replica-local
      training"). Every other variable is still checked.

  Returns:
    list of str, one per differing variable: its name, the replica that
    differs from replica 0 and the largest absolute difference.
  """
  out = []
  skipped = {id(v) for v in replica_local}
  for var in variables:
    copies = getattr(var, 'values', None)
    if (not copies or len(copies) < 2 or id(var) in skipped or
        getattr(var, 'synchronization', None) ==
        tf.VariableSynchronization.ON_READ):
      continue
    first = np.asarray(copies[0].numpy())
    for r, copy in enumerate(copies[1:], 1):
      value = np.asarray(copy.numpy())
      if value.tobytes() != first.tobytes():
        diff = np.abs(value.astype(np.float64) - first.astype(np.float64))
        out.append('%s: replica %d differs from replica 0 (max |diff| %s)' %
                   (var.name, r, np.nanmax(diff) if diff.size else 0.0))
        break
  return out


def AssertReplicasIdentical(variables, replica_local=()):
  """Raises AssertionError naming every variable of `ReplicaMismatches`.

  Args:
    variables, replica_local: as `ReplicaMismatches`.

  Raises:
    AssertionError: if a mirrored variable's copies differ between this
      worker's replicas (the replicas diverged: a per-replica decision).
  """
  bad = ReplicaMismatches(variables, replica_local)
  if bad:
    raise AssertionError('The replicas diverged: ' + '; '.join(bad))


def WorkerLogdir(logdir, strategy=None):
  """Directory this process writes checkpoints and summaries to.

  The chief writes to `logdir`; every other worker must still take part in
  saving (checkpoint saving runs collectives) but writes to
  `logdir/worker_tmp/<task_type>_<task_id>`, which it should remove with
  `RemoveWorkerLogdir` when done (TF multi-worker tutorial).

  Args:
    logdir: str, the run's log directory.
    strategy: tf.distribute.Strategy; default the current one.

  Returns:
    str.
  """
  strategy = strategy or tf.distribute.get_strategy()
  if strategy_lib.IsChief(strategy):
    return logdir
  task_type, task_id = strategy_lib.TaskOf(strategy)
  return os.path.join(logdir, 'worker_tmp', '%s_%s' % (task_type, task_id))


def RemoveWorkerLogdir(logdir, strategy=None):
  """Deletes a non-chief worker's temporary directory; no-op on the chief."""
  path = WorkerLogdir(logdir, strategy)
  if path != logdir:
    shutil.rmtree(path, ignore_errors=True)


# Errors a collective op raises when a peer worker died, hung or restarted.
_PEER_FAILURE_ERRORS = (tf.errors.UnavailableError,
                        tf.errors.DeadlineExceededError,
                        tf.errors.FailedPreconditionError,
                        tf.errors.AbortedError, tf.errors.CancelledError)


class PeerFailureError(RuntimeError):
  """A multi-worker run lost a peer: restart the whole group to resume."""

class ReportPeerFailure:
  """Context manager turning a collective's peer-failure error into a clear one.

  Under `MultiWorkerMirroredStrategy`, when a worker dies the survivors'
  collectives fail (measured here: UnavailableError about 10 s later, from
  the coordination service's heartbeat check; at most the collective
  timeout of `CreateStrategy`). Wrap the training loop in
  `with ReportPeerFailure(strategy):` to re-raise such an error as
  `PeerFailureError` saying what happened and how to resume. Without a
  cluster it changes nothing.

  Args:
    strategy: tf.distribute.Strategy; default the current one.

  Raises:
    PeerFailureError: from the wrapped block, for a peer failure under
      multi_worker (the original error is its __cause__).
  """

  def __init__(self, strategy=None):
    self._strategy = strategy

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc, tb):
    strategy = self._strategy or tf.distribute.get_strategy()
    task_type, task_id = strategy_lib.TaskOf(strategy)
    if (exc is None or task_type is None or
        not isinstance(exc, _PEER_FAILURE_ERRORS)):
      return False
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    telling = [l for l in lines if any(
        w in l.lower() for w in ('abort', 'unhealthy', 'deadline', 'timed out',
                                 'timeout', 'unavailable', 'connect'))]
    first_line = telling or lines
    raise PeerFailureError(
        'Worker %s:%s: a collective op failed with %s, which means another '
        'worker of this multi-worker run stopped, restarted or is '
        'unreachable (%s). Training cannot continue with a missing replica. '
        'Restart the whole group (every worker, same TF_CONFIG cluster); it '
        'resumes from the chief\'s last checkpoint.' %
        (task_type, task_id, type(exc).__name__,
         first_line[0] if first_line else '')) from exc
