"""tf.distribute strategies and the roles of a process in a cluster.

`CreateStrategy(name)` for `--strategy=default|mirrored|multi_worker|tpu`
(before any other TensorFlow op: multi-worker collectives are configured at
start-up), TF_CONFIG parsing and checks, the bounded multi-worker start-up
(every worker registers with TF's coordination service within
`register_timeout_seconds`, else a one-line `ClusterStartupError`), TF1's
`replicas_to_aggregate` mapped onto TF2 (`CheckReplicasToAggregate`), and
which worker this process is (`TaskOf`, `IsMultiWorker`, `IsChief`).
Part of `distribution` (its facade); reference: TF guide "Multi-worker
training with Keras / custom training loop".
"""

import difflib
import json
import os
import re

from absl import logging
import tensorflow as tf
# pylint: disable=g-direct-tensorflow-import
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
from tensorflow.python.distribute import multi_worker_util
from tensorflow.python.eager import context
# pylint: enable=g-direct-tensorflow-import

from learner.training.cluster import cluster_env

# The replica count's one definition, under the name the trainer uses.
from schedules.base_schedule import NumReplicasInSync as NumReplicas  # pylint: disable=unused-import


STRATEGY_NAMES = ('default', 'mirrored', 'multi_worker', 'tpu')


# Seconds a collective op may wait for its peers before failing: a worker
# whose peer died fails with DeadlineExceeded/Unavailable instead of hanging.
DEFAULT_TIMEOUT_SECONDS = 60.0


# Seconds every worker of a multi-worker run may take to register with the
# coordination service (run by worker 0, the leader) at start-up. A worker
# that never comes, or two workers started with the same task index, then
# fail every started worker with a ClusterStartupError after this long
# instead of a silent hang (TF's own default is one hour).
DEFAULT_REGISTER_TIMEOUT_SECONDS = 120.0


_COMMUNICATION = {
    'auto': 'AUTO',
    'ring': 'RING',
    'nccl': 'NCCL',
}


def _RuntimeInitialized():
  """True once the TF eager runtime has been initialised by some op."""
  # pylint: disable=protected-access
  return context.context()._context_handle is not None


  # pylint: enable=protected-access


def ParseTfConfig(environ=None):
  """Returns the parsed `TF_CONFIG` environment variable (a dict).

  Args:
    environ: mapping to read from; default `os.environ`.

  Returns:
    dict with 'cluster' ({job: [host:port, ...]}) and 'task'
    ({'type': str, 'index': int}).

  Raises:
    ValueError: TF_CONFIG is unset, not JSON, or lacks 'cluster' / 'task'.
  """
  environ = os.environ if environ is None else environ
  text = environ.get('TF_CONFIG', '')
  how = ('Start the workers with `python -m learner.launcher --num_workers=N '
         '-- <trainer args>`, which writes TF_CONFIG for each, or set it by '
         'hand (see docs/distributed.md).')
  if not text.strip():
    raise ValueError('--strategy=multi_worker needs the TF_CONFIG environment '
                     'variable, which is unset. ' + how)
  try:
    config = json.loads(text)
  except ValueError as e:
    raise ValueError('TF_CONFIG is not valid JSON (%s): %r. %s' %
                     (e, text, how)) from e
  for key in ('cluster', 'task'):
    if not isinstance(config, dict) or key not in config:
      raise ValueError(
          'TF_CONFIG lacks the key %r; expected {"cluster": {"worker": '
          '["host:port", ...]}, "task": {"type": "worker", "index": i}}, got '
          '%r. %s' % (key, text, how))
  return config


