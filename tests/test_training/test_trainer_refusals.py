"""Every bad value is refused before the logdir exists (issue 15, item 2).

Each case is one `ERROR: <message>` line on stderr naming the key and the
value, exit status 2, and no logdir. The fast tests run the trainer's main()
in-process; the slow one runs `python -m learner.trainer`'s code as a user
would, every case in one process.
The checks themselves (learner/training/jobs/validate.py) are tested below too.
"""

import os

import pytest
import tensorflow as tf

from learner import optimizers
from params import registry
import schedules as sch
from learner.training.jobs import trainer as trainer_lib
import trainer_helpers
from learner.training.jobs import validate

_MODEL = '--model=digits.MlpMomentum'

# (flags, what the one line must name).
_CASES = [
    (['--params_override=task.train.learner.learning_rate : -0.1'],
     ['learning_rate', '-0.1']),
    (['--params_override=task.train.learner.clip_gradient_norm_to_value : '
      '-1.0'], ['clip_gradient_norm_to_value', '-1.0']),
    (["--params_override=task.train.learner.loss_name : 'xent'"],
     ['task.train.learner.loss_name', "'xent'", "['accuracy', 'loss']"]),
    (["--params_override=task.train.learner.bprop_variable_filter : 'enc/'"],
     ['task.train.learner.bprop_variable_filter', "'enc/'",
      'digits/layer_0/w']),
    (['--params_override=train_input.batch_size : 5000'],
     ['train_input', 'batch_size 5000', '1438 examples']),
    (["--params_override=task.eval.dev_metric : 'acc'"],
     ['task.eval.dev_metric', "'acc'", "['accuracy', 'loss']"]),
    (['--strategy=multi_worker'],
     ['--strategy=multi_worker', 'TF_CONFIG', 'learner.launcher']),
    (["--params_override=task.train.learner.lr_schedule.schedule."
      "warmup_steps : '-2000 examples'"],
     ['task.train.learner.lr_schedule.schedule.warmup_steps',
      "'-2000 examples'", 'negative duration', 'must be positive']),
]
_IDS = ['learning_rate', 'clip', 'loss_name', 'filter', 'batch_size',
        'dev_metric', 'multi_worker', 'negative_duration']


_Main = trainer_helpers.RunMain


def _CheckOneLine(code, err, names):
  assert code == 2, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('ERROR: '), err
  for name in names:
    assert name in lines[0], (name, lines[0])


@pytest.mark.parametrize('flags,names', _CASES, ids=_IDS)
def test_bad_value_is_one_error_line_exit_2_and_no_logdir(
    tmp_path, capsys, flags, names):
  logdir = tmp_path / 'never'
  code, _, err = _Main([_MODEL, '--logdir=%s' % logdir,
                        '--mode=train_and_eval'] + flags, capsys)
  _CheckOneLine(code, err, names)
  assert not logdir.exists()


def test_verbose_raises_the_error_with_its_traceback(tmp_path, capsys):
  with pytest.raises(validate.ExperimentError, match='dev_metric'):
    _Main([_MODEL, '--logdir=%s' % tmp_path, '--verbose',
           '--mode=train_and_eval',
           "--params_override=task.eval.dev_metric : 'acc'"], capsys)


@pytest.mark.slow
def test_bad_values_from_the_command_line(tmp_path):
  # Every case through `python -m learner.trainer`'s own code (its exit
  # status and stderr), all in one process: TensorFlow loads once, not once
  # per case (trainer_helpers.RunModuleBatch).
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
  env.pop('TF_CONFIG', None)
  argvs = [[_MODEL, '--logdir=%s' % (tmp_path / str(i)),
            '--mode=train_and_eval'] + flags
           for i, (flags, _) in enumerate(_CASES)]
  runs = trainer_helpers.RunModuleBatch('learner.trainer', argvs, env,
                                        timeout=300)
  assert len(runs) == len(_CASES)
  for i, ((_, names), run) in enumerate(zip(_CASES, runs)):
    # Only our line: TF's start-up lines are not errors of ours.
    err = '\n'.join(l for l in run['stderr'].splitlines()
                    if l.startswith('ERROR') or 'Traceback' in l)
    _CheckOneLine(run['code'], err, names)
    assert 'Traceback' not in run['stderr']
    assert not (tmp_path / str(i)).exists()


# ---- the checks, on the built experiment -------------------------------------


def _Check(key, train=True, evaluate=False, **sets):
  p = registry.GetParams(key)
  for k, v in sets.items():
    p.Set(**{k: v})
  return validate.Experiment(p, tf.distribute.get_strategy(), train=train,
                             evaluate=evaluate)


def test_max_steps_past_the_end_of_a_decaying_schedule_warns_once():
  # digits.MlpMomentum: warmup 50 + cosine 1150 = update 1200, the floor
  # alpha 0.01 (times the linear scale 64/128 = 0.5: 0.005, peak 0.5).
  checked = _Check('digits.MlpMomentum', **{'task.train.max_steps': 100000})
  assert len(checked.warnings) == 1
  w = checked.warnings[0]
  assert 'runs 98800 schedule steps past the end' in w and 'step 1200' in w
  assert 'multiplier 0.005' in w and 'peak 0.5' in w and '\n' not in w
  assert _Check('digits.MlpMomentum').warnings == []


