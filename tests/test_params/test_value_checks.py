"""Issue 12, items 2 and 6: values are in range or refused, with the key.

Every numeric param of every component is checked at construction for its
type (a bool is not a number; an int where an int is required), finiteness
and range (params/checks.py). A refusal is one line of ValueError naming the
key, the value and the fix. Regexes, rewrite rules and dtypes are refused
the same way, before any training work.
"""

import importlib
import inspect
import math
import pkgutil
import re

import pytest
import tensorflow as tf

import schedules as sch
from learner import learner as learner_lib
from learner import optimizers as opt
from learner.training.model import task as task_lib
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import cli as cli_lib
from params import BaseLayer
from params import checks
from params import registry

NAN = float('nan')
INF = float('inf')


# ---- the helper itself --------------------------------------------------------


@pytest.mark.parametrize('value, problem', [
    (True, 'is a bool, not a number'),
    (NAN, 'is not finite'),
    (INF, 'is not finite'),
    (-INF, 'is not finite'),
    ('0.5', 'is not a number'),
    (1.0, 'is outside [0, 1)'),
    (-0.1, 'is outside [0, 1)'),
    (None, 'is not set'),
])
def test_real_spec_refuses_with_one_line_naming_key_value_and_fix(value,
                                                                   problem):
  spec = checks.Real(0, 1, high_open=True, example=0.9)
  with pytest.raises(ValueError) as e:
    checks.CheckValue("Momentum 'opt'", 'alpha', value, spec)
  msg = str(e.value)
  assert '\n' not in msg
  assert msg.startswith("Momentum 'opt': alpha=%r %s" % (value, problem)), msg
  assert msg.endswith('Set alpha to a finite number in [0, 1), e.g. 0.9.')


@pytest.mark.parametrize('value', [0.0, 0.5, 0.999, 0, 1e-30])
def test_real_spec_accepts_in_range_values(value):
  spec = checks.Real(0, 1, high_open=True)
  assert checks.CheckValue('x', 'alpha', value, spec) == value


@pytest.mark.parametrize('value, problem', [
    (True, 'is a bool, not a number'),
    (2.0, 'is not an int'),
    (NAN, 'is not an int'),
    (0, 'is not >= 1'),
])
def test_int_spec_refuses_bools_floats_and_small_ints(value, problem):
  with pytest.raises(ValueError, match='n=%r %s' % (value, problem)):
    checks.CheckValue('x', 'n', value, checks.Int(1))


def test_none_ok_spec_accepts_none_and_says_so():
  spec = checks.Int(1, none_ok=True, example=3)
  assert checks.CheckValue('x', 'k', None, spec) is None
  with pytest.raises(ValueError, match='Set k to None or an int >= 1'):
    checks.CheckValue('x', 'k', 0, spec)


# ---- every ValueChecks() of every component -----------------------------------


def _AllLayerClasses():
  """Every BaseLayer subclass defined in our packages (imported here)."""
  found = {}
  for pkg_name in ('params', 'schedules', 'layers', 'learner',
                   'learner.optimizers', 'learner.optimizers.rules',
                   'learner.optimizers.wrappers',
                   'learner.training.model', 'learner.training.jobs',
                   'learner.training.services', 'learner.training.cluster',
                   'configs'):
    pkg = importlib.import_module(pkg_name)
    for info in pkgutil.iter_modules(pkg.__path__):
      mod = importlib.import_module('%s.%s' % (pkg_name, info.name))
      for obj in vars(mod).values():
        if (inspect.isclass(obj) and issubclass(obj, BaseLayer) and
            obj.__module__ == mod.__name__):
          found['%s.%s' % (obj.__module__, obj.__name__)] = obj
  return found


_CLASSES = _AllLayerClasses()
_WITH_CHECKS = {n: c for n, c in sorted(_CLASSES.items()) if c.ValueChecks()}