def CreateStrategy(name='default',
                   timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
                   communication='auto',
                   devices=None,
                   tpu_address=None,
                   register_timeout_seconds=DEFAULT_REGISTER_TIMEOUT_SECONDS,
                   cluster='tf_config',
                   cluster_port=cluster_env.DEFAULT_PORT):
  """Creates the tf.distribute strategy named by the trainer's --strategy.

  Call it first in the process, before any other TensorFlow op.

  Args:
    name: str, one of STRATEGY_NAMES:
      'default': no distribution (`tf.distribute.get_strategy()`).
      'mirrored': `MirroredStrategy` over this machine's devices (`devices`,
        default every GPU, else every logical CPU device). One per device
        set per process: a second call returns the same strategy, because
        two MirroredStrategies over the same devices share TF's
        process-wide collective keys and their all-reduces collide.
      'multi_worker': `MultiWorkerMirroredStrategy`, cluster from the
        `TF_CONFIG` environment variable (one process per worker; see
        learner/launcher.py), with
        `CommunicationOptions(implementation=communication,
        timeout_seconds=timeout_seconds)`.
      'tpu': `TPUStrategy`; raises a clear error when no TPU is reachable.
    timeout_seconds: float seconds a collective may wait for its peers
      (multi_worker only); a worker whose peer died fails with an error
      after it instead of hanging forever. None or 0 waits forever.
    communication: 'auto', 'ring' or 'nccl' (multi_worker only).
    devices: optional list of device names for 'mirrored'.
    tpu_address: optional TPU name or grpc address for 'tpu'.
    register_timeout_seconds: float seconds (multi_worker only) every
      worker of the cluster may take to register with the coordination
      service at start-up; after it every started worker fails with a
      ClusterStartupError naming the missing worker (see
      `ConfigureCoordinationService`). None or 0 keeps TF's default (1 h).
    cluster: multi_worker only: where the cluster comes from, one of
      `cluster_env.CLUSTER_SOURCES`: 'tf_config' (the TF_CONFIG variable),
      'slurm' or 'jobset' (derived from the cluster manager's environment
      by `cluster_env.ClusterConfig`, written to os.environ['TF_CONFIG'],
      replacing any, and printed once to stdout).
    cluster_port: int port of the derived cluster's workers (see
      `cluster_env.ClusterConfig`); ignored for 'tf_config'.

  Returns:
    a `tf.distribute.Strategy`.

  Raises:
    ValueError: unknown `name` or `communication`; TF_CONFIG missing or
      malformed for 'multi_worker'; with cluster 'slurm' or 'jobset', a
      variable of its environment missing or malformed, or a bad port.
    ClusterStartupError: 'multi_worker' whose cluster lists an address
      twice, whose task index is outside it, or whose start-up failed (a
      peer did not register in time, this worker's port is taken).
    RuntimeError: 'multi_worker' requested after the TF runtime was
      initialised by another op; 'tpu' with no TPU reachable.
  """
  if name not in STRATEGY_NAMES:
    close = difflib.get_close_matches(str(name), STRATEGY_NAMES, n=1)
    raise ValueError(
        'Unknown strategy %r; expected one of %s%s. Set --strategy to one of '
        'them.' % (name, list(STRATEGY_NAMES),
                   (' (did you mean %r?)' % close[0]) if close else ''))
  if name == 'default':
    return tf.distribute.get_strategy()
  if name == 'mirrored':
    if devices is None:
      # Every GPU, else every (logical) CPU: tests and CPU-only machines can
      # split one CPU into several logical devices before TF starts.
      devices = ([d.name for d in tf.config.list_logical_devices('GPU')] or
                 [d.name for d in tf.config.list_logical_devices('CPU')])
    return _MirroredFor(tuple(devices))
  if name == 'multi_worker':
    return _CreateMultiWorker(timeout_seconds, communication,
                              register_timeout_seconds, cluster, cluster_port)
  return _CreateTpu(tpu_address)


# One MirroredStrategy per device set per process: TF's collective keys are
# process-wide, and a second MirroredStrategy over the same devices reuses
# the first one's group and instance keys, so their all-reduces collide
# ("Shape mismatch in the collective instance 100"). Explicit and tested.
_MIRRORED_STRATEGIES = {}


def _MirroredFor(devices):
  """The process's MirroredStrategy over `devices`, created once."""
  strategy = _MIRRORED_STRATEGIES.get(devices)
  if strategy is None:
    strategy = tf.distribute.MirroredStrategy(devices=list(devices))
    _MIRRORED_STRATEGIES[devices] = strategy
  return strategy


