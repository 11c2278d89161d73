"""One task, two learners on disjoint variables."""

from params import registry
from learner import learner as learner_lib
from learner import optimizers
from schedules.base_schedule import ConstantOne
from schedules.cosine import CosineDecay
from schedules.warmup import Warmup
from configs import digits


@registry.Register
class TwoLearners:
  """Digits MLP: Adagrad trains the first layer, Adam the rest.

  Learner 'first' (bprop_variable_filter 'layer_0/'): Adagrad, rate 0.1,
  constant, per-variable norm clipping at 1. Learner 'rest'
  (bprop_variable_filter 'layer_1/'): Adam, rate 0.01, warmup then cosine,
  global-norm clipping at 5. Summaries are per learner:
  '<metric>/first', '<metric>/rest'.
  """

  MAX_STEPS = 800

  def Task(self):
    p = digits.MlpTaskParams(hidden_dims=(64,))
    p.train.max_steps = self.MAX_STEPS
    p.eval.interval_steps = 400
    first = learner_lib.Learner.Params().Set(
        # 0.0 as before the Lingvo default (None): the same numbers, and
        # l1_loss / l2_loss (0) are reported, as Lingvo does for 0.0.
        l1_regularizer_weight=0.0, l2_regularizer_weight=0.0,
        name='first', loss_name='loss', learning_rate=0.1,
        lr_schedule=ConstantOne.Params(),
        # Adagrad's and Adam's defaults were Keras's when this experiment's
        # results were recorded; kept explicitly (Lingvo's are 1.0/0 and 1e-6,
        # and lazy sparse updates for Adagrad; this MLP's gradients are dense).
        optimizer=optimizers.Adagrad.Params().Set(
            initial_accumulator_value=0.1, epsilon=1e-7,
            lazy_sparse_updates=False),
        bprop_variable_filter='layer_0/',
        clip_gradient_single_norm_to_value=1.0)
    rest = learner_lib.Learner.Params().Set(
        # 0.0 as before the Lingvo default (None): the same numbers, and
        # l1_loss / l2_loss (0) are reported, as Lingvo does for 0.0.
        l1_regularizer_weight=0.0, l2_regularizer_weight=0.0,
        name='rest', loss_name='loss', learning_rate=0.01,
        lr_schedule=Warmup.Params().Set(
            warmup_steps=20, schedule=CosineDecay.Params().Set(
                total_steps=self.MAX_STEPS - 20, alpha=0.05)),
        optimizer=optimizers.Adam.Params().Set(epsilon=1e-7),
        bprop_variable_filter='layer_1/',
        clip_gradient_norm_to_value=5.0)
    p.train.learner = [first, rest]
    return p

  def Train(self):
    return digits.DigitsTrainInput(64)

  def Eval(self):
    return digits.DigitsEvalInput()
