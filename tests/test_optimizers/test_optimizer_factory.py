"""Tests of learner/optimizers/factory.py (MoXing-style factories)."""

import importlib.util

import numpy as np
import pytest
import tensorflow as tf

import learner
from learner.optimizers.wrappers import ema
from learner.optimizers import rules
from learner.optimizers import keras_optimizer
from learner.optimizers.wrappers import lars
from learner.optimizers import factory
from learner import optimizers
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
from params import Params

get_optimizer_fn = factory.get_optimizer_fn
get_optimizer_wrapper_fn = factory.get_optimizer_wrapper_fn

_HAS_ACCUMULATION = importlib.util.find_spec(
    'learner.optimizers.wrappers.accumulation') is not None


@pytest.mark.parametrize('name,kwargs,expected', [
    ('sgd', {}, optimizers.SGD.Params()),
    ('momentum', {'momentum': 0.8}, optimizers.Momentum.Params().Set(
        alpha=0.8)),
    ('nesterov', {'momentum': 0.7}, optimizers.Momentum.Params().Set(
        alpha=0.7, use_nesterov=True)),
    ('adam', {'beta1': 0.8, 'beta_2': 0.99, 'epsilon': 1e-6},
     optimizers.Adam.Params().Set(beta1=0.8, beta2=0.99, epsilon=1e-6)),
    ('adamw', {'weight_decay': 0.05}, optimizers.AdamW.Params().Set(
        decoupled_weight_decay=0.05)),
    ('adagrad', {'initial_accumulator_value': 0.5},
     optimizers.Adagrad.Params().Set(initial_accumulator_value=0.5)),
    ('rmsprop', {'rho': 0.8, 'centered': True},
     optimizers.RMSProp.Params().Set(decay=0.8, centered=True)),
    # Lingvo 0.14.2 optimizer.py AdaDelta names TF1's rho `decay`.
    ('adadelta', {'rho': 0.9}, optimizers.AdaDelta.Params().Set(decay=0.9)),
    ('adafactor', {'decay_rate': 0.7}, optimizers.Adafactor.Params().Set(
        decay_rate=0.7)),
    ('lamb', {'weight_decay': 0.01}, optimizers.LAMB.Params().Set(
        weight_decay=0.01)),
    ('lion', {'beta_1': 0.95, 'weight_decay': 0.1},
     optimizers.Lion.Params().Set(beta1=0.95, decoupled_weight_decay=0.1)),
    ('schedule_free_sgd', {'b1': 0.8, 'weight_decay': 0.1},
     optimizers.ScheduleFreeSGD.Params().Set(momentum=0.8,
                                             decoupled_weight_decay=0.1)),
    ('schedule_free_adamw', {'beta_1': 0.95, 'b2': 0.99, 'eps': 1e-6},
     optimizers.ScheduleFreeAdamW.Params().Set(beta1=0.95, beta2=0.99,
                                               epsilon=1e-6)),
    ('muon', {'momentum': 0.9, 'weight_decay': 0.1, 'nesterov': False},
     optimizers.Muon.Params().Set(beta=0.9, decoupled_weight_decay=0.1,
                                  nesterov=False)),
])
def test_each_name_and_moxing_keywords_give_the_params(name, kwargs, expected):
  fn = get_optimizer_fn(name, learning_rate=0.01, **kwargs)
  assert fn.Params() == expected
  assert fn.learning_rate == 0.01
  opt = fn()
  assert isinstance(opt, expected.cls) and opt.factory_learning_rate == 0.01


def test_c_not_callable_unknown_name_suggests_adam():
  with pytest.raises(ValueError) as e:
    get_optimizer_fn('adamm')
  msg = str(e.value)
  assert "'adamm'" in msg and "Did you mean 'adam'" in msg
  assert "'lion'" in msg and "'sgd'" in msg


def test_unknown_keyword_is_named_with_the_accepted_ones():
  with pytest.raises(ValueError) as e:
    get_optimizer_fn('momentum', learning_rate=0.1, momentun=0.9)
  assert "'momentun'" in str(e.value) and "'momentum'" in str(e.value)


