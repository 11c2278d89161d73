"""lr_util: Lingvo's lingvo/tasks/car/lr_util.py setters on our p.train.

Expected numbers are Lingvo's arithmetic written out (e0be5dc):
steps_per_epoch = num_samples / max(batch_size * total_worker_devices, 1),
each epoch argument times steps_per_epoch, max_steps the ceil of
total_epoch's. The car configs' full blocks against Lingvo's recorded rates
are in tests/test_lingvo/test_lingvo_configs.py.
"""

import math
import types

import numpy as np
import pytest
import tensorflow as tf

import schedules
from learner.training.model import lr_util
from learner.training.model.task import BaseTask

# KITTI StarNet's trainer input (lingvo/tasks/car/params/kitti.py:44, 321).
KITTI = types.SimpleNamespace(batch_size=2, num_samples=3712)


def _Tp():
  return BaseTask.Params().train


def _Value(sp, step):
  return float(sp.Instantiate().Value(tf.constant(step, tf.int64)).numpy())


def test_exponential_kitti_steps_are_epochs_times_1856():
  tp = _Tp()
  lr_util.SetExponentialLR(tp, KITTI, exp_start_epoch=150, total_epoch=650)
  # 3712 / 2 = 1856 steps per epoch; limit_epoch = 0.95 * 650 = 617.5.
  assert tp.max_steps == 650 * 1856 == 1206400
  sp = tp.lr_schedule
  assert sp.cls is schedules.LinearRampupExponentialDecayScaledByNumSplitSchedule
  assert (sp.warmup, sp.decay_start, sp.decay_end, sp.min, sp.warmup_init,
          sp.num_splits) == (0.0, 150 * 1856, 617.5 * 1856, 0.01, 1.0, 1)
  # Lingvo's decay: min ** ((s - start) / (end - start)); halfway 0.01**0.5.
  half = (278400 + 1146080) // 2
  np.testing.assert_allclose(_Value(sp, half), 0.1, rtol=1e-6)
  assert _Value(sp, 1000) == 1.0


def test_exponential_warmup_ramps_from_warmup_init():
  tp = _Tp()
  inp = types.SimpleNamespace(batch_size=4, num_samples=400)  # 100 / epoch.
  lr_util.SetExponentialLR(tp, inp, exp_start_epoch=5, total_epoch=10,
                           warmup_epoch=2, limit_epoch=9, warmup_init=0.2)
  sp = tp.lr_schedule
  assert (sp.warmup, sp.decay_start, sp.decay_end, sp.warmup_init) == (
      200.0, 500.0, 900.0, 0.2)
  # Ramp: 0.2 + (1 - 0.2) * 100 / 200 = 0.6 at step 100.
  np.testing.assert_allclose(_Value(sp, 100), 0.6, rtol=1e-6)


def test_cosine_centerpoint_steps_and_warmup_init():
  tp = _Tp()
  inp = types.SimpleNamespace(batch_size=1, num_samples=158361)
  lr_util.SetCosineLR(tp, inp, total_epoch=60, warmup_epoch=3,
                      warmup_init=0.1)
  sp = tp.lr_schedule
  assert sp.cls is schedules.LinearRampupCosineSchedule
  assert (tp.max_steps, sp.warmup_steps, sp.total_steps, sp.warmup_init,
          sp.num_splits) == (9501660, 475083.0, 9501660.0, 0.1, 1)
  # Lingvo: min(ramp, cosine); at the end the cosine is 0.
  assert _Value(sp, 9501660) == 0.0


def test_zero_warmup_epochs_set_warmup_init_to_one_as_lingvo():
  tp = _Tp()
  lr_util.SetCosineLR(tp, KITTI, total_epoch=1, warmup_init=0.3)
  assert tp.lr_schedule.warmup_init == 1.0
  assert _Value(tp.lr_schedule, 0) == 1.0


def test_max_steps_is_the_ceil_of_fractional_steps():
  tp = _Tp()
  inp = types.SimpleNamespace(batch_size=3, num_samples=10)  # 10/3 a epoch.
  lr_util.SetCosineLR(tp, inp, total_epoch=2)
  assert tp.max_steps == math.ceil(20 / 3) == 7
  assert isinstance(tp.max_steps, int)


def test_under_two_replicas_an_epoch_is_half_the_steps():
  # Lingvo's batch_size is per device: 2 devices x 2 = 4 examples a step.
  tp = _Tp()
  with tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1']).scope():
    lr_util.SetExponentialLR(tp, KITTI, exp_start_epoch=150, total_epoch=650)
  assert tp.max_steps == 650 * 928 == 603200
  assert tp.lr_schedule.decay_start == 150 * 928


@pytest.mark.parametrize('kwargs, says', [
    (dict(exp_start_epoch=700, total_epoch=650),
     'exp_start_epoch=700.0 is after limit_epoch=617.5'),
    (dict(exp_start_epoch=10, total_epoch=650, warmup_epoch=20),
     'warmup_epoch=20.0 is after exp_start_epoch=10.0'),
    (dict(exp_start_epoch=10, total_epoch=-1), 'total_epoch=-1 must be'),
])
def test_exponential_epochs_out_of_order_are_refused_before_any_change(
    kwargs, says):
  tp = _Tp()
  before = tp.ToText()
  with pytest.raises(ValueError) as e:
    lr_util.SetExponentialLR(tp, KITTI, **kwargs)
  assert str(e.value).startswith('lr_util.SetExponentialLR: ')
  assert says in str(e.value) and '\n' not in str(e.value)
  assert tp.ToText() == before


def test_an_input_without_num_samples_is_refused_by_name():
  tp = _Tp()
  with pytest.raises(ValueError) as e:
    lr_util.SetCosineLR(tp, types.SimpleNamespace(batch_size=2),
                        total_epoch=5)
  # It said 'num_samples is None; ... set them, e.g. num_samples=3712', a
  # fix a user cannot follow on params without that key (fresh-user trial).
  assert str(e.value).startswith(
      "lr_util.SetCosineLR: train_input_p has no 'num_samples': ")
  assert "p.Define('num_samples', 3712, 'examples per epoch')" in str(e.value)
  assert tp.max_steps == 4 * 10**6  # Unchanged.


def test_our_inputs_num_examples_counts_as_lingvos_num_samples():
  # DatasetInput and the generated inputs call the epoch size num_examples:
  # the same arithmetic as KITTI's num_samples (3712 / 2 = 1856 per epoch).
  tp = _Tp()
  lr_util.SetExponentialLR(
      tp, types.SimpleNamespace(batch_size=2, num_examples=3712),
      warmup_epoch=0, exp_start_epoch=150, total_epoch=650)
  assert tp.max_steps == 650 * 1856
