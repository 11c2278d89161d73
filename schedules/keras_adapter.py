"""Schedules across the Keras boundary, in both directions.

  * `KerasSchedule`: a Keras `LearningRateSchedule` as one of our schedules,
    so it can be a learner's `lr_schedule` (and stack inside ours).
  * `AsKerasSchedule`: one of our schedules as a Keras `LearningRateSchedule`,
    so it can be a Keras optimizer's `learning_rate`.

A Keras schedule gives an absolute rate (it holds its initial rate); ours
give a multiplier of the learner's `learning_rate`. So `KerasSchedule`'s value
is the Keras schedule's rate itself (set the learner's `learning_rate` to
1.0, the default when `lr_schedule` is a Keras schedule), and
`AsKerasSchedule(p, learning_rate=r)` gives `r * Value(step)`.
"""

import tensorflow as tf

from params import hyperparams
from params import text_registry
from schedules import base_schedule

_KERAS_SCHEDULE = tf.keras.optimizers.schedules.LearningRateSchedule


def IsKerasSchedule(value):
  """True if `value` is a Keras LearningRateSchedule instance."""
  return isinstance(value, _KERAS_SCHEDULE)


class KerasSchedule(base_schedule.BaseSchedule):
  """A Keras `LearningRateSchedule`, evaluated at our step.

  Value(step) = keras_schedule(step), float32. The Keras schedule is kept
  in params as its serialized form (`tf.keras.optimizers.schedules
  .serialize`: {'class_name': ..., 'config': {...}}), which is plain data,
  so the params round-trip through text; `FromKeras(obj)` builds the params
  from an instance. Under a learner the step counts applied updates (as for
  every schedule; docs/DESIGN.md, "Words with one meaning").

  Raises:
    ValueError: at construction, if `keras_schedule` is not a serialized
      Keras schedule that Keras can rebuild (the message names the param).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define(
        'keras_schedule', None,
        'The Keras LearningRateSchedule, serialized: '
        "{'class_name': 'CosineDecay', 'config': {...}} as "
        'tf.keras.optimizers.schedules.serialize(obj) gives it. Build with '
        'KerasSchedule.FromKeras(obj).')
    return p

  @classmethod
  def FromKeras(cls, keras_schedule):
    """Returns KerasSchedule params holding `keras_schedule`.

    Args:
      keras_schedule: a tf.keras.optimizers.schedules.LearningRateSchedule.

    Raises:
      TypeError: if it is not one.
    """
    if not IsKerasSchedule(keras_schedule):
      raise TypeError('KerasSchedule.FromKeras expects a Keras '
                      'LearningRateSchedule, got %s.' %
                      type(keras_schedule).__name__)
    config = tf.keras.optimizers.schedules.serialize(keras_schedule)
    return cls.Params().Set(keras_schedule=_PlainCopy(config))

  def __init__(self, params):
    super().__init__(params)
    config = self.params.keras_schedule
    if not isinstance(config, dict) or 'class_name' not in config:
      self._Fail('keras_schedule', 'is not a serialized Keras schedule',
                 'Build the params with KerasSchedule.FromKeras(obj).')
    cls = self._ScheduleClass(config)
    try:
      self._keras = cls.from_config(_PlainCopy(config.get('config', {})))
    except (TypeError, ValueError) as e:
      self._Fail('keras_schedule', 'cannot be rebuilt by Keras (%s)' % e,
                 'Build the params with KerasSchedule.FromKeras(obj).')

  def _ScheduleClass(self, config):
    """The LearningRateSchedule class `config` names; never imports.

    Keras' own schedules are found in tf.keras.optimizers.schedules; any
    other class must already be imported (params text is data: naming a
    class never imports its module, see README).
    """
    module = config.get('module') or ''
    name = config['class_name']
    cls = None
    if not module or module.startswith('keras.'):
      cls = getattr(tf.keras.optimizers.schedules, name, None)
    if cls is None and module:
      try:
        cls = text_registry.LookupImported('%s.%s' % (module, name))
      except ValueError:
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, _KERAS_SCHEDULE)):
      self._Fail('keras_schedule', 'names no imported Keras schedule class '
                 '(%s.%s)' % (module, name),
                 'Import the module that defines it before building, or use '
                 'one of tf.keras.optimizers.schedules.')
    return cls

  def FProp(self, theta, step):
    del theta
    return tf.cast(self._keras(step), tf.float64)


def _PlainCopy(value):
  """A deep copy of Keras' config as plain dicts and lists.

  Params freeze what they hold, and Keras wants to own (and may change) the
  config it rebuilds from, so each side gets its own copy.
  """
  if isinstance(value, dict):
    return {k: _PlainCopy(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_PlainCopy(v) for v in value]
  return value


class _OurScheduleForKeras(_KERAS_SCHEDULE):
  """A Keras LearningRateSchedule whose rate is learning_rate * Value(step)."""

  def __init__(self, schedule, learning_rate):
    super().__init__()
    self._schedule = schedule
    self._learning_rate = float(learning_rate)

  @property
  def schedule(self):
    """The BaseSchedule layer evaluated at each step."""
    return self._schedule

  def __call__(self, step):
    return self._learning_rate * self._schedule.Value(
        tf.cast(step, tf.int64))

  def get_config(self):
    return {'learning_rate': self._learning_rate,
            'schedule': self._schedule.params.ToText()}


def AsKerasSchedule(schedule, learning_rate=1.0):
  """Returns a Keras LearningRateSchedule: learning_rate * Value(step).

  For a Keras optimizer, e.g. `tf.keras.optimizers.Adam(AsKerasSchedule(
  CosineDecay.Params().Set(total_steps=1000), learning_rate=1e-3))`. The
  Keras optimizer passes its `iterations` (applied updates) as the step.

  Args:
    schedule: params of a BaseSchedule subclass, or a built BaseSchedule.
    learning_rate: float, the rate the schedule's multiplier scales.

  Returns:
    A tf.keras.optimizers.schedules.LearningRateSchedule.

  Raises:
    TypeError: if `schedule` is neither.
  """
  if isinstance(schedule, hyperparams.InstantiableParams):
    cls = schedule.cls
    if isinstance(cls, type) and issubclass(cls, base_schedule.BaseSchedule):
      schedule = schedule.Instantiate()
  if not isinstance(schedule, base_schedule.BaseSchedule):
    raise TypeError('AsKerasSchedule expects the params of one of our '
                    'schedules (e.g. CosineDecay.Params()) or a built one, '
                    'got %s.' % type(schedule).__name__)
  return _OurScheduleForKeras(schedule, learning_rate)
