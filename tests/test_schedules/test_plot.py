"""`python -m schedules.plot`: text plot, key values, sources, PNG, errors."""

import io
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from params import hyperparams
from params import registry
import schedules as sch
from schedules import plot

WARMUP_COSINE = sch.Warmup.Params().Set(
    warmup_steps=100, schedule=sch.CosineDecay.Params().Set(
        total_steps=900, alpha=0.1))


def Run(*args):
  out, err = io.StringIO(), io.StringIO()
  code = plot.Main(['plot'] + list(args), out=out, err=err)
  return code, out.getvalue(), err.getvalue()


def test_params_text_prints_plot_peak_end_and_boundaries():
  code, out, err = Run('--params_text=' + WARMUP_COSINE.ToText(),
                       '--end=1200', '--num_points=50')
  assert code == 0, err
  assert out.startswith('Warmup (params text), steps 0..1200')
  assert out.count('*') >= 50  # One mark per plot column.
  # Peak 1.0 at step 99 (warmup_steps - 1), end value alpha = 0.1.
  assert 'peak: 1 at step 99\n' in out
  assert 'end:  0.1 at step 1200\n' in out
  # Warmup ends at 99 (0.99 -> 1); the cosine ends at 100 + 900.
  assert 'boundary 99: 0.99 -> 1\n' in out
  assert 'boundary 1000: 0.100003 -> 0.1\n' in out


def test_params_text_from_a_file_and_default_end(tmp_path):
  path = tmp_path / 'schedule.txt'
  path.write_text(sch.PiecewiseConstantSchedule.Params().Set(
      boundaries=[10, 20], values=[1.0, 0.1, 0.01]).ToText())
  code, out, err = Run('--params_text=%s' % path)
  assert code == 0, err
  # Default end: 1.2 x the last boundary.
  assert 'steps 0..24' in out
  assert 'boundary 10: 1 -> 0.1\n' in out
  assert 'boundary 20: 0.1 -> 0.01\n' in out


def _ExperimentParams():
  """Params shaped like an experiment: task.train.learner = [two learners]."""
  learners = []
  for rate, value in [(0.5, 2.0), (0.1, 3.0)]:
    lp = hyperparams.Params()
    lp.Define('learning_rate', rate, '')
    lp.Define('lr_schedule', sch.Constant.Params().Set(value=value), '')
    learners.append(lp)
  train = hyperparams.Params()
  train.Define('learner', learners, '')
  task = hyperparams.Params()
  task.Define('train', train, '')
  return task


def test_params_text_of_an_experiment_picks_the_learner():
  task = _ExperimentParams()
  root = hyperparams.Params()
  root.Define('task', task, '')
  text = root.ToText()
  assert 'task.train.learner[1].lr_schedule.cls' in text
  code, out, _ = Run('--params_text=' + text, '--learner=1', '--end=10')
  assert code == 0 and 'peak: 3 at step 0' in out
  code, _, err = Run('--params_text=' + text, '--learner=5', '--end=10')
  assert code == 1 and '--learner=5' in err


class FakeExperiment:
  """A registered experiment whose single learner warms up and decays."""

  def Task(self):
    p = _ExperimentParams()
    p.train.learner = p.train.learner[0].Set(lr_schedule=WARMUP_COSINE.Copy())
    return p

  def Train(self):
    return hyperparams.Params()

  def Eval(self):
    return hyperparams.Params()


@pytest.fixture
def fake_model():
  registry.Register(FakeExperiment)
  key = registry._KeyOf(FakeExperiment)  # pylint: disable=protected-access
  yield key
  registry._REGISTRY.pop(key, None)  # pylint: disable=protected-access


