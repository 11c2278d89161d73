"""Group stops: the workers of a multi-worker run agree on a stop step.

On a cluster one worker is preempted by SIGTERM (SLURM's `--signal`,
Kubernetes' `terminationGracePeriodSeconds`), and its peers usually learn of
it later, or never. `StopAgreement` lets every worker learn it at the same
step: at each train-loop boundary (the trainer's loops end at its summary,
log, eval and save steps, identical on every worker) each worker puts the
signal it received, or 0, into one small all-reduce through the strategy's
own collectives. Every worker then reads the same list of signals, so all
stop after the same step, save the same checkpoint and exit with the same
status, with no clock, file or coordination key of our own.

The cost is one all-reduce of `num_replicas` int32 values per train loop
(not per step); docs/distributed.md, "Preemption on a cluster", gives the
measured time. Part of `distribution` (its facade).
"""

import tensorflow as tf

from learner.training.cluster import replicas
from learner.training.cluster import strategy as strategy_lib


def GroupStopSignals(strategy):
  """The trainer's `group` callable for `stops.SignalStop`, or None.

  Args:
    strategy: the run's tf.distribute.Strategy.

  Returns:
    None when this process is not one worker of a multi-worker cluster
    (its signals concern only itself); else a callable(signum or 0) ->
    list of int, every worker's signal (`StopAgreement.Signals`), which
    raises `replicas.PeerFailureError` when a peer is gone.
  """
  if not strategy_lib.IsMultiWorker(strategy):
    return None
  agreement = StopAgreement(strategy)

  def _Signals(signum):
    with replicas.ReportPeerFailure(strategy):
      return agreement.Signals(signum)
  return _Signals


class StopAgreement:
  """Exchanges every worker's stop signal with one all-reduce.

  Build it once per strategy (it holds one traced function) and call
  `Signals` at the same points on every worker: a worker that skips a call
  leaves its peers waiting in the collective until its timeout.

  Args:
    strategy: the run's tf.distribute.Strategy (MultiWorkerMirroredStrategy
      for a group; any strategy works, a local one exchanges nothing).
  """

  def __init__(self, strategy):
    self._strategy = strategy
    self._num_replicas = strategy.num_replicas_in_sync
    # Replicas of one worker: its local devices (1 per CPU worker). Replica
    # ids run worker by worker, so worker i holds ids [i*k, (i+1)*k).
    try:
      self._per_worker = max(1, len(strategy.extended.worker_devices))
    except RuntimeError:  # The default strategy: one replica, one process.
      self._per_worker = 1
    num = self._num_replicas

    def _Replica(signum):
      ctx = tf.distribute.get_replica_context()
      mine = tf.one_hot(ctx.replica_id_in_sync_group, num,
                        dtype=tf.int32) * signum
      return ctx.all_reduce(tf.distribute.ReduceOp.SUM, mine)

    self._exchange = tf.function(
        lambda signum: strategy.run(_Replica, args=(signum,)),
        autograph=False)

  def Signals(self, signum):
    """Every worker's stop signal, the same list on every worker.

    Args:
      signum: int or None: the signal number this worker received (e.g.
        15 for SIGTERM), None or 0 if none.

    Returns:
      list of int, one per worker in task-index order: its signal number,
      0 for a worker that received none.

    Raises:
      tf.errors.OpError: a peer is gone (the collective fails; the trainer
        reports it as a `PeerFailureError`).
    """
    out = self._exchange(tf.constant(int(signum or 0), tf.int32))
    total = self._strategy.experimental_local_results(out)[0].numpy()
    k = self._per_worker
    return [int(max(total[i:i + k])) for i in range(0, self._num_replicas, k)]
