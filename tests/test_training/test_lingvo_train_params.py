"""A task's p.train as Lingvo's (issue 23): legacy learner keys, the train
knobs, Lingvo's warm-start rules, hints for a key on the wrong object.

Lingvo 0.14.2 (lingvo/core/base_model.py, learner.py): when
p.train.learner is None, BaseTask builds one learner named 'loss' from the
legacy keys of p.train (ExtractLearnerFromLegacyParams). The values below
are by hand: the regression task (y = 5x + 2 + noise, w = b = 0 at start)
and small variables whose updates are written out.
"""

import io
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

import schedules
from learner import gradient_tape
from learner import learner as learner_lib
from learner import optimizers
from learner.training.services import warm_start
from learner.training.services import early_stop as early_stop_lib
from learner.training.model import task_params
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import validate
from learner.training.model.task import BaseTask
from params import NestedMap
from params import registry
from configs import model_tasks
from configs import regression
import trainer_helpers

_KEY = 'regression.LinearRegression'


def _Regression(**train):
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=20, save_interval_steps=10,
                   summary_interval_steps=5, log_interval_steps=10)
  p.task.train.Set(**train)
  return p


def _Run(p, logdir, mode='train'):
  t = trainer_lib.Trainer(p, str(logdir), mode=mode, stream=io.StringIO())
  t.Run()
  return t, {v.name[:-2]: float(v.numpy())
             for v in t.task.ModelVars().Flatten()}


# ---- the legacy learner --------------------------------------------------


def test_legacy_keys_train_as_the_same_learner_given_explicitly(tmp_path):
  sgd = optimizers.SGD.Params()
  legacy = _Regression(learner=None, learning_rate=0.05, optimizer=sgd,
                       lr_schedule=schedules.Constant.Params(),
                       clip_gradient_norm_to_value=1.0)
  t, got = _Run(legacy, tmp_path / 'legacy')
  (lrn,) = t.task.learners
  assert lrn.params.name == 'loss'  # Lingvo's name for it.
  assert lrn.params.lr_schedule_step == 'global_step'
  explicit = _Regression(learner=learner_lib.Learner.Params().Set(
      name='loss', learning_rate=0.05, optimizer=sgd,
      lr_schedule=schedules.Constant.Params(), lr_schedule_step='global_step',
      clip_gradient_norm_to_value=1.0))
  _, want = _Run(explicit, tmp_path / 'explicit')
  assert got == want
  assert got['regression/w'] != 0.0


def test_extraction_moves_the_16_keys_and_names_the_learner_loss():
  tp = BaseTask.Params().train
  tp.Set(learning_rate=0.3, clip_gradient_norm_to_value=2.0,
         bprop_variable_filter='w')
  lp = task_params.ExtractLearnerFromLegacyParams(tp)
  assert (lp.name, lp.learning_rate, lp.clip_gradient_norm_to_value,
          lp.bprop_variable_filter) == ('loss', 0.3, 2.0, 'w')
  assert lp.optimizer.cls is optimizers.Adam  # Lingvo's default.
  assert all(tp.Get(k) is None for k in task_params.LEGACY_LEARNER_PARAMS)
  assert tp.max_steps == 4000000  # Kept.


def test_a_legacy_key_beside_a_learner_is_refused_naming_both():
  p = registry.GetParams(_KEY)
  p.task.train.learning_rate = 0.1
  with pytest.raises(ValueError) as e:
    p.task.Instantiate()
  msg = str(e.value)
  assert msg.startswith('task.train.learning_rate : 0.1 is set together '
                        'with task.train.learner')
  assert 'task.train.learner.learning_rate' in msg and '\n' not in msg


def test_every_legacy_key_beside_a_learner_is_named_at_once():
  # Found by the fresh-user trial: one key per run.
  p = registry.GetParams(_KEY)
  p.task.train.Set(learning_rate=0.1, clip_gradient_norm_to_value=2.0)
  with pytest.raises(ValueError) as e:
    p.task.Instantiate()
  assert str(e.value).startswith(
      'task.train.clip_gradient_norm_to_value : 2.0; task.train.'
      'learning_rate : 0.1 are set together with task.train.learner')
  assert ('(task.train.learner.clip_gradient_norm_to_value, '
          'task.train.learner.learning_rate)') in str(e.value)


