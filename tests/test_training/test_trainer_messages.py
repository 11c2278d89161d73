"""The trainer's messages in one style (issue 21, item 8).

A refused command is `ERROR: ...` on stderr with exit 2 and nothing
written: a bad flag value (--mode), an error inside the user's experiment
module (its file, line and message in four lines, not the traceback through
importlib), a module given as --model (its own experiments suggested) and
a key through a list of learners without an index (the [0] hint), a
ComputeLoss that returns a plain loss, an unbuilt Keras layer. Warnings are
`WARNING:` lines (the schedule-end one only on runs that train, the
learner's with its numbers as given), and on a terminal no note is glued
to the progress bar.
"""

import io
import os
import signal
import sys

import pytest
import trainer_helpers

from params import registry
from schedules import LinearSchedule
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import cli as cli_lib


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
  """tmp_path on sys.path (as the current directory is); modules undone."""
  monkeypatch.syspath_prepend(str(tmp_path))
  before = set(sys.modules)
  yield tmp_path
  for name in set(sys.modules) - before:
    if name.startswith('msgpkg'):
      del sys.modules[name]
  for key in [k for k in registry._REGISTRY if k.startswith('msgpkg.')]:  # pylint: disable=protected-access
    del registry._REGISTRY[key]  # pylint: disable=protected-access


def _Package(root, name, source):
  (root / 'msgpkg').mkdir(exist_ok=True)
  path = root / 'msgpkg' / ('%s.py' % name)
  path.write_text(source)
  return path


def test_a_bad_mode_is_one_error_line_exit_2(capsys):
  cli_lib.DefineFlags()
  try:
    with pytest.raises(SystemExit) as e:
      cli_lib.ParseFlags(['trainer', '--model=m', '--mode=trian'])
  finally:
    cli_lib.FLAGS.unparse_flags()
  assert e.value.code == 2
  captured = capsys.readouterr()
  assert captured.out == ''
  assert captured.err == (
      'ERROR: --mode=trian is not one of train, eval, train_and_eval, '
      'evaler, export; --help describes them.\n')


@pytest.mark.parametrize('value', ['abc', '2.5'])
def test_a_cpu_devices_that_is_no_integer_says_what_it_takes(capsys, value):
  # It was absl's "invalid literal for int() with base 10: 'abc'".
  cli_lib.DefineFlags()
  try:
    with pytest.raises(SystemExit) as e:
      cli_lib.ParseFlags(['trainer', '--model=m', '--cpu_devices=' + value])
  finally:
    cli_lib.FLAGS.unparse_flags()
  assert e.value.code == 2
  assert capsys.readouterr().err == (
      'ERROR: --cpu_devices=%s is not an integer: --cpu_devices takes a '
      'positive integer count of logical CPU devices (one replica each under '
      '--strategy=mirrored), e.g. --cpu_devices=2.\n' % value)


def test_a_numeric_flag_without_its_own_hint_says_integer_or_number(capsys):
  cli_lib.DefineFlags()
  for flag, kind in (('--max_steps=1e3', 'an integer'),
                     ('--worker_register_timeout_secs=soon', 'a number')):
    try:
      with pytest.raises(SystemExit):
        cli_lib.ParseFlags(['trainer', '--model=m', flag])
    finally:
      cli_lib.FLAGS.unparse_flags()
    err = capsys.readouterr().err
    assert err.startswith('ERROR: %s is not %s: ' % (flag, kind)), err
    assert len(err.splitlines()) == 1 and 'invalid literal' not in err


def test_an_unknown_flag_is_one_error_line_exit_2(capsys):
  cli_lib.DefineFlags()
  try:
    with pytest.raises(SystemExit) as e:
      cli_lib.ParseFlags(['trainer', '--modle=digits.MlpMomentum'])
  finally:
    cli_lib.FLAGS.unparse_flags()
  assert e.value.code == 2
  assert capsys.readouterr().err == (
      "ERROR: Unknown command line flag 'modle'. Did you mean: mode, model? "
      '(--help lists every flag).\n')


