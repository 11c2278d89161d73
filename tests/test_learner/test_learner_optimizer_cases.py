"""Optimizer cases that need a Learner, from docs/cases/optimizers.md."""

import logging as py_logging

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner.optimizers import base as base_optimizer
from learner.optimizers.wrappers import composite
from learner import optimizers
from learner.learner import Learner
from params import BaseLayer
from schedules import PiecewiseConstantSchedule
from schedules import StepwiseExponentialSchedule


def MakeLearner(**kw):
  p = Learner.Params().Set(name='loss', learning_rate=0.1,
                           optimizer=base_optimizer.SGD.Params())
  p.Set(**kw)
  return p.Instantiate()


class Scalars(BaseLayer):
  """Scalar variables from {name: initial value}; children from `children`."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'task'
    p.Define('values', {'w': 0.0}, 'Scalar variables and initial values.')
    p.Define('children', [], 'Names of child Scalars layers, each with w=0.')
    return p

  def __init__(self, params):
    super().__init__(params)
    for name, value in self.params.values.items():
      self.CreateVariable(name, [], init=value)
    for child in self.params.children:
      self.CreateChild(child, Scalars.Params().Set(name=child,
                                                   values={'w': 0.0}))


def TrainSteps(task, lrn, loss_fn, n):
  @tf.function
  def Step():
    return lrn.Apply({'loss': (loss_fn(task.theta), 1.0)}, task.vars)[2]
  return [Step() for _ in range(n)]


def test_c_decay_lr_scaled():
  # w = 2 - 0.5*1 - 0.5*0.1*2 = 1.4 (decay with the scheduled rate and the
  # weights from before the step).
  task = Scalars.Params().Set(values={'w': 2.0}).Instantiate()
  lrn = MakeLearner(learning_rate=0.5, optimizer=base_optimizer.SGD.Params()
                    .Set(decoupled_weight_decay=0.1))
  lrn.Bind(task.vars)
  TrainSteps(task, lrn, lambda th: th.w, 1)
  assert float(task.vars.w.numpy()) == pytest.approx(1.4, rel=1e-6)


def test_c_decay_follows_lr():
  # Step 0: w = 1 - 1*0.01*1 = 0.99; step 1 (rate 0.1):
  # w = 0.99 - 0.1*0.01*0.99 = 0.98901.
  task = Scalars.Params().Set(values={'w': 1.0}).Instantiate()
  lrn = MakeLearner(
      learning_rate=1.0,
      optimizer=base_optimizer.SGD.Params().Set(decoupled_weight_decay=0.01),
      lr_schedule=PiecewiseConstantSchedule.Params().Set(
          boundaries=[1], values=[1.0, 0.1]))
  lrn.Bind(task.vars)
  TrainSteps(task, lrn, lambda th: 0.0 * th.w, 1)
  assert float(task.vars.w.numpy()) == pytest.approx(0.99, rel=1e-6)
  TrainSteps(task, lrn, lambda th: 0.0 * th.w, 1)
  assert float(task.vars.w.numpy()) == pytest.approx(0.98901, rel=1e-6)


def _CompositeLearner():
  return MakeLearner(
      learning_rate=1.0,
      optimizer=composite.Composite.Params().Set(optimizer_map={
          'enc/': (optimizers.Momentum.Params().Set(alpha=0.0), 1.0),
          'dec/': (base_optimizer.SGD.Params(), 1.0)}),
      lr_schedule=StepwiseExponentialSchedule.Params().Set(
          decay=0.5, num_steps_per_decay=1))


def test_c_composite_steps():
  task = Scalars.Params().Set(values={}, children=['enc', 'dec']).Instantiate()
  lrn = _CompositeLearner()
  lrn.Bind(task.vars)
  ms = TrainSteps(task, lrn, lambda th: th.enc.w + th.dec.w, 3)
  assert [float(m['learning_rate'][0]) for m in ms] == [1.0, 0.5, 0.25]
  assert float(task.vars.enc.w.numpy()) == pytest.approx(-1.75)
  assert float(task.vars.dec.w.numpy()) == pytest.approx(-1.75)
  assert int(lrn.num_updates.numpy()) == 3
  for _, _, group in lrn.optimizer.groups:
    assert int(group.num_updates.numpy()) == 3


def test_c_composite_steps_unmatched_variable_fails_at_bind():
  task = Scalars.Params().Set(values={},
                              children=['enc', 'dec', 'other']).Instantiate()
  lrn = _CompositeLearner()
  with pytest.raises(ValueError, match='task/other/w'):
    lrn.Bind(task.vars)


def test_c_not_callable_instance_as_optimizer_fn():
  with pytest.raises(TypeError) as e:
    MakeLearner(optimizer=None, optimizer_fn=tf.keras.optimizers.Adam(0.1))
  assert 'optimizer_fn' in str(e.value)
  assert 'optimizer_fn=lambda: ' in str(e.value)


def test_c_not_callable_our_optimizer_instance_suggests_its_params():
  # One of our optimizers is built from params: the fix is optimizer=params.
  sgd = learner_lib.get_optimizer_fn('sgd', learning_rate=0.1)()
  with pytest.raises(TypeError) as e:
    MakeLearner(optimizer=None, optimizer_fn=sgd)
  msg = str(e.value)
  assert 'optimizer_fn=lambda: ' in msg
  assert 'optimizer=SGD.Params()' in msg


def test_c_not_callable_a_plain_value_names_optimizer_fn():
  with pytest.raises(TypeError) as e:
    MakeLearner(optimizer=None, optimizer_fn='sgd')
  assert "optimizer_fn" in str(e.value) and "'sgd'" in str(e.value)
  assert 'get_optimizer_fn(' in str(e.value)


def test_c_not_callable_both_optimizer_and_optimizer_fn_is_an_error():
  with pytest.raises(ValueError) as e:
    MakeLearner(optimizer_fn=learner_lib.get_optimizer_fn(
        'sgd', learning_rate=0.1))
  # The fix, also in the command line's form.
  assert 'both optimizer and optimizer_fn are set; set only one' in str(
      e.value)
  assert 'from the command line add <learner>.optimizer : None' in str(
      e.value)


def test_c_not_callable_unknown_factory_name_suggests_the_closest():
  with pytest.raises(ValueError, match="'adam'"):
    learner_lib.get_optimizer_fn('adamm')


def test_keras_optimizer_fn_gives_the_base_rate():
  # Keras SGD(0.5) as optimizer_fn, no learner rate: w = 0 - 0.5 * 3.
  task = Scalars.Params().Instantiate()
  lrn = MakeLearner(optimizer=None, learning_rate=None,
                    optimizer_fn=lambda: tf.keras.optimizers.SGD(0.5))
  assert lrn.base_learning_rate == pytest.approx(0.5)
  lrn.Bind(task.vars)
  TrainSteps(task, lrn, lambda th: 3.0 * th.w, 1)
  assert float(task.vars.w.numpy()) == pytest.approx(-1.5, rel=1e-6)


def test_learning_rate_from_factory_and_override_warning(caplog):
  fn = learner_lib.get_optimizer_fn('sgd', learning_rate=0.3)
  lrn = MakeLearner(optimizer=None, optimizer_fn=fn, learning_rate=None)
  assert lrn.base_learning_rate == pytest.approx(0.3)
  with caplog.at_level(py_logging.WARNING):
    lrn = MakeLearner(optimizer=None, optimizer_fn=fn, learning_rate=0.1)
  assert lrn.base_learning_rate == pytest.approx(0.1)
  msgs = [r.getMessage() for r in caplog.records if 'overrides' in
          r.getMessage()]
  assert len(msgs) == 1 and '0.1' in msgs[0] and '0.3' in msgs[0]




def test_seed_three_level_example_factory_and_params_give_identical_updates():
  # Momentum(0.9) in Lars(eta=0.001, weight_decay=0.0001) in
  # batch_gradients(num_batches=8, sync_on_apply=True), from factories
  # (MoXing's ratio=0.001) and from params; 16 micro-steps = 2 updates.
  from learner.optimizers.wrappers import accumulation as gradient_accumulation  # pylint: disable=g-import-not-at-top
  from learner.optimizers.wrappers import lars  # pylint: disable=g-import-not-at-top
  fn = learner_lib.get_optimizer_fn('momentum', learning_rate=0.1,
                                    momentum=0.9)
  fn = learner_lib.get_optimizer_wrapper_fn('lars', fn, ratio=0.001,
                                            weight_decay=0.0001)
  fn = learner_lib.get_optimizer_wrapper_fn('batch_gradients', fn,
                                            num_batches=8, sync_on_apply=True)
  params = gradient_accumulation.GradientAccumulation.Params().Set(
      num_batches=8, sync_on_apply=True,
      optimizer=lars.Lars.Params().Set(
          eta=0.001, weight_decay=0.0001,
          optimizer=optimizers.Momentum.Params().Set(alpha=0.9)))
  rng = np.random.RandomState(5)
  coeffs = rng.randn(16, 2).astype(np.float32)
  results = []
  for kw in (dict(optimizer=None, learning_rate=None, optimizer_fn=fn),
             dict(optimizer=params, learning_rate=0.1)):
    task = Scalars.Params().Set(values={}).Instantiate()
    kernel = task.CreateVariable('kernel', [2, 1],
                                 init=np.array([[3.], [4.]], np.float32))
    lrn = MakeLearner(**kw)
    lrn.Bind(task.vars)

    @tf.function
    def Step(c):
      loss = tf.reduce_sum(c * tf.reshape(task.theta.kernel, [2]))
      return lrn.Apply({'loss': (loss, 1.0)}, task.vars)[2]

    for c in coeffs:
      Step(tf.constant(c))
    assert int(lrn.num_updates.numpy()) == 2
    results.append((kernel.numpy(), lrn.optimizer.inner.optimizer.GetSlots(
        kernel)['momentum'].numpy()))
  np.testing.assert_array_equal(results[0][0], results[1][0])
  np.testing.assert_array_equal(results[0][1], results[1][1])
  assert not np.allclose(results[0][0], [[3.], [4.]])


@pytest.mark.parametrize('name', ['dog', 'dowg', 'cocob', 'prodigy',
                                  'dadapt_adamw'])
def test_a_rate_free_rule_without_a_rate_runs_at_rate_one(name):
  # README: "leave the rate at 1.0"; no rate anywhere gives exactly that.
  lrn = MakeLearner(optimizer=None, learning_rate=None,
                    optimizer_fn=learner_lib.get_optimizer_fn(name))
  assert lrn.base_learning_rate == 1.0


def test_a_rule_with_a_rate_still_needs_one():
  with pytest.raises(ValueError, match='learning_rate is None and the '
                     'optimizer gives no rate'):
    MakeLearner(optimizer=None, learning_rate=None,
                optimizer_fn=learner_lib.get_optimizer_fn('adam'))
