"""BaseTask: params, learners built only to train, one train step by hand."""

import numpy as np
import pytest
import tensorflow as tf

from learner import learner as learner_lib
from learner import optimizers
from learner import task as task_lib
from configs import model_tasks

# A batch where every gradient is easy by hand: w = b = 0, x = [1, 2],
# y = [3, 5]. loss = mean(y^2) = (9 + 25) / 2 = 17;
# dL/dw = mean(2 * (0 - y) * x) = (-6 - 20) / 2 = -13; dL/db = (-6 - 10) / 2
# = -8. SGD lr 0.1: w = 1.3, b = 0.8.
_BATCH = {'x': np.array([1.0, 2.0], np.float32),
          'y': np.array([3.0, 5.0], np.float32)}


def _Learner(name, lr, **kw):
  return learner_lib.Learner.Params().Set(
      name=name, loss_name='loss', learning_rate=lr,
      optimizer=optimizers.SGD.Params(), **kw)


def _Task(learner=None, **train_kw):
  p = model_tasks.LinearRegressionTask.Params().Set(name='reg')
  p.train.learner = learner
  for k, v in train_kw.items():
    p.train.Set(**{k: v})
  return p.Instantiate()


def test_train_step_applies_sgd_and_counts_the_global_step():
  task = _Task(_Learner('learner', 0.1))
  task.CreateLearners()
  out = task.TrainStep(_BATCH)
  np.testing.assert_allclose(task.vars.w.numpy(), 1.3, rtol=1e-6)
  np.testing.assert_allclose(task.vars.b.numpy(), 0.8, rtol=1e-6)
  assert int(task.global_step.numpy()) == 1
  loss, weight = out['metrics']['loss']
  np.testing.assert_allclose(loss.numpy(), 17.0)
  assert weight.numpy() == 2.0
  em = out['learners']['learner']
  np.testing.assert_allclose(em['learning_rate'][0].numpy(), 0.1)
  np.testing.assert_allclose(em['grad_norm/all'][0].numpy(),
                             np.hypot(13.0, 8.0), rtol=1e-6)


@pytest.mark.parametrize('mode', ['eager', 'jit'])
def test_train_step_is_the_same_eagerly_and_under_xla(mode):
  task = _Task(_Learner('learner', 0.1), jit_compile=(mode == 'jit'))
  task.CreateLearners()
  if mode == 'eager':
    tf.config.run_functions_eagerly(True)
  try:
    task.TrainStep(_BATCH)
  finally:
    tf.config.run_functions_eagerly(False)
  np.testing.assert_allclose(task.vars.w.numpy(), 1.3, rtol=1e-6)
  np.testing.assert_allclose(task.vars.b.numpy(), 0.8, rtol=1e-6)


def test_two_learners_update_only_their_variables_in_order():
  task = _Task([_Learner('lw', 0.1, bprop_variable_filter='/w$'),
                _Learner('lb', 0.01, bprop_variable_filter='/b$')])
  learners = task.CreateLearners()
  assert [l.params.name for l in learners] == ['lw', 'lb']
  assert task.GetDescendant('lw') is learners[0]
  out = task.TrainStep(_BATCH)
  np.testing.assert_allclose(task.vars.w.numpy(), 1.3, rtol=1e-6)  # 0.1*13
  np.testing.assert_allclose(task.vars.b.numpy(), 0.08, rtol=1e-6)  # 0.01*8
  assert set(out['learners']) == {'lw', 'lb'}
  np.testing.assert_allclose(out['learners']['lb']['grad_norm/all'][0], 8.0)
  assert int(task.global_step.numpy()) == 1


def test_eval_task_builds_no_optimizer():
  task = _Task(_Learner('learner', 0.1))
  # Only the model's variables and the global step: no learner, no slot.
  assert sorted(task.vars) == ['b', 'global_step', 'w']
  assert len(tf.nest.flatten(task.vars)) == 3
  with pytest.raises(ValueError, match='CreateLearners'):
    task.TrainStep(_BATCH)
  metrics = task.EvalStep(_BATCH)
  np.testing.assert_allclose(metrics['loss'][0].numpy(), 17.0)
  assert int(task.global_step.numpy()) == 0


def test_train_without_learner_is_a_clear_error():
  task = _Task(None)
  with pytest.raises(ValueError, match='train.learner is None'):
    task.CreateLearners()


def test_duplicate_learner_names_are_refused():
  task = _Task([_Learner('same', 0.1), _Learner('same', 0.2)])
  with pytest.raises(ValueError, match="'same'"):
    task.CreateLearners()


@pytest.mark.parametrize('key,value,match', [
    ('train.max_steps', 0, 'train.max_steps'),
    ('train.save_interval_steps', -1, 'train.save_interval_steps'),
    ('eval.interval_steps', -5, 'eval.interval_steps'),
    ('eval.dev_metric_mode', 'best', 'eval.dev_metric_mode'),
    ('train.replicas_to_aggregate', 0, 'train.replicas_to_aggregate'),
])
def test_bad_task_params_raise_naming_the_key(key, value, match):
  p = model_tasks.LinearRegressionTask.Params().Set(name='reg')
  p.Set(**{key: value})
  with pytest.raises(ValueError, match=match):
    p.Instantiate()


def test_base_task_requires_compute_methods():
  task = task_lib.BaseTask.Params().Instantiate()
  with pytest.raises(NotImplementedError, match='ComputePredictions'):
    task.FProp(task.theta, _BATCH)
