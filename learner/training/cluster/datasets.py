"""Input under a strategy: each worker's shard, batched per replica.

`DistributeDataset` gives each worker its own shard (`ShardForWorker`),
batched per replica (`WorkerDataset`), and skips the batches a resumed run
already consumed (distributed iterators are not checkpointable in TF 2.21,
so resume is by deterministic skip); `DistributeBatches` does the same for
any per-pipeline batches function; `WithoutAutotuneThread` turns off
tf.data's autotuning thread for a long-lived input (the trainer's). Part of
`distribution` (its facade).
"""

import tensorflow as tf

from learner.training.cluster import strategy as strategy_lib


def ShardForWorker(dataset, input_context):
  """Keeps this input pipeline's shard of `dataset` (every k-th element).

  With k = input_context.num_input_pipelines (one per worker) and an
  unbatched, deterministic dataset, worker i keeps elements i, i+k, ...;
  batching each shard by the per-replica batch size then makes the union of
  one step's per-replica batches exactly one global batch of the
  single-process run (elements step·B .. step·B + B - 1 when there is one
  replica per worker).

  Args:
    dataset: tf.data.Dataset of single examples (not yet batched).
    input_context: tf.distribute.InputContext, or None for no sharding.

  Returns:
    tf.data.Dataset.
  """
  if input_context is None or input_context.num_input_pipelines == 1:
    return dataset
  return dataset.shard(input_context.num_input_pipelines,
                       input_context.input_pipeline_id)


def DistributeDataset(strategy, example_dataset_fn, global_batch_size,
                      skip_batches=0, drop_remainder=True):
  """A distributed dataset of per-replica batches, one shard per worker.

  Args:
    strategy: tf.distribute.Strategy (the default strategy is fine).
    example_dataset_fn: callable() -> tf.data.Dataset of single examples,
      deterministic (same order every call: shuffle with a fixed seed and
      `reshuffle_each_iteration=False`, or before the call).
    global_batch_size: int, examples per step over all replicas; must be a
      multiple of the number of replicas.
    skip_batches: int, global batches already consumed (the global step of a
      resumed run); each replica skips as many per-replica batches.
    drop_remainder: bool, drop a final incomplete batch (keeps shapes static).

  Returns:
    a `tf.distribute.DistributedDataset` (iterate it; per-replica values).

  Raises:
    ValueError: global_batch_size not a positive multiple of the replicas,
      or skip_batches negative.
  """
  return DistributeBatches(
      strategy,
      lambda ctx: WorkerDataset(example_dataset_fn, ctx, global_batch_size,
                                skip_batches, drop_remainder),
      global_batch_size, skip_batches)


def DistributeBatches(strategy, batches_fn, global_batch_size,
                      skip_batches=0):
  """`batches_fn`'s per-replica batches, one input pipeline per worker.

  The input of every train step, on one device or under any strategy: with
  the default strategy the result is `batches_fn(InputContext())`, a plain
  tf.data.Dataset (whose iterator can be checkpointed); under a strategy a
  `tf.distribute.DistributedDataset` (whose iterator cannot, in TF 2.21).

  Args:
    strategy: tf.distribute.Strategy.
    batches_fn: callable(tf.distribute.InputContext) -> tf.data.Dataset of
      this input pipeline's per-replica batches, the first `skip_batches`
      global batches already skipped (e.g. `WorkerDataset`, or
      `BaseInputGenerator.GetDataset(skip_batches, input_context)`).
    global_batch_size: int, examples per step over all replicas, or None
      with one replica (an input that batches itself).
    skip_batches: int >= 0, global batches `batches_fn` skips (checked).

  Returns:
    tf.data.Dataset (default strategy) or tf.distribute.DistributedDataset.

  Raises:
    ValueError: global_batch_size not a positive multiple of the replicas,
      or skip_batches negative.
  """
  num_replicas = strategy_lib.NumReplicas(strategy)
  if (global_batch_size is not None or num_replicas > 1) and (
      not isinstance(global_batch_size, int) or global_batch_size < 1 or
      global_batch_size % num_replicas):
    raise ValueError(
        'global_batch_size=%r must be a positive multiple of the number of '
        'replicas (%d); set the input\'s batch_size to a multiple of %d.' %
        (global_batch_size, num_replicas, num_replicas))
  if skip_batches < 0:
    raise ValueError('skip_batches=%r must be >= 0 (the global batches '
                     'already consumed).' % (skip_batches,))
  return strategy.distribute_datasets_from_function(batches_fn)


def WorkerDataset(example_dataset_fn, input_context, global_batch_size,
                  skip_batches=0, drop_remainder=True):
  """One worker's input pipeline: its shard, in per-replica batches.

  The one place where examples become batches and a resumed run skips the
  consumed ones: `DistributeDataset` and `BaseInputGenerator.GetDataset`
  call it (one device: `InputContext()`, one pipeline of one replica).

  Args:
    example_dataset_fn: callable() -> deterministic tf.data.Dataset of
      single examples.
    input_context: tf.distribute.InputContext of this worker.
    global_batch_size: int, examples per step over all replicas.
    skip_batches: int, global steps already consumed.
    drop_remainder: bool.

  Returns:
    tf.data.Dataset of per-replica batches.
  """
  ds = ShardForWorker(example_dataset_fn(), input_context)
  per_replica = input_context.get_per_replica_batch_size(global_batch_size)
  # The replicas of one worker share its pipeline and take batches in turn,
  # so a worker with r replicas consumes r per-replica batches per step.
  local_replicas = (input_context.num_replicas_in_sync //
                    input_context.num_input_pipelines)
  ds = ds.batch(per_replica, drop_remainder=drop_remainder)
  if skip_batches:
    ds = ds.skip(skip_batches * local_replicas)
  return ds


def WithoutAutotuneThread(dataset):
  """`dataset` with tf.data's autotuning model thread off.

  In TF 2.21 deleting an iterator whose autotuning thread is waiting out its
  optimization period (which doubles up to 60 s over a long run) blocks
  until that period ends: a train run's iterator took 30-35 s to delete
  after "Final metrics" in about half the runs of lm.CharTransformerMuon
  here (the thread's native stack: `Model::OptimizeLoop` in a timed wait,
  the main thread in `~RootDataset::Iterator`). With the model thread off,
  `num_parallel_calls=AUTOTUNE` runs at the CPU's thread count and
  prefetch(AUTOTUNE) keeps its own buffer tuning; the elements and their
  order are the same, and checkpoints of the iterator are read either way.
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def AdvanceIterator(iterator, num_batches):
  """Takes `num_batches` batches from a tf.data iterator, in one graph call.

  Unlike an iterator of `dataset.skip(num_batches)`, the iterator keeps the
  dataset of every other run (skip_batches 0), so the checkpoints that save
  it are restored by the next run; the cost is the same (tf.data's skip
  also produces the batches it drops).
  """
  def _Body(i):
    with tf.control_dependencies(tf.nest.flatten(iterator.get_next())):
      return (i + 1,)

  tf.function(lambda n: tf.while_loop(lambda i: i < n, _Body, (
      tf.constant(0, tf.int64),)), autograph=False)(
          tf.constant(num_batches, tf.int64))