def test_a_param_on_the_wrong_object_in_task_is_a_value_error_naming_it():
  # The CLI prints a ValueError in one line, exit 2 (a trial found a
  # traceback for an AttributeError raised inside Task()).
  class _Bad:  # pylint: disable=unused-variable
    def Task(self):
      p = BaseTask.Params()
      p.clip_gradient_norm_to_value = 1.0
      return p

    def Train(self):
      pass

    def Eval(self):
      pass

  registry.Register(_Bad)
  key = registry._KeyOf(_Bad)  # pylint: disable=protected-access
  try:
    with pytest.raises(ValueError, match=r"_Bad'?: Task\(\): Param "
                       "'clip_gradient_norm_to_value' is not defined here"):
      registry.GetParams(key)
  finally:  # Other tests list every registered experiment.
    registry._REGISTRY.pop(key)  # pylint: disable=protected-access


def test_a_legacy_learner_at_lingvos_rate_0_is_refused_at_create_learners():
  p = registry.GetParams(_KEY)
  p.task.train.learner = None
  task = p.task.Instantiate()
  with pytest.raises(ValueError, match=r'task.train.learning_rate : 0.0 '
                     'trains nothing'):
    task.CreateLearners()


def test_scale_gradients_false_is_refused_and_tf1_args_warned(caplog):
  tp = BaseTask.Params().train
  tp.learning_rate = 0.1
  tp.scale_gradients = False
  with pytest.raises(ValueError, match='task.train.scale_gradients : False'):
    task_params.ExtractLearnerFromLegacyParams(tp.Copy())
  tp.scale_gradients = True
  tp.gate_gradients = True
  with caplog.at_level(logging.WARNING):
    task_params.ExtractLearnerFromLegacyParams(tp.Copy())
  assert 'task.train.gate_gradients : True' in caplog.text


# ---- the train knobs -----------------------------------------------------


def _CkptSteps(logdir):
  d = os.path.join(str(logdir), 'ckpt')
  return sorted(int(f[5:-6]) for f in os.listdir(d) if f.endswith('.index'))


def test_save_interval_seconds_saves_by_time_when_steps_is_none(tmp_path):
  # Loops end every 5 steps (summaries). 1e-9 s: every loop end is due;
  # 1e9 s: none is, only the final save.
  _Run(_Regression(save_interval_steps=None, save_interval_seconds=1e-9,
                   save_max_to_keep=None), tmp_path / 'often')
  assert _CkptSteps(tmp_path / 'often') == [5, 10, 15, 20]
  _Run(_Regression(save_interval_steps=None, save_interval_seconds=1e9),
       tmp_path / 'never')
  assert _CkptSteps(tmp_path / 'never') == [20]


def test_keep_checkpoint_every_n_hours_keeps_beyond_max_to_keep(tmp_path):
  # max_to_keep 1 rolls every checkpoint away but the newest; one kept per
  # 1e-9 hours keeps each of them.
  _Run(_Regression(save_interval_steps=5, save_max_to_keep=1,
                   save_keep_checkpoint_every_n_hours=1e-9),
       tmp_path / 'kept')
  assert _CkptSteps(tmp_path / 'kept') == [5, 10, 15, 20]
  _Run(_Regression(save_interval_steps=5, save_max_to_keep=1,
                   save_keep_checkpoint_every_n_hours=0),
       tmp_path / 'rolled')
  assert _CkptSteps(tmp_path / 'rolled') == [20]


def test_steps_per_loop_falls_back_to_tpu_steps_per_loop():
  tp = BaseTask.Params().train
  assert task_params.StepsPerLoop(tp) == 1000  # Lingvo's tpu_steps_per_loop.
  tp.tpu_steps_per_loop = 7
  assert task_params.StepsPerLoop(tp) == 7
  tp.steps_per_loop = 3
  assert task_params.StepsPerLoop(tp) == 3


def test_lingvos_defaults_are_the_tasks():
  tp = BaseTask.Params().train
  assert (tp.max_steps, tp.save_max_to_keep, tp.save_interval_steps,
          tp.save_interval_seconds, tp.summary_interval_steps) == (
              4000000, 100, None, 600, 100)
  assert tp.optimizer.cls is optimizers.Adam


