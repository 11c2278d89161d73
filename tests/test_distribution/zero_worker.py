"""A worker process of the 2-worker ZeRO-1 tests (test_sharded_state.py).

Usage: python zero_worker.py <out_dir>   (TF_CONFIG set by the launcher)

Under MultiWorkerMirroredStrategy (one CPU per worker, 2 replicas) runs
sharded_cases.py's 20 steps with Momentum, Adam and AdamW, clipping and
accumulation of 4 micro-batches, micro-step 5 NaN on replica 1; the same
with the whole-tensor rules homed (sharded_cases.HOME_WORKER_CASES: Muon,
Adafactor factored and not, LAMB, LARS); then schedule-free SGD and AdamW,
Ema, Lookahead and SWA around Adam (sharded_cases.AVERAGING; accumulation
of 2, clipping; their eval weights too); Momentum, Adam and AdamW alone
(their gradients reduce-scattered), 8 steps, step 3 NaN on replica 1, with
and without clipping; each with shard_optimizer_state False
and True, and writes <out_dir>/result_<task index>.json: {case:
{'plain'|'sharded': {variable: values}}, plus each run's
num_dropped_microbatches}. One launch serves every case: each launch is two
TensorFlow start-ups and a cluster's.
"""

import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv):
  out_dir = argv[1]
  # The strategy comes first: nothing else may run a TF op before it.
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  strategy = distribution.CreateStrategy('multi_worker', timeout_seconds=60)
  index = json.loads(os.environ['TF_CONFIG'])['task']['index']
  import sharded_cases as cases  # pylint: disable=g-import-not-at-top
  result = {'num_replicas': strategy.num_replicas_in_sync}
  flat = [(name, False) for name in sorted(cases.OPTS)]
  homed = [(name, True) for name in cases.HOME_WORKER_CASES]
  for name, home in flat + homed:
    result[name] = {}
    for label, shard in (('plain', False), ('sharded', True)):
      opt, kw = (cases.HomeRule(name, 4) if home else
                 (cases.Accumulated(name), {}))
      task, lrn = cases.Run(strategy, opt, shard, nan_at=(5, 1),
                            clip_gradient_norm_to_value=0.5, **kw)
      weights = cases.Weights(strategy, task)
      result[name][label] = {k: v[0].tolist() for k, v in weights.items()}
      result[name][label + '_dropped'] = int(
          lrn.optimizer.num_dropped_microbatches.numpy())
  # Gradients reduce-scattered (update_step.MeanOverReplicas: no wrapper),
  # a NaN on replica 1 at step 3; with clip and without.
  for name in sorted(cases.OPTS):
    for clip in (0.0, 0.5):
      key = 'scatter_%s_clip%g' % (name, clip)
      result[key] = {}
      for label, shard in (('plain', False), ('sharded', True)):
        task, lrn = cases.Run(strategy, cases.OPTS[name](), shard, steps=8,
                              nan_at=(3, 1), clip_gradient_norm_to_value=clip,
                              scatter_clipped_gradients=True)
        result[key][label] = {k: v[0].tolist() for k, v in
                              cases.Weights(strategy, task).items()}
        result[key][label + '_skipped'] = int(lrn.num_skipped_steps.numpy())
  # Averages sharded (issue 38 item 1B): weights and gathered eval weights.
  for name in sorted(cases.AVERAGING):
    result[name] = {}
    for label, shard in (('plain', False), ('sharded', True)):
      opt = cases.GradientAccumulation.Params().Set(
          optimizer=cases.AVERAGING[name](), num_batches=2)
      task, lrn = cases.Run(strategy, opt, shard,
                            clip_gradient_norm_to_value=0.5)
      weights = cases.Weights(strategy, task)
      result[name][label] = {k: v[0].tolist() for k, v in weights.items()}
      result[name][label + '_eval'] = {
          k: v.tolist()
          for k, v in cases.EvalWeights(strategy, task, lrn).items()}
  path = os.path.join(out_dir, 'result_%d.json' % index)
  with open(path + '.tmp', 'w') as f:
    json.dump(result, f)
  os.replace(path + '.tmp', path)
  print('zero_worker %d: done' % index, flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