# Sizes whose default 0 means "must be set" (refused before this issue too):
# the values that make the rest of each class's params valid.
_REQUIRED = {
    'DenseLayer': dict(input_dim=4, output_dim=2),
    'Linear': dict(input_dim=3, output_dim=2),
    'MultiHeadedAttention': dict(model_dim=8, num_heads=2),
    'Conv1DLayer': dict(input_dim=2, filters=3),
    'EmbeddingLayer': dict(vocab_size=5, embedding_dim=4),
    'PositionalEmbeddingLayer': dict(embedding_dim=8),
    'LayerNorm': dict(input_dim=4),
    'FeedForwardLayer': dict(input_dim=4, hidden_dim=8),
    'TransformerBlock': dict(model_dim=8, num_heads=2),
    # Lingvo's default None: the threshold must be set (refused unset).
    'DynamicAccumulator': dict(min_accum_weight=256.0),
}


def _ValidParams(cls):
  return cls.Params().Set(name='x', **_REQUIRED.get(cls.__name__, {}))


def _Payloads(spec):
  """Values `spec` must refuse: a bool, NaN, inf, and just outside the range."""
  out = [True, NAN, INF, -INF]
  if spec.integer:
    out.append(1.5)
  if spec.low is not None:
    out.append(spec.low if spec.low_open else spec.low - 1)
  if spec.high is not None:
    out.append(spec.high if spec.high_open else spec.high + 1)
  if not spec.none_ok:
    out.append(None)
  return out


def _Cases():
  for name, cls in _WITH_CHECKS.items():
    for key, spec in cls.ValueChecks().items():
      for value in _Payloads(spec):
        yield pytest.param(cls, key, value, id='%s-%s-%r' % (
            cls.__name__, key, value))


def _SetKey(p, key, value):
  *parents, last = key.split('.')
  for part in parents:
    p = p.Get(part)
  p.Set(**{last: value})


def test_the_families_the_issue_names_declare_value_checks():
  names = {c.__name__ for c in _WITH_CHECKS.values()}
  for expected in ('Momentum', 'Adam', 'AdamW', 'Adagrad', 'RMSProp',
                   'AdaDelta', 'Adafactor', 'LAMB', 'Lion', 'Lars', 'Ema',
                   'Lookahead', 'SWA',
                   'GradientAccumulation', 'Learner', 'GradNormTracker',
                   'LossScale', 'BaseTask', 'BaseInputGenerator',
                   'DatasetInput', 'DropoutLayer', 'LayerNorm',
                   'TransformerBlock', 'MultiHeadedAttention'):
    assert expected in names, expected
  keys = sum(len(c.ValueChecks()) for c in _WITH_CHECKS.values())
  assert keys >= 150, keys  # Counted with inheritance; see the report.


@pytest.mark.parametrize('name', sorted(_WITH_CHECKS))
def test_every_default_passes_its_value_checks(name):
  cls = _WITH_CHECKS[name]
  p = cls.Params()
  required = _REQUIRED.get(cls.__name__, {})
  for key in required:  # The "must be set" values are refused as they are.
    if p.Get(key) not in (0, None):
      continue
    with pytest.raises(ValueError, match='%s=%r is not ' % (key, p.Get(key))):
      checks.CheckValue(name, key, p.Get(key), cls.ValueChecks()[key])
  checks.CheckValues(name, _ValidParams(cls), cls.ValueChecks())


@pytest.mark.parametrize('cls, key, value', list(_Cases()))
def test_construction_refuses_bad_value_naming_the_key(cls, key, value):
  p = _ValidParams(cls)
  _SetKey(p, key, value)
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  msg = str(e.value)
  assert '%s=%r' % (key, value) in msg, msg
  assert '\n' not in msg


# ---- schedules: every numeric param refuses NaN, inf and bools -----------------

