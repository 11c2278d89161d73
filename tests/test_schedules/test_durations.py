"""Schedule lengths in examples and epochs (issue 25, item 2).

A duration converts to round(examples / (global batch x micro-batches per
update)) updates; the trainer converts before building the task, prints
each conversion once, keeps the strings in params.txt, and a run with
durations equals the same run with the equivalent steps, bit for bit.
"""

import io

import numpy as np
import pytest
import tensorflow as tf

from learner import learner as learner_lib
from learner import optimizers
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import validate
from learner.training.model import task_params
from params import registry
import schedules as sch
from schedules import durations

_KEY = 'regression.LinearRegression'  # batch 32, 800 train examples.


@pytest.mark.parametrize('value, want', [
    ('2000 examples', (2000.0, 'examples')), ('1 example', (1.0, 'examples')),
    (' 1.5 epochs ', (1.5, 'epochs')), ('2e3 examples', (2000.0, 'examples')),
    ('.5 epoch', (0.5, 'epochs')), ('epochs', None), ('2000', None),
    (2000, None), ('2000 steps', None), ('-1 epochs', None)])
def test_parse_duration(value, want):
  assert durations.ParseDuration(value) == want


def _Wsd(**kw):
  return sch.WarmupStableDecay.Params().Set(**kw)


def test_resolve_converts_every_length_with_the_learner_batch():
  lp = learner_lib.Learner.Params().Set(lr_schedule=sch.PiecewiseSchedule
                                        .Params().Set(
      boundaries=['320 examples'],
      schedules=[_Wsd(warmup_steps='64 examples', total_steps='2 epochs',
                      decay_steps=10), sch.ConstantOne.Params()]))
  lines = durations.ResolveDurations(lp, 'L', 32, lambda: 800)
  s = lp.lr_schedule
  assert s.boundaries == [10]
  assert (s.schedules[0].warmup_steps, s.schedules[0].total_steps,
          s.schedules[0].decay_steps) == (2, 50, 10)
  assert lines == [
      "L.lr_schedule.boundaries[0] : '320 examples' -> 10 updates (320 "
      'examples at 32 per update)',
      "L.lr_schedule.schedules[0].warmup_steps : '64 examples' -> 2 updates "
      '(64 examples at 32 per update)',
      "L.lr_schedule.schedules[0].total_steps : '2 epochs' -> 50 updates "
      '(1600 examples at 32 per update)']


def test_accumulation_counts_examples_per_applied_update():
  p = registry.GetParams(_KEY)
  lp = p.task.train.learner
  lp.optimizer = GradientAccumulation.Params().Set(
      num_batches=4, optimizer=optimizers.Momentum.Params())
  lp.optimizer_fn = None
  lp.lr_schedule = _Wsd(warmup_steps='256 examples', total_steps='8 epochs')
  lines = task_params.ResolveDurations(p)
  # 32 x 4 = 128 examples per update: 2 warmup updates; 6400 / 128 = 50.
  assert (lp.lr_schedule.warmup_steps, lp.lr_schedule.total_steps) == (2, 50)
  assert len(lines) == 2 and 'at 128 per update' in lines[0]


def test_dynamic_accumulator_refuses_durations_in_updates_in_one_line():
  # Its updates come when the weight reaches min_accum_weight: the examples
  # per update are not known. Counted in train steps (global_step), 32
  # examples each: 256 / 32 = 8 and 6400 / 32 = 200.
  p = registry.GetParams(_KEY)
  lp = p.task.train.learner
  lp.optimizer = optimizers.DynamicAccumulator.Params().Set(
      min_accum_weight=64, optimizer=optimizers.Momentum.Params())
  lp.optimizer_fn = None
  lp.lr_schedule = _Wsd(warmup_steps='256 examples', total_steps='8 epochs')
  with pytest.raises(ValueError) as e:
    task_params.ResolveDurations(p.Copy())
  assert str(e.value).startswith(
      'task.train.learner: a schedule length in examples or epochs cannot '
      'be converted to updates under DynamicAccumulator')
  assert '\n' not in str(e.value)
  lp.lr_schedule_step = 'global_step'
  task_params.ResolveDurations(p)
  assert (lp.lr_schedule.warmup_steps, lp.lr_schedule.total_steps) == (
      8, 200)