def test_a_run_shorter_than_its_warmup_warns_once():
  # digits.MlpMomentum's warmup: 50 updates to the peak 0.2 * 64/128 = 0.1
  # (multiplier 0.5 with the linear scale); a 20-step run ends at (20/50) of
  # it: 0.5 * 20/50 = 0.2 (the ramp is (t+1)/50, t = 19).
  w = _Check('digits.MlpMomentum', **{'task.train.max_steps': 20}).warnings
  assert w == [
      'WARNING: task.train.learner.lr_schedule.schedule.warmup_steps : 50 is '
      'longer than the run (task.train.max_steps 20): the warmup never ends '
      '(the multiplier at the last step is 0.2, below the 0.5 it reaches at '
      'step 49); shorten the warmup or raise max_steps.']
  # Past the warmup (decaying, then held): no warmup warning.
  assert _Check('digits.MlpMomentum',
                **{'task.train.max_steps': 600}).warnings == []


def test_a_warmup_longer_than_the_run_warns_even_where_the_rate_is_flat():
  # Lingvo's rampup from warmup_init 1.0 to 1 split is flat, so the
  # value-based check saw nothing rise and a 5000-step warmup in a 30-step
  # run trained silently. The legacy learner's key is task.train.
  w = _Check('lingvo_ported.DigitsMlpLingvoTrain',
             **{'task.train.max_steps': 30,
                'task.train.lr_schedule.warmup': 5000}).warnings
  assert w == [
      'WARNING: task.train.lr_schedule.warmup : 5000 is longer than the run '
      '(task.train.max_steps 30): the warmup never ends; shorten the warmup '
      'or raise max_steps.']
  assert _Check('lingvo_ported.DigitsMlpLingvoTrain',
                **{'task.train.max_steps': 100}).warnings == []


def test_a_long_warmup_counts_applied_updates_under_accumulation():
  # 8 micro-batches per update: 40 global steps are 5 updates, fewer than
  # the warmup's 10; 80 global steps are 10 updates: no warning.
  w = _Check('digits.MlpLarsAccumulate',
             **{'task.train.max_steps': 40}).warnings
  assert len(w) == 1 and w[0].startswith(
      'WARNING: task.train.learner.lr_schedule.warmup_steps : 10 is longer '
      'than the run (task.train.max_steps 40 = 5 schedule steps)'), w
  assert _Check('digits.MlpLarsAccumulate',
                **{'task.train.max_steps': 80}).warnings == []


def test_an_optimizers_own_warmup_longer_than_the_run_warns():
  # Schedule-free's warmup_steps lives in the optimizer (counted in updates).
  w = _Check('regression.LinearRegression', **{
      'task.train.max_steps': 30,
      'task.train.learner.optimizer_fn': None,
      'task.train.learner.learning_rate': 0.05,
      'task.train.learner.optimizer': optimizers.ScheduleFreeSGD.Params().Set(
          warmup_steps=5000)}).warnings
  assert w == [
      'WARNING: task.train.learner.optimizer.warmup_steps : 5000 is longer '
      'than the run (task.train.max_steps 30): the warmup never ends; '
      'shorten the warmup or raise max_steps.']


@pytest.mark.parametrize('index', [0, 1])
def test_a_bad_nested_schedule_value_names_its_learner_and_dotted_key(index):
  # Both learners of multi.TwoLearners get a Warmup; the schedule alone can
  # only say "Warmup 'lr_schedule': warmup_steps=-5" for either.
  key = 'task.train.learner[%d].lr_schedule' % index
  p = registry.GetParams('multi.TwoLearners')
  p.Set(**{key: sch.Warmup.Params().Set(warmup_steps=-5)})
  with pytest.raises(validate.ExperimentError) as e:
    validate.Experiment(p, tf.distribute.get_strategy(), train=True,
                        evaluate=False)
  assert str(e.value) == (
      '%s.warmup_steps : -5 is not >= 0; it must be a finite number >= 0. '
      'Set warmup_steps to a finite number >= 0.' % key)


def test_schedule_steps_count_applied_updates_under_accumulation():
  # 8 micro-batches per update: 4800 global steps are 600 updates; the
  # schedule (warmup 10 + cosine 290) ends at update 300.
  w = _Check('digits.MlpLarsAccumulate',
             **{'task.train.max_steps': 4800}).warnings
  assert len(w) == 1 and 'runs 300 schedule steps' in w[0]
  assert _Check('digits.MlpLarsAccumulate').warnings == []


def test_a_flat_schedule_never_warns():
  # ConstantOne has no end; multi.TwoLearners' warmup + cosine is checked too.
  assert _Check('regression.LinearRegression',
                **{'task.train.max_steps': 10**6}).warnings == []