def test_model_from_registry_with_learning_rate(fake_model):
  code, out, err = Run('--model=' + fake_model, '--end=1000')
  assert code == 0, err
  assert 'Warmup (%s learner 0)' % fake_model in out
  # learning_rate 0.5 x multiplier: peak 0.5, end 0.5 x 0.1.
  assert 'learning_rate 0.5: peak rate 0.5, end rate 0.05\n' in out
  code, _, err = Run('--model=' + fake_model, '--learner=1')
  assert code == 1 and 'out of range' in err and '--learner=1' in err


def test_unknown_model_is_reported():
  code, _, err = Run('--model=no_such.Experiment')
  assert code == 1 and 'no_such.Experiment' in err


def test_png_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, 'matplotlib', None)  # Import fails.
  code, out, err = Run('--params_text=' + WARMUP_COSINE.ToText(),
                       '--png=%s' % (tmp_path / 'lr.png'))
  assert code == 1
  assert 'pip install matplotlib' in err
  assert 'peak:' in out  # The text plot is still printed first.
  assert not os.path.exists(tmp_path / 'lr.png')


def test_png_written_when_matplotlib_is_installed(tmp_path):
  pytest.importorskip('matplotlib')
  path = tmp_path / 'lr.png'
  code, _, err = Run('--params_text=' + WARMUP_COSINE.ToText(),
                     '--png=%s' % path)
  assert code == 0, err
  assert path.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


@pytest.mark.parametrize('args,needle', [
    ((), 'exactly one of --model'),
    (('--model=a.B', '--params_text=x : 1'), 'exactly one of --model'),
    (('--params_text=value : 1.0',), 'holds no schedule'),
    (("--params_text=cls : Class('schedules.base_schedule.Constant'); "
      "valeu : 2.0",), 'valeu'),
    (('--params_text=' + WARMUP_COSINE.ToText(), '--start=50', '--end=10'),
     '--end=10 must be > --start=50'),
    (('--params_text=' + WARMUP_COSINE.ToText(), '--num_points=1'),
     '--num_points=1'),
])
def test_bad_invocations_exit_1_with_a_message(args, needle):
  code, _, err = Run(*args)
  assert code == 1
  assert needle in err, err


def test_unknown_flag_exits_2():
  code, _, err = Run('--modle=x')
  assert code == 2 and "modle" in err and "--help lists every flag" in err


_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def module_run(onednn_module):
  """`python -m schedules.plot` on params text, TF_CPP_MIN_LOG_LEVEL unset.

  With oneDNN forced on, the strict case (tests/conftest.py).
  """
  text = sch.CosineDecay.Params().Set(total_steps=100).ToText()
  env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn_module)
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  return subprocess.run(
      [sys.executable, '-m', 'schedules.plot', '--params_text=' + text,
       '--num_points=20'],
      capture_output=True, text=True, timeout=120, env=env, cwd=_ROOT)


def test_runs_as_a_module(module_run):
  proc = module_run
  assert proc.returncode == 0, proc.stderr
  assert 'CosineDecay (params text), steps 0..120' in proc.stdout
  assert 'end:  0 at step 120' in proc.stdout


@pytest.mark.parametrize('flag', ['--help', '-h', '--helpshort', '--helpfull'])
def test_help_prints_the_docstring_examples_and_every_flag(flag):
  code, out, err = Run(flag)
  assert code == 0, err
  # The module docstring's examples, with the line continuation kept.
  assert 'python -m schedules.plot --model=digits.MlpMomentum [--learner=0] \\\n' in out
  assert '--params_text=/path/to/params.txt --end=5000' in out
  for name in ['end', 'learner', 'model', 'num_points', 'params_text', 'png',
               'start']:
    assert '\n  --%s: ' % name in out
  assert '--num_points: Steps evaluated (plus the boundaries). (default: 200)' in out


def test_help_wins_over_other_flags_and_runs_as_a_module():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  proc = subprocess.run(
      [sys.executable, '-m', 'schedules.plot', '--end=5', '--help'],
      capture_output=True, text=True, timeout=120, env=env,
      cwd=os.path.dirname(os.path.dirname(os.path.dirname(
          os.path.abspath(__file__)))))
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.startswith('Shows a learning-rate schedule')
  assert 'Unknown command line flag' not in proc.stderr