_SCHEDULES = [
    sch.Constant.Params().Set(value=5.0),
    sch.PiecewiseConstantSchedule.Params().Set(boundaries=[10, 20],
                                               values=[1.0, 0.1, 0.01]),
    sch.PolynomialSchedule.Params().Set(power=2, start=(0, 1.0),
                                        limit=(40, 0.1)),
    sch.ContinuousSchedule.Params().Set(start_step=10, half_life_steps=20,
                                        min=0.1),
    sch.StepwiseExponentialSchedule.Params().Set(decay=0.5,
                                                 num_steps_per_decay=7),
    sch.CosineSchedule.Params().Set(initial_value=2.0, final_value=0.5,
                                    total_steps=30),
    sch.LinearRampupCosineSchedule.Params().Set(
        warmup_steps=10, initial_value=3.0, final_value=1.0, total_steps=80),
    sch.CosineDecay.Params().Set(total_steps=50, alpha=0.1),
    sch.StepDecay.Params().Set(step_size=10, factor=0.5, total_steps=35),
    sch.TransformerSchedule.Params().Set(warmup_steps=20, model_dim=16,
                                         decay_end=100),
    sch.TransformerScheduleNoWarmUp.Params().Set(decay_start=20, model_dim=16),
    sch.TransformerMLPerfSchedule.Params().Set(
        warmup_steps=20, warmup_init_fraction=0.1, model_dim=16),
    sch.SqrtDecay.Params().Set(warmup_steps=20, offset=5.0),
    sch.SqrtDecayToZero.Params().Set(warmup_steps=20.0, final_steps=100.0,
                                     starting_lr=0.5),
    sch.LinearRampupSqrtDecay.Params().Set(warmup_steps=20, peak=2.0),
    sch.LinearRampupSqrtDecayByBatchSizeAndReplicas.Params().Set(
        warmup_examples=2000, batch_size=10, num_replicas=10),
    sch.LinearRampupExponentialDecayScaledByNumSplitSchedule.Params().Set(
        warmup=10, decay_start=80, decay_end=160, min=0.1, max=1.5,
        num_splits=2),
    sch.LinearRampupExponentialDecay.Params().Set(
        warmup=10, decay_start=40, decay_end=80, min=0.01),
    sch.LinearRampupPiecewiseConstantSchedule.Params().Set(
        boundaries=[10, 20], lrs=[1.0, 0.1], num_splits=1),
    sch.LinearRampupDecaySchedule.Params().Set(peak=10, end=20),
    sch.AnnealingSchedule.Params().Set(init=1.0, lower_bound=0.01,
                                       factor=0.9),
    sch.InverseSigmoid.Params().Set(k=100),
    sch.EmaDecaySchedule.Params(),
    sch.DevBasedSchedule.Params(),
    sch.Warmup.Params().Set(warmup_steps=10, warmup_init=0.0,
                            schedule=sch.Constant.Params()),
    sch.LinearScaling.Params().Set(base_batch_size=256, batch_size=64,
                                   num_replicas=2, num_batches=2,
                                   schedule=sch.Constant.Params()),
]
# LinearRampupExponentialDecay refuses any num_splits but 1 before the rest.
_SCHEDULE_SKIP = {('LinearRampupExponentialDecay', 'num_splits')}


def _ScheduleCases():
  for p in _SCHEDULES:
    for key, default in p.IterParams():
      if (isinstance(default, bool) or
          not isinstance(default, (int, float)) or
          (p.cls.__name__, key) in _SCHEDULE_SKIP):
        continue
      for value in (NAN, INF, True):
        yield pytest.param(p, key, value, id='%s-%s-%r' % (
            p.cls.__name__, key, value))


@pytest.mark.parametrize('p', _SCHEDULES, ids=lambda p: p.cls.__name__)
def test_schedule_catalog_builds(p):
  p.Copy().Instantiate()


@pytest.mark.parametrize('p, key, value', list(_ScheduleCases()))
def test_schedule_refuses_non_finite_or_bool_naming_the_key(p, key, value):
  p = p.Copy().Set(**{key: value})
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  assert '%s=%r' % (key, value) in str(e.value)


@pytest.mark.parametrize('key', ['start', 'limit'])
def test_schedule_refuses_non_finite_step_value_pair(key):
  p = sch.LinearSchedule.Params().Set(start=(0, 1.0), limit=(10, 0.1))
  p.Set(**{key: (0, NAN) if key == 'start' else (10, INF)})
  with pytest.raises(ValueError, match=key):
    p.Instantiate()


