"""The seeds' SyncReplicasOptimizer example, as a tf.distribute experiment.

TF1 trained `y = 5x + 2 + noise` with plain gradient descent on several
workers through `SyncReplicasOptimizer(opt, replicas_to_aggregate=N,
total_num_replicas=N)`: each worker computed the gradient of its own batch,
N gradients were averaged and one update applied. Here the same experiment
runs under `MultiWorkerMirroredStrategy` (one process per worker, see
docs/distributed.md):

    python -m learner.launcher --num_workers=2 -- \\
        --model=regression.DistributedLinearRegression \\
        --logdir=/tmp/dlr --strategy=multi_worker

Every step, each of the 2 workers takes its half of the global batch of 32,
the gradients are all-reduced (sum weight*grad / sum weight) and both apply
the same update, so both end with bit-identical weights w ~ 5, b ~ 2 (within
0.05), equal to single-process training on the same global batches.

`replicas_to_aggregate` maps onto `p.task.train.replicas_to_aggregate`
(None: all replicas, the only value TF2 collectives support).

This module holds the unregistered base, `DistributedLinearRegressionBase`;
configs/regression.py registers it under the key
`regression.DistributedLinearRegression` (the registry keys an experiment by
its defining module, and issue 7 asks for that key).
"""

from configs import inputs
from learner import learner as learner_lib
from learner.optimizers.factory import get_optimizer_fn
from schedules.base_schedule import ConstantOne
from configs import model_tasks


def RegressionTaskParams(max_steps):
  """The regression task with the train knobs both experiments use.

  Saves every 100 steps (3 kept), summaries every 10, a log line every 50,
  loops of at most 100 steps; the dev metric is the loss.
  """
  p = model_tasks.LinearRegressionTask.Params().Set(name='regression')
  p.train.max_steps = max_steps
  p.train.save_interval_steps = 100
  p.train.summary_interval_steps = 10
  p.train.save_max_to_keep = 3  # Ours, not Lingvo's 100.
  p.train.steps_per_loop = 100
  p.train.log_interval_steps = 50
  p.eval.dev_metric = 'loss'
  return p


class DistributedLinearRegressionBase:
  """y = w*x + b, y = 5x + 2 + N(0, 0.1^2); plain SGD (lr 0.3), 300 steps.

  Global batch 32 (16 per worker on 2 workers); ends |w-5|, |b-2| < 0.05 on
  any number of replicas dividing 32. Unregistered base: the registered
  experiment is configs/regression.py's DistributedLinearRegression.
  """

  MAX_STEPS = 300
  GLOBAL_BATCH = 32
  LEARNING_RATE = 0.3

  def Task(self):
    p = RegressionTaskParams(self.MAX_STEPS)
    # SyncReplicasOptimizer(replicas_to_aggregate=None -> all replicas).
    p.train.replicas_to_aggregate = None
    p.train.learner = learner_lib.Learner.Params().Set(
        name='learner', loss_name='loss',
        # Constant rate, explicitly: the Learner's default is now Lingvo's
        # ContinuousSchedule (the same 1.0 below step 400000).
        lr_schedule=ConstantOne.Params(),
        optimizer_fn=get_optimizer_fn(
            'sgd', learning_rate=self.LEARNING_RATE))
    return p

  def Train(self):
    return inputs.LinearRegressionInput.Params().Set(
        name='train_input', split='train', batch_size=self.GLOBAL_BATCH)

  def Eval(self):
    return inputs.LinearRegressionInput.Params().Set(
        name='eval_input', split='test', batch_size=200, shuffle=False,
        num_epochs=1, drop_remainder=False)