def _CreateMultiWorker(timeout_seconds, communication,
                       register_timeout_seconds, cluster, cluster_port):
  """MultiWorkerMirroredStrategy from TF_CONFIG; see CreateStrategy."""
  if communication not in _COMMUNICATION:
    raise ValueError(
        'Unknown communication %r for --strategy=multi_worker; expected one '
        'of %s.' % (communication, sorted(_COMMUNICATION)))
  if cluster not in cluster_env.CLUSTER_SOURCES:
    raise ValueError(
        'Unknown cluster source %r for --strategy=multi_worker; expected one '
        'of %s.' % (cluster, list(cluster_env.CLUSTER_SOURCES)))
  if cluster != 'tf_config':  # Then the TF_CONFIG path below, unchanged.
    ExportClusterConfig(cluster, cluster_port)
  config = ParseTfConfig()
  CheckCluster(config)
  if _RuntimeInitialized():
    raise RuntimeError(
        '--strategy=multi_worker: the strategy must be created before any '
        'other TensorFlow op in the process (collective ops are configured '
        'at start-up), but the TF runtime is already initialised. Call '
        'learner.training.cluster.distribution.CreateStrategy() first, e.g. at the top of '
        'main(), before building params, layers or datasets.')
  impl = getattr(tf.distribute.experimental.CommunicationImplementation,
                 _COMMUNICATION[communication])
  options = tf.distribute.experimental.CommunicationOptions(
      implementation=impl, timeout_seconds=timeout_seconds or None)
  logging.info('MultiWorkerMirroredStrategy: task %s of cluster %s, '
               'collective timeout %s s, register timeout %s s',
               config['task'], config['cluster'], timeout_seconds,
               register_timeout_seconds)
  resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  if register_timeout_seconds:
    ConfigureCoordinationService(resolver.cluster_spec(),
                                 register_timeout_seconds)
  try:
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver, communication_options=options)
  except tf.errors.OpError as e:
    raise ClusterStartupError(
        StartupErrorMessage(e, config, register_timeout_seconds)) from None


def ExportClusterConfig(cluster, cluster_port=cluster_env.DEFAULT_PORT):
  """Derives this worker's TF_CONFIG from a cluster manager and exports it.

  Writes `cluster_env.ClusterConfig(cluster, os.environ, cluster_port)` as
  JSON to os.environ['TF_CONFIG'] (replacing any) and prints it once as one
  line to stdout ('Cluster from --cluster=slurm: worker 1 of worker [...]').
  Runs no TensorFlow op; call it before the strategy is created.

  Args:
    cluster: 'slurm' or 'jobset' (see learner/training/cluster/cluster_env.py).
    cluster_port: int in [1, 65535], the workers' port.

  Returns:
    dict, the derived TF_CONFIG.

  Raises:
    ValueError: a variable of the source missing or malformed, or a bad
      port (one line); nothing is exported then.
  """
  derived = cluster_env.ClusterConfig(cluster, os.environ, cluster_port)
  os.environ['TF_CONFIG'] = json.dumps(derived)
  print(cluster_env.Describe(cluster, derived), flush=True)
  return derived


class ClusterStartupError(RuntimeError):
  """A multi-worker run could not start (see `StartupErrorMessage`)."""


class ClusterConfigError(ClusterStartupError):
  """A cluster no worker group can start: a bad value (`CheckCluster`).

  The trainer exits 2 for it, as for every refused value (a peer that did
  not start is exit 1).
  """

def CheckCluster(config):
  """Refuses a TF_CONFIG whose cluster no worker group can start.

  Args:
    config: dict, `ParseTfConfig()`.

  Raises:
    ClusterConfigError: an address that is not 'host:port' with a port in
      [1, 65535], an address listed twice (two tasks would share one
      port), or a task type/index that is not in the cluster.
  """
  cluster, task = config['cluster'], config['task']
  seen = {}
  for job, addresses in sorted(cluster.items()):
    for i, address in enumerate(addresses):
      _CheckAddress(address, job, i)
      if address in seen:
        raise ClusterConfigError(
            'TF_CONFIG lists the address %s twice in its cluster (%s %d and '
            '%s %d); give every task its own host:port.' %
            (address, seen[address][0], seen[address][1], job, i))
      seen[address] = (job, i)
  addresses = cluster.get(task.get('type'), [])
  index = task.get('index')
  if (isinstance(index, bool) or not isinstance(index, int) or
      not 0 <= index < len(addresses)):
    raise ClusterConfigError(
        'TF_CONFIG task %r is not in the cluster, which has %d %r task(s) '
        '(indices 0..%d); set "task" to {"type": "worker", "index": i} '
        'with i in that range, a different i for every worker.' %
        (task, len(addresses), task.get('type'), len(addresses) - 1))


def _CheckAddress(address, job, index):
  """Raises ClusterConfigError unless `address` is 'host:port', port 1..65535."""
  host, _, port = str(address).rpartition(':')
  if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
    raise ClusterConfigError(
        'TF_CONFIG gives %s %d the address %r, which is not host:port with a '
        'port in [1, 65535]; write e.g. "10.0.0.2:23456" (a port free on '
        'that host).' % (job, index, address))