# ---- the payloads of the issue, one by one -----------------------------------


def _Learner(**kw):
  return learner_lib.Learner.Params().Set(
      name='loss', optimizer=opt.SGD.Params(), learning_rate=0.1).Set(**kw)


@pytest.mark.parametrize('key, value', [
    ('learning_rate', True),
    ('learning_rate', NAN),
    ('learning_rate', INF),
    ('learning_rate', -0.1),
    ('clip_gradient_norm_to_value', NAN),
    ('clip_gradient_norm_to_value', INF),
    ('clip_gradient_norm_to_value', True),
    ('clip_gradient_single_norm_to_value', NAN),
    ('clip_gradient_value', NAN),
    ('grad_norm_to_clip_to_zero', NAN),
    ('l1_regularizer_weight', NAN),
    ('l2_regularizer_weight', INF),
    ('l2_regularizer_weight', True),
    ('loss_scale', NAN),
    ('loss_scale', True),
    ('loss_scale', 0.0),
])
def test_learner_refuses_silent_garbage_values(key, value):
  with pytest.raises(ValueError) as e:
    _Learner(**{key: value}).Instantiate()
  assert '%s=%r' % (key, value) in str(e.value)


@pytest.mark.parametrize('value', [NAN, INF, True, -1.0])
def test_learning_rate_of_an_optimizer_factory_is_checked_too(value):
  fn = opt.get_optimizer_fn('sgd', learning_rate=value)
  p = learner_lib.Learner.Params().Set(name='loss', optimizer_fn=fn)
  with pytest.raises(ValueError, match='learning_rate of optimizer_fn=%r' %
                     value):
    p.Instantiate()


def test_learner_still_accepts_its_documented_values():
  # None turns L1/L2 off, 0 reports their loss; 'dynamic' and a number scale.
  _Learner(l1_regularizer_weight=None, l2_regularizer_weight=0.0,
           loss_scale='dynamic').Instantiate()
  _Learner(loss_scale=128.0, clip_gradient_norm_to_value=1.0).Instantiate()


@pytest.mark.parametrize('cls, key, value, reason', [
    (opt.Momentum, 'alpha', 1.5, 'velocity grow'),
    (opt.Momentum, 'alpha', 1.0, 'velocity grow'),
    (opt.Adam, 'beta1', 1.0, 'NaN weights'),
    (opt.Adam, 'beta2', 1.0, 'no learning'),
    (opt.Adam, 'epsilon', 0.0, '0/0'),
    (opt.AdamW, 'beta1', 1.0, 'NaN weights'),
    (opt.RMSProp, 'momentum', 1.0, 'without bound'),
    (opt.AdaDelta, 'epsilon', 0.0, 'update at 0'),
    (opt.LAMB, 'beta2', 1.0, 'divides by'),
    (opt.Lion, 'beta1', 0.0, 'sign SGD'),
    (opt.Lion, 'beta1', 0, 'sign SGD'),
])
def test_optimizer_refuses_values_that_diverge_or_give_nan(cls, key, value,
                                                          reason):
  p = cls.Params().Set(**{key: value})
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  assert '%s=%r' % (key, value) in str(e.value)
  assert reason in str(e.value)


@pytest.mark.parametrize('wrapper', [opt.Lars, opt.Ema, opt.Lookahead,
                                     opt.SWA, opt.GradientAccumulation])
def test_wrapper_refuses_bad_inner_value_naming_the_inner_key(wrapper):
  p = wrapper.Params().Set(optimizer=opt.Momentum.Params().Set(alpha=NAN))
  with pytest.raises(ValueError, match=r'alpha=nan is not finite'):
    p.Instantiate()


def _Task(**train):
  p = task_lib.BaseTask.Params()
  p.train.Set(**train)
  return p


