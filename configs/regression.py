"""The seeds' linear regression: y = 5x + 2 + noise, learn w and b.

Two experiments: `regression.LinearRegression` (one process, Momentum) and
`regression.DistributedLinearRegression` (the seeds' SyncReplicasOptimizer
example under tf.distribute; its params live in
configs/regression_distributed.py, see docs/distributed.md).
"""

from params import registry
from configs import inputs
from learner import learner as learner_lib
from learner.optimizers.factory import get_optimizer_fn
from schedules.base_schedule import ConstantOne
from configs import regression_distributed


@registry.Register
class LinearRegression:
  """y = w*x + b on generated y = 5x + 2 + N(0, 0.1^2); ends |w-5|, |b-2| < 0.05.

  Momentum(0.9) from a MoXing-style factory (learning_rate 0.05), batch 32,
  300 steps.
  """

  MAX_STEPS = 300

  def Task(self):
    p = regression_distributed.RegressionTaskParams(self.MAX_STEPS)
    p.train.learner = learner_lib.Learner.Params().Set(
        name='learner', loss_name='loss',
        # Constant rate, explicitly: the Learner's default is now Lingvo's
        # ContinuousSchedule (the same 1.0 below step 400000).
        lr_schedule=ConstantOne.Params(),
        optimizer_fn=get_optimizer_fn('momentum', learning_rate=0.05,
                                      momentum=0.9))
    return p

  def Train(self):
    return inputs.LinearRegressionInput.Params().Set(
        name='train_input', split='train', batch_size=32)

  def Eval(self):
    return inputs.LinearRegressionInput.Params().Set(
        name='eval_input', split='test', batch_size=200, shuffle=False,
        num_epochs=1, drop_remainder=False)


@registry.Register
class DistributedLinearRegression(
    regression_distributed.DistributedLinearRegressionBase):
  """The seeds' SyncReplicasOptimizer example: y = 5x + 2, SGD, all replicas.

  Plain SGD (learning rate 0.3), global batch 32, 300 steps; every replica
  takes its share of the global batch, gradients are all-reduced
  (sum weight*grad / sum weight) and one update is applied. Run it on 2
  workers with learner.launcher and --strategy=multi_worker (see
  docs/distributed.md); ends with w, b within 0.05 of 5, 2 and identical
  weights on every worker.
  """