@pytest.mark.parametrize('source, shown, error', [
    ('X = 1\nimport no_such_dep_qq\n', 'import no_such_dep_qq',
     "ModuleNotFoundError: No module named 'no_such_dep_qq'"),
    ('X = 1\ndef f(:\n  pass\n', 'def f(:', 'SyntaxError: invalid syntax'),
    ('X = 1\nY = X / 0\n', 'Y = X / 0', 'ZeroDivisionError: division by zero'),
], ids=['missing_import', 'syntax_error', 'exception_at_import'])
def test_an_error_in_the_users_module_is_four_lines_exit_2(
    user_dir, capsys, source, shown, error):
  path = _Package(user_dir, 'exp', source)
  logdir = user_dir / 'run'
  code, out, err = trainer_helpers.RunMain(
      ['--model=msgpkg.exp.Mine', '--logdir=%s' % logdir], capsys)
  assert code == 2 and out == ''
  assert err.splitlines() == [
      "ERROR: Importing module 'msgpkg.exp' for experiment 'msgpkg.exp.Mine' "
      'failed:',
      '  File "%s", line 2' % path,
      '    ' + shown,
      error]
  assert not logdir.exists()


_TWO_EXPERIMENTS = '''
from params import registry
from configs import regression


@registry.Register
class Small(regression.LinearRegression):
  """Small."""


@registry.Register
class Large(regression.LinearRegression):
  """Large."""
'''


def test_a_module_as_model_suggests_its_own_experiments(user_dir, capsys):
  _Package(user_dir, 'cancer', _TWO_EXPERIMENTS)
  code, out, err = trainer_helpers.RunMain(
      ['--model=msgpkg.cancer', '--logdir=%s' % (user_dir / 'run')], capsys)
  assert (code, out) == (2, '')
  assert err == (
      "ERROR: 'msgpkg.cancer' is a module, not an experiment: give one of its "
      "experiments, 'msgpkg.cancer.Large' or 'msgpkg.cancer.Small' (e.g. "
      '--model=msgpkg.cancer.Large).\n')
  assert not (user_dir / 'run').exists()


def test_a_key_through_two_learners_without_an_index_hints_at_0(
    tmp_path, capsys):
  logdir = tmp_path / 'run'
  code, out, err = trainer_helpers.RunMain(
      ['--model=multi.TwoLearners', '--logdir=%s' % logdir,
       '--params_override=task.train.learner.learning_rate : 0.1'], capsys)
  assert (code, out) == (2, '')
  assert err == (
      "ERROR: --params_override: Line 1 'task.train.learner.learning_rate : "
      "0.1': unknown key 'task.train.learner.learning_rate': "
      "'task.train.learner' is a list of 2 Params, not a Params; index it, "
      "e.g. 'task.train.learner[0].learning_rate' (indices 0..1).\n")
  assert not logdir.exists()


_PLAIN_LOSS = '''
from params import registry
from configs import model_tasks
from configs import regression


class PlainTask(model_tasks.LinearRegressionTask):

  def ComputeLoss(self, theta, predictions, batch):
    metrics, _ = super().ComputeLoss(theta, predictions, batch)
    return metrics['loss'][0]  # The loss alone: not the contract.


@registry.Register
class Plain(regression.LinearRegression):

  def Task(self):
    p = super().Task()
    p.cls = PlainTask
    return p
'''


def test_compute_loss_returning_a_plain_loss_gets_the_return_contract(
    user_dir, capsys):
  _Package(user_dir, 'plain', _PLAIN_LOSS)
  logdir = user_dir / 'run'
  code, out, err = trainer_helpers.RunMain(
      ['--model=msgpkg.plain.Plain', '--logdir=%s' % logdir], capsys)
  assert (code, out) == (2, '')
  assert err == (
      "ERROR: train_input: the task's FProp fails on its batches: "
      'PlainTask.ComputeLoss returned a tf.Tensor; it must return (metrics, '
      'per_example): metrics a dict {name: (value, weight)} (weight: the '
      "examples averaged over), e.g. return {'loss': (loss, batch_size)}, "
      '{}.\n')
  assert 'Iterating over a symbolic' not in err
  assert not logdir.exists()


_UNBUILT = '''
import tensorflow as tf
from params import NestedMap
from params import registry
from configs import model_tasks
from configs import regression


class UnbuiltTask(model_tasks.LinearRegressionTask):

  def __init__(self, params):
    super().__init__(params)
    self.head = tf.keras.layers.Dense(1)  # Never built.


@registry.Register
class Unbuilt(regression.LinearRegression):

  def Task(self):
    p = super().Task()
    p.cls = UnbuiltTask
    return p
'''


def test_an_unbuilt_keras_layer_is_one_error_line_exit_2(user_dir, capsys):
  _Package(user_dir, 'unbuilt', _UNBUILT)
  logdir = user_dir / 'run'
  code, out, err = trainer_helpers.RunMain(
      ['--model=msgpkg.unbuilt.Unbuilt', '--logdir=%s' % logdir], capsys)
  assert (code, out) == (2, '')
  assert err == (
      'ERROR: regression.head is a Keras layer that is not built, so it has '
      'no variables yet and no learner would train it. Build it in '
      '__init__, e.g. `self.head.build(input_shape)` or one call on an '
      'example input.\n')
  assert not logdir.exists()


