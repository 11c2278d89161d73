"""Trainer: logdir contents, summaries, resume, eval mode, EMA, warm start.

Uses regression.LinearRegression (two scalar weights, fast) in-process.
"""

import glob
import io
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from params import registry
from learner.optimizers.wrappers import ema as ema_lib
from learner import optimizers
from learner.training.jobs import eval_restore
from learner.training.jobs import trainer as trainer_lib
from learner.training.cluster import distribution
from learner.training.jobs import cli as cli_lib
from schedules.dev_based import DevBasedSchedule

_KEY = 'regression.LinearRegression'


def _Params(max_steps=60, **overrides):
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=max_steps, save_interval_steps=20,
                   summary_interval_steps=10, log_interval_steps=10)
  p.task.eval.interval_steps = 30
  for k, v in overrides.items():
    p.Set(**{k: v})
  return p


def _Run(logdir, p, mode='train_and_eval', **kw):
  out = io.StringIO()
  t = trainer_lib.Trainer(p, str(logdir), mode=mode, stream=out, **kw)
  result = t.Run()
  return t, result, out.getvalue()


def _Tags(logdir, sub):
  tags = {}
  for f in glob.glob(os.path.join(str(logdir), sub, 'events*')):
    for e in tf.compat.v1.train.summary_iterator(f):
      for v in e.summary.value:
        tags.setdefault(v.tag, []).append(e.step)
  return tags


def _CkptValues(path):
  r = tf.train.load_checkpoint(path)
  return {k: r.get_tensor(k) for k in r.get_variable_to_shape_map()
          if 'save_counter' not in k and 'ITERATOR_STATE' not in k and
          k != '_CHECKPOINTABLE_OBJECT_GRAPH'}


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  logdir = tmp_path_factory.mktemp('trained')
  t, result, out = _Run(logdir, _Params())
  return logdir, t, result, out


def test_logdir_holds_params_checkpoints_and_metrics(trained):
  logdir, t, result, out = trained
  with open(os.path.join(logdir, 'params.txt')) as f:
    text = f.read()
  assert 'task.train.max_steps : 60' in text
  # The text reads back into the experiment's params.
  assert registry.GetParams(_KEY).FromText(text).task.train.max_steps == 60
  ckpts = sorted(os.path.basename(p) for p in glob.glob(
      os.path.join(logdir, 'ckpt', 'ckpt-*.index')))
  assert ckpts == ['ckpt-20.index', 'ckpt-40.index', 'ckpt-60.index']
  with open(os.path.join(logdir, 'metrics.json')) as f:
    metrics = json.load(f)
  assert metrics == result
  assert metrics['global_step'] == 60
  assert set(metrics) == {'global_step', 'loss', 'w', 'b',
                          'num_skipped_steps'}
  assert metrics['num_skipped_steps'] == 0  # A finite run skips nothing.
  np.testing.assert_allclose(metrics['w'], t.task.vars.w.numpy(), rtol=1e-6)
  assert 'Final metrics (global step 60)' in out
  # Not a terminal: plain log lines every log_interval_steps.
  assert 'step 10/60' in out and 'step 60/60' in out and '\r' not in out
  with open(os.path.join(logdir, 'best', 'best.json')) as f:
    best = json.load(f)
  assert best['metric'] == 'loss' and best['step'] in (30, 60)


def test_event_files_hold_losses_learner_metrics_and_params(trained):
  logdir = trained[0]
  train = _Tags(logdir, 'train')
  for tag in ('loss', 'w', 'b', 'learning_rate', 'lr_schedule',
              'grad_norm/all', 'grad_norm/clipped', 'var_norm/all',
              'num_updates', 'num_skipped_steps', 'has_nan_or_inf', 'params'):
    assert tag in train, (tag, sorted(train))
  assert train['loss'] == [10, 20, 30, 40, 50, 60]
  evals = _Tags(logdir, 'eval')
  assert sorted(evals) == ['b', 'loss', 'w']
  assert evals['loss'] == [30, 60]