def ConfigureCoordinationService(cluster_spec, register_timeout_seconds):
  """Bounds the start-up of a multi-worker run by TF's coordination service.

  MultiWorkerMirroredStrategy starts TF's coordination service (on the
  leader, worker 0) with a one-hour registration timeout, and without a
  registration barrier the leader waits for a missing worker forever. Here
  the same service is configured before the strategy exists (the strategy
  then keeps it), with `cluster_register_timeout_in_ms` and
  `cluster_register_with_barrier`: every task waits at start-up until all
  have registered, and after the timeout each fails with
  DeadlineExceeded naming the tasks that never came (the leader) or saying
  the leader did not answer (the others). Fields: TSL's
  coordination_config.proto, CoordinationServiceConfig.

  Args:
    cluster_spec: tf.train.ClusterSpec of the run.
    register_timeout_seconds: float > 0.
  """
  jobs = [coordination_config_pb2.CoordinatedJob(
      name=job, num_tasks=cluster_spec.num_tasks(job))
          for job in ('chief', 'worker') if job in cluster_spec.jobs]
  ctx = context.context()
  ctx.configure_coordination_service(
      service_type='standalone',
      service_leader=multi_worker_util.coordination_leader(cluster_spec),
      cluster_register_timeout_in_ms=int(register_timeout_seconds * 1000),
      coordinated_jobs=jobs)
  ctx.coordination_service.cluster_register_with_barrier = True


# A task name alone on its line, as the registration barrier lists them.
_TASK_LINE = re.compile(r'^\s*/job:(\w+)/replica:\d+/task:(\d+)\s*$', re.M)


def _Task(job, index, cluster):
  """'worker 1 (127.0.0.1:2223)' for job 'worker', index 1."""
  addresses = cluster.get(job, [])
  where = (' (%s)' % addresses[index]) if index < len(addresses) else ''
  return '%s %d%s' % (job, index, where)


def StartupErrorMessage(error, config, register_timeout_seconds):
  """One line saying why this worker's multi-worker start-up failed.

  Args:
    error: the tf.errors.OpError the strategy's start-up raised.
    config: dict, this worker's `ParseTfConfig()`.
    register_timeout_seconds: float, the registration bound in force.

  Returns:
    str naming this worker, the missing peer(s) or the taken address, and
    the fix.
  """
  cluster, task = config['cluster'], config['task']
  me = 'Multi-worker start-up of %s' % _Task(task['type'], task['index'],
                                             cluster)
  text = str(error)
  fix = ('Start every worker of TF_CONFIG\'s cluster, each with its own task '
         'index (python -m learner.launcher does), within %g s of each '
         'other (--worker_register_timeout_secs).' % register_timeout_seconds)
  if 'Wait_for_all_tasks_to_register' in text:
    names = text.split('timed out task names:', 1)[-1].split('\n\n')[0]
    missing = sorted({(j, int(i)) for j, i in _TASK_LINE.findall(names)})
    return ('%s: %s did not register with the coordination service '
            'within %g s. %s If a worker stopped saying its address is in '
            'use, two workers were given the same task index.' % (
                me, ', '.join(_Task(j, i, cluster) for j, i in missing) or
                'a peer', register_timeout_seconds, fix))
  if 'Could not start gRPC server' in text:
    return ('%s: cannot listen on its own address: the port is in '
            'use, most likely by another worker started with the same task '
            'index %d (a duplicate), or by another process on this host '
            '(e.g. two jobset pods on one machine share --cluster_port). Give '
            'every worker its own index 0..%d, or free the port.' % (
                me, task['index'], len(cluster.get(task['type'], [])) - 1))
  if isinstance(error, tf.errors.DeadlineExceededError):
    leader = ('chief', 0) if 'chief' in cluster else ('worker', 0)
    return ('%s: the coordination service on %s did not answer '
            'within %g s: that worker was not started, stopped, or is '
            'unreachable. %s' % (me, _Task(leader[0], leader[1], cluster),
                                 register_timeout_seconds, fix))
  first = text.strip().splitlines()[0] if text.strip() else ''
  return ('%s: the multi-worker start-up failed with %s: %s. %s' %
          (me, type(error).__name__, first, fix))


def _CreateTpu(tpu_address):
  """TPUStrategy, or a RuntimeError that says no TPU is reachable."""
  if (tpu_address is None and not os.environ.get('TPU_NAME') and
      not tf.config.list_logical_devices('TPU')):
    # Checked here so that no TPU lookup (e.g. GCE metadata) leaves the host.
    raise RuntimeError(
        '--strategy=tpu: no TPU found (no local TPU device, no TPU_NAME '
        'environment variable, no TPU address given). Run on a TPU VM or '
        'pass the TPU name/address, or use --strategy=default|mirrored|'
        'multi_worker on this machine.')
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu_address)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except Exception as e:  # pylint: disable=broad-except
    raise RuntimeError(
        '--strategy=tpu: no TPU is reachable from this machine (%s: %s). Run '
        'on a TPU VM (or pass the TPU name/address), or use '
        '--strategy=default|mirrored|multi_worker here.' %
        (type(e).__name__, e)) from e
  return tf.distribute.TPUStrategy(resolver)


