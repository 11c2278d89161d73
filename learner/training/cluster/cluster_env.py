"""The cluster of a multi-worker run, from a cluster manager's environment.

`--strategy=multi_worker --cluster=SOURCE` says where the cluster comes from:

  tf_config  the `TF_CONFIG` variable, as written by hand or by
             `python -m learner.launcher` (the default; nothing derived).
  slurm      a SLURM job step with one task per worker (`srun`), through TF's
             `tf.distribute.cluster_resolver.SlurmClusterResolver`. It reads
             SLURM_PROCID (this task's rank), SLURM_STEP_NUM_TASKS (the
             step's task count), SLURM_STEP_NODELIST (its nodes, e.g.
             'gpu[01-02]') and SLURM_STEP_TASKS_PER_NODE (e.g. '1(x2)');
             the nodes are taken in sorted order, the k-th task on a node
             listens on `port + k`, and ranks fill the nodes in that order.
  jobset     a Kubernetes indexed Job (or one replicated job of a JobSet)
             behind a headless Service, one pod per worker:
             JOB_COMPLETION_INDEX (Kubernetes sets it: this pod's index),
             LEARNER_NUM_WORKERS (the pod count, = the Job's completions)
             and LEARNER_WORKER_HOST (every pod's stable DNS name with
             '{index}' for its index, e.g. 'lr-{index}.lr' for the Job 'lr'
             whose pods have subdomain 'lr'); every pod listens on `port`.

Each derivation returns the TF_CONFIG dict the worker would have been
given by hand ({'cluster': {'worker': [host:port, ...]}, 'task': {'type':
'worker', 'index': i}}); the strategy puts it in TF_CONFIG, so everything
downstream (checks, start-up, roles) is the TF_CONFIG path unchanged. A
missing or malformed variable is a ValueError of one line naming the
variable, its value and the fix, raised before any TensorFlow op.
"""

import os
import re

# pylint: disable=g-direct-tensorflow-import
from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver
# pylint: enable=g-direct-tensorflow-import


CLUSTER_SOURCES = ('tf_config', 'slurm', 'jobset')

# The first port of every node (SLURM) or every pod's port (jobset):
# SlurmClusterResolver's own default port_base.
DEFAULT_PORT = 8888

_SLURM_VARS = ('SLURM_PROCID', 'SLURM_STEP_NUM_TASKS', 'SLURM_STEP_NODELIST',
               'SLURM_STEP_TASKS_PER_NODE')
_JOBSET_VARS = ('JOB_COMPLETION_INDEX', 'LEARNER_NUM_WORKERS',
                'LEARNER_WORKER_HOST')

# A DNS name or IPv4 address (RFC 1123 labels, dot-separated).
_HOST = re.compile(r'^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?'
                   r'(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$')


def ClusterConfig(source, environ=None, port=DEFAULT_PORT):
  """This worker's TF_CONFIG dict, derived from the environment of `source`.

  Args:
    source: one of CLUSTER_SOURCES other than 'tf_config'.
    environ: mapping to read from; default `os.environ`.
    port: int in [1, 65535]: SLURM: the port of the first task on each node
      (the next task on the node gets port + 1, ...); jobset: every pod's
      port.

  Returns:
    dict {'cluster': {'worker': ['host:port', ...]}, 'task': {'type':
    'worker', 'index': int}}, as `ParseTfConfig` returns it.

  Raises:
    ValueError: unknown source, a bad port, or a variable of the source
      missing or malformed (one line naming it, its value and the fix).
  """
  environ = os.environ if environ is None else environ
  CheckPort(port)
  if source == 'slurm':
    return TfConfigFromSlurm(environ, port)
  if source == 'jobset':
    return TfConfigFromJobset(environ, port)
  raise ValueError('--cluster=%s: no cluster is derived from it; expected '
                   'one of %s.' % (source, list(CLUSTER_SOURCES[1:])))


def CheckPort(port):
  """Raises a one-line ValueError unless `port` is an int in [1, 65535]."""
  if (isinstance(port, bool) or not isinstance(port, int) or
      not 1 <= port <= 65535):
    raise ValueError('--cluster_port=%s is not a TCP port: give an integer '
                     'in [1, 65535] that is free on every node, e.g. '
                     '--cluster_port=%d.' % (port, DEFAULT_PORT))


def _Need(environ, name, source, what):
  """The value of variable `name`, stripped; a one-line ValueError if unset."""
  value = environ.get(name)
  if value is None or not value.strip():
    raise ValueError('--cluster=%s needs the environment variable %s (%s), '
                     'which is %s. %s' % (
                         source, name, what,
                         'unset' if value is None else 'empty',
                         _HOW[source]))
  return value.strip()


def _Int(environ, name, source, what, low):
  """Variable `name` as an int >= low; a one-line ValueError otherwise."""
  text = _Need(environ, name, source, what)
  if not re.match(r'^\d+$', text) or int(text) < low:
    raise ValueError('--cluster=%s: %s=%r is not %s: it must be an integer '
                     '>= %d. %s' % (source, name, text, what, low,
                                    _HOW[source]))
  return int(text)


