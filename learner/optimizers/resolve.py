"""A learner's params checked, and its optimizer and schedule resolved.

`Learner.optimizer` may be BaseOptimizer params or come from `optimizer_fn`
(a factory of get_optimizer_fn / get_optimizer_wrapper_fn, or a callable
returning a Keras optimizer); `lr_schedule` may be BaseSchedule params or a
Keras LearningRateSchedule. This module turns each into the params the
learner instantiates, with the base rate, and refuses anything else in one
message that gives the fix.
"""

from absl import logging
import tensorflow as tf

from learner.optimizers import base as base_optimizer
from learner.optimizers import factory as optimizer_factory
from params import checks
from schedules import base_schedule
from schedules import keras_adapter


def CheckLearnerParams(owner, p):
  """Refuses a learner's params that cannot work, before anything is built.

  Args:
    owner: the learner (a layer), for messages ('Learner <path>: ...').
    p: the learner's Params.

  Raises:
    ValueError: a `bprop_variable_filter` / `bprop_variable_exclusion`
      regex that does not compile; both clip norms set; an empty loss_name
      list, or several names without `gradient_combiner`; a loss_name that
      is not a string or a list; a bad `lr_schedule_step`, `loss_scale` or
      `learning_rate` (negative, NaN, inf, a bool).
    TypeError: `learning_rate` given a Keras schedule (it belongs in
      lr_schedule).
  """
  checks.CheckRegex(owner, 'bprop_variable_filter', p.bprop_variable_filter)
  checks.CheckRegex(owner, 'bprop_variable_exclusion',
                    p.bprop_variable_exclusion)
  if p.clip_gradient_norm_to_value and p.clip_gradient_single_norm_to_value:
    raise ValueError(
        'Learner %r: clip_gradient_norm_to_value=%r and '
        'clip_gradient_single_norm_to_value=%r are both set; they are '
        'exclusive. Set one of them to 0.' %
        (owner.path, p.clip_gradient_norm_to_value,
         p.clip_gradient_single_norm_to_value))
  if isinstance(p.loss_name, (list, tuple)):
    if not p.loss_name:
      raise ValueError('Learner %r: loss_name is an empty list; give at '
                       'least one metric name.' % owner.path)
    if len(p.loss_name) > 1 and p.gradient_combiner is None:
      raise ValueError(
          'Learner %r: loss_name=%r names several losses but '
          'gradient_combiner is None. Set gradient_combiner='
          'GradientSum.Params() (or PCGrad.Params()).' %
          (owner.path, list(p.loss_name)))
  elif p.loss_name is not None and not isinstance(p.loss_name, str):
    raise ValueError('Learner %r: loss_name=%r; expected a string, a list '
                     'of strings or None.' % (owner.path, p.loss_name))
  if p.lr_schedule_step not in ('updates', 'global_step'):
    raise ValueError(
        'Learner %r: lr_schedule_step=%r; expected \'updates\' or '
        '\'global_step\'.' % (owner.path, p.lr_schedule_step))
  if p.loss_scale != 'dynamic':
    checks.CheckValue(owner, 'loss_scale', p.loss_scale, checks.Real(
        0, low_open=True, none_ok=True, example=128.0,
        why="a number is a fixed scale; 'dynamic' adjusts it"))
  if keras_adapter.IsKerasSchedule(p.learning_rate):
    raise TypeError(
        'Learner %r: learning_rate is the Keras schedule %r; give it as '
        'lr_schedule=<the schedule> (learning_rate=None, or 1.0: the '
        'Keras schedule holds the rate).' %
        (owner.path, type(p.learning_rate).__name__))
  checks.CheckValue(owner, 'learning_rate', p.learning_rate, checks.Real(
      0, none_ok=True, example=0.1,
      why='None takes the rate of optimizer_fn'))
  _WarnIgnoredBySingleNormClip(owner, p)


def _WarnIgnoredBySingleNormClip(owner, p):
  """Lingvo ignores these with clip_gradient_single_norm_to_value; so
  do we, but we say so once."""
  if not p.clip_gradient_single_norm_to_value:
    return
  ignored = [k for k in ('grad_norm_to_clip_to_zero', 'grad_norm_tracker')
             if p.Get(k)]
  if ignored:
    logging.warning(
        'Learner %r: %s have no effect with '
        'clip_gradient_single_norm_to_value=%r, as in Lingvo (only '
        'clip_gradient_norm_to_value uses them).', owner.path, ignored,
        p.clip_gradient_single_norm_to_value)


