"""Lingvo's `cluster_factory.Current()`, answered by tf.distribute.

Lingvo configs read the size of the training cluster while they build
their params, e.g. lingvo/tasks/car/params/waymo_deepfusion.py:

    cluster = cluster_factory.Current()
    total_num_cores = cluster.total_worker_devices

Lingvo keeps a stack of `Cluster` objects built from its trainer's flags
(lingvo/core/cluster_factory.py, cluster.py). There is no such cluster
here: the devices that train together are the replicas of the
tf.distribute strategy, so `Current()` reads the strategy whose scope is
current (`tf.distribute.get_strategy()`; the default strategy, one
replica, outside any scope). Only the field that Lingvo's configs and
`lr_util` read is offered; any other Lingvo field is refused by name
(docs/lingvo.md, "lr_util and cluster_factory").
"""

from learner.training.cluster import strategy as strategy_lib


class Cluster:
  """The training cluster as Lingvo's configs see it (read-only).

  Attributes:
    total_worker_devices: int >= 1, the devices that compute one global
      batch together: the strategy's `num_replicas_in_sync` (all workers).
      Lingvo's `Cluster.total_worker_devices` is devices per replica x
      worker replicas, 1 for its default cluster (one worker, one CPU),
      the same number as one replica here.
  """

  __slots__ = ('_total_worker_devices',)

  def __init__(self, total_worker_devices):
    object.__setattr__(self, '_total_worker_devices',
                       int(total_worker_devices))

  @property
  def total_worker_devices(self):
    return self._total_worker_devices

  def __setattr__(self, name, value):
    raise AttributeError(
        'cluster_factory.Current().%s: the cluster is read-only here; its '
        'size is the tf.distribute strategy\'s (run under '
        'strategy.scope() to change it).' % name)

  def __getattr__(self, name):
    # Only called for names that are not found: Lingvo fields not offered.
    raise AttributeError(
        'cluster_factory.Current().%s: this field of Lingvo\'s Cluster is '
        'not offered here; only total_worker_devices (the tf.distribute '
        'strategy\'s num_replicas_in_sync) is (docs/lingvo.md).' % name)

  def __repr__(self):
    return 'Cluster(total_worker_devices=%d)' % self._total_worker_devices


def Current():
  """The cluster the current tf.distribute strategy trains on.

  Where the value comes from: `tf.distribute.get_strategy()
  .num_replicas_in_sync` at the time of the call, i.e. the strategy whose
  `scope()` is entered (1 with no strategy). Call it where Lingvo calls
  it, while building params; the number is not updated later.

  Returns:
    A read-only `Cluster` with `total_worker_devices` (int >= 1).
  """
  return Cluster(strategy_lib.NumReplicas())