def test_resume_continues_exactly_like_an_uninterrupted_run(trained,
                                                            tmp_path):
  logdir, _, _, _ = trained
  # Continue the 60-step run to 80 steps in a copy of its logdir.
  resumed = tmp_path / 'resumed'
  tf.io.gfile.makedirs(str(resumed))
  for f in glob.glob(os.path.join(logdir, 'ckpt', '*')):
    tf.io.gfile.makedirs(str(resumed / 'ckpt'))
    tf.io.gfile.copy(f, str(resumed / 'ckpt' / os.path.basename(f)))
  _, r1, out = _Run(resumed, _Params(80), mode='train')
  assert 'Resumed from' in out and 'global step 60' in out
  _, r2, _ = _Run(tmp_path / 'straight', _Params(80), mode='train')
  assert r1 == r2
  a = _CkptValues(str(resumed / 'ckpt' / 'ckpt-80'))
  b = _CkptValues(str(tmp_path / 'straight' / 'ckpt' / 'ckpt-80'))
  assert sorted(a) == sorted(b)
  assert any('/momentum' in k or 'slot' in k or 'optimizer' in k for k in a)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _IteratorKeys(path):
  return [k for k in tf.train.load_checkpoint(path).get_variable_to_shape_map()
          if 'ITERATOR_STATE' in k]


def test_resume_without_iterator_in_checkpoint_skips_to_the_same_batches(
    tmp_path):
  def _NoIterator(max_steps):
    p = _Params(max_steps)
    p.task.train.checkpoint_input_iterator = False
    return p

  logdir = tmp_path / 'resumed'
  _Run(logdir, _NoIterator(40), mode='train')
  assert not _IteratorKeys(str(logdir / 'ckpt' / 'ckpt-40'))
  _, r1, out = _Run(logdir, _NoIterator(80), mode='train')
  assert 'Resumed from' in out and 'global step 40' in out
  # The default run (iterator saved, never interrupted) is the reference.
  _, r2, _ = _Run(tmp_path / 'straight', _Params(80), mode='train')
  straight = str(tmp_path / 'straight' / 'ckpt' / 'ckpt-80')
  assert _IteratorKeys(straight)
  assert r1 == r2
  a = _CkptValues(str(logdir / 'ckpt' / 'ckpt-80'))
  b = _CkptValues(straight)
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _Flag(max_steps, flag):
  p = _Params(max_steps)
  p.task.train.checkpoint_input_iterator = flag
  return p


@pytest.fixture(scope='module')
def straight80(tmp_path_factory):
  """A default run (iterator saved), never interrupted: the reference."""
  logdir = tmp_path_factory.mktemp('straight80')
  _, result, _ = _Run(logdir, _Params(80), mode='train')
  return result, _CkptValues(str(logdir / 'ckpt' / 'ckpt-80'))


def _AssertSameAsStraight(logdir, result, straight80):
  want_result, want = straight80
  assert result == want_result
  got = _CkptValues(str(logdir / 'ckpt' / 'ckpt-80'))
  assert sorted(got) == sorted(want)
  for k in got:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def _Lines(out, text):
  return [l for l in out.splitlines() if text in l]


def test_flag_false_resumes_a_checkpoint_with_iterator_by_skip(
    tmp_path, straight80):
  logdir = tmp_path / 'run'
  _Run(logdir, _Flag(40, True), mode='train')
  ckpt40 = str(logdir / 'ckpt' / 'ckpt-40')
  assert _IteratorKeys(ckpt40)
  _, result, out = _Run(logdir, _Flag(80, False), mode='train')
  assert 'Resumed from %s at global step 40.' % ckpt40 in out
  warn = _Lines(out, 'input iterator')
  assert warn == [
      'WARNING: checkpoint %s holds the input iterator\'s state but '
      'task.train.checkpoint_input_iterator is False: it is not read; the '
      'input resumes by skipping the 40 global steps already taken.' % ckpt40]
  _AssertSameAsStraight(logdir, result, straight80)
  assert not _IteratorKeys(str(logdir / 'ckpt' / 'ckpt-80'))
  # Nothing lost: the earlier checkpoints (max_to_keep 3) and its params.
  assert _IteratorKeys(ckpt40)
  with open(logdir / 'params.txt') as f:
    assert 'task.train.max_steps : 40' in f.read()