def test_epochs_without_a_known_epoch_size_are_refused_in_one_line():
  lp = learner_lib.Learner.Params().Set(
      lr_schedule=_Wsd(total_steps='1 epochs'))
  with pytest.raises(ValueError, match=r"^L.lr_schedule.total_steps : '1 "
                     r"epochs' is in epochs, but the train input does not "
                     r'say how many examples an epoch has'):
    durations.ResolveDurations(lp, 'L', 32, None)


@pytest.mark.parametrize('value, examples', [('10 examples', 10),
                                             ('0.01 epochs', 8)])
def test_a_duration_that_rounds_to_zero_updates_is_refused_naming_it(
    value, examples):
  # Found by the fresh-user trial: total_steps : '10 examples' at 32 per
  # update became 0 updates, refused later as 'total_steps : 0 is not > 0',
  # without the value written or the rounding. 10 / 32 and 0.01 * 800 / 32
  # both round to 0.
  lp = learner_lib.Learner.Params().Set(
      lr_schedule=_Wsd(total_steps=value))
  with pytest.raises(ValueError) as e:
    durations.ResolveDurations(lp, 'L', 32, lambda: 800)
  assert str(e.value) == (
      "L.lr_schedule.total_steps : %r is %g examples, which rounds to 0 "
      "updates at 32 examples per update; give at least '32 examples', or "
      'the length in updates.' % (value, examples))


def test_zero_examples_is_still_zero_updates():
  lp = learner_lib.Learner.Params().Set(
      lr_schedule=_Wsd(warmup_steps='0 examples', total_steps=10))
  durations.ResolveDurations(lp, 'L', 32, lambda: 800)
  assert lp.lr_schedule.warmup_steps == 0


def test_a_duration_outside_the_trainer_is_refused_naming_the_way():
  with pytest.raises(ValueError, match="total_steps='1 epochs' is a duration"
                     '; only the trainer converts'):
    _Wsd(total_steps='1 epochs').Instantiate()


def _Params(**lengths):
  p = registry.GetParams(_KEY)
  p.Set(**{'task.train.max_steps': 30, 'task.eval.interval_steps': 0,
           'task.train.save_interval_steps': 30})
  p.task.train.learner.lr_schedule = _Wsd(**lengths)
  return p


def _Run(logdir, p):
  out = io.StringIO()
  trainer_lib.Trainer(p, str(logdir), mode='train', stream=out).Run()
  reader = tf.train.load_checkpoint(str(logdir / 'ckpt'))
  weights = {k: reader.get_tensor(k) for k in
             reader.get_variable_to_shape_map() if k.startswith('task/')}
  return out.getvalue(), weights


def test_trainer_run_with_durations_equals_the_run_with_steps(tmp_path):
  _, want = _Run(tmp_path / 'steps', _Params(
      warmup_steps=5, total_steps=25, decay_steps=10))
  out, got = _Run(tmp_path / 'durations', _Params(
      warmup_steps='160 examples', total_steps='1 epochs',
      decay_steps='320 examples'))
  assert sorted(got) == sorted(want)
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)
  lines = [l for l in out.splitlines() if l.startswith('Schedule length:')]
  assert lines == [
      "Schedule length: task.train.learner.lr_schedule.warmup_steps : '160 "
      "examples' -> 5 updates (160 examples at 32 per update)",
      "Schedule length: task.train.learner.lr_schedule.total_steps : '1 "
      "epochs' -> 25 updates (800 examples at 32 per update)",
      "Schedule length: task.train.learner.lr_schedule.decay_steps : '320 "
      "examples' -> 10 updates (320 examples at 32 per update)"]
  text = (tmp_path / 'durations' / 'params.txt').read_text()
  assert "lr_schedule.total_steps : '1 epochs'" in text