def ResolveOptimizer(owner, p):
  """The optimizer params and base rate of a learner's params `p`.

  Args:
    owner: the learner (a layer), for messages ('Learner <path>: ...').
    p: the learner's Params: optimizer, optimizer_fn, learning_rate,
      lr_schedule.

  Returns:
    (Params of a BaseOptimizer, Python float base learning rate): the rate
    is `learning_rate`, else optimizer_fn's, else 1.0 for a Keras schedule
    (which holds the rate itself), else the rule's DEFAULT_LEARNING_RATE
    (1.0 for the rate-free rules: DoG, DoWG, COCOB, Prodigy, D-Adapt).

  Raises:
    ValueError: both or neither of optimizer and optimizer_fn; no rate
      anywhere; optimizer_fn's rate negative or not a number.
    TypeError: optimizer_fn an instance or not callable; optimizer not
      BaseOptimizer params (a Keras optimizer, a built optimizer, a
      schedule, a class, ...), with the fix.
  """
  path = owner.path
  if p.optimizer is not None and p.optimizer_fn is not None:
    raise ValueError(
        'Learner %r: both optimizer and optimizer_fn are set; set only one '
        '(optimizer=<params> or optimizer_fn=<factory or callable>; from the '
        'command line add <learner>.optimizer : None).' % path)
  if p.optimizer is None and p.optimizer_fn is None:
    raise ValueError(
        'Learner %r: neither optimizer nor optimizer_fn is set; e.g. '
        'optimizer=SGD.Params() or optimizer_fn=get_optimizer_fn(\'sgd\', '
        'learning_rate=0.1).' % path)
  fn_lr = None
  if p.optimizer_fn is not None:
    fn = p.optimizer_fn
    if isinstance(fn, (base_optimizer.BaseOptimizer,
                       tf.keras.optimizers.Optimizer)):
      raise TypeError(optimizer_factory.InstanceGivenMessage(
          fn, where='Learner %r: optimizer_fn' % path))
    if not callable(fn):
      raise TypeError(
          'Learner %r: optimizer_fn must be a zero-argument callable that '
          'returns an optimizer (optimizer_fn=lambda: ...), or a factory '
          'from get_optimizer_fn(...); got %r.' % (path, fn))
    opt_params, fn_lr = optimizer_factory.OptimizerParamsFromFn(fn)
    checks.CheckValue(owner, 'learning_rate of optimizer_fn', fn_lr,
                      checks.Real(0, none_ok=True, example=0.1))
  else:
    opt_params = OptimizerParams(path, p.optimizer)
  if p.learning_rate is None and keras_adapter.IsKerasSchedule(
      p.lr_schedule) and fn_lr is None:
    return opt_params, 1.0  # A Keras schedule gives the rate itself.
  if p.learning_rate is None:
    if fn_lr is None and opt_params.cls.DEFAULT_LEARNING_RATE is not None:
      return opt_params, float(opt_params.cls.DEFAULT_LEARNING_RATE)
    if fn_lr is None:
      raise ValueError(
          'Learner %r: learning_rate is None and the optimizer gives no '
          'rate. Set learning_rate (e.g. 0.1), or use optimizer_fn='
          'get_optimizer_fn(..., learning_rate=...).' % path)
    return opt_params, float(fn_lr)
  if fn_lr is not None and float(fn_lr) != float(p.learning_rate):
    logging.warning(
        'Learner %r: learning_rate=%r overrides the rate %r of '
        'optimizer_fn; the learner\'s rate is used.', path,
        p.learning_rate, fn_lr)
  return opt_params, float(p.learning_rate)


def _WrongParamsMessage(where, key, value, base_name, example):
  """The one-line error for a value of `key` that is not Params: the fix."""
  got = type(value).__name__
  if isinstance(value, type):
    got = 'the class %s' % value.__name__
    fix = '%s=%s.Params()' % (key, value.__name__)
  elif callable(value) and getattr(value, '__name__', '') == 'Params':
    owner = getattr(value, '__self__', None)
    owner = owner.__name__ if isinstance(owner, type) else 'X'
    got = '%s.Params (not called)' % owner
    fix = '%s=%s.Params() (with parentheses)' % (key, owner)
  else:
    got = '%s %r' % (got, value)
    fix = '%s=%s' % (key, example)
  return ('Learner %r: %s must be the Params of a %s, got %s; write %s.' %
          (where, key, base_name, got, fix))


def OptimizerParams(where, value):
  """`value` if it is BaseOptimizer params; else TypeError with the fix."""
  cls = getattr(value, 'cls', None)
  if isinstance(cls, type) and issubclass(cls, base_optimizer.BaseOptimizer):
    return value
  if isinstance(value, tf.keras.optimizers.Optimizer):
    name = type(value).__name__
    raise TypeError(
        'Learner %r: optimizer is the Keras optimizer instance %s; give a '
        'factory: optimizer_fn=lambda: tf.keras.optimizers.%s(...), or '
        'optimizer=KerasOptimizer.Params().Set(optimizer_fn=lambda: '
        'tf.keras.optimizers.%s(...)).' % (where, name, name, name))
  if isinstance(value, base_optimizer.BaseOptimizer):
    raise TypeError('Learner %r: optimizer is the built optimizer %r; give '
                    'its params: optimizer=<instance>.params, or '
                    'optimizer=%s.Params().' % (where, value.path,
                                                type(value).__name__))
  if keras_adapter.IsKerasSchedule(value):
    raise TypeError('Learner %r: optimizer is the Keras schedule %s; give it '
                    'as lr_schedule=<the schedule>.' %
                    (where, type(value).__name__))
  raise TypeError(_WrongParamsMessage(where, 'optimizer', value,
                                      'BaseOptimizer', 'Adam.Params()'))


def ScheduleParams(where, value):
  """Params of our schedule for `value`: a Keras schedule is wrapped.

  A Keras LearningRateSchedule becomes schedules.KerasSchedule params (its
  value is the Keras rate itself; the learner's base rate defaults to 1.0).
  Anything that is not BaseSchedule params raises TypeError with the fix.
  """
  if keras_adapter.IsKerasSchedule(value):
    return keras_adapter.KerasSchedule.FromKeras(value)
  cls = getattr(value, 'cls', None)
  if isinstance(cls, type) and issubclass(cls, base_schedule.BaseSchedule):
    return value
  if isinstance(value, base_schedule.BaseSchedule):
    raise TypeError('Learner %r: lr_schedule is the built schedule %r; give '
                    'its params: lr_schedule=<instance>.params.' %
                    (where, value.path))
  raise TypeError(_WrongParamsMessage(
      where, 'lr_schedule', value, 'BaseSchedule (or a Keras '
      'LearningRateSchedule)', 'CosineDecay.Params().Set(total_steps=...)'))