def StrategyName(strategy=None):
  """The strategy's public TF name, e.g. 'MultiWorkerMirroredStrategy'.

  (TF 2.21's MultiWorkerMirroredStrategy is the class
  CollectiveAllReduceStrategy, the name `type()` gives.)
  """
  strategy = strategy or tf.distribute.get_strategy()
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return 'MultiWorkerMirroredStrategy'
  return type(strategy).__name__


def CheckReplicasToAggregate(replicas_to_aggregate, num_replicas):
  """Maps TF1 SyncReplicasOptimizer's knob onto tf.distribute, or refuses it.

  `SyncReplicasOptimizer(opt, replicas_to_aggregate=R,
  total_num_replicas=N)` applied one update from the first R gradients of N
  replicas; R < N meant N - R "backup workers" whose gradients were dropped.
  TF2 collectives (all-reduce) need every replica at every step, so only
  R == N (all replicas aggregate every step) exists here; to aggregate
  more gradients per update than there are replicas, accumulate micro-batches
  with `batch_gradients` (GradientAccumulation, num_batches = R / N).

  Args:
    replicas_to_aggregate: int or None (the trainer's
      `p.train.replicas_to_aggregate`); None means all replicas.
    num_replicas: int, `strategy.num_replicas_in_sync` (= total_num_replicas).

  Returns:
    int, the number of replicas aggregated per step (== num_replicas).

  Raises:
    ValueError: replicas_to_aggregate is not a positive int, is below
      num_replicas (backup workers), or above it.
  """
  if replicas_to_aggregate is None:
    return int(num_replicas)
  if (isinstance(replicas_to_aggregate, bool) or
      not isinstance(replicas_to_aggregate, int) or replicas_to_aggregate < 1):
    raise ValueError(
        'p.train.replicas_to_aggregate must be None (all replicas) or a '
        'positive int, got %r.' % (replicas_to_aggregate,))
  if replicas_to_aggregate < num_replicas:
    raise ValueError(
        'p.train.replicas_to_aggregate=%d is below the number of replicas '
        '(%d): that asks for %d backup worker(s), as TF1\'s '
        'SyncReplicasOptimizer allowed, but TF2 collectives (all-reduce) do '
        'not support backup workers - every replica contributes to every '
        'step. Set p.train.replicas_to_aggregate=None (or %d), or run fewer '
        'workers.' % (replicas_to_aggregate, num_replicas,
                      num_replicas - replicas_to_aggregate, num_replicas))
  if replicas_to_aggregate > num_replicas:
    raise ValueError(
        'p.train.replicas_to_aggregate=%d is above the number of replicas '
        '(%d); one step aggregates exactly one gradient per replica. To '
        'average more gradients per update, use gradient accumulation '
        '(get_optimizer_wrapper_fn(\'batch_gradients\', ..., num_batches=k)) '
        'and set p.train.replicas_to_aggregate=None.' %
        (replicas_to_aggregate, num_replicas))
  return int(num_replicas)


def TaskOf(strategy):
  """(task_type, task_id) of this process, or (None, None) when local."""
  resolver = getattr(strategy, 'cluster_resolver', None)
  extended = getattr(strategy, 'extended', None)
  task_type = getattr(extended, '_task_type', None)
  task_id = getattr(extended, '_task_id', None)
  if task_type is None and resolver is not None:
    task_type, task_id = resolver.task_type, resolver.task_id
  return task_type, task_id


def IsMultiWorker(strategy=None):
  """bool: this process is one worker of a multi-worker cluster."""
  return TaskOf(strategy or tf.distribute.get_strategy())[0] is not None


def IsChief(strategy=None):
  """bool: this process writes checkpoints and summaries.

  True without a cluster; under multi_worker, for the 'chief' task, or for
  worker 0 when the cluster has no chief (TF's convention).
  """
  strategy = strategy or tf.distribute.get_strategy()
  task_type, task_id = TaskOf(strategy)
  if task_type is None:
    return True
  if task_type == 'chief':
    return True
  resolver = getattr(strategy, 'cluster_resolver', None)
  jobs = resolver.cluster_spec().jobs if resolver is not None else []
  return task_type == 'worker' and task_id == 0 and 'chief' not in jobs