def test_structural_params_are_not_factory_keywords():
  with pytest.raises(ValueError, match="'cls'"):
    get_optimizer_fn('sgd', cls=optimizers.Adam)


def test_unknown_wrapper_name_suggests_the_closest():
  with pytest.raises(ValueError, match="Did you mean 'lars'"):
    get_optimizer_wrapper_fn('larss', get_optimizer_fn('sgd'))


def test_wrapper_inner_of_unknown_kind_is_a_type_error_naming_inner():
  with pytest.raises(TypeError, match='inner must be'):
    get_optimizer_wrapper_fn('lars', 'momentum')


def test_factories_round_trip_through_params_text():
  fn = get_optimizer_wrapper_fn(
      'ema', get_optimizer_wrapper_fn(
          'lars', get_optimizer_fn('momentum', learning_rate=0.1,
                                   momentum=0.9), ratio=0.001,
          weight_decay=0.0001), decay=0.99)
  p = Params()
  p.Define('optimizer_fn', fn, '')
  q = Params()
  q.Define('optimizer_fn', None, '')
  q.FromText(p.ToText())
  assert q.optimizer_fn == fn
  assert q.optimizer_fn.Params() == fn.Params()
  assert q.optimizer_fn.learning_rate == 0.1


def test_wrapper_of_an_instance_keeps_the_rate_in_its_text_form():
  inner = get_optimizer_fn('momentum', learning_rate=0.2, momentum=0.9)()
  fn = get_optimizer_wrapper_fn('lars', inner, ratio=0.01)
  assert fn.learning_rate == 0.2
  p = Params()
  p.Define('optimizer_fn', fn, '')
  q = Params()
  q.Define('optimizer_fn', None, '')
  q.FromText(p.ToText())
  assert q.optimizer_fn.Params() == fn.Params()
  assert q.optimizer_fn.learning_rate == 0.2


def _LarsMomentumParams():
  return lars.Lars.Params().Set(
      optimizer=optimizers.Momentum.Params().Set(alpha=0.9), eta=0.001,
      weight_decay=0.0001)


def _LarsMomentumFactory(from_instance):
  inner = get_optimizer_fn('momentum', learning_rate=0.1, momentum=0.9)
  if from_instance:  # MoXing's own example wraps built optimizers.
    inner = inner()
  return get_optimizer_wrapper_fn('lars', inner, ratio=0.001,
                                  weight_decay=0.0001)


@pytest.mark.parametrize('from_instance', [False, True])
def test_seed_example_lars_momentum_factory_equals_params_and_updates(
    from_instance):
  fn = _LarsMomentumFactory(from_instance)
  assert fn.Params() == _LarsMomentumParams()
  assert fn.learning_rate == 0.1
  results = []
  for opt in (fn(), _LarsMomentumParams().Instantiate()):
    k = tf.Variable([[3.0], [4.0]], name='k')
    opt.Bind([k])
    for _ in range(2):
      opt.Apply(0.1, NestedMap(k=VarGrad(k, tf.constant([[0.8], [-0.6]]))))
    results.append(k.numpy())
  np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.skipif(not _HAS_ACCUMULATION,
                    reason='learner/optimizers/wrappers/accumulation.py not committed yet')
@pytest.mark.parametrize('from_instance', [False, True])
def test_seed_three_level_example_factory_equals_params(from_instance):
  from learner.optimizers.wrappers import accumulation as gradient_accumulation  # pylint: disable=g-import-not-at-top
  fn = get_optimizer_wrapper_fn('batch_gradients',
                                _LarsMomentumFactory(from_instance),
                                num_batches=8, sync_on_apply=True)
  expected = gradient_accumulation.GradientAccumulation.Params().Set(
      optimizer=_LarsMomentumParams(), num_batches=8, sync_on_apply=True)
  assert fn.Params() == expected
  assert fn.learning_rate == 0.1
  params, base_lr = factory.OptimizerParamsFromFn(fn)
  assert params == expected and base_lr == 0.1