def test_flag_true_resumes_a_checkpoint_without_iterator_by_skip(
    tmp_path, straight80):
  logdir = tmp_path / 'run'
  _Run(logdir, _Flag(40, False), mode='train')
  ckpt40 = str(logdir / 'ckpt' / 'ckpt-40')
  assert not _IteratorKeys(ckpt40)
  _, _, out = _Run(logdir, _Flag(60, True), mode='train')
  assert 'Resumed from %s at global step 40.' % ckpt40 in out
  warn = _Lines(out, 'input iterator')
  assert warn == [
      'WARNING: checkpoint %s holds no input iterator state (written with '
      'task.train.checkpoint_input_iterator : False) but this run has it '
      'True: the input resumes by skipping the 40 global steps already '
      'taken, and its own checkpoints save the iterator.' % ckpt40]
  # From here on the iterator (rebuilt 40 batches on) is saved and restored.
  assert _IteratorKeys(str(logdir / 'ckpt' / 'ckpt-60'))
  _, result, out = _Run(logdir, _Flag(80, True), mode='train')
  assert 'global step 60' in out and not _Lines(out, 'input iterator')
  _AssertSameAsStraight(logdir, result, straight80)
  assert not _IteratorKeys(ckpt40) and os.path.exists(ckpt40 + '.index')


@pytest.mark.parametrize('flag', [True, False])
def test_read_only_jobs_restore_checkpoints_with_or_without_iterator(
    tmp_path, flag):
  logdir = tmp_path / 'run'
  trained_t, _, _ = _Run(logdir, _Flag(20, flag), mode='train')
  w = trained_t.task.vars.w.numpy()
  assert bool(_IteratorKeys(str(logdir / 'ckpt' / 'ckpt-20'))) == flag
  # Eval mode with the other flag value: no warning, the trained weights.
  t, r, out = _Run(logdir, _Flag(20, not flag), mode='eval')
  assert 'Eval at global step 20' in out and not _Lines(out, 'iterator')
  assert t.task.vars.w.numpy() == w
  # The evaler's and the export's restore.
  task = _Params().task.Instantiate()
  assert task.vars.w.numpy() != w  # Not yet restored.
  path = str(logdir / 'ckpt' / 'ckpt-20')
  assert eval_restore.RestoreForEval(path, task) == (20, 0)
  assert task.vars.w.numpy() == w


def test_eval_mode_restores_weights_without_optimizer(trained):
  logdir, _, result, _ = trained
  t, r, out = _Run(logdir, _Params(), mode='eval')
  assert t.task._learners is None  # pylint: disable=protected-access
  assert r == result
  assert 'Eval at global step 60' in out


def test_eval_mode_without_checkpoint_raises(tmp_path):
  with pytest.raises(trainer_lib.NothingToEvaluateError, match='no checkpoint'):
    _Run(tmp_path, _Params(), mode='eval')
  # Refused before anything is written.
  assert not os.path.exists(os.path.join(str(tmp_path), 'params.txt'))


def test_resume_with_other_params_warns_naming_the_changed_lines(
    trained, tmp_path):
  logdir = os.path.join(str(tmp_path), 'copy')
  shutil.copytree(str(trained[0]), logdir)
  p = _Params()
  p.task.train.learner.clip_gradient_norm_to_value = 7.0
  # A train job resumes the run (an eval job owns no params and never warns:
  # test_trainer_rerun.py).
  _, _, out = _Run(logdir, p, mode='train')
  assert 'params differ from the earlier run' in out
  assert '+ task.train.learner.clip_gradient_norm_to_value : 7.0' in out
  assert '- task.train.learner.clip_gradient_norm_to_value : 0.0' in out


def test_params_change_warning_lists_removed_and_added_lines():
  msg = trainer_lib.ParamsChangeWarning('d/params.txt', 'a : 1\nb : 2\n',
                                        'a : 1\nb : 3\n')
  assert '- b : 2' in msg and '+ b : 3' in msg and 'a : 1' not in msg


def test_train_without_learner_raises_naming_the_param(tmp_path):
  p = _Params()
  p.task.train.learner = None
  with pytest.raises(ValueError, match='train.learner'):
    _Run(tmp_path, p)


def test_unreadable_newest_checkpoint_is_reported_and_previous_used(
    trained, tmp_path):
  logdir = trained[0]
  tf.io.gfile.makedirs(str(tmp_path / 'ckpt'))
  for f in glob.glob(os.path.join(logdir, 'ckpt', '*')):
    tf.io.gfile.copy(f, str(tmp_path / 'ckpt' / os.path.basename(f)))
  for f in glob.glob(str(tmp_path / 'ckpt' / 'ckpt-60.data*')):
    with open(f, 'wb') as fh:
      fh.write(b'broken')
  _, r, out = _Run(tmp_path, _Params(), mode='train')
  assert 'ckpt-60 is unreadable' in out
  assert 'Resumed from' in out and 'global step 40' in out
  assert r['global_step'] == 60