def test_ema_decay_averages_as_tfs_moving_average_with_num_updates():
  # decay_n = min(0.9, (1 + n) / (10 + n)): 0.1, 2/11 at updates 0, 1.
  # SGD rate 1 on loss = w (gradient 1): w = 1 -> 0 -> -1.
  # avg: 1 -> 0.1*1 + 0.9*0 = 0.1 -> (2/11)*0.1 + (9/11)*(-1).
  p = BaseTask.Params().Set(name='t')
  p.train.Set(learner=None, learning_rate=1.0, optimizer=optimizers.SGD.Params(),
              lr_schedule=schedules.Constant.Params(), ema_decay=0.9)
  (lp,) = BaseTask(p).LearnerParamsList()
  assert lp.optimizer.cls is optimizers.Ema
  w = tf.Variable(1.0, name='w')
  gs = tf.Variable(0, dtype=tf.int64)
  learner = lp.Instantiate()
  learner.Bind(NestedMap(w=w), global_step=gs)
  for _ in range(2):
    with gradient_tape.GradientTape():
      loss = w * 1.0
    learner.Apply({'loss': (loss, tf.constant(1.0))}, NestedMap(w=w))
    gs.assign_add(1)
  assert float(w.numpy()) == -1.0
  with learner.optimizer.SwapAverages():
    np.testing.assert_allclose(float(w.numpy()),
                               (2 / 11) * 0.1 + (9 / 11) * -1.0, rtol=1e-6)


@pytest.mark.parametrize('key, value, fix', [
    ('vn_std', 0.1, 'task.train.vn_std : 0.0'),
    ('ema_decay_moving_vars', 'yes', 'set it to None'),
    ('pruning_hparams_dict', {'a': 1}, 'set it to None'),
    ('ema_decay', 1.0, 'not in [0, 1)'),
])
def test_knobs_not_offered_are_refused_by_name(key, value, fix):
  p = BaseTask.Params().Set(name='t')
  p.train.Set(**{key: value})
  with pytest.raises(ValueError) as e:
    BaseTask(p)
  assert str(e.value).startswith('task.train.%s : ' % key)
  assert fix in str(e.value) and '\n' not in str(e.value)


