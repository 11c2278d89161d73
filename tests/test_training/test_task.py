"""BaseTask: params, learners built only to train, one train step by hand."""

import numpy as np
import pytest
import tensorflow as tf

from learner import learner as learner_lib
from learner import optimizers
from learner.training.model import task as task_lib
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
    ('train.steps_per_loop', 0, 'train.steps_per_loop'),
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


def _Dataset(n):
  """n different batches of two examples (y = 5x + 2 with x = 0.1 i, ...)."""
  x = np.arange(2 * n, dtype=np.float32).reshape(n, 2) * 0.1
  return tf.data.Dataset.from_tensor_slices({'x': x, 'y': 5.0 * x + 2.0})


def _Momentum(name='learner'):
  return learner_lib.Learner.Params().Set(
      name=name, loss_name='loss', learning_rate=0.1,
      optimizer=optimizers.Momentum.Params().Set(alpha=0.9),
      clip_gradient_norm_to_value=3.0)


def _State(task):
  """{index: name, value} of every variable (weights, slots, counters)."""
  return {'%d %s' % (i, v.name): v.numpy()
          for i, v in enumerate(task.variables)}


@pytest.mark.parametrize('jit', [False, True])
def test_train_loop_equals_one_train_step_per_batch_and_takes_n_batches(jit):
  n = 5
  ref = _Task(_Momentum(), jit_compile=jit)
  ref.CreateLearners()
  ref_outs = [ref.TrainStep(b) for b in _Dataset(n + 1).take(n)]
  task = _Task(_Momentum(), jit_compile=jit)
  task.CreateLearners()
  it = iter(_Dataset(n + 1))
  out = task.TrainLoop(it, 2)  # steps 1-2, then 3-5 with the same trace
  out = task.TrainLoop(it, 3)
  assert int(task.global_step.numpy()) == n
  a, b = _State(ref), _State(task)
  assert sorted(a) == sorted(b) and len(a) > 4, sorted(a)  # slots too
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  # The output is the last step's, and the iterator moved by exactly n.
  last = ref_outs[-1]
  assert (out['metrics']['loss'][0].numpy() ==
          last['metrics']['loss'][0].numpy())
  assert (out['learners']['learner']['grad_norm/all'][0].numpy() ==
          last['learners']['learner']['grad_norm/all'][0].numpy())
  np.testing.assert_array_equal(next(it)['x'].numpy(),
                                np.float32([1.0, 1.1]))
  assert task._train_loop_fn is not None  # pylint: disable=protected-access


def test_train_loop_needs_at_least_one_step():
  task = _Task(_Learner('learner', 0.1))
  task.CreateLearners()
  with pytest.raises(ValueError, match='num_steps'):
    task.TrainLoop(iter(_Dataset(2)), 0)


class _BranchyTask(model_tasks.LinearRegressionTask):
  """Uses a Python `if` on a tensor: needs AutoGraph."""

  def ComputeLoss(self, theta, predictions, batch):
    metrics, per_example = super().ComputeLoss(theta, predictions, batch)
    loss = metrics['loss'][0]
    if loss > 1e9:  # A tensor condition: only AutoGraph can trace this.
      loss = loss * 0.0
    metrics['loss'] = (loss, metrics['loss'][1])
    return metrics, per_example


def test_a_step_that_needs_autograph_is_retraced_with_it():
  p = _BranchyTask.Params().Set(name='reg')
  p.train.learner = _Learner('learner', 0.1)
  task = p.Instantiate()
  task.CreateLearners()
  task.TrainStep(_BATCH)
  np.testing.assert_allclose(task.vars.w.numpy(), 1.3, rtol=1e-6)
  np.testing.assert_allclose(task.EvalStep(_BATCH)['loss'][0].numpy(),
                             (0.9 ** 2 + 1.6 ** 2) / 2, rtol=1e-5)


# ---- ComputeLoss's return contract (issue 21, item 8) -----------------------


@pytest.mark.parametrize('value, got', [
    (tf.constant(1.0), 'a tf.Tensor'),
    ((1.0, 2.0, 3.0), 'a tuple of 3 items'),
    (0.5, 'a float'),
    ((tf.constant(1.0), {}), 'a tuple of 2 items'),  # metrics not a dict
])
def test_compute_loss_output_outside_the_contract_is_refused(value, got):
  task = _ContractTask()
  with pytest.raises(TypeError) as e:
    task_lib.CheckLossOutput(task, value)
  assert str(e.value) == (
      "_ContractTask.ComputeLoss returned %s; it must return (metrics, "
      "per_example): metrics a dict {name: (value, weight)} (weight: the "
      "examples averaged over), e.g. return {'loss': (loss, batch_size)}, "
      "{}." % got)


def test_compute_loss_output_in_the_contract_is_returned_as_is():
  out = ({'loss': (tf.constant(1.0), 2.0)}, {})
  assert task_lib.CheckLossOutput(_ContractTask(), out) is out


class _ContractTask:
  """Stands for a task: only its class name is used in the message."""
