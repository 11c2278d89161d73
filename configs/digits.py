"""Experiments on scikit-learn's 8x8 digits: an MLP classifier.

  digits.MlpMomentum        Momentum + LinearScaling + Warmup + cosine decay,
                            global-norm clipping (the README's main job).
  digits.MlpLarsAccumulate  Momentum in LARS in batch_gradients (8
                            micro-batches): the seeds' three-level optimizer.
  digits.MlpSam             MlpMomentum with its Momentum inside Sam (SAM).

All reach >= 95% test accuracy in well under two minutes on 2 CPU cores
(measured: see each class).
"""

from params import registry
from configs import inputs
from learner import learner as learner_lib
from learner import optimizers
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from schedules.cosine import CosineDecay
from schedules.linear_scaling import LinearScaling
from schedules.warmup import Warmup
from configs import model_tasks


def DigitsTrainInput(batch_size):
  """Training input: the 1438-example train split, shuffled, repeated."""
  return inputs.DigitsInput.Params().Set(
      name='train_input', split='train', batch_size=batch_size, seed=1234)


def DigitsEvalInput():
  """Evaluation input: the 359-example test split, one ordered pass."""
  return inputs.DigitsInput.Params().Set(
      name='eval_input', split='test', batch_size=359, shuffle=False,
      num_epochs=1, drop_remainder=False)


def MlpTaskParams(hidden_dims=(128,)):
  """MLP 64 -> hidden -> 10, seeded initialisation, accuracy as dev metric."""
  p = model_tasks.MlpClassifierTask.Params().Set(
      name='digits', input_dim=64, hidden_dims=list(hidden_dims),
      num_classes=10, random_seed=1234)
  p.eval.dev_metric = 'accuracy'
  p.eval.dev_metric_mode = 'max'
  p.train.save_interval_steps = 200
  p.train.summary_interval_steps = 20
  p.train.save_max_to_keep = 3  # Ours, not Lingvo's 100.
  p.train.steps_per_loop = 100
  p.train.log_interval_steps = 100
  return p


@registry.Register
class MlpMomentum:
  """MLP on digits: Momentum, linear-scaled warmup + cosine rate, clipping.

  Batch 64; base rate 0.2 at batch 128 scaled linearly to 0.1; warmup over
  50 updates, then cosine decay to 1% over the rest of 1200 steps; global
  gradient norm clipped at 5. Reaches ~98% test accuracy in about 10 s
  (plus start-up) on 2 CPU cores.
  """

  BATCH_SIZE = 64
  MAX_STEPS = 1200
  WARMUP = 50

  def Task(self):
    p = MlpTaskParams()
    p.train.max_steps = self.MAX_STEPS
    p.eval.interval_steps = 400
    schedule = LinearScaling.Params().Set(
        base_batch_size=128, global_batch_size=self.BATCH_SIZE,
        schedule=Warmup.Params().Set(
            warmup_steps=self.WARMUP,
            schedule=CosineDecay.Params().Set(
                total_steps=self.MAX_STEPS - self.WARMUP, alpha=0.01)))
    p.train.learner = learner_lib.Learner.Params().Set(
        name='learner', loss_name='loss', learning_rate=0.2,
        lr_schedule=schedule,
        optimizer=optimizers.Momentum.Params().Set(alpha=0.9),
        clip_gradient_norm_to_value=5.0)
    return p

  def Train(self):
    return DigitsTrainInput(self.BATCH_SIZE)

  def Eval(self):
    return DigitsEvalInput()


@registry.Register
class MlpLarsAccumulate:
  """MLP on digits: Momentum(0.9) in Lars in batch_gradients(num_batches=8).

  Built from MoXing-style factories, innermost first: momentum 0.9 at base
  rate 5.0; Lars with MoXing's ratio (eta) 0.001 and weight decay 1e-4, over
  every variable (exclude_1d=False: Lars' trust ratio also tames the biases'
  step, which the large base rate needs); gradient accumulation of 8
  micro-batches of 16 (128 examples per update). Schedule over applied
  updates: warmup 10, then cosine to 1%. 2400 global steps = 300 updates;
  ~98% test accuracy in about 15 s.
  """

  MICRO_BATCH = 16
  NUM_BATCHES = 8
  MAX_STEPS = 2400  # global steps = micro-batches; 300 applied updates.

  def Task(self):
    p = MlpTaskParams()
    p.train.max_steps = self.MAX_STEPS
    p.eval.interval_steps = 800
    updates = self.MAX_STEPS // self.NUM_BATCHES
    opt_fn = get_optimizer_fn('momentum', learning_rate=5.0, momentum=0.9)
    opt_fn = get_optimizer_wrapper_fn('lars', opt_fn, ratio=0.001,
                                      weight_decay=0.0001, exclude_1d=False)
    opt_fn = get_optimizer_wrapper_fn('batch_gradients', opt_fn,
                                      num_batches=self.NUM_BATCHES)
    p.train.learner = learner_lib.Learner.Params().Set(
        # 0.0 as before the Lingvo default (None): the same numbers, and
        # l1_loss / l2_loss (0) are reported, as Lingvo does for 0.0.
        l1_regularizer_weight=0.0, l2_regularizer_weight=0.0,
        name='learner', loss_name='loss', optimizer_fn=opt_fn,
        lr_schedule=Warmup.Params().Set(
            warmup_steps=10,
            schedule=CosineDecay.Params().Set(total_steps=updates - 10,
                                              alpha=0.01)))
    return p

  def Train(self):
    return DigitsTrainInput(self.MICRO_BATCH)

  def Eval(self):
    return DigitsEvalInput()


@registry.Register
class MlpSam(MlpMomentum):
  """MlpMomentum with its Momentum(0.9) inside Sam (rho 0.05).

  Sharpness-aware minimization (Foret et al. 2021, rho = 0.05 as in their
  experiments): every update takes a second forward and backward pass at
  w + rho * g / ||g||, so a step costs about twice MlpMomentum's. The rate,
  schedule and clipping (of the second gradient) are MlpMomentum's.
  """

  RHO = 0.05

  def Task(self):
    p = super().Task()
    lp = p.train.learner
    lp.optimizer = optimizers.Sam.Params().Set(rho=self.RHO,
                                               optimizer=lp.optimizer)
    return p