@pytest.mark.parametrize('value', [0, -1, True, 2.0])
def test_save_max_to_keep_is_refused_with_the_key(value):
  with pytest.raises(ValueError, match='train.save_max_to_keep=%r' % value):
    _Task(save_max_to_keep=value).Instantiate()


def test_save_max_to_keep_none_keeps_every_checkpoint():
  _Task(save_max_to_keep=None).Instantiate()


@pytest.mark.parametrize('key', ['max_steps', 'save_interval_steps',
                                 'steps_per_loop', 'summary_interval_steps',
                                 'log_interval_steps'])
def test_task_counts_refuse_bools(key):
  # isinstance(True, int) holds, so a bare int check let `max_steps : True`
  # through as 1 step.
  with pytest.raises(ValueError, match='train.%s=True is a bool' % key):
    _Task(**{key: True}).Instantiate()


@pytest.mark.parametrize('dtype', [tf.int32, tf.int64, tf.bool, 'int32',
                                   tf.string])
def test_fprop_dtype_that_is_not_floating_is_refused_with_the_key(dtype):
  p = task_lib.BaseTask.Params().Set(fprop_dtype=dtype)
  with pytest.raises(ValueError, match='fprop_dtype=.*not a floating'):
    p.Instantiate()


def test_fprop_dtype_on_a_learner_and_dtype_on_a_layer_are_refused():
  with pytest.raises(ValueError, match="Learner 'loss': fprop_dtype=int32"):
    _Learner(fprop_dtype=tf.int32).Instantiate()
  with pytest.raises(ValueError, match="dtype=int32 is not a floating"):
    opt.SGD.Params().Set(dtype=tf.int32).Instantiate()


@pytest.mark.parametrize('dtype', [tf.float16, tf.bfloat16, tf.float64,
                                   'float32', None])
def test_floating_fprop_dtypes_are_accepted(dtype):
  task_lib.BaseTask.Params().Set(fprop_dtype=dtype).Instantiate()


@pytest.mark.parametrize('key', ['bprop_variable_filter',
                                 'bprop_variable_exclusion'])
def test_bad_bprop_regex_names_the_key_and_the_regex(key):
  with pytest.raises(ValueError) as e:
    _Learner(**{key: 'enc/[w'}).Instantiate()
  msg = str(e.value)
  assert key in msg and "'enc/[w'" in msg and 'does not compile' in msg
  assert not isinstance(e.value, re.error)


def test_bad_init_from_checkpoint_rules_param_names_the_key():
  with pytest.raises(ValueError) as e:
    _Task(init_from_checkpoint_rules=[('^old/(', 'new/')]).Instantiate()
  msg = str(e.value)
  assert 'train.init_from_checkpoint_rules[0]' in msg and "'^old/('" in msg


def test_rule_replacement_with_a_missing_group_is_refused():
  with pytest.raises(ValueError, match=r'replacement .*\\\\2'):
    _Task(init_from_checkpoint_rules=[('^old/(.*)', r'new/\2')]).Instantiate()


def test_rules_that_are_not_pairs_are_refused():
  with pytest.raises(ValueError, match='is not a .regex, replacement. pair'):
    _Task(init_from_checkpoint_rules=['^old/']).Instantiate()


def test_bad_init_from_checkpoint_rules_flag_names_the_flag_and_regex():
  with pytest.raises(ValueError) as e:
    cli_lib.ParseRules('^a/=>b/;enc/(x=>y')
  msg = str(e.value)
  assert '--init_from_checkpoint_rules[1]' in msg and "'enc/(x'" in msg
  # A good text still parses.
  assert cli_lib.ParseRules(r'^old/(.*)=>new/\1') == [
      ('^old/(.*)', r'new/\1')]


@pytest.mark.parametrize('cls, key', [
    (opt.SGD, 'weight_decay_exclude'),
    (opt.Lars, 'exclude'),
    (opt.LAMB, 'exclude_from_weight_decay'),
    (opt.LAMB, 'exclude_from_layer_adaptation'),
])
def test_bad_regex_lists_name_the_key_and_index(cls, key):
  p = cls.Params().Set(**{key: ['bias', '(']})
  if 'optimizer' in p:
    p.optimizer = opt.SGD.Params()
  with pytest.raises(ValueError, match=r"%s\[1\] has the regex '\('" % key):
    p.Instantiate()