def test_ema_evaluates_on_averages_in_both_modes(tmp_path):
  p = _Params(40)
  lp = p.task.train.learner
  lp.optimizer_fn = None
  lp.learning_rate = 0.05
  lp.optimizer = ema_lib.Ema.Params().Set(
      decay=0.9, optimizer=optimizers.Momentum.Params().Set(alpha=0.9))
  t, r, out = _Run(tmp_path, p)
  assert 'Evaluating on the EMA averages' in out
  ema = t.task.learner.optimizer
  avg_w = ema.GetAverage(t.task.vars.w).numpy()
  raw_w = t.task.vars.w.numpy()
  assert abs(avg_w - raw_w) > 1e-3  # averages lag the weights here
  np.testing.assert_allclose(r['w'], avg_w, rtol=1e-6)
  t2, r2, out2 = _Run(tmp_path, p, mode='eval')
  assert 'EMA averages' in out2
  assert t2.task._learners is None  # pylint: disable=protected-access
  np.testing.assert_allclose(r2['w'], avg_w, rtol=1e-6)


def test_dev_based_schedule_is_updated_after_each_eval(tmp_path):
  p = _Params(60)
  p.task.train.learner.lr_schedule = DevBasedSchedule.Params().Set(
      window=0, decay=0.5, min_factor=0.1)
  t, _, _ = _Run(tmp_path, p)
  sched = t.task.learner.lr_schedule
  # Evals at 30 and (final) 60: each sees step - ref_step >= window = 0 and
  # halves the factor: 1 -> 0.5 -> 0.25.
  np.testing.assert_allclose(sched.Value(0).numpy(), 0.25)


def test_init_from_checkpoint_warm_starts_weights_only(trained, tmp_path):
  logdir = trained[0]
  p = _Params(1)
  _, r, out = _Run(tmp_path, p, mode='train', init_from_checkpoint=str(logdir))
  assert 'Warm-started 2 variables' in out
  # One step from w ~ 5 stays near 5; from scratch it would be ~0.3.
  assert abs(r['train/w'] - 5.0) < 0.1
  # The learner's own counters were not taken: it applied one update.
  assert r['train/num_updates'] == 1.0


def test_bad_override_fails_before_anything_runs(tmp_path):
  with pytest.raises(ValueError,
                     match="--params_override.*Did you mean 'max_steps'"):
    cli_lib.LoadExperimentParams(
        _KEY, params_override='task.train.max_step : 5')
  bad = tmp_path / 'bad.txt'
  bad.write_text('task.train.learner.learning_rat : 0.1\n')
  with pytest.raises(ValueError, match="--params_file.*learning_rate"):
    cli_lib.LoadExperimentParams(_KEY, params_file=str(bad))
  with pytest.raises(LookupError, match='regression.LinearRegression'):
    cli_lib.LoadExperimentParams('regression.LinearRegresion')


def test_params_file_then_override_then_flags(tmp_path):
  f = tmp_path / 'p.txt'
  f.write_text('task.train.max_steps : 7\ntask.train.learner.learning_rate '
               ': 0.3\n')
  p = cli_lib.LoadExperimentParams(
      _KEY, params_file=str(f),
      params_override='task.train.learner.learning_rate : 0.2',
      jit_compile=True)
  assert p.task.train.max_steps == 7
  assert p.task.train.learner.learning_rate == 0.2
  assert p.task.train.jit_compile is True
  p = cli_lib.LoadExperimentParams(_KEY, params_file=str(f), max_steps=9)
  assert p.task.train.max_steps == 9


def test_parse_rules():
  assert cli_lib.ParseRules('^a/(.*)=>b/\\1; x=>y') == [
      ('^a/(.*)', 'b/\\1'), ('x', 'y')]
  with pytest.raises(ValueError, match='init_from_checkpoint_rules'):
    cli_lib.ParseRules('nope')


def test_bad_mode_raises_naming_it():
  with pytest.raises(ValueError, match="'predict'"):
    trainer_lib.Trainer(_Params(), '/tmp/unused', mode='predict')