class _WithMovingStat(model_tasks.LinearRegressionTask):
  """The regression task plus one non-trainable variable (a moving stat)."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('moving_mean', [], init=0.0, trainable=False)


def _MovingVarsTask(cls, **train):
  p = registry.GetParams(_KEY).task.Copy(frozen=False)
  p.cls = cls
  p.train.Set(learner=None, learning_rate=0.1,
              optimizer=optimizers.SGD.Params(), ema_decay_moving_vars=True)
  p.train.Set(**train)
  return p.Instantiate()


def test_ema_decay_moving_vars_true_averages_what_lingvo_would_here():
  # Lingvo averages trainable + "moving_vars" variables; this model has only
  # trainable ones (w, b), so True is Lingvo's EMA: both averaged.
  task = _MovingVarsTask(model_tasks.LinearRegressionTask, ema_decay=0.99)
  (lrn,) = task.CreateLearners()
  ema = lrn.optimizer
  assert ema.params.cls is optimizers.Ema
  for v in task.ModelVars().Flatten():
    assert float(ema.GetAverage(v).numpy()) == 0.0  # A copy of w / b at 0.


def test_ema_decay_moving_vars_true_beside_a_non_trainable_var_is_refused():
  task = _MovingVarsTask(_WithMovingStat, ema_decay=0.99)
  with pytest.raises(ValueError) as e:
    task.CreateLearners()
  msg = str(e.value)
  assert msg.startswith('task.train.ema_decay_moving_vars : True: ')
  assert '1 non-trainable variable(s)' in msg and 'moving_mean' in msg
  assert 'Set it to None' in msg and '\n' not in msg


def test_ema_decay_moving_vars_true_without_ema_changes_nothing():
  # Lingvo reads the flag only when its EMA is on.
  task = _MovingVarsTask(_WithMovingStat, ema_decay=0.0)
  (lrn,) = task.CreateLearners()
  assert lrn.optimizer.params.cls is optimizers.SGD


def test_the_cli_refuses_moving_vars_beside_a_moving_stat_in_one_line(
    tmp_path, capsys):
  class _RegressionWithStat(regression.LinearRegression):  # pylint: disable=unused-variable

    def Task(self):
      p = super().Task()
      p.cls = _WithMovingStat
      p.train.Set(learner=None, learning_rate=0.05,
                  optimizer=optimizers.SGD.Params(), ema_decay=0.99,
                  ema_decay_moving_vars=True)
      return p

  registry.Register(_RegressionWithStat)
  key = registry._KeyOf(_RegressionWithStat)  # pylint: disable=protected-access
  logdir = tmp_path / 'never'
  try:
    code, _, err = trainer_helpers.RunMain(
        ['--model=' + key, '--logdir=%s' % logdir, '--mode=train'], capsys)
  finally:  # Other tests list every registered experiment.
    registry._REGISTRY.pop(key)  # pylint: disable=protected-access
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1, err
  assert lines[0].startswith(
      'ERROR: task.train.ema_decay_moving_vars : True: '), err
  assert 'moving_mean' in lines[0]
  assert not logdir.exists()


def test_lingvos_early_stop_window_counts_global_steps_since_the_best():
  # Lingvo's rule: stop when last - best > window and last >= min_steps; a
  # value is better only by more than the tolerance (0.1 here).
  def _Stops(min_steps):
    es = early_stop_lib.EarlyStop('loss', 'min', 0, interval_steps=10,
                                  window=20, tolerance=0.1,
                                  min_steps=min_steps)
    values = {10: 1.0, 20: 0.95, 30: 0.85, 40: 0.8, 50: 0.8, 60: 0.8,
              70: 0.8}
    return [s for s, v in values.items() if es.Update(s, v)], es
  stops, es = _Stops(0)
  assert stops == [60]  # Best 0.85 at 30 (0.95 is not 0.1 better than 1).
  assert 'its best 0.85 (global step 30) is more than 20 global steps old' in (
      es.reason)
  assert _Stops(70)[0] == [70]


def test_early_stop_window_stops_train_and_eval(tmp_path):
  # Tolerance 100: no later loss beats the first evaluation's (step 5), so
  # at step 15 the best is 10 > 5 steps old.
  p = _Regression()
  p.task.eval.interval_steps = 5
  p.task.train.early_stop.Set(window=5, tolerance=100.0)
  p.task.train.early_stop.metric_history.metric = 'loss'
  t = trainer_lib.Trainer(p, str(tmp_path), mode='train_and_eval',
                          stream=io.StringIO())
  result = t.Run()
  assert result['global_step'] == 15 and result['early_stopped'] is True


@pytest.mark.parametrize('change, says', [
    (dict(patience=2), 'are both set; keep one'),
    (dict(interval=0), 'needs evaluations during training'),
    (dict(metric='log_pplx'), "metric : 'log_pplx' is not an eval metric"),
])
def test_early_stop_window_mistakes_are_refused(tmp_path, change, says):
  p = _Regression()
  p.task.eval.interval_steps = change.get('interval', 5)
  p.task.eval.early_stop_patience = change.get('patience', 0)
  p.task.train.early_stop.window = 5
  p.task.train.early_stop.metric_history.metric = change.get('metric', 'loss')
  t = trainer_lib.Trainer(p, str(tmp_path), mode='train_and_eval',
                          stream=io.StringIO())
  with pytest.raises((ValueError, validate.ExperimentError), match=says):
    t.Run()


def test_runtime_only_knobs_are_accepted_with_a_warning(caplog):
  p = BaseTask.Params().Set(name='t')
  p.train.Set(start_up_delay_steps=5, tpu_computation_shape=[1, 1, 1, 2])
  with caplog.at_level(logging.WARNING):
    BaseTask(p)
  assert 'task.train.start_up_delay_steps : 5 is accepted' in caplog.text
  assert 'task.train.tpu_computation_shape' in caplog.text
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    BaseTask(BaseTask.Params().Set(name='t'))  # Lingvo's defaults: quiet.
  assert 'accepted' not in caplog.text


def test_time_based_saves_are_refused_on_several_workers(monkeypatch):
  # Each worker's clock could decide differently; the run is refused
  # before anything is written, with the fix.
  monkeypatch.setattr(validate.distribution, 'IsMultiWorker', lambda s: True)
  p = _Regression(save_interval_steps=None)
  with pytest.raises(validate.ExperimentError) as e:
    validate.Experiment(p, tf.distribute.get_strategy(), train=True,
                        evaluate=False)
  assert str(e.value).startswith('task.train.save_interval_steps : None')
  assert 'set task.train.save_interval_steps' in str(e.value)
  monkeypatch.setattr(validate.distribution, 'IsMultiWorker', lambda s: False)
  validate.Experiment(p, tf.distribute.get_strategy(), train=True,
                      evaluate=False)  # One process: its clock decides.


# ---- Lingvo's init_from_checkpoint_rules ----------------------------------


def test_lingvo_rules_load_by_match_and_format_and_skip_ignored(tmp_path):
  _Run(_Regression(), tmp_path / 'a')
  ckpt = str(tmp_path / 'a' / 'ckpt')
  tp = BaseTask.Params().train
  tp.init_from_checkpoint_rules = {
      '/elsewhere': ([('regression/(.*)', 'regression/%s')],
                     ['regression/b'])}
  tp.init_from_checkpoint_override = ckpt
  path, rules = task_params.InitFromCheckpoint(tp)
  assert path == ckpt
  variables = {'regression/w': tf.Variable(0.0), 'regression/b':
               tf.Variable(0.0)}
  plan = warm_start.CheckInitFromCheckpoint(path, variables, rules)
  assert plan == {'regression/w': 'regression/w'}  # b is ignored.


@pytest.mark.parametrize('rules, says', [
    ({'a': ([], []), 'b': ([], [])}, 'one checkpoint is warm-started'),
    ({'a': [('(.*)', '%s')]}, 'is not (load rules, ignore rules)'),
    ({'a': ([('(x)(y)', '%s')], [])}, "needs one %s per group"),
    ({'a': ([('(', '%s')], [])}, 'is not a valid regex'),
])
def test_bad_lingvo_rules_are_refused_in_one_line(rules, says):
  p = BaseTask.Params().Set(name='t')
  p.train.init_from_checkpoint_rules = rules
  with pytest.raises(ValueError) as e:
    BaseTask(p)
  assert says in str(e.value) and '\n' not in str(e.value)
  assert str(e.value).startswith('task.train.init_from_checkpoint_rules')


# ---- a key on the wrong params object ------------------------------------


@pytest.mark.parametrize('where, key, says', [
    ('train', 'loss_name', 'a Learner param: set task.train.learner = '),
    ('eval', 'samples_per_summary', 'task.eval.samples here'),
    ('eval', 'load_checkpoint_from', '--checkpoint'),
    ('', 'clip_gradient_norm_to_value',
     'a Learner param: task.train.learner.clip_gradient_norm_to_value, or '
     'leave task.train.learner None and set it on task.train'),
    ('', 'max_steps', 'a train param: task.train.max_steps'),
])
def test_a_key_on_the_wrong_object_says_where_it_belongs(where, key, says):
  p = BaseTask.Params()
  target = p.Get(where) if where else p
  with pytest.raises(AttributeError) as e:
    setattr(target, key, 1)
  assert ('is not defined here: ' in str(e.value) and
          says in str(e.value)), str(e.value)


def test_learner_keys_of_the_task_or_the_optimizer_say_where():
  lp = learner_lib.Learner.Params()
  with pytest.raises(AttributeError, match='a task train param: '
                     r'task.train.max_steps'):
    lp.max_steps = 10
  with pytest.raises(AttributeError, match='task.train.learner.optimizer.'
                     'beta1'):
    lp.Set(beta1=0.9)
  with pytest.raises(AttributeError, match='Did you mean'):
    lp.learning_rat = 0.1  # A typo still gets the closest names.


# ---- a Lingvo-shaped experiment through the command line -----------------

_PORTED = 'lingvo_ported.DigitsMlpLingvoTrain'


def _Metrics(path):
  with open(path) as f:
    return json.load(f)


@pytest.mark.slow
def test_trains_evaluates_dev_and_test_and_exports_by_the_cli(
    tmp_path, capsys):
  logdir = str(tmp_path / 'run')
  code, _, err = trainer_helpers.RunMain(
      ['--model=%s' % _PORTED, '--logdir=%s' % logdir,
       '--mode=train_and_eval'], capsys)
  assert code == 0, err
  dev = _Metrics(os.path.join(logdir, 'metrics.json'))
  assert dev['global_step'] == 3000 and dev['accuracy'] > 0.93
  code, _, err = trainer_helpers.RunMain(
      ['--model=%s' % _PORTED, '--logdir=%s' % logdir, '--mode=eval',
       '--evaler_dataset=test'], capsys)
  assert code == 0, err
  test = _Metrics(os.path.join(logdir, 'eval_job_test', 'metrics.json'))
  assert test['global_step'] == 3000 and test['accuracy'] > 0.93
  assert test['accuracy'] != dev['accuracy']  # Another set of examples.
  code, _, err = trainer_helpers.RunMain(
      ['--model=%s' % _PORTED, '--logdir=%s' % logdir, '--mode=export'],
      capsys)
  assert code == 0, err
  assert os.path.isdir(os.path.join(logdir, 'export'))
  # The run saved by time (Lingvo's save_interval_seconds; steps None) and
  # once at the end.
  assert os.path.exists(os.path.join(logdir, 'ckpt', 'ckpt-3000.index'))