def test_lion_beta1_is_refused_at_zero_in_one_line_and_kept_up_to_one():
  # Issue 21: Keras's Lion requires beta_1 in (0, 1]; so do we.
  with pytest.raises(ValueError) as e:
    opt.Lion.Params().Set(beta1=0.0).Instantiate()
  message = str(e.value)
  assert '\n' not in message
  assert 'beta1=0.0 is outside (0, 1]' in message and 'sign SGD' in message
  assert 'Set beta1 to a finite number in (0, 1]' in message
  for beta1 in (1.0, 1e-6, 0.9):
    assert opt.Lion.Params().Set(beta1=beta1).Instantiate().params.beta1 == (
        beta1)


def test_adam_presets_and_lingvo_defaults_still_build():
  for p in (opt.Adam.Params(), opt.Adam.ParamsA(), opt.Adam.ParamsB(),
            opt.Momentum.Params().Set(alpha=0.0), opt.Lion.Params()):
    p.Instantiate()
  assert math.isclose(opt.Adam.ParamsA().beta2, 0.997)


# ---- the same payloads written as params text (--params_override) -------------


@pytest.mark.parametrize('line, key', [
    ("task.train.learner.learning_rate : float('nan')", 'learning_rate=nan'),
    ("task.train.learner.learning_rate : float('inf')", 'learning_rate=inf'),
    ("task.train.learner.clip_gradient_norm_to_value : float('nan')",
     'clip_gradient_norm_to_value=nan'),
    ('task.train.learner.optimizer.alpha : 1.5', 'alpha=1.5'),
    ('task.train.save_max_to_keep : 0', 'train.save_max_to_keep=0'),
    ("task.fprop_dtype : DType('int32')", 'fprop_dtype=int32'),
    ("task.train.learner.bprop_variable_filter : 'hidden/[w'",
     'bprop_variable_filter'),
    ("task.train.init_from_checkpoint_rules : [('(', 'x')]",
     'train.init_from_checkpoint_rules[0]'),
])
def test_override_text_payloads_are_refused_when_the_task_is_built(line, key):
  # The reader reads each line (text is data); building refuses the value.
  p = registry.GetParams('digits.MlpMomentum', overrides=line)
  with pytest.raises(ValueError) as e:
    p.task.Instantiate().CreateLearners()
  assert key in str(e.value)


@pytest.mark.parametrize('key', ['task.train.learner.learning_rate',
                                 'task.train.learner.optimizer.alpha'])
def test_a_bool_for_a_float_param_is_refused_already_by_the_reader(key):
  # In Python configs the construction check above refuses it; in text the
  # reader does, since the key holds a float.
  with pytest.raises(ValueError, match="wrong type for '%s'" % key):
    registry.GetParams('digits.MlpMomentum', overrides='%s : True' % key)


def test_a_class_given_for_params_is_refused_with_the_cls_swap():
  line = ("task.train.learner.lr_schedule : "
          "Class('schedules.base_schedule.ConstantOne')")
  with pytest.raises(ValueError) as e:
    registry.GetParams('digits.MlpMomentum', overrides=line)
  assert ("To swap the class of 'task.train.learner.lr_schedule' write "
          "task.train.learner.lr_schedule.cls : "
          "Class('schedules.base_schedule.ConstantOne')") in str(e.value)


def test_a_misspelt_class_name_gets_did_you_mean():
  line = ("task.train.learner.optimizer.cls : "
          "Class('learner.optimizers.rules.soap.SOAPP')")
  importlib.import_module('learner.optimizers.rules.soap')
  with pytest.raises(ValueError) as e:
    registry.GetParams('digits.MlpMomentum', overrides=line)
  assert "has no 'SOAPP' (did you mean 'SOAP'?)" in str(e.value)
