"""Rows of `benchmarks.memory --sharded`: ZeRO-1 optimizer state per replica.

    python -m benchmarks.memory --sharded [--set=resnet50] [--steps=8]

One child process splits its CPU into N = 2 logical devices (before
TensorFlow starts), builds a MirroredStrategy over them and, in it, the
variable set with Adam (the rule whose state is 2 x the weights) twice: a
Learner with `shard_optimizer_state=False`, and one with True
(learner/optimizers/sharded_state.py). For each it reports the bytes of the
optimizer's variables placed on each device (the sum of the sizes of the
per-device copies: slots, and for the sharded run the [shard] copy of the
weights the rule updates, reported apart), not RSS: both runs live in one
process. Then both take `--steps` steps on fixed gradients
(learner_row.FixedGradientTerm), interleaved in the same run
(timing.TimeRows), so their step-time ratio is measured under the same
load.

Check (issue 26, item 5): sharded slot bytes per replica <= unsharded
slot bytes / N + the largest shard imbalance (the padding of the flat
vector, < N elements per slot, x 4 B).
"""

import json
import sys

import tensorflow as tf

from benchmarks import learner_row
from benchmarks import timing
from benchmarks import variable_sets
from learner import gradient_tape
from learner import learner as learner_lib
from learner import optimizers
from learner.optimizers import var_grad
from learner.training.cluster import distribution
from params import NestedMap

NUM_REPLICAS = 2
RESULT_PREFIX = 'SHARDED_MEMORY_RESULT '


def _BytesByDevice(variables, skip=()):
  """{device: bytes} of the per-device copies of `variables` (those whose
  id is in `skip` left out)."""
  out = {}
  for v in variables:
    if id(v) in skip:
      continue
    for c in getattr(v, 'values', None) or [v]:
      out[c.device] = out.get(c.device, 0) + (
          int(c.shape.num_elements()) * c.dtype.size)
  return out


def _Build(strategy, specs, weights, grads, shard):
  """(learner, step fn, model variables) of one run under `strategy`."""
  with strategy.scope():
    vs = [tf.Variable(w, name=s.name) for s, w in zip(specs, weights)]
    gs = [tf.Variable(g, trainable=False, name=s.name + '_grad')
          for s, g in zip(specs, grads)]
    vmap = NestedMap({var_grad.SanitizedName(s.name): v
                      for s, v in zip(specs, vs)})
    lrn = learner_lib.Learner.Params().Set(
        name='bench', loss_name='loss', learning_rate=1e-3,
        clip_gradient_norm_to_value=1.0, optimizer=optimizers.Adam.Params(),
        shard_optimizer_state=shard).Instantiate()
    lrn.Bind(vmap)

  def _Replica():
    with gradient_tape.GradientTape():
      loss = tf.add_n([learner_row.FixedGradientTerm(v, g)
                       for v, g in zip(vs, gs)])
    lrn.Apply({'loss': (loss, tf.constant(1.0))}, vmap)

  @tf.function
  def _Step():
    strategy.run(_Replica)

  return lrn, _Step, vs


def RunChild(set_name, steps):
  """Both runs' bytes per device and step times; returns a result dict."""
  cpu = tf.config.list_physical_devices('CPU')[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_REPLICAS)
  strategy = distribution.CreateStrategy('mirrored')
  specs = variable_sets.Specs(set_name)
  weights, grads = variable_sets.MakeValues(specs)
  result = dict(set=set_name, num_params=variable_sets.NumParams(specs),
                num_replicas=strategy.num_replicas_in_sync, rows={})
  steps_by_row = {}
  for shard in (False, True):
    name = 'adam_sharded' if shard else 'adam_unsharded'
    lrn, step, model_vars = _Build(strategy, specs, weights, grads, shard)
    copies = (lrn.optimizer.state_sharding.shard_variables if shard
              else [])
    skip = {id(v) for v in list(model_vars) + copies}
    result['rows'][name] = dict(
        state_bytes_by_device=_BytesByDevice(lrn.optimizer.variables, skip),
        shard_copy_bytes_by_device=_BytesByDevice(copies))
    steps_by_row[name] = step
  times = timing.TimeRows(steps_by_row, steps=steps, warmup=2, rounds=2)
  for name, stats in times.items():
    result['rows'][name]['step'] = dict(stats)
  return result


def Report(res):
  """Table lines and the check of item 5 from a child's result."""
  n, replicas = res['num_params'], res['num_replicas']
  rows = res['rows']
  plain = max(rows['adam_unsharded']['state_bytes_by_device'].values())
  sharded = max(rows['adam_sharded']['state_bytes_by_device'].values())
  # Imbalance bound: the padding (< N elements) of each of Adam's 2 slots.
  bound = plain / replicas + 2 * replicas * 4
  table = []
  for name in ('adam_unsharded', 'adam_sharded'):
    r = rows[name]
    table.append([name, max(r['state_bytes_by_device'].values()) / 2**20,
                  max(r['shard_copy_bytes_by_device'].values() or [0]) /
                  2**20, r['step']['median_s'] * 1e3])
  lines = ['%s (%.2f M params), Adam, MirroredStrategy on %d logical CPUs' %
           (res['set'], n / 1e6, replicas),
           timing.FormatTable(['row', 'state_MiB/replica',
                               'weight_shard_MiB/replica', 'step_ms'], table),
           'sharded state per replica %d B <= unsharded / N + imbalance '
           '%d B: %s; step time sharded / unsharded %.2f (same run)' % (
               sharded, bound, 'ok' if sharded <= bound else 'OVER',
               rows['adam_sharded']['step']['median_s'] /
               rows['adam_unsharded']['step']['median_s'])]
  return lines, dict(sharded_bytes=sharded, unsharded_bytes=plain,
                     bound_bytes=bound, within_bound=sharded <= bound)


def main(argv):
  """Child entry point: --set=NAME --steps=K; prints the result line."""
  args = dict(a.lstrip('-').split('=', 1) for a in argv)
  res = RunChild(args.get('set', 'resnet50'), int(args.get('steps', 8)))
  print(RESULT_PREFIX + json.dumps(res))
  sys.stdout.flush()
  return res


if __name__ == '__main__':
  main(sys.argv[1:])
