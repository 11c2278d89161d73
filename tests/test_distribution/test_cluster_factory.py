"""cluster_factory.Current(): Lingvo's cluster size from tf.distribute.

Lingvo's default cluster (one worker replica, one CPU) has
total_worker_devices = 1 * 1; here the devices that train one global batch
are the strategy's replicas (tests/conftest.py gives two logical CPUs).
"""

import pytest
import tensorflow as tf

from learner.training.cluster import cluster_factory


def _TwoReplicas():
  return tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])


def test_no_strategy_is_one_device_as_lingvos_default_cluster():
  assert cluster_factory.Current().total_worker_devices == 1


def test_inside_a_strategy_scope_it_is_the_strategys_replicas():
  strategy = _TwoReplicas()
  with strategy.scope():
    assert cluster_factory.Current().total_worker_devices == 2
  # Read at the call: the scope has ended.
  assert cluster_factory.Current().total_worker_devices == 1


def test_a_lingvo_field_not_offered_is_named():
  with pytest.raises(AttributeError) as e:
    cluster_factory.Current().num_splits_per_client  # pylint: disable=expression-not-assigned
  assert str(e.value).startswith(
      'cluster_factory.Current().num_splits_per_client: ')
  assert 'total_worker_devices' in str(e.value)


def test_the_cluster_is_read_only():
  with pytest.raises(AttributeError, match='read-only'):
    cluster_factory.Current().total_worker_devices = 8