def test_as_a_module_tf_start_up_lines_are_off_unless_asked_for(module_run):
  # schedules/__init__.py sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads,
  # for this command only; --tf_log_level=0 turns TF's INFO lines back on.
  env = dict(os.environ)
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  root = _ROOT
  quiet = module_run
  assert quiet.returncode == 0, quiet.stderr
  for noise in ('cpu_feature_guard', 'oneDNN', 'I0000', 'W0000',
                'absl::InitializeLog'):
    assert noise not in quiet.stderr, quiet.stderr
  probe = subprocess.run(
      [sys.executable, '-c', 'import sys, os; sys.orig_argv = [sys.executable,'
       ' "-m", "schedules.plot", "--tf_log_level=0"]; import schedules; '
       'print(os.environ["TF_CPP_MIN_LOG_LEVEL"])'],
      capture_output=True, text=True, timeout=120, env=env, cwd=root)
  assert probe.stdout.strip() == '0', probe.stderr
  def _LevelAfter(module):
    return subprocess.run(
        [sys.executable, '-c', 'import os, %s; '
         'print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))' % module],
        capture_output=True, text=True, timeout=120, env=env, cwd=root)

  # A library import leaves the level as importing TensorFlow itself does:
  # unset, or '1' where jax is installed (the `bench` extra), because
  # TensorFlow imports jax, which sets that default.
  other, bare = _LevelAfter('schedules'), _LevelAfter('tensorflow')
  assert bare.stdout.strip() in ('None', '1'), bare.stderr
  assert other.stdout.strip() == bare.stdout.strip(), other.stderr


class KerasScheduleExperiment:
  """A learner whose lr_schedule is a Keras schedule (issue 21)."""

  def Task(self):
    p = hyperparams.Params()
    p.Define('train', hyperparams.Params(), '')
    p.train.Define('learner', hyperparams.Params(), '')
    p.train.learner.Define('learning_rate', None, '')
    p.train.learner.Define(
        'lr_schedule', tf.keras.optimizers.schedules.CosineDecay(0.2, 100),
        '')
    return p

  def Train(self):
    return hyperparams.Params()

  def Eval(self):
    return hyperparams.Params()


def test_a_keras_lr_schedule_is_plotted_as_the_learner_takes_it():
  # The learner wraps it in KerasSchedule and, with learning_rate None,
  # multiplies 1.0: cosine from 0.2 at step 0 to 0 at step 100 (it was an
  # AttributeError: 'CosineDecay' object has no attribute 'Copy').
  registry.Register(KerasScheduleExperiment)
  key = registry._KeyOf(KerasScheduleExperiment)  # pylint: disable=protected-access
  try:
    code, out, err = Run('--model=' + key, '--end=100', '--num_points=3')
  finally:
    registry._REGISTRY.pop(key, None)  # pylint: disable=protected-access
  assert code == 0, err
  assert out.splitlines()[0] == (
      'KerasSchedule (%s learner 0), steps 0..100 (applied updates)' % key)
  assert 'peak: 0.2 at step 0\n' in out
  assert 'end:  0 at step 100\n' in out
  assert 'learning_rate 1: peak rate 0.2, end rate 0\n' in out


