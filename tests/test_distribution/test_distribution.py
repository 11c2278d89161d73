"""In-process tests of learner/training/cluster/distribution.py (issue 7).

Multi-process runs are in test_multi_worker.py; these need only the two
logical CPU devices that tests/conftest.py configures.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from learner.training.cluster import distribution

_LOOPBACK_CONFIG = json.dumps({
    'cluster': {'worker': ['127.0.0.1:1', '127.0.0.1:2']},
    'task': {'type': 'worker', 'index': 0}
})


@pytest.fixture(scope='module')
def mirrored():
  return distribution.CreateStrategy('mirrored')


def test_unknown_strategy_name_is_refused_with_close_match():
  with pytest.raises(ValueError) as e:
    distribution.CreateStrategy('mirorred')
  assert "'mirorred'" in str(e.value)
  assert "did you mean 'mirrored'" in str(e.value)


def test_default_strategy_is_tf_default():
  s = distribution.CreateStrategy('default')
  assert s is tf.distribute.get_strategy()
  assert distribution.NumReplicas(s) == 1
  assert distribution.IsChief(s)
  assert distribution.WorkerLogdir('/tmp/run', s) == '/tmp/run'


def test_mirrored_uses_both_logical_cpus(mirrored):
  assert distribution.NumReplicas(mirrored) == 2
  assert distribution.IsChief(mirrored)


def test_multi_worker_without_tf_config_names_it(monkeypatch):
  monkeypatch.delenv('TF_CONFIG', raising=False)
  with pytest.raises(ValueError) as e:
    distribution.CreateStrategy('multi_worker')
  assert 'TF_CONFIG' in str(e.value)
  assert 'learner.launcher' in str(e.value)


def test_multi_worker_tf_config_without_task_names_the_key(monkeypatch):
  monkeypatch.setenv('TF_CONFIG', json.dumps({'cluster': {'worker': []}}))
  with pytest.raises(ValueError) as e:
    distribution.CreateStrategy('multi_worker')
  assert "'task'" in str(e.value)


def test_multi_worker_tf_config_not_json(monkeypatch):
  monkeypatch.setenv('TF_CONFIG', '{cluster:')
  with pytest.raises(ValueError) as e:
    distribution.CreateStrategy('multi_worker')
  assert 'TF_CONFIG is not valid JSON' in str(e.value)


def test_multi_worker_unknown_communication_names_it(monkeypatch):
  monkeypatch.setenv('TF_CONFIG', _LOOPBACK_CONFIG)
  with pytest.raises(ValueError) as e:
    distribution.CreateStrategy('multi_worker', communication='rings')
  assert "'rings'" in str(e.value)


def test_multi_worker_after_other_tf_ops_says_create_it_first(monkeypatch):
  monkeypatch.setenv('TF_CONFIG', _LOOPBACK_CONFIG)
  tf.constant(1.0) + 1.0  # The runtime is now initialised.
  with pytest.raises(RuntimeError) as e:
    distribution.CreateStrategy('multi_worker')
  assert 'before any other TensorFlow op' in str(e.value)
  assert 'CreateStrategy' in str(e.value)


def test_tpu_without_tpu_is_a_clear_error(monkeypatch):
  monkeypatch.delenv('TPU_NAME', raising=False)
  with pytest.raises(RuntimeError) as e:
    distribution.CreateStrategy('tpu')
  assert '--strategy=tpu: no TPU found' in str(e.value)


# ---- SyncReplicasOptimizer's replicas_to_aggregate -------------------------


def test_replicas_to_aggregate_default_is_all_replicas():
  # SyncReplicasOptimizer(replicas_to_aggregate=N, total_num_replicas=N).
  assert distribution.CheckReplicasToAggregate(None, 2) == 2
  assert distribution.CheckReplicasToAggregate(2, 2) == 2


def test_replicas_to_aggregate_below_replicas_refuses_backup_workers():
  with pytest.raises(ValueError) as e:
    distribution.CheckReplicasToAggregate(1, 2)
  msg = str(e.value)
  assert 'replicas_to_aggregate=1' in msg
  assert 'TF2 collectives' in msg and 'backup worker' in msg


def test_replicas_to_aggregate_above_replicas_points_to_accumulation():
  with pytest.raises(ValueError) as e:
    distribution.CheckReplicasToAggregate(4, 2)
  assert 'replicas_to_aggregate=4' in str(e.value)
  assert 'batch_gradients' in str(e.value)


@pytest.mark.parametrize('bad', [0, -1, 2.0, '2', True])
def test_replicas_to_aggregate_not_positive_int(bad):
  with pytest.raises(ValueError) as e:
    distribution.CheckReplicasToAggregate(bad, 2)
  assert 'replicas_to_aggregate' in str(e.value)


# ---- input -------------------------------------------------------------------


def _Examples():
  return tf.data.Dataset.range(40)


def _Steps(per_worker_datasets, replicas_per_worker, steps):
  """Global batch of each step: the union of every replica's batch."""
  iters = [iter(ds) for ds in per_worker_datasets]
  out = []
  for _ in range(steps):
    batch = []
    for it in iters:
      for _ in range(replicas_per_worker):
        batch.extend(next(it).numpy().tolist())
    out.append(sorted(batch))
  return out


@pytest.mark.parametrize('workers,replicas_per_worker', [(2, 1), (2, 2),
                                                         (1, 2)])