def test_mirrored_two_replicas_and_resume_by_skip_match_one_device(
    trained, tmp_path):
  # conftest.py gives two logical CPUs. Distributed iterators cannot be
  # checkpointed, so the resumed run rebuilds the data and skips 40 batches.
  assert len(tf.config.list_logical_devices('CPU')) == 2
  _, r40, _ = _Run(tmp_path, _Params(40), strategy='mirrored')
  assert r40['global_step'] == 40
  t, r60, out = _Run(tmp_path, _Params(60), strategy='mirrored')
  assert t._strategy.num_replicas_in_sync == 2  # pylint: disable=protected-access
  assert 'Resumed from' in out and 'global step 40' in out
  expected = trained[2]
  assert r60['global_step'] == 60
  for k in ('w', 'b', 'loss'):
    np.testing.assert_allclose(r60[k], expected[k], rtol=1e-5, err_msg=k)


def test_unknown_dev_metric_raises_naming_it_and_the_metrics(tmp_path):
  p = _Params(10)
  p.task.eval.dev_metric = 'acuracy'
  with pytest.raises(ValueError, match=r"'acuracy'.*\['b', 'loss', 'w'\]"):
    _Run(tmp_path, p)


def test_eval_samples_limits_the_evaluated_batches(trained, tmp_path):
  logdir = trained[0]
  p = _Params()
  p.task.eval.samples = 150
  p.eval_input.batch_size = 50
  t = trainer_lib.Trainer(p, str(logdir), mode='eval', stream=io.StringIO())
  r = t.Run()
  # Reference: the loss over the first 150 examples of the test split.
  arrays = p.eval_input.Instantiate().LoadArrays()
  w, b = r['w'], r['b']
  ref = np.mean((w * arrays['x'][:150] + b - arrays['y'][:150])**2)
  np.testing.assert_allclose(r['loss'], ref, rtol=1e-4)


def test_replicas_to_aggregate_above_the_replicas_is_refused(tmp_path):
  p = _Params(10)
  p.task.train.replicas_to_aggregate = 2  # one replica without a strategy
  with pytest.raises(ValueError, match='replicas_to_aggregate=2'):
    _Run(tmp_path, p)
  assert not (tmp_path / 'ckpt').exists()


def test_steps_per_loop_ends_loops_at_every_boundary_and_changes_nothing(
    trained, tmp_path, monkeypatch):
  from learner.training.model import task as task_lib  # pylint: disable=g-import-not-at-top
  sizes = []
  loop = task_lib.BaseTask.TrainLoop

  def _Recording(self, iterator, num_steps):
    sizes.append(int(num_steps))
    return loop(self, iterator, num_steps)

  monkeypatch.setattr(task_lib.BaseTask, 'TrainLoop', _Recording)
  p = _Params()
  p.task.train.steps_per_loop = 7
  _, r, out = _Run(tmp_path, p)
  # Boundaries: summaries and log lines every 10, saves every 20, evals
  # every 30, max_steps 60; otherwise 7 steps per call.
  assert sizes == [7, 3] * 6, sizes
  logdir, _, expected, expected_out = trained  # steps_per_loop 100: 10 each
  assert r == expected
  def _NoTimes(text):  # steps/s and ETA depend on the clock
    return re.sub(r'([0-9.]+|-) steps/s|ETA \S+', '', text)
  assert _NoTimes(out) == _NoTimes(expected_out)
  for step in (20, 40, 60):
    a = _CkptValues(str(logdir / 'ckpt' / ('ckpt-%d' % step)))
    b = _CkptValues(str(tmp_path / 'ckpt' / ('ckpt-%d' % step)))
    assert sorted(a) == sorted(b)
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  assert _Tags(tmp_path, 'train') == _Tags(logdir, 'train')


def test_train_input_runs_without_the_autotune_thread(tmp_path, monkeypatch):
  # TF 2.21 blocks the deletion of an iterator until its autotuning thread's
  # period ends (30-35 s after a char LM's "Final metrics" in about half the
  # runs): the trainer's train input has that thread off, the same elements.
  ds = tf.data.Dataset.range(10).map(lambda x: 2 * x,
                                     num_parallel_calls=tf.data.AUTOTUNE)
  off = distribution.WithoutAutotuneThread(ds)
  assert ds.options().autotune.enabled is not False
  assert off.options().autotune.enabled is False
  assert list(off.as_numpy_iterator()) == list(range(0, 20, 2))
  seen = []
  original = distribution.WithoutAutotuneThread
  monkeypatch.setattr(distribution, 'WithoutAutotuneThread',
                      lambda d: seen.append(d) or original(d))
  _Run(tmp_path / 'run', _Params(max_steps=10), mode='train')
  assert seen, 'the train input did not go through WithoutAutotuneThread'