def test_the_schedule_end_warning_only_on_a_run_that_trains(tmp_path):
  # LinearSchedule 1 -> 0.1 over updates 0..2, then 4 - 2 = 2 updates at the
  # floor: the first run warns; its finished rerun trains nothing and says
  # nothing of the schedule (it did before, issue 21).
  def _Run():
    p = registry.GetParams('regression.LinearRegression').Set(**{
        'task.train.max_steps': 4, 'task.eval.interval_steps': 0,
        'task.train.learner.lr_schedule': LinearSchedule.Params().Set(
            start=(0, 1.0), limit=(2, 0.1))})
    out = io.StringIO()
    trainer_lib.Trainer(p, str(tmp_path), stream=out, tty=False).Run()
    return out.getvalue()

  warning = ('WARNING: task.train.max_steps 4 runs 2 schedule steps past the '
             'end of task.train.learner.lr_schedule (at step 2 it reaches its '
             'final multiplier 0.1, peak 1, and stays there); lengthen the '
             'schedule or lower max_steps.')
  assert _Run().splitlines()[0] == warning
  again = _Run()
  assert 'is finished (global step 4, max_steps 4)' in again
  assert 'WARNING' not in again


def _BarTrainer(tmp_path, out):
  p = registry.GetParams('regression.LinearRegression').Set(**{
      'task.train.max_steps': 20, 'task.eval.interval_steps': 0,
      'task.train.steps_per_loop': 1})
  return trainer_lib.Trainer(p, str(tmp_path), stream=out, tty=True)


def test_a_note_and_the_stop_start_on_a_line_of_their_own(tmp_path,
                                                          monkeypatch):
  # SIGINT arrives after step 3 (as SignalStop records it): its note goes
  # through the trainer's _Print while the bar's line is open, then the stop
  # raises with the bar drawn. Before issue 21 the note was glued to the
  # bar and the stop line (stderr) followed it on the same line.
  out = io.StringIO()
  trainer = _BarTrainer(tmp_path, out)
  report = trainer_lib.Trainer._ReportTrainStep  # pylint: disable=protected-access

  def _Report(self, task, step, *args):
    report(self, task, step, *args)
    if step == 3:
      self._stop._Handle(signal.SIGINT, None)  # pylint: disable=protected-access

  monkeypatch.setattr(trainer_lib.Trainer, '_ReportTrainStep', _Report)
  with pytest.raises(trainer_lib.stops.StopRequested):
    trainer.Run()
  lines = out.getvalue().split('\n')
  assert lines[-1] == ''  # The stop message will start a new line.
  bar, note = lines[-3], lines[-2]
  assert bar.rsplit('\r', 1)[1].startswith('[###.................] step 3/20')
  assert note == ('SIGINT received: finishing the current step, then saving '
                  'a checkpoint and stopping.')


def test_the_learners_warnings_are_our_warning_lines_with_numbers_as_given(
    tmp_path):
  # A Keras Adam(1e-4) as optimizer_fn and learning_rate 0.001: one line in
  # our style, the rates as written (it was 'W1203 ... learner.py:376]' and
  # 9.999999747378752e-05).
  pkg = tmp_path / 'warnpkg'
  pkg.mkdir()
  (pkg / 'exp.py').write_text(_KERAS_RATE)
  env = dict(_ENV, PYTHONPATH=str(tmp_path))
  [run] = trainer_helpers.RunModuleBatch(
      'learner.trainer', [['--model=warnpkg.exp.KerasRate',
                           '--logdir=%s' % (tmp_path / 'run')]], env, 240)
  assert run['code'] == 0, run['stderr'][-3000:]
  ours = [l for l in run['stderr'].splitlines()
          if 'overrides the rate' in l or 'learner.py:' in l]
  assert ours == [
      "WARNING: Learner 'regression/learner': learning_rate=0.001 overrides "
      "the rate 0.0001 of optimizer_fn; the learner's rate is used."]


_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')

_KERAS_RATE = '''
import tensorflow as tf
from params import registry
from configs import regression


@registry.Register
class KerasRate(regression.LinearRegression):
  """Two steps; a Keras Adam(1e-4) overridden by learning_rate 0.001."""
  MAX_STEPS = 2

  def Task(self):
    p = super().Task()
    p.train.learner.optimizer_fn = lambda: tf.keras.optimizers.Adam(1e-4)
    p.train.learner.learning_rate = 0.001
    return p
'''
