"""scikit-learn's diabetes regression: a linear model with Adam and L2."""

from params import registry
from configs import inputs
from learner import learner as learner_lib
from learner import optimizers
from schedules.cosine import CosineDecay
from configs import model_tasks

# Test mean squared error (standardised targets) the experiment must beat.
# Predicting the mean gives ~1.0; least squares on this split gives ~0.5.
TEST_MSE_BOUND = 0.6


@registry.Register
class LinearAdamL2:
  """Linear model on diabetes (standardised), Adam + coupled L2 (1e-3).

  Batch 32, 600 steps, base rate 0.02 with cosine decay. Test MSE in
  standardised units below TEST_MSE_BOUND = 0.6.
  """

  MAX_STEPS = 600

  def Task(self):
    p = model_tasks.LinearModelTask.Params().Set(name='diabetes',
                                                 input_dim=10)
    p.train.max_steps = self.MAX_STEPS
    p.train.save_interval_steps = 200
    p.train.summary_interval_steps = 20
    p.train.save_max_to_keep = 3  # Ours, not Lingvo's 100.
    p.train.steps_per_loop = 100
    p.train.log_interval_steps = 100
    p.eval.dev_metric = 'mse'
    p.train.learner = learner_lib.Learner.Params().Set(
        name='learner', loss_name='loss', learning_rate=0.02,
        # Keras's epsilon, the default when the results were recorded
        # (Lingvo's Adam default is 1e-6).
        optimizer=optimizers.Adam.Params().Set(epsilon=1e-7),
        l2_regularizer_weight=1e-3,
        lr_schedule=CosineDecay.Params().Set(total_steps=self.MAX_STEPS,
                                             alpha=0.1))
    return p

  def Train(self):
    return inputs.DiabetesInput.Params().Set(
        name='train_input', split='train', batch_size=32)

  def Eval(self):
    return inputs.DiabetesInput.Params().Set(
        name='eval_input', split='test', batch_size=100, shuffle=False,
        num_epochs=1, drop_remainder=False)
