"""Changing the schedule at a resume (issue 25, item 3).

A cooldown branched off a stable-phase checkpoint (train at the constant
rate of a WarmupStableDecay whose cooldown is far away, then resume with a
total_steps that starts the cooldown now) equals a straight run of the
final schedule, bit for bit, and the resume says in one line which schedule
keys changed. In-process, on regression.LinearRegression.
"""

import io

import numpy as np
import tensorflow as tf

from params import registry
from learner.training.jobs import trainer as trainer_lib
from learner.training.services import logdir as logdir_lib
import schedules as sch

_KEY = 'regression.LinearRegression'


def _Params(max_steps, total_steps):
  p = registry.GetParams(_KEY)
  p.Set(**{'task.train.max_steps': max_steps,
           'task.eval.interval_steps': 0,
           'task.train.save_interval_steps': 10})
  p.task.train.learner.lr_schedule = sch.WarmupStableDecay.Params().Set(
      warmup_steps=3, total_steps=total_steps, decay_steps=10)
  return p


def _Run(logdir, p):
  out = io.StringIO()
  trainer_lib.Trainer(p, str(logdir), mode='train', stream=out).Run()
  return out.getvalue()


def _ModelWeights(logdir):
  """{key: value} of the task's variables in the last checkpoint: the
  weights, the optimizer's slots and the counters."""
  reader = tf.train.load_checkpoint(str(logdir / 'ckpt'))
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith('task/')}


def test_branched_cooldown_equals_a_straight_wsd_run_bit_for_bit(tmp_path):
  straight, branched = tmp_path / 'straight', tmp_path / 'branched'
  _Run(straight, _Params(30, 30))
  # Stable phase: the cooldown of total_steps=1000 is far beyond step 20.
  _Run(branched, _Params(20, 1000))
  out = _Run(branched, _Params(30, 30))
  assert 'Resumed from' in out and 'global step 20' in out
  notice = [line for line in out.splitlines() if line.startswith('NOTICE')]
  assert notice == [
      'NOTICE: the schedule changed at this resume (task.train.learner.'
      'lr_schedule.total_steps): each rate continues from the step in the '
      "checkpoint under the new schedule (params.txt keeps the first run's)."]
  # Only schedule keys and max_steps changed: no alarming WARNING.
  assert 'params differ from the earlier run' not in out
  want, got = _ModelWeights(straight), _ModelWeights(branched)
  assert want and sorted(want) == sorted(got)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)
  # And the cooldown did something: the run without it ends elsewhere.
  stable = tmp_path / 'stable'
  _Run(stable, _Params(30, 1000))
  moved = _ModelWeights(stable)
  w = 'task/_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE'
  assert not np.array_equal(moved[w], want[w])


def test_schedule_change_notice_names_only_schedule_keys():
  old = ('task.train.max_steps : 20\n'
         'task.train.learner.lr_schedule.total_steps : 1000\n'
         'task.train.learner.optimizer.ema.decay_schedule.ema_decay : 0.9\n')
  new = ('task.train.max_steps : 30\n'
         'task.train.learner.lr_schedule.total_steps : 30\n'
         'task.train.learner.optimizer.ema.decay_schedule.ema_decay : 0.99\n')
  notice = logdir_lib.ScheduleChangeNotice(old, new)
  assert notice.startswith('NOTICE: the schedule changed at this resume ('
                           'task.train.learner.lr_schedule.total_steps, '
                           'task.train.learner.optimizer.ema.decay_schedule.'
                           'ema_decay):')
  assert 'max_steps' not in notice
  assert logdir_lib.ScheduleChangeNotice(
      'task.train.max_steps : 20\n', 'task.train.max_steps : 30\n') is None