_HOW = {
    'slurm': ('Start one trainer per task with srun inside an sbatch '
              'allocation (SLURM sets these; see docs/distributed.md, '
              '"Multi-host"), or use --cluster=tf_config.'),
    'jobset': ('Set it in the pod template of the indexed Job (see '
               'docs/examples/jobset_2_pods.yaml and docs/distributed.md, '
               '"Multi-host"), or use --cluster=tf_config.'),
}


class _SlurmResolver(slurm_cluster_resolver.SlurmClusterResolver):
  """TF's SlurmClusterResolver with this task's rank given, not read.

  Everything else (node order, ports, which task is which worker, GPU
  allocation) is TF's; the rank is passed in so that a mapping other than
  os.environ (a test's fake step) can be resolved.
  """

  def __init__(self, rank, **kwargs):
    self._given_rank = rank
    super().__init__(**kwargs)

  def _resolve_own_rank(self):
    return self._given_rank


def _VisibleGpus(environ):
  """GPUs this node's tasks may share: CUDA_VISIBLE_DEVICES, else nvidia-smi.

  As SlurmClusterResolver counts them, except that an empty or '-1'
  CUDA_VISIBLE_DEVICES and a missing nvidia-smi count 0 (TF's count says 1
  and raises, respectively).
  """
  visible = environ.get('CUDA_VISIBLE_DEVICES')
  if visible is not None:
    return len([d for d in visible.split(',')
                if d.strip() and d.strip() != '-1'])
  try:
    return slurm_cluster_resolver.get_num_gpus()
  except (OSError, RuntimeError):
    return 0


def TfConfigFromSlurm(environ, port=DEFAULT_PORT):
  """TF_CONFIG dict of this SLURM task, through TF's SlurmClusterResolver.

  One task per worker: the step's SLURM_STEP_NUM_TASKS tasks are the
  workers, SLURM_PROCID is this worker's index. The nodes of
  SLURM_STEP_NODELIST are sorted by name; the k-th task on a node listens on
  `port + k` (k from 0). With GPUs visible (CUDA_VISIBLE_DEVICES or
  nvidia-smi), each task gets an equal share and CUDA_VISIBLE_DEVICES is
  set to it in os.environ, as the resolver does; without GPUs nothing is
  set.

  Args:
    environ: mapping with the SLURM_* variables of the step.
    port: int, the first task's port on every node.

  Returns:
    dict, as `ClusterConfig`.

  Raises:
    ValueError: a variable missing or malformed, the node and task lists
      of different lengths, a node listed twice, a task count that is not
      the sum of the tasks per node, SLURM_PROCID outside the step, or
      fewer GPUs on a node than tasks.
  """
  rank, num_tasks, hosts, per_node = _SlurmStep(environ)
  if port + max(per_node) - 1 > 65535:
    raise ValueError('--cluster_port=%d: the %d tasks of a node would listen '
                     'on ports up to %d, above 65535; choose a lower port.' %
                     (port, max(per_node), port + max(per_node) - 1))
  gpus = _VisibleGpus(environ)
  if gpus and gpus < max(per_node):
    raise ValueError('--cluster=slurm: a node runs %d tasks but only %d GPU(s) '
                     'are visible (CUDA_VISIBLE_DEVICES=%r); run at most one '
                     'task per GPU (--ntasks-per-node), or hide the GPUs '
                     '(CUDA_VISIBLE_DEVICES=) to run on CPUs.' % (
                         max(per_node), gpus,
                         environ.get('CUDA_VISIBLE_DEVICES')))
  # Without GPUs, one "GPU" per task keeps the resolver's allocation loop
  # (one entry per task) working; nothing is set from it.
  resolver = _SlurmResolver(
      rank, jobs={'worker': num_tasks}, port_base=port,
      gpus_per_node=gpus or max(per_node),
      gpus_per_task=None if gpus else 1,
      tasks_per_node=dict(zip(hosts, per_node)), auto_set_gpu=bool(gpus))
  spec = resolver.cluster_spec().as_dict()
  return {'cluster': {job: list(addresses) for job, addresses in spec.items()},
          'task': {'type': resolver.task_type, 'index': resolver.task_id}}