@pytest.mark.skipif(not _HAS_ACCUMULATION,
                    reason='learner/optimizers/wrappers/accumulation.py not committed yet')
@pytest.mark.parametrize('outer', ['lars', 'ema', 'lookahead', 'swa', 'sam'])
def test_accumulation_must_be_outermost_in_factories(outer):
  acc = get_optimizer_wrapper_fn('batch_gradients', get_optimizer_fn('sgd'),
                                 num_batches=2)
  with pytest.raises(ValueError, match='accumulation must be the outermost'):
    get_optimizer_wrapper_fn(outer, acc)


class _FakeAccumulation(optimizers.SGD):
  IS_ACCUMULATION = True


def test_accumulation_params_inside_a_factory_wrapper_is_refused():
  with pytest.raises(ValueError, match='accumulation must be the outermost'):
    get_optimizer_wrapper_fn('ema', _FakeAccumulation.Params())


def test_ema_wrapper_factory_accepts_ema_decay():
  fn = get_optimizer_wrapper_fn('ema', get_optimizer_fn('sgd'), ema_decay=0.9)
  assert fn.Params() == ema.Ema.Params().Set(
      optimizer=optimizers.SGD.Params(), decay=0.9)


# ---- OptimizerParamsFromFn ------------------------------------------------------


def test_params_from_factory():
  params, lr = factory.OptimizerParamsFromFn(
      get_optimizer_fn('adam', learning_rate=0.003))
  assert params == optimizers.Adam.Params() and lr == 0.003


def test_params_from_keras_callable_uses_keras_rate():
  fn = lambda: tf.keras.optimizers.Lion(1e-4)
  params, lr = factory.OptimizerParamsFromFn(fn)
  assert params.cls is keras_optimizer.KerasOptimizer
  assert params.optimizer_fn is fn
  np.testing.assert_allclose(lr, 1e-4, rtol=1e-6)


@pytest.mark.parametrize('rate', [1e-4, 3e-4, 0.1, 0.003, 1.5e-5])
def test_keras_rate_is_the_number_the_user_wrote(rate):
  # Issue 21: Keras holds the rate in float32 (1e-4 is 9.999999747e-05);
  # the warning printed that. The shortest float32 decimal is 1e-4 itself.
  _, lr = factory.OptimizerParamsFromFn(lambda: tf.keras.optimizers.Adam(rate))
  assert lr == rate and repr(lr) == repr(rate)


def test_params_from_callable_returning_our_optimizer():
  params, lr = factory.OptimizerParamsFromFn(
      lambda: optimizers.Momentum.Params().Set(alpha=0.5).Instantiate())
  assert params == optimizers.Momentum.Params().Set(alpha=0.5)
  assert lr is None


@pytest.mark.parametrize('instance', [
    lambda: tf.keras.optimizers.Adam(0.1),
    lambda: optimizers.SGD.Params().Instantiate(),
])
def test_c_not_callable_instance_is_type_error_showing_lambda(instance):
  with pytest.raises(TypeError) as e:
    factory.OptimizerParamsFromFn(instance())
  assert 'optimizer_fn' in str(e.value)
  assert 'optimizer_fn=lambda: ...' in str(e.value)
  assert '...(' not in str(e.value)  # No "lambda: ...(e.g." run-together.


def test_c_not_callable_keras_instance_message_suggests_a_lambda_around_its_class():
  with pytest.raises(TypeError) as e:
    factory.OptimizerParamsFromFn(tf.keras.optimizers.RMSprop(0.1))
  msg = str(e.value)
  assert 'got the RMSprop instance' in msg
  assert 'optimizer_fn=lambda: tf.keras.optimizers.RMSprop(...) (e.g. ' in msg
  assert 'optimizer_fn=lambda: tf.keras.optimizers.Adam(0.1)), ' in msg