def test_trainer_refuses_a_bad_duration_before_any_file(tmp_path):
  p = _Params(total_steps='1 epochs', warmup_steps='1000 examples',
              decay_steps=0)
  # 1000 examples = 31 updates of warmup > 25 updates in total.
  with pytest.raises(validate.ExperimentError, match=r'^task.train.learner.'
                     r'lr_schedule.total_steps : 25 is less than '
                     r'warmup_steps \(31\)'):
    trainer_lib.Trainer(p, str(tmp_path / 'run'), mode='train',
                        stream=io.StringIO()).Run()
  assert not (tmp_path / 'run').exists()


def test_a_duration_in_params_text_is_read_and_a_typo_suggests_the_form():
  p = _Params(warmup_steps=5, total_steps=25, decay_steps=10)
  p.FromText("task.train.learner.lr_schedule.warmup_steps : '160 examples'")
  assert p.task.train.learner.lr_schedule.warmup_steps == '160 examples'
  with pytest.raises(ValueError, match="wrong type .* got str 'abc'"):
    p.Copy().FromText("task.train.max_steps : 'abc'")
  # A quoted string that is no duration: the one-line error also names the
  # two duration forms (a fresh user's '1 epochs 100 steps' got only "write
  # an int").
  with pytest.raises(ValueError) as e:
    p.Copy().FromText(
        "task.train.learner.lr_schedule.decay_steps : '1 epochs 100 steps'")
  assert len(str(e.value).splitlines()) == 1
  assert str(e.value).endswith(
      "e.g. task.train.learner.lr_schedule.decay_steps : 10. A schedule's "
      "length may instead be one duration, e.g. '2000 examples' or "
      "'3 epochs'.")
  with pytest.raises(ValueError) as e:  # Not quoted: no duration hint.
    p.Copy().FromText('task.train.max_steps : 2.5')
  assert 'duration' not in str(e.value)
  with pytest.raises(ValueError, match="total_steps='3 epocs' is not an int.*"
                     "or a duration such as '3 epochs'"):
    _Wsd(total_steps='3 epocs').Instantiate()


def test_a_negative_duration_in_params_text_names_the_sign():
  # It was "wrong type ... expected an int, got str '-2000 examples'" and
  # then "may instead be one duration": the sign, the real fault, unnamed.
  p = _Params(warmup_steps=5, total_steps=25, decay_steps=10)
  key = 'task.train.learner.lr_schedule.warmup_steps'
  for value, fixed in (("'-2000 examples'", "'2000 examples'"),
                       ("'-1.5 epochs'", "'1.5 epochs'")):
    with pytest.raises(ValueError) as e:
      p.Copy().FromText('%s : %s' % (key, value))
    assert len(str(e.value).splitlines()) == 1
    assert str(e.value).endswith(
        "%r : %s is a negative duration; a duration must be positive, e.g. "
        "%s : %s." % (key, value, key, fixed)), str(e.value)
    assert 'wrong type' not in str(e.value)


def test_a_negative_duration_in_a_config_is_refused_before_any_file(
    tmp_path):
  # Set in code, the string reaches the trainer's conversion, which named no
  # sign either (the schedule said "is a duration; only the trainer
  # converts"). Both forms: a length and a list of boundaries.
  p = _Params(warmup_steps='-160 examples', total_steps=25, decay_steps=10)
  with pytest.raises(validate.ExperimentError, match=(
      r"^task.train.learner.lr_schedule.warmup_steps : '-160 examples' is a "
      r"negative duration; a duration must be positive, e.g. '160 "
      r"examples'.$")):
    trainer_lib.Trainer(p, str(tmp_path / 'run'), mode='train',
                        stream=io.StringIO()).Run()
  assert not (tmp_path / 'run').exists()
  lp = learner_lib.Learner.Params().Set(
      lr_schedule=sch.PiecewiseConstantSchedule.Params().Set(
          boundaries=[5, '-1 epochs'], values=[1.0, 0.5, 0.1]))
  with pytest.raises(ValueError, match=r"^L.lr_schedule.boundaries\[1\] : "
                     r"'-1 epochs' is a negative duration"):
    durations.ResolveDurations(lp, 'L', 32, lambda: 800)