def _SlurmStep(environ):
  """(rank, task count, nodes, tasks per node) of the step, checked.

  The lists are expanded by TF's resolver module (`expand_hostlist`,
  `expand_tasks_per_node`); every inconsistency is one ValueError line
  (see `TfConfigFromSlurm`).
  """
  source = 'slurm'
  rank = _Int(environ, 'SLURM_PROCID', source, "this task's rank", 0)
  num_tasks = _Int(environ, 'SLURM_STEP_NUM_TASKS', source,
                   "the step's task count", 1)
  nodelist = _Need(environ, 'SLURM_STEP_NODELIST', source,
                   "the step's nodes, e.g. 'node[01-02]'")
  per_node_text = _Need(environ, 'SLURM_STEP_TASKS_PER_NODE', source,
                        "the step's tasks on each node, e.g. '1(x2)'")
  try:
    hosts = slurm_cluster_resolver.expand_hostlist(nodelist)
  except ValueError:
    hosts = []
  if not hosts or not all(_HOST.match(h) for h in hosts):
    raise ValueError('--cluster=slurm: SLURM_STEP_NODELIST=%r is not a SLURM '
                     "host list such as 'node[01-02],gpu7'. %s" %
                     (nodelist, _HOW[source]))
  try:
    per_node = slurm_cluster_resolver.expand_tasks_per_node(per_node_text)
  except ValueError:
    per_node = []
  if not per_node or min(per_node) < 1:
    raise ValueError("--cluster=slurm: SLURM_STEP_TASKS_PER_NODE=%r is not a "
                     "SLURM tasks-per-node list such as '1(x2)' or '2,1' "
                     "(positive counts). %s" % (per_node_text, _HOW[source]))
  if len(per_node) != len(hosts):
    raise ValueError('--cluster=slurm: SLURM_STEP_TASKS_PER_NODE=%r gives %d '
                     'node(s) but SLURM_STEP_NODELIST=%r lists %d; they must '
                     'describe the same nodes. %s' % (
                         per_node_text, len(per_node), nodelist, len(hosts),
                         _HOW[source]))
  if len(set(hosts)) != len(hosts):
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    raise ValueError('--cluster=slurm: SLURM_STEP_NODELIST=%r lists %s more '
                     'than once; list every node once and its task count '
                     'in SLURM_STEP_TASKS_PER_NODE. %s' % (
                         nodelist, ', '.join(twice), _HOW[source]))
  if sum(per_node) != num_tasks:
    raise ValueError('--cluster=slurm: SLURM_STEP_NUM_TASKS=%d but '
                     'SLURM_STEP_TASKS_PER_NODE=%r places %d task(s); they '
                     'must agree. %s' % (num_tasks, per_node_text,
                                         sum(per_node), _HOW[source]))
  if rank >= num_tasks:
    raise ValueError('--cluster=slurm: SLURM_PROCID=%d is outside the step, '
                     'whose SLURM_STEP_NUM_TASKS=%d tasks have ranks 0..%d. '
                     '%s' % (rank, num_tasks, num_tasks - 1, _HOW[source]))
  return rank, num_tasks, hosts, per_node


def TfConfigFromJobset(environ, port=DEFAULT_PORT):
  """TF_CONFIG dict of this pod of an indexed Job (or JobSet replicated job).

  Worker i is the pod with JOB_COMPLETION_INDEX i, at host
  LEARNER_WORKER_HOST with '{index}' replaced by i, port `port`; there are
  LEARNER_NUM_WORKERS workers.

  Args:
    environ: mapping with JOB_COMPLETION_INDEX, LEARNER_NUM_WORKERS and
      LEARNER_WORKER_HOST.
    port: int, every pod's port.

  Returns:
    dict, as `ClusterConfig`.

  Raises:
    ValueError: a variable missing or malformed, LEARNER_WORKER_HOST
      without exactly one '{index}' or not a host name, or
      JOB_COMPLETION_INDEX outside 0..LEARNER_NUM_WORKERS - 1.
  """
  source = 'jobset'
  index = _Int(environ, 'JOB_COMPLETION_INDEX', source,
               "this pod's index in the indexed Job", 0)
  num = _Int(environ, 'LEARNER_NUM_WORKERS', source,
             "the pod count, the Job's completions", 1)
  template = _Need(environ, 'LEARNER_WORKER_HOST', source,
                   "every pod's host name with {index}, e.g. 'lr-{index}.lr'")
  example = _Host(template, 0) if template.count('{index}') == 1 else None
  if example is None or not _HOST.match(example):
    raise ValueError('--cluster=jobset: LEARNER_WORKER_HOST=%r is not a host '
                     "name with '{index}' once where the pod's index goes, "
                     "e.g. 'lr-{index}.lr' for the indexed Job 'lr' whose "
                     "pods have subdomain 'lr' (its headless Service). %s" %
                     (template, _HOW[source]))
  if index >= num:
    raise ValueError('--cluster=jobset: JOB_COMPLETION_INDEX=%d is outside '
                     'the %d worker(s) of LEARNER_NUM_WORKERS=%d (indices '
                     "0..%d); set LEARNER_NUM_WORKERS to the Job's "
                     'completions. %s' % (index, num, num, num - 1,
                                          _HOW[source]))
  return {'cluster': {'worker': ['%s:%d' % (_Host(template, i), port)
                                 for i in range(num)]},
          'task': {'type': 'worker', 'index': index}}


def _Host(template, index):
  return template.replace('{index}', str(index))


def Describe(source, config):
  """One line saying which cluster `source` gave this worker."""
  task = config['task']
  return ('Cluster from --cluster=%s: %s %d of %s' % (
      source, task['type'], task['index'],
      ', '.join('%s %s' % (job, addresses)
                for job, addresses in sorted(config['cluster'].items()))))