def test_worker_shards_union_is_the_single_process_global_batch(
    workers, replicas_per_worker):
  # Global batch 8; single process: step k sees examples 8k .. 8k+7. Resumed
  # at global step 2 (skip_batches=2), the next step sees 16 .. 23.
  replicas = workers * replicas_per_worker
  datasets = [
      distribution.WorkerDataset(
          _Examples,
          tf.distribute.InputContext(workers, w, replicas),
          global_batch_size=8,
          skip_batches=2) for w in range(workers)
  ]
  got = _Steps(datasets, replicas_per_worker, steps=2)
  assert got == [list(range(16, 24)), list(range(24, 32))]


def test_distribute_dataset_on_mirrored_feeds_each_step_one_global_batch(
    mirrored):
  dist = distribution.DistributeDataset(
      mirrored, _Examples, global_batch_size=4, skip_batches=1)
  it = iter(dist)
  for step in (1, 2):
    values = mirrored.experimental_local_results(next(it))
    assert [len(v) for v in values] == [2, 2]
    np.testing.assert_array_equal(
        sorted(np.concatenate([v.numpy() for v in values])),
        np.arange(4 * step, 4 * step + 4))


def test_distribute_dataset_batch_not_multiple_of_replicas(mirrored):
  with pytest.raises(ValueError) as e:
    distribution.DistributeDataset(mirrored, _Examples, global_batch_size=3)
  assert 'global_batch_size=3' in str(e.value)


def test_distribute_dataset_negative_skip(mirrored):
  with pytest.raises(ValueError) as e:
    distribution.DistributeDataset(
        mirrored, _Examples, global_batch_size=4, skip_batches=-1)
  assert 'skip_batches=-1' in str(e.value)


# ---- peer failure --------------------------------------------------------------


class _FakeWorkerStrategy:
  """Just enough of a MultiWorkerMirroredStrategy for ReportPeerFailure."""

  class extended:  # pylint: disable=invalid-name
    _task_type = 'worker'
    _task_id = 1

  cluster_resolver = None


def test_peer_failure_becomes_a_clear_error_under_multi_worker():
  err = tf.errors.UnavailableError(
      None, None, 'Graph execution error:\n\nCollective ops is aborted by: '
      'The following tasks are unhealthy (stopped sending heartbeats)')
  with pytest.raises(distribution.PeerFailureError) as e:
    with distribution.ReportPeerFailure(_FakeWorkerStrategy()):
      raise err
  msg = str(e.value)
  assert 'Worker worker:1' in msg and 'UnavailableError' in msg
  assert 'unhealthy' in msg and 'Restart the whole group' in msg
  assert e.value.__cause__ is err


def test_peer_failure_passes_other_errors_and_single_process_through():
  with pytest.raises(ValueError):
    with distribution.ReportPeerFailure(_FakeWorkerStrategy()):
      raise ValueError('not a collective')
  with pytest.raises(tf.errors.UnavailableError):
    with distribution.ReportPeerFailure(tf.distribute.get_strategy()):
      raise tf.errors.UnavailableError(None, None, 'local')


def test_trainer_refuses_backup_workers_under_mirrored(tmp_path):
  # SyncReplicasOptimizer(replicas_to_aggregate=1, total_num_replicas=2):
  # 2 replicas here (2 logical CPUs), so 1 backup worker: refused, before
  # any step is taken.
  from learner.training.jobs import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  from learner.training.jobs import cli as cli_lib  # pylint: disable=g-import-not-at-top
  params = cli_lib.LoadExperimentParams(
      'regression.DistributedLinearRegression',
      params_override='task.train.replicas_to_aggregate : 1')
  with pytest.raises(ValueError) as e:
    trainer_lib.Trainer(params, str(tmp_path), strategy='mirrored',
                        tty=False).Run()
  msg = str(e.value)
  assert 'replicas_to_aggregate=1' in msg and 'backup worker' in msg
  assert not tf.io.gfile.exists(str(tmp_path / 'ckpt'))


def test_distributed_linear_regression_params_are_the_seeds_example():
  from params import registry  # pylint: disable=g-import-not-at-top
  p = registry.GetParams('regression.DistributedLinearRegression')
  assert p.task.train.replicas_to_aggregate is None  # All replicas.
  assert p.train_input.batch_size == 32  # Global: 16 per worker on 2.
  assert p.task.train.learner.optimizer_fn.learning_rate == 0.3
  assert (p.train_input.w, p.train_input.b) == (5.0, 2.0)


def test_mirrored_is_created_once_per_device_set(mirrored):
  # Two MirroredStrategies over the same devices in one process reuse TF's
  # collective keys and their all-reduces collide ("Shape mismatch in the
  # collective instance 100"), so CreateStrategy returns the same one.
  assert distribution.CreateStrategy('mirrored') is mirrored


def test_weights_digest_is_sha256_of_sorted_names_and_values():
  import hashlib  # pylint: disable=g-import-not-at-top
  b = tf.Variable(np.array([1.5, -2.0], np.float32), name='b')
  w = tf.Variable(np.array([[3.0]], np.float32), name='w')
  want = hashlib.sha256()
  for name, value in ((b.name, np.array([1.5, -2.0], np.float32)),
                      (w.name, np.array([[3.0]], np.float32))):
    want.update(('%s <f4 %s\n' % (name, value.shape)).encode())
    want.update(value.tobytes())
  assert distribution.WeightsDigest([w, b]) == want.hexdigest()
  w.assign([[3.0000002]])
  assert distribution.WeightsDigest([w, b]) != want.hexdigest()
