"""The seeds' linear regression: y = 5x + 2 + noise, learn w and b.

Three experiments: `regression.LinearRegression` (one process, Momentum),
`regression.DistributedLinearRegression` (the seeds' SyncReplicasOptimizer
example under tf.distribute; its params live in
configs/regression_distributed.py, see docs/distributed.md) and
`regression.EasgdLinearRegression` (the same with the MoXing seed's EASGD:
replica-local copies and a center, docs/distributed.md "Replica-local
training").
"""

from params import registry
from configs import inputs
from learner import learner as learner_lib
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
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


@registry.Register
class EasgdLinearRegression(
    regression_distributed.DistributedLinearRegressionBase):
  """y = 5x + 2 trained with synchronous EASGD (the MoXing seed's optimizer).

  Each replica trains its own copy with plain SGD (learning rate 0.3) on its
  share of the global batch of 32, with no gradient all-reduce; every 4
  updates the copies and the center pull toward each other with moving rate
  alpha = 0.45 (N * alpha = 0.9 on 2 replicas, the paper's beta). 300
  steps; the center (what eval, evaler and export read) ends within 0.05 of
  w = 5, b = 2. Run it on 2 workers:

      python -m learner.launcher --num_workers=2 -- \\
          --model=regression.EasgdLinearRegression --logdir=/tmp/easgd \\
          --strategy=multi_worker
  """

  TAU = 4
  ALPHA = 0.45

  def Task(self):
    p = super().Task()
    p.train.learner.optimizer_fn = get_optimizer_wrapper_fn(
        'easgd', get_optimizer_fn('sgd', learning_rate=self.LEARNING_RATE),
        tau=self.TAU, alpha=self.ALPHA)
    return p
