"""Benchmark: the collectives a ZeRO-1 update could use, on one vector.

    python -m benchmarks.collectives [--elements=25557032] [--steps=10]

Splits the CPU into 2 logical devices (before TensorFlow starts) and, under
MirroredStrategy, times one float32 vector of `--elements` (default the
resnet50 set's parameter count) through
  * all_reduce: CollectiveReduceV2 (learner/cross_replica.py AllReduceSum,
    the unsharded update's gradients);
  * all_gather: CollectiveGatherV2 of a 1/N slice (what
    learner/optimizers/sharded_state.py runs after the sharded update);
  * all_to_all: CollectiveAllToAllV2 of the vector as [N, n/N] chunks
    (replica r receives every replica's chunk r);
  * reduce_scatter_a2a: cross_replica.ReduceScatterSum, the all-to-all and
    the local sum of the N chunks (a sharded update's gradients,
    cross_replica.ScatteredMean);
interleaved in one run (timing.TimeRows); then reduce_scatter, TF's own
CollectiveReduceScatterV2, last (TF 2.21 has no CPU implementation of it:
the row then prints the error). Prints each row's median, the bytes one
replica sends in it (`SentBytes`: a ring all-reduce 2 (N - 1) / N P of P
bytes, an all-gather of a part of P bytes (N - 1) P, an all-to-all (N -
1) / N P) and those bytes per second, and the ratio to the all-reduce.
"""

import argparse
import json
import sys

import tensorflow as tf

from benchmarks import timing
from learner import cross_replica
from learner.training.cluster import distribution

RESULT_PREFIX = 'COLLECTIVES_RESULT '


ROWS = ('all_reduce', 'all_gather', 'all_to_all', 'reduce_scatter_a2a')


def SentBytes(row, n, replicas):
  """Bytes one replica sends in `row` on n float32 elements (module doc);
  all_gather sends its part of ceil(n / N) elements."""
  shard = -(-n // replicas)
  full, part = 4.0 * shard * replicas, 4.0 * shard
  return {'all_reduce': 2.0 * (replicas - 1) / replicas * full,
          'all_gather': (replicas - 1) * part,
          'all_to_all': (replicas - 1) / replicas * full,
          'reduce_scatter_a2a': (replicas - 1) / replicas * full,
          'reduce_scatter': (replicas - 1) / replicas * full}[row]


def Rows(strategy, n):
  """{row: step fn} of the collectives on an n-element vector (ROWS, then
  'reduce_scatter', TF's kernel, which may not exist: time it last)."""
  replicas = strategy.num_replicas_in_sync
  shard = -(-n // replicas)
  with strategy.scope():
    full = tf.Variable(tf.ones([shard * replicas]), trainable=False)
    part = tf.Variable(tf.ones([shard]), trainable=False)

  def _AllToAll():
    group_key, instance_key, token = cross_replica._Keys()  # pylint: disable=protected-access
    return tf.raw_ops.CollectiveAllToAllV2(
        input=tf.reshape(full.read_value(), [replicas, shard]),
        group_size=replicas, group_key=group_key, instance_key=instance_key,
        ordering_token=[token.handle])

  def _Scatter():
    group_key, instance_key, token = cross_replica._Keys()  # pylint: disable=protected-access
    return tf.raw_ops.CollectiveReduceScatterV2(
        input=full.read_value(), group_size=replicas, group_key=group_key,
        instance_key=instance_key, ordering_token=[token.handle],
        merge_op='Add', final_op='Id')

  fns = {
      'all_reduce': lambda: cross_replica.AllReduceSum([full.read_value()]),
      'all_gather': lambda: cross_replica.AllGather(part.read_value()),
      'all_to_all': _AllToAll,
      'reduce_scatter_a2a': lambda: cross_replica.ReduceScatterSum(
          [full.read_value()]),
      'reduce_scatter': _Scatter,
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
  rows = Rows(strategy, args.elements)
  scatter = rows.pop('reduce_scatter')
  stats = timing.TimeRows(rows, steps=args.steps, warmup=2, rounds=2)
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
  print(Table(stats, args.elements, 2))
  if note:
    print(note)
  result = {k: dict(v, sent_bytes=SentBytes(k, args.elements, 2))
            for k, v in stats.items()}
  result['note'] = note
  print(RESULT_PREFIX + json.dumps(result))
  return result


def Table(stats, n, replicas):
  """The table of `stats` ({row: timing stats}): median, MiB sent by one
  replica, GiB/s of it, ratio to the all-reduce's median."""
  base = stats['all_reduce'].median
  rows = []
  for k, v in stats.items():
    sent = SentBytes(k, n, replicas)
    rows.append([k, v.median * 1e3, sent / 2**20, sent / v.median / 2**30,
                 v.median / base])
  return timing.FormatTable(['collective', 'median_ms', 'sent_MiB',
                             'sent_GiB/s', 'vs all_reduce'], rows)


if __name__ == '__main__':
  main()
