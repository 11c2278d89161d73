"""Synchronous data parallelism on tf.distribute: strategies, input, roles.

The facade of the modules of this room, one per concern: `strategy.py` (strategies,
TF_CONFIG, start-up, roles), `cluster_env.py` (the TF_CONFIG a SLURM step or
a Kubernetes indexed Job implies, for `--cluster=slurm|jobset`), `datasets.py`
(input sharding and batching), `replicas.py` (agreement, worker logdirs, peer
failures) and `group_stop.py` (the workers' agreement on a stop by signal).
Callers use
`distribution.<Name>`; a new function goes in the module of its concern
and its name here.

This module is the one place where the trainer meets `tf.distribute`
(docs/DESIGN.md, "Distribution"); we write no cluster code of our own.

  * `CreateStrategy(name)` builds the strategy for the trainer's
    `--strategy=default|mirrored|multi_worker|tpu` flag. It must be called
    before any other TensorFlow op in the process (multi-worker collectives
    can only be configured at start-up); it checks this and says so.
    Multi-worker start-up is bounded: every worker must register with TF's
    coordination service within `register_timeout_seconds`, else every
    started worker raises a one-line `ClusterStartupError` naming the
    missing worker or the duplicate task index (`StartupErrorMessage`).
    With `cluster='slurm'|'jobset'` the TF_CONFIG is first derived from the
    cluster manager's environment and printed once (`ExportClusterConfig`,
    which the trainer's `--cluster` calls before it builds anything).
  * `CheckReplicasToAggregate(replicas_to_aggregate, num_replicas)` maps
    TF1's `SyncReplicasOptimizer(replicas_to_aggregate, total_num_replicas)`
    onto TF2: every replica aggregates every step; backup workers (fewer
    replicas to aggregate than replicas) are refused.
  * `DistributeDataset(strategy, dataset_fn, ...)` gives each worker its own
    shard (`ShardForWorker`), batched per replica (`WorkerDataset`), and
    skips the batches a resumed run already consumed (distributed iterators
    are not checkpointable in TF 2.21, so resume is by deterministic skip);
    `DistributeBatches` does the same for any per-pipeline batches function
    (the trainer's input, on one device too).
  * `IsChief`, `WorkerLogdir`, `RemoveWorkerLogdir`: the chief writes
    checkpoints and summaries to the real logdir; other workers write to a
    temporary directory, as TF's multi-worker tutorial documents.
  * `WeightsDigest(variables)`: a sha256 of the weights, which each worker
    prints at the end so the launcher can say whether they are identical.
  * `ReportPeerFailure(strategy)`: a context manager that turns the error a
    collective raises when a peer worker died into a `PeerFailureError`
    saying what happened and how to resume (restart the whole group).
  * `StopAgreement(strategy).Signals(signum)`: every worker's stop signal
    through one small all-reduce, so a SIGTERM to any worker stops the
    whole group at the same step; `GroupStopSignals(strategy)` gives it to
    the trainer (None outside a cluster) (`group_stop.py`).

The gradient all-reduce itself (Σ weight·grad / Σ weight, once per applied
update) lives in `learner/cross_replica.py`, next to the Learner.

Reference: TF guide "Multi-worker training with Keras / custom training
loop" and `tf.distribute.MultiWorkerMirroredStrategy` documentation.
"""

from learner.training.cluster.cluster_env import CLUSTER_SOURCES  # pylint: disable=unused-import
from learner.training.cluster.cluster_env import CheckPort as CheckClusterPort  # pylint: disable=unused-import
from learner.training.cluster.cluster_env import ClusterConfig  # pylint: disable=unused-import
from learner.training.cluster.cluster_env import DEFAULT_PORT as DEFAULT_CLUSTER_PORT  # pylint: disable=unused-import
from learner.training.cluster.strategy import CheckCluster  # pylint: disable=unused-import
from learner.training.cluster.strategy import CheckReplicasToAggregate  # pylint: disable=unused-import
from learner.training.cluster.strategy import ClusterConfigError  # pylint: disable=unused-import
from learner.training.cluster.strategy import ClusterStartupError  # pylint: disable=unused-import
from learner.training.cluster.strategy import ConfigureCoordinationService  # pylint: disable=unused-import
from learner.training.cluster.strategy import CreateStrategy  # pylint: disable=unused-import
from learner.training.cluster.strategy import ExportClusterConfig  # pylint: disable=unused-import
from learner.training.cluster.strategy import DEFAULT_REGISTER_TIMEOUT_SECONDS  # pylint: disable=unused-import
from learner.training.cluster.strategy import DEFAULT_TIMEOUT_SECONDS  # pylint: disable=unused-import
from learner.training.cluster.strategy import IsChief  # pylint: disable=unused-import
from learner.training.cluster.strategy import IsMultiWorker  # pylint: disable=unused-import
from learner.training.cluster.strategy import NumReplicas  # pylint: disable=unused-import
from learner.training.cluster.strategy import ParseTfConfig  # pylint: disable=unused-import
from learner.training.cluster.strategy import STRATEGY_NAMES  # pylint: disable=unused-import
from learner.training.cluster.strategy import StartupErrorMessage  # pylint: disable=unused-import
from learner.training.cluster.strategy import StrategyName  # pylint: disable=unused-import
from learner.training.cluster.strategy import TaskOf  # pylint: disable=unused-import
from learner.training.cluster.group_stop import GroupStopSignals  # pylint: disable=unused-import
from learner.training.cluster.group_stop import StopAgreement  # pylint: disable=unused-import
from learner.training.cluster.datasets import AdvanceIterator  # pylint: disable=unused-import
from learner.training.cluster.datasets import DistributeBatches  # pylint: disable=unused-import
from learner.training.cluster.datasets import DistributeDataset  # pylint: disable=unused-import
from learner.training.cluster.datasets import ShardForWorker  # pylint: disable=unused-import
from learner.training.cluster.datasets import WorkerDataset  # pylint: disable=unused-import
from learner.training.cluster.datasets import WithoutAutotuneThread  # pylint: disable=unused-import
from learner.training.cluster.replicas import AssertReplicasIdentical  # pylint: disable=unused-import
from learner.training.cluster.replicas import PeerFailureError  # pylint: disable=unused-import
from learner.training.cluster.replicas import RemoveWorkerLogdir  # pylint: disable=unused-import
from learner.training.cluster.replicas import ReplicaMismatches  # pylint: disable=unused-import
from learner.training.cluster.replicas import ReportPeerFailure  # pylint: disable=unused-import
from learner.training.cluster.replicas import WeightsDigest  # pylint: disable=unused-import
from learner.training.cluster.replicas import WorkerLogdir  # pylint: disable=unused-import
