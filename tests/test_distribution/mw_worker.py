"""A worker process for the distribution tests: runs scenarios.RunAll.

Usage: python mw_worker.py <strategy: mirrored|multi_worker> <out_dir>

Writes <out_dir>/result_<task index>.json (task index 0 for mirrored) with
every scenario's weights (exact float32 values) and collective layouts.
mirrored: 2 logical CPU devices are configured before TF starts; the
process is separate so that a hang in a collective is bounded by the test's
deadline instead of blocking the test session.
"""

import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SPLITS = [2, 6]  # Unequal per-replica example counts; the global batch is 8.


def main(argv):
  kind, out_dir = argv[1], argv[2]
  # The strategy comes first: nothing else may run a TF op before it.
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  if kind == 'mirrored':
    os.environ.pop('TF_CONFIG', None)  # One process, not a cluster.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    cpu = tf.config.list_physical_devices('CPU')[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = distribution.CreateStrategy('mirrored')
    index = 0
  else:
    strategy = distribution.CreateStrategy('multi_worker', timeout_seconds=60)
    index = json.loads(os.environ['TF_CONFIG'])['task']['index']
  import scenarios  # pylint: disable=g-import-not-at-top
  out = scenarios.RunAll(strategy, SPLITS)
  result = {'num_replicas': strategy.num_replicas_in_sync,
            'is_chief': distribution.IsChief(strategy)}
  for key, value in out.items():
    if key.startswith('layout'):
      result[key] = [value[0], [[op, list(c)] for op, c in value[1]]]
    else:
      result[key] = {k: v.tolist() for k, v in value.items()}
  path = os.path.join(out_dir, 'result_%d.json' % index)
  with open(path + '.tmp', 'w') as f:
    json.dump(result, f)
  os.replace(path + '.tmp', path)
  print('mw_worker %s %d: done' % (kind, index), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