def test_c_not_callable_our_instance_message_suggests_params_or_a_factory_not_a_lambda():
  from learner.optimizers.wrappers import accumulation as gradient_accumulation  # pylint: disable=g-import-not-at-top
  opt = gradient_accumulation.GradientAccumulation.Params().Set(
      optimizer=optimizers.SGD.Params()).Instantiate()
  with pytest.raises(TypeError) as e:
    factory.OptimizerParamsFromFn(opt)
  msg = str(e.value)
  assert 'optimizer_fn' in msg and 'optimizer_fn=lambda: ...' in msg
  # Our classes take params: no `lambda: GradientAccumulation(...)`.
  assert 'lambda: GradientAccumulation' not in msg
  assert 'optimizer=GradientAccumulation.Params().Set(...)' in msg
  assert 'optimizer=<instance>.params' in msg
  assert "optimizer_fn=get_optimizer_fn('sgd', learning_rate=0.1)" in msg
  assert "get_optimizer_wrapper_fn('batch_gradients'" in msg


def test_wrapper_names_and_the_classes_they_build():
  sgd = get_optimizer_fn('sgd')
  assert set(factory._WRAPPER_NAMES) == {  # pylint: disable=protected-access
      'batch_gradients', 'dynamic_accumulator', 'lars', 'ema', 'lookahead',
      'swa', 'sam', 'easgd', 'local_sgd', 'mechanic'}
  built = {name: get_optimizer_wrapper_fn(name, sgd)().__class__.__name__
           for name in ('lars', 'ema', 'lookahead', 'swa', 'sam', 'easgd',
                        'local_sgd', 'mechanic')}
  assert built == {'lars': 'Lars', 'ema': 'Ema', 'lookahead': 'Lookahead',
                   'swa': 'SWA', 'sam': 'Sam', 'easgd': 'Easgd',
                   'local_sgd': 'LocalSgd', 'mechanic': 'Mechanic'}
  la = get_optimizer_wrapper_fn('lookahead', sgd, k=5, alpha=0.5).Params()
  assert (la.k, la.alpha, la.optimizer) == (5, 0.5, optimizers.SGD.Params())


def test_instance_given_message_names_the_parameter():
  msg = factory.InstanceGivenMessage(optimizers.SGD.Params().Instantiate(),
                                     where="Learner 'l': optimizer_fn")
  assert msg.startswith("Learner 'l': optimizer_fn must be a zero-argument")


@pytest.mark.parametrize('bad', [3, lambda: 'adam'])
def test_not_an_optimizer_callable_is_type_error_naming_optimizer_fn(bad):
  with pytest.raises(TypeError, match='optimizer_fn'):
    factory.OptimizerParamsFromFn(bad)


def test_lazy_table_names_every_registered_rule():
  # rules.RULES is the one registration point: learner.optimizers exports
  # each rule from it, the factory's names come from it, and learner's lazy
  # exports find every rule there (no second list to keep in step).
  names = {r.cls.__name__ for r in rules.RULES} - {'SGD'}
  assert names >= {'Momentum', 'Adam', 'AdamW', 'Adagrad', 'RMSProp',
                   'AdaDelta', 'Adafactor', 'XLAShardingAdafactor', 'LAMB',
                   'Lion', 'Nadam', 'RAdam', 'Adamax', 'AMSGrad', 'ADOPT',
                   'ScheduleFreeSGD', 'ScheduleFreeAdamW', 'Muon'}
  for name in names:
    assert name not in learner._EXPORTS, name  # pylint: disable=protected-access
    assert getattr(learner, name) is getattr(optimizers, name)
    assert name in dir(learner)
  with pytest.raises(AttributeError, match='no attribute'):
    getattr(learner, 'NoSuchRule')
  assert {n for r in rules.RULES for n in r.factory_names} == set(
      factory._OPTIMIZERS)  # pylint: disable=protected-access
  assert factory._OPTIMIZERS['nesterov'] == (  # pylint: disable=protected-access
      optimizers.Momentum, {'momentum': 'alpha'})
