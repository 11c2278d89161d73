"""Lingvo's lingvo/tasks/car/lr_util.py: rate schedules set in epochs.

The setters take Lingvo's arguments and set what Lingvo's set on a task's
train params (`p.train`, learner/training/model/task_params.py):
`max_steps` and the legacy `lr_schedule`, with Lingvo's numbers (checked
against lingvo 0.14.2's in tests/test_lingvo/test_lingvo_configs.py and
tests/test_training/test_lr_util.py). Epochs become global steps as in
Lingvo:

  total_batch_size = max(train_input_p.batch_size * total_worker_devices, 1)
  steps_per_epoch  = train_input_p.num_samples / total_batch_size
  steps            = epochs * steps_per_epoch   (float, not rounded)
  max_steps        = ceil(total_epoch * steps_per_epoch)

where total_worker_devices is `cluster_factory.Current()`'s (the current
tf.distribute strategy's replicas, 1 outside a strategy scope) and
`batch_size` is read as Lingvo's: examples per device (docs/lingvo.md,
"lr_util and cluster_factory"). The schedule counts the global step, as the
legacy learner does (`ExtractLearnerFromLegacyParams`).

Differences from Lingvo: its asserts on the epochs are ValueErrors naming
the argument, raised before `train_p` is changed; an input without
`batch_size` or `num_samples` is refused by name (Lingvo fails with an
AttributeError).
"""

import math
import numbers

from absl import logging

import schedules
from learner.training.cluster import cluster_factory


def _Number(fn, name, value, low=0.0):
  """`value` as a float >= low, or a ValueError naming fn and the arg."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Real) or
      not math.isfinite(value) or value < low):
    raise ValueError(
        'lr_util.%s: %s=%r must be a finite number >= %g.' %
        (fn, name, value, low))
  return float(value)


def _Defines(input_p, key):
  """True if the input's params (Params, or any object) have `key`."""
  try:
    getattr(input_p, key)
  except AttributeError:
    return False
  return True


def _TrainingStatistics(fn, train_input_p):
  """(total devices, total batch size, steps per epoch) of the input."""
  values = {}
  # Lingvo's inputs say num_samples; ours (DatasetInput, the generated
  # inputs) say num_examples for the same count.
  epoch_key = ('num_examples' if not _Defines(train_input_p, 'num_samples')
               and _Defines(train_input_p, 'num_examples') else 'num_samples')
  for key, example in (('batch_size', 2), (epoch_key, 3712)):
    if not _Defines(train_input_p, key):
      raise ValueError(
          'lr_util.%s: train_input_p has no %r: Lingvo\'s input params give '
          'the examples per device (batch_size) and per epoch (num_samples; '
          'ours call it num_examples); define it on the input\'s params, '
          "e.g. p.Define(%r, %d, 'examples per epoch')." % (
              fn, key, key, example))
    v = getattr(train_input_p, key)
    if (isinstance(v, bool) or not isinstance(v, numbers.Real) or
        not math.isfinite(v) or v < (1 if key == epoch_key else 0)):
      raise ValueError(
          'lr_util.%s: train_input_p.%s is %r; Lingvo\'s input params give '
          'the examples per device (batch_size) and per epoch (%s); '
          'set them, e.g. %s=%d.' % (fn, key, v, epoch_key, key, example))
    values['num_samples' if key == epoch_key else key] = v
  total_num_cores = cluster_factory.Current().total_worker_devices
  total_batch_size = max(values['batch_size'] * total_num_cores, 1)
  steps_per_epoch = float(values['num_samples']) / total_batch_size
  logging.info('lr_util: #cores = %d batch size = %d steps/epoch = %d',
               total_num_cores, total_batch_size, steps_per_epoch)
  return total_num_cores, total_batch_size, steps_per_epoch


def _CheckOrdered(fn, named_epochs):
  """Refuses epochs out of order (Lingvo's assert), naming both args."""
  for (a, va), (b, vb) in zip(named_epochs, named_epochs[1:]):
    if va > vb:
      raise ValueError(
          'lr_util.%s: %s=%r is after %s=%r; need 0 <= %s.' %
          (fn, a, va, b, vb, ' <= '.join(n for n, _ in named_epochs)))


def _CheckTrainParams(fn, train_p):
  for key in ('max_steps', 'lr_schedule'):
    if key not in dict(train_p.IterParams()):
      raise ValueError(
          'lr_util.%s: train_p has no %r; pass the task\'s train params '
          '(p.train), as in Lingvo.' % (fn, key))


