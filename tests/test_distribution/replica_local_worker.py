"""A worker process of the replica-local tests: Easgd / LocalSgd, 2 replicas.

Usage: python replica_local_worker.py <mirrored|multi_worker|single> <out_dir>

For each of 'easgd' and 'local_sgd' (scenarios.LinearModel, batches of
scenarios.Batches with SPLITS, a different batch on each replica):
  * 20 steps straight; records every replica's copies and the kept copies
    (center / average) after step 10 and after step 20;
  * 10 steps, a checkpoint (under multi_worker the chief writes it in
    <out_dir>/ckpt_<kind>, the other worker in a temporary directory), a
    fresh model and learner restored from it, 10 more steps; records the
    same values, to compare bit for bit.
Writes <out_dir>/result_<task index>.json with exact float32 values (as
lists) and the checkpoint path. mirrored: 2 logical CPU devices; single:
the default strategy (one replica).
"""

import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SPLITS = [2, 6]
NUM_STEPS = 20
TAU = 3
ALPHA = 0.2
LR = 0.1
MOMENTUM = 0.9


def LearnerParams(kind):
  """Easgd around SGD, or LocalSgd around Momentum (slots per replica)."""
  from learner import learner as learner_lib  # pylint: disable=g-import-not-at-top
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  if kind == 'easgd':
    opt = optimizers.Easgd.Params().Set(
        optimizer=optimizers.SGD.Params(), tau=TAU, alpha=ALPHA)
  else:
    opt = optimizers.LocalSgd.Params().Set(
        optimizer=optimizers.Momentum.Params().Set(alpha=MOMENTUM), tau=TAU)
  return learner_lib.Learner.Params().Set(
      name='lrn', loss_name='loss', learning_rate=LR, optimizer=opt)


def _Build(strategy, kind):
  import scenarios  # pylint: disable=g-import-not-at-top
  problem = scenarios.Problem.__new__(scenarios.Problem)
  problem.strategy = strategy
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with strategy.scope():
    problem.model = scenarios.LinearModel.Params().Set(
        name='model').Instantiate()
    problem.learner = LearnerParams(kind).Instantiate()
    problem.learner.Bind(problem.model.vars)
  problem._fn = tf.function(problem._Step)  # pylint: disable=protected-access
  return problem


def _State(problem):
  """{'w', 'b': [N, ...] every replica's copy; 'w_avg', 'b_avg': kept}."""
  from learner.optimizers.wrappers import replica_local  # pylint: disable=g-import-not-at-top
  opt = problem.learner.optimizer
  out = {}
  for name in ('w', 'b'):
    var = problem.model.vars[name]
    out[name] = replica_local.GatherCopies(var).numpy().tolist()
    out[name + '_avg'] = opt.GetAverage(var).numpy().tolist()
  return out


def _Steps(problem, batches, check):
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  for per_replica in batches:
    problem._fn(problem._Distribute(per_replica))  # pylint: disable=protected-access
    if check:  # Everything but the replica-local variables stays equal.
      distribution.AssertReplicasIdentical(
          problem.model.vars.Flatten() + problem.learner.vars.Flatten(),
          replica_local=problem.learner.optimizer.ReplicaLocalVariables())


def _Barrier(strategy):
  """Every worker gets here before any goes on (one small all-reduce)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  strategy.reduce(tf.distribute.ReduceOp.SUM,
                  strategy.run(lambda: tf.constant(1.0)), axis=None)


def RunKind(strategy, kind, out_dir):
  import scenarios  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  n = strategy.num_replicas_in_sync
  splits = SPLITS if n > 1 else SPLITS[:1]
  batches = scenarios.Batches(splits, NUM_STEPS)
  result = {}
  straight = _Build(strategy, kind)
  _Steps(straight, batches[:10], check=True)
  result['straight_10'] = _State(straight)
  _Steps(straight, batches[10:], check=True)
  result['straight_20'] = _State(straight)

  first = _Build(strategy, kind)
  _Steps(first, batches[:10], check=False)
  chief_dir = os.path.join(out_dir, 'ckpt_%s' % kind)
  write_dir = distribution.WorkerLogdir(chief_dir, strategy)
  ckpt = tf.train.Checkpoint(model=first.model, learner=first.learner)
  path = ckpt.write(os.path.join(write_dir, 'ckpt'))
  _Barrier(strategy)  # The chief's checkpoint is written.
  result['ckpt'] = os.path.join(chief_dir, 'ckpt')
  second = _Build(strategy, kind)
  tf.train.Checkpoint(model=second.model, learner=second.learner).read(
      result['ckpt']).assert_consumed()
  result['restored_10'] = _State(second)
  _Steps(second, batches[10:], check=False)
  result['resumed_20'] = _State(second)
  del path
  return result


def main(argv):
  kind, out_dir = argv[1], argv[2]
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  if kind == 'multi_worker':
    strategy = distribution.CreateStrategy('multi_worker', timeout_seconds=60)
    index = json.loads(os.environ['TF_CONFIG'])['task']['index']
  else:
    os.environ.pop('TF_CONFIG', None)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if kind == 'mirrored':
      cpu = tf.config.list_physical_devices('CPU')[0]
      tf.config.set_logical_device_configuration(
          cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
      strategy = distribution.CreateStrategy('mirrored')
    else:
      strategy = tf.distribute.get_strategy()
    index = 0
  result = {'num_replicas': strategy.num_replicas_in_sync}
  for opt in ('easgd', 'local_sgd'):
    result[opt] = RunKind(strategy, opt, out_dir)
  path = os.path.join(out_dir, 'result_%d.json' % index)
  with open(path + '.tmp', 'w') as f:
    json.dump(result, f)
  os.replace(path + '.tmp', path)
  print('replica_local_worker %s %d: done' % (kind, index), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