def test_filters_of_several_learners_are_named_by_index():
  with pytest.raises(validate.ExperimentError,
                     match=r"task\.train\.learner\[1\]\.bprop_variable_filter "
                     r": 'layer_9/' matches no trainable variable"):
    _Check('multi.TwoLearners',
           **{'task.train.learner[1].bprop_variable_filter': 'layer_9/'})
  with pytest.raises(validate.ExperimentError,
                     match=r"learner\[0\]\.bprop_variable_exclusion : 'zz'"):
    _Check('multi.TwoLearners',
           **{'task.train.learner[0].bprop_variable_exclusion': 'zz'})


def test_bad_regexes_are_refused_naming_their_key():
  with pytest.raises(validate.ExperimentError,
                     match=r"init_from_checkpoint_rules\[0\] has the regex "
                     r"'\(', which does not compile"):
    _Check('regression.LinearRegression',
           **{'task.train.init_from_checkpoint_rules': [('(', 'x')]})


def test_eval_only_checks_skip_the_learners():
  # An eval job builds no learner: a bad loss_name is not its business,
  # a bad dev_metric is.
  checked = _Check('regression.LinearRegression', train=False, evaluate=True,
                   **{'task.train.learner.loss_name': 'xent'})
  assert checked.task._learners is None  # pylint: disable=protected-access
  with pytest.raises(validate.ExperimentError, match="dev_metric : 'acc'"):
    _Check('regression.LinearRegression', train=False, evaluate=True,
           **{'task.eval.dev_metric': 'acc'})


def test_one_line_joins_the_lines_of_a_message():
  assert validate.OneLine('a\n  b\n\nc ') == 'a b c'


def test_loss_names_are_checked_under_a_mirrored_strategy_too():
  # conftest.py gives two logical CPUs: FProp is traced in cross-replica
  # context over the mirrored variables.
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  strategy = distribution.CreateStrategy('mirrored')
  assert strategy.num_replicas_in_sync == 2
  p = registry.GetParams('regression.LinearRegression')
  p.task.train.learner.loss_name = 'xent'
  with pytest.raises(validate.ExperimentError, match="loss_name : 'xent'"):
    validate.Experiment(p, strategy, train=True, evaluate=False)


@pytest.mark.parametrize('mode', ['train', 'train_and_eval'])
@pytest.mark.parametrize('override,names', [
    ("task.train.init_from_checkpoint_rules : [('(', 'x')]",
     ['init_from_checkpoint_rules[0]', "'('"]),
    ("task.eval.dev_metric : 'acc'", ['dev_metric', "'acc'"]),
])
def test_rules_and_dev_metric_are_refused_in_every_train_mode(
    tmp_path, capsys, mode, override, names):
  # Found by tools/hostile_campaign.py: the rules were a traceback, and a
  # dev_metric was not checked in mode 'train' (the evaler uses it).
  logdir = tmp_path / 'never'
  code, _, err = _Main([_MODEL, '--logdir=%s' % logdir, '--mode=' + mode,
                        '--params_override=' + override], capsys)
  _CheckOneLine(code, err, names)
  assert not logdir.exists()


def test_a_piecewise_constant_tail_is_meant_to_hold_and_never_warns():
  # Issue 21: values 1, 0.1, 0.01 with boundaries 100, 200: from update 200
  # the rate holds 0.01 by design, 800 updates of it are not a mistake.
  from schedules import PiecewiseConstantSchedule  # pylint: disable=g-import-not-at-top
  piecewise = PiecewiseConstantSchedule.Params().Set(
      boundaries=[100, 200], values=[1.0, 0.1, 0.01])
  assert _Check('regression.LinearRegression', **{
      'task.train.max_steps': 1000,
      'task.train.learner.lr_schedule': piecewise}).warnings == []


def test_a_linear_decay_to_a_floor_warns_past_its_end():
  # LinearSchedule 1 -> 0.1 over updates 0..200 decays into its end: 800 of
  # 1000 updates would train at the floor 0.1.
  from schedules import LinearSchedule  # pylint: disable=g-import-not-at-top
  linear = LinearSchedule.Params().Set(start=(0, 1.0), limit=(200, 0.1))
  w = _Check('regression.LinearRegression', **{
      'task.train.max_steps': 1000,
      'task.train.learner.lr_schedule': linear}).warnings
  assert w == [
      'WARNING: task.train.max_steps 1000 runs 800 schedule steps past the '
      'end of task.train.learner.lr_schedule (at step 200 it reaches its '
      'final multiplier 0.1, peak 1, and stays there); lengthen the schedule '
      'or lower max_steps.']


def test_ema_decay_on_a_factory_built_learner_is_one_line(tmp_path, capsys):
  # regression.LinearRegression's learner has optimizer_fn (a factory), and
  # task.train.ema_decay needs optimizer params to wrap: refused while the
  # learners' filters are checked, which ran outside the refusal (a
  # traceback, exit 1, found by the Lingvo port's helper).
  logdir = tmp_path / 'never'
  code, _, err = _Main(['--model=regression.LinearRegression',
                        '--logdir=%s' % logdir, '--max_steps=20',
                        '--params_override=task.train.ema_decay : 0.99'],
                       capsys)
  _CheckOneLine(code, err, ['task.train.ema_decay', '0.99', 'optimizer_fn',
                            "get_optimizer_wrapper_fn('ema'"])
  assert not logdir.exists()