def SetExponentialLR(train_p,
                     train_input_p,
                     exp_start_epoch,
                     total_epoch,
                     warmup_epoch=0,
                     limit_epoch=None,
                     multiplier_min=0.01,
                     warmup_init=0.):
  """Linear ramp-up, hold, exponential decay, set on `train_p` in epochs.

  Lingvo's `lr_util.SetExponentialLR`: sets `train_p.max_steps` =
  ceil(total_epoch * steps_per_epoch) and `train_p.lr_schedule` =
  `LinearRampupExponentialDecayScaledByNumSplitSchedule` with warmup,
  decay_start and decay_end the steps of warmup_epoch, exp_start_epoch and
  limit_epoch, min=multiplier_min, warmup_init (1 when warmup_epoch is 0:
  no ramp) and num_splits=1. The multiplier is 1 from the ramp's end to
  decay_start, then falls exponentially to multiplier_min at decay_end.

  Args:
    train_p: the task's train params (`p.train`), changed in place.
    train_input_p: the train input's params: `batch_size` (examples per
      device, as Lingvo's) and `num_samples` (examples per epoch).
    exp_start_epoch: float, epoch where the exponential decay starts.
    total_epoch: float, epochs to train.
    warmup_epoch: float, epoch where the linear ramp ends (0: none).
    limit_epoch: float, epoch where the decay reaches multiplier_min;
      None is 0.95 * total_epoch.
    multiplier_min: float, the final multiplier of the rate.
    warmup_init: float, the multiplier at step 0 of the ramp.

  Raises:
    ValueError: before `train_p` changes, if an epoch is negative or not a
      number, the epochs are not 0 <= warmup_epoch <= exp_start_epoch <=
      limit_epoch <= total_epoch (Lingvo asserts it), or the input has no
      usable batch_size / num_samples.
  """
  fn = 'SetExponentialLR'
  _CheckTrainParams(fn, train_p)
  if limit_epoch is None:
    limit_epoch = 0.95 * _Number(fn, 'total_epoch', total_epoch)
  epochs = [(n, _Number(fn, n, v)) for n, v in (
      ('warmup_epoch', warmup_epoch), ('exp_start_epoch', exp_start_epoch),
      ('limit_epoch', limit_epoch), ('total_epoch', total_epoch))]
  _CheckOrdered(fn, epochs)
  _, _, steps_per_epoch = _TrainingStatistics(fn, train_input_p)
  warmup, start, limit, _ = [e * steps_per_epoch for _, e in epochs]
  logging.info('lr_util: warmup_steps = %d start_steps = %d limit_steps = %d',
               warmup, start, limit)
  if warmup_epoch == 0.:  # Lingvo: no warm-up at all, not a ramp from 0.
    warmup_init = 1.
  train_p.max_steps = math.ceil(total_epoch * steps_per_epoch)
  train_p.lr_schedule = (
      schedules.LinearRampupExponentialDecayScaledByNumSplitSchedule.Params()
      .Set(warmup=warmup, decay_start=start, decay_end=limit,
           min=multiplier_min, warmup_init=warmup_init, num_splits=1))


def SetCosineLR(train_p,
                train_input_p,
                total_epoch,
                warmup_epoch=0,
                warmup_init=0.):
  """Linear ramp-up then cosine decay to 0, set on `train_p` in epochs.

  Lingvo's `lr_util.SetCosineLR`: sets `train_p.max_steps` =
  ceil(total_epoch * steps_per_epoch) and `train_p.lr_schedule` =
  `LinearRampupCosineSchedule` with warmup_steps and total_steps the steps
  of warmup_epoch and total_epoch, warmup_init (1 when warmup_epoch is 0)
  and num_splits=1. As in Lingvo the value is the minimum of the ramp and
  the cosine, so it does not quite reach 1 at the ramp's end.

  Args:
    train_p: the task's train params (`p.train`), changed in place.
    train_input_p: the train input's params: `batch_size` (examples per
      device, as Lingvo's) and `num_samples` (examples per epoch).
    total_epoch: float, epochs to train; the cosine reaches 0 there.
    warmup_epoch: float, epoch where the linear ramp ends (0: none).
    warmup_init: float, the multiplier at step 0 of the ramp.

  Raises:
    ValueError: before `train_p` changes, if an epoch is negative or not a
      number, warmup_epoch > total_epoch (Lingvo asserts it), or the input
      has no usable batch_size / num_samples.
  """
  fn = 'SetCosineLR'
  _CheckTrainParams(fn, train_p)
  epochs = [(n, _Number(fn, n, v)) for n, v in (
      ('warmup_epoch', warmup_epoch), ('total_epoch', total_epoch))]
  _CheckOrdered(fn, epochs)
  _, _, steps_per_epoch = _TrainingStatistics(fn, train_input_p)
  warmup, total = [e * steps_per_epoch for _, e in epochs]
  logging.info('lr_util: warmup_steps = %d total_steps = %d', warmup, total)
  if warmup_epoch == 0.:
    warmup_init = 1.
  train_p.max_steps = math.ceil(total_epoch * steps_per_epoch)
  train_p.lr_schedule = schedules.LinearRampupCosineSchedule.Params().Set(
      warmup_steps=warmup, warmup_init=warmup_init, total_steps=total,
      num_splits=1)
