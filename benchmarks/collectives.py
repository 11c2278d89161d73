"""Benchmark: the collectives a ZeRO-1 update could use, on one vector.

    python -m benchmarks.collectives [--elements=25557032] [--steps=10]

Splits the CPU into 2 logical devices (before TensorFlow starts) and, under
MirroredStrategy, times one float32 vector of `--elements` (default the
resnet50 set's parameter count) through CollectiveReduceV2 (all-reduce,
what learner/cross_replica.py runs), CollectiveReduceScatterV2 (each
replica gets the sum of its 1/N slice) and CollectiveGatherV2 (all-gather
of a 1/N slice, what learner/optimizers/sharded_state.py runs after the update), the
all-reduce and all-gather rows interleaved in one run (timing.TimeRows),
reduce-scatter last (TF 2.21 has no CPU implementation of it: the row then
prints the error). Prints the medians and the ratios to the all-reduce.
"""

import argparse
import json
import sys

import tensorflow as tf

from benchmarks import timing
from learner import cross_replica
from learner.training.cluster import distribution

RESULT_PREFIX = 'COLLECTIVES_RESULT '


def _Rows(strategy, n):
  """{row: step fn} for the three collectives on an n-element vector."""
  replicas = strategy.num_replicas_in_sync
  shard = -(-n // replicas)
  with strategy.scope():
    full = tf.Variable(tf.ones([shard * replicas]), trainable=False)
    part = tf.Variable(tf.ones([shard]), trainable=False)

  def _Scatter():
    group_key, instance_key, token = cross_replica._Keys()  # pylint: disable=protected-access
    return tf.raw_ops.CollectiveReduceScatterV2(
        input=full.read_value(), group_size=replicas, group_key=group_key,
        instance_key=instance_key, ordering_token=[token.handle],
        merge_op='Add', final_op='Id')

  fns = {
      'all_reduce': lambda: cross_replica.AllReduceSum([full.read_value()]),
      'reduce_scatter': _Scatter,
      'all_gather': lambda: cross_replica.AllGather(part.read_value()),
  }
  rows = {}
  for name, fn in fns.items():
    run = tf.function(lambda fn=fn: strategy.run(
        lambda: tf.reduce_sum(tf.nest.flatten(fn())[0])))
    rows[name] = lambda run=run: [t.numpy() for t in
                                  strategy.experimental_local_results(run())]
  return rows


def main(argv=None):
  """Times the rows; prints the table; returns the result dict."""
  parser = argparse.ArgumentParser(prog='python -m benchmarks.collectives',
                                   description=__doc__)
  parser.add_argument('--elements', type=int, default=25557032)
  parser.add_argument('--steps', type=int, default=10)
  args = parser.parse_args(sys.argv[1:] if argv is None else argv)
  cpu = tf.config.list_physical_devices('CPU')[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  strategy = distribution.CreateStrategy('mirrored')
  rows = _Rows(strategy, args.elements)
  scatter = rows.pop('reduce_scatter')
  stats = timing.TimeRows(rows, steps=args.steps, warmup=2, rounds=2)
  base = stats['all_reduce'].median
  # Last: a collective without an implementation aborts the collective
  # executor of the process (TF 2.21 has none for reduce-scatter on CPU).
  try:
    stats['reduce_scatter'] = timing.TimeRows(
        {'reduce_scatter': scatter}, steps=args.steps, warmup=2,
        rounds=2)['reduce_scatter']
    note = ''
  except (tf.errors.OpError, RuntimeError) as e:
    text = str(e)
    key = 'did not find collective implementation'
    note = 'reduce_scatter: not available here: %s' % (
        'CollectiveRegistry::Lookup ' + key if key in text else
        text.strip().splitlines()[0][:200])
  print('%d float32 elements, MirroredStrategy on 2 logical CPUs' %
        args.elements)
  print(timing.FormatTable(['collective', 'median_ms', 'vs all_reduce'], [
      [k, v.median * 1e3, v.median / base] for k, v in stats.items()]))
  if note:
    print(note)
  result = {k: dict(v) for k, v in stats.items()}
  result['note'] = note
  print(RESULT_PREFIX + json.dumps(result))
  return result


if __name__ == '__main__':
  main()