@pytest.mark.parametrize('params, needles', [
    (sch.WarmupStableDecay.Params().Set(warmup_steps=4, total_steps=20,
                                        decay_steps=8),
     ['peak: 1 at step 3\n', 'boundary 12: 1 -> 1\n', 'boundary 20: ',
      'end:  0 at step 24\n']),
    (sch.CosineWithRestarts.Params().Set(first_decay_steps=4, t_mul=2.0,
                                         m_mul=0.5),
     ['peak: 1 at step 0\n', 'boundary 4: ', '-> 0.5\n',
      'boundary 12: ', '-> 0.25\n']),
    (sch.OneCycle.Params().Set(total_steps=10),
     ['peak: 1 at step 2\n', 'end:  4e-06 at step 10\n', 'boundary 9: 0.0495194 -> 4e-06\n']),
    (sch.OneCycleMomentum.Params().Set(total_steps=10),
     ['peak: 0.95 at step 0\n', 'boundary 2: ']),
])
def test_schedules_of_today_are_plotted_with_their_phases(params, needles):
  code, out, err = Run('--params_text=' + params.ToText(), '--num_points=30')
  assert code == 0, err
  for needle in needles:
    assert needle in out, (needle, out)


def test_a_single_learner_experiments_params_txt_plots_its_learner_schedule():
  # An experiment's text also holds Lingvo's legacy task.train.lr_schedule
  # (unused beside task.train.learner): the learner's schedule is plotted.
  text = registry.GetParams('digits.MlpMomentum').ToText()
  assert 'task.train.lr_schedule.cls' in text
  code, out, err = Run('--params_text=' + text, '--num_points=30')
  assert code == 0, err
  assert out.startswith('LinearScaling (params text)'), out


_STABLE = sch.WarmupStableDecay.Params().Set(warmup_steps=4, total_steps=1000,
                                             decay_steps=8)
_COOLDOWN_AT_12 = sch.WarmupStableDecay.Params().Set(
    warmup_steps=4, total_steps=20, decay_steps=8)


def test_a_branched_cooldown_is_drawn_as_the_resumed_run_sees_it(tmp_path):
  # Trained under a long stable phase, resumed at step 12 with a WSD whose
  # 1-sqrt cooldown runs 12..20: the rate is the stable one before 12 and
  # 1 - sqrt((s - 12) / 8) from 12 on (by hand: 0.5 at 14, 0.292893 at 16).
  branch = tmp_path / 'params.txt'
  branch.write_text(_COOLDOWN_AT_12.ToText())
  code, out, err = Run('--params_text=' + _STABLE.ToText(),
                       '--branch_step=12', '--branch_params_text=%s' % branch,
                       '--end=24', '--num_points=25')
  assert code == 0, err
  assert out.splitlines()[0] == (
      'WarmupStableDecay, branched at step 12 to WarmupStableDecay '
      '(params text), steps 0..24 (applied updates)')
  # The branch is named on its boundary line (a fresh user read '12: 1 ->
  # 1' as no branch).
  assert 'boundary 12 (branch): 1 -> 1\n' in out
  assert 'boundary 20: ' in out and 'end:  0 at step 24\n' in out
  first = _STABLE.Copy().Set(name='a').Instantiate()
  second = _COOLDOWN_AT_12.Copy().Set(name='b').Instantiate()
  branched = plot.Branched(first, second, 12)
  values = plot.Evaluate(branched, range(25))
  # A branched cooldown is the straight run of the final schedule.
  assert values.tolist() == plot.Evaluate(second, range(25)).tolist()
  assert values[14] == pytest.approx(0.5, rel=1e-6)
  assert values[16] == pytest.approx(1 - 0.5 ** 0.5, rel=1e-6)
  assert values[11] == 1.0 and values[20] == 0.0
  # Before the branch the first schedule rules, even where they differ.
  early = plot.Branched(second, first, 16)
  assert plot.Evaluate(early, [15, 16]).tolist() == [
      float(plot.Evaluate(second, [15])[0]), 1.0]


@pytest.mark.parametrize('args, needle', [
    (['--branch_step=12'], 'go together'),
    (['--branch_params_text=x'], 'go together'),
    (['--branch_step=0', '--branch_params_text=' + _COOLDOWN_AT_12.ToText()],
     '--branch_step=0 must be >= 1'),
])
def test_branch_flags_are_checked(args, needle):
  code, _, err = Run('--params_text=' + _STABLE.ToText(), *args)
  assert code == 1 and needle in err, err
