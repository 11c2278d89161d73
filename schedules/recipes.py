"""Recipes: well-known learning-rate setups built in one call."""

from schedules.cosine import CosineDecay
from schedules.linear_scaling import LinearScaling
from schedules.step_decay import StepDecay
from schedules.warmup import Warmup


def EpochsToUpdates(epochs, steps_per_epoch, num_batches=1):
  """Converts epochs to applied updates (what schedules count).

  Args:
    epochs: number of epochs (may be fractional).
    steps_per_epoch: global steps (batches, one micro-batch each under
      accumulation) per epoch.
    num_batches: micro-batches per applied update (GradientAccumulation's
      num_batches; 1 without accumulation).

  Returns:
    round(epochs * steps_per_epoch / num_batches), a Python int.

  Raises:
    ValueError: if steps_per_epoch or num_batches is not positive, or epochs
      is negative.
  """
  if not steps_per_epoch or steps_per_epoch <= 0:
    raise ValueError('steps_per_epoch=%r must be > 0: the number of batches '
                     'in one epoch.' % (steps_per_epoch,))
  if not num_batches or num_batches <= 0:
    raise ValueError('num_batches=%r must be > 0: micro-batches per applied '
                     'update (1 without gradient accumulation).' %
                     (num_batches,))
  if epochs < 0:
    raise ValueError('epochs=%r must be >= 0.' % (epochs,))
  return int(round(epochs * steps_per_epoch / float(num_batches)))


def ResNet50Schedule(steps_per_epoch,
                     batch_size=None,
                     num_replicas=1,
                     num_batches=1,
                     global_batch_size=None,
                     warmup_epochs=5,
                     decay='step',
                     decay_epochs=(30, 60, 80),
                     decay_factor=0.1,
                     total_epochs=90,
                     alpha=0.0,
                     base_learning_rate=0.1,
                     base_batch_size=256):
  """The ResNet-50 ImageNet recipe: base rate, linear scaling, warmup, decay.

  The learner's rate is learning_rate * lr_schedule.Value(num_updates) with
    learning_rate = base_learning_rate (0.1 at base_batch_size 256)
    lr_schedule   = LinearScaling(k = global batch / 256) of
                    Warmup(warmup_epochs, (step + 1) / W ramp) of
                    StepDecay(x decay_factor at decay_epochs, absolute) or
                    CosineDecay(to alpha over total - warmup epochs, shifted
                    to start after the warmup).
  All epoch counts become applied updates with `EpochsToUpdates`:
  steps_per_epoch batches / num_batches micro-batches per update, since
  schedules count applied updates (docs/DESIGN.md, "Words with one meaning").

  Args:
    steps_per_epoch: global steps (batches) per epoch.
    batch_size: examples per replica per micro-batch (or give
      global_batch_size).
    num_replicas: replicas (None: the tf.distribute strategy's, when the
      schedule is built).
    num_batches: micro-batches per applied update (accumulation).
    global_batch_size: examples per applied update; overrides batch_size *
      num_replicas * num_batches.
    warmup_epochs: epochs of linear warmup (0 for none).
    decay: 'step' or 'cosine'.
    decay_epochs: epochs at which the step decay multiplies by decay_factor.
    decay_factor: the step decay's factor.
    total_epochs: training length; the cosine reaches alpha there.
    alpha: the cosine's floor, as a fraction of the peak.
    base_learning_rate: rate at base_batch_size.
    base_batch_size: batch size of base_learning_rate.

  Returns:
    (learning_rate, lr_schedule_params): a Python float for the learner's
    `learning_rate` and the schedule params for its `lr_schedule`.

  Raises:
    ValueError: for an unknown decay, bad epoch counts, or as the schedules
      do (naming the parameter).

  Source: He et al., "Deep Residual Learning for Image Recognition", CVPR
  2016; Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
  1 Hour", 2017 (linear scaling and gradual warmup).
  """
  to_updates = lambda e: EpochsToUpdates(e, steps_per_epoch, num_batches)
  warmup = to_updates(warmup_epochs)
  child, shift = _DecayParams(decay, to_updates, warmup, warmup_epochs,
                              decay_epochs, decay_factor, total_epochs, alpha)
  schedule = LinearScaling.Params().Set(
      base_batch_size=base_batch_size,
      global_batch_size=global_batch_size,
      batch_size=batch_size,
      num_replicas=num_replicas,
      num_batches=num_batches,
      schedule=Warmup.Params().Set(
          warmup_steps=warmup, shift_decay=shift, schedule=child))
  schedule.Copy().Instantiate()  # Validates now, naming the bad parameter.
  return float(base_learning_rate), schedule


def _DecayParams(decay, to_updates, warmup, warmup_epochs, decay_epochs,
                 decay_factor, total_epochs, alpha):
  """ResNet50Schedule's decay after the warmup: (schedule params, shift).

  `to_updates` converts epochs to applied updates and `warmup` is the
  warmup in updates; shift says whether Warmup starts the decay after the
  ramp (the cosine) or counts it from update 0 (the absolute step decay).
  """
  if decay == 'step':
    return StepDecay.Params().Set(
        boundaries=[to_updates(e) for e in decay_epochs],
        factor=decay_factor), False
  if decay == 'cosine':
    if not total_epochs > warmup_epochs:
      raise ValueError('total_epochs=%r must be > warmup_epochs=%r for a '
                       'cosine decay.' % (total_epochs, warmup_epochs))
    return CosineDecay.Params().Set(
        total_steps=to_updates(total_epochs) - warmup, alpha=alpha), True
  raise ValueError('decay=%r must be "step" or "cosine".' % (decay,))
