"""BaseSchedule: a learning-rate schedule, a pure function of an integer step."""

import re

import tensorflow as tf

from params import BaseLayer
from params import Params
from params import checks

# Name given to a schedule built on its own (Lingvo uses 'LRSched'); a parent
# that builds schedules as children renames them after their slot.
DEFAULT_NAME = 'lr_schedule'


class ScheduleValueError(ValueError):
  """A schedule's refused param value; a ValueError with its parts.

  str(): "<Class> '<name>': <param>=<value> <problem>. <fix>". The parts let
  a caller that knows where the schedule sits (e.g. the trainer, which
  knows the learner's dotted key) say it by its key instead.

  Attributes:
    schedule_class: the schedule's class name (str).
    name: the schedule's params.name.
    param: the refused param's name.
    value_text: its value as shown (str).
    problem: what is wrong (str).
    fix: what to write instead (str).
  """

  def __init__(self, schedule_class, name, param, value_text, problem, fix):
    super().__init__('%s %r: %s=%s %s. %s' % (schedule_class, name, param,
                                               value_text, problem, fix))
    self.schedule_class = schedule_class
    self.name = name
    self.param = param
    self.value_text = value_text
    self.problem = problem
    self.fix = fix


class BaseSchedule(BaseLayer):
  """Base class of schedules: `Value(step)` -> float32 scalar multiplier.

  `step` counts applied updates by default (the learner's `num_updates`; see
  docs/DESIGN.md, "Words with one meaning"). Subclasses implement `FProp(theta,
  step)` where `step` is already an int64 scalar tensor; `Value` converts the
  step and casts the result, so each schedule works eagerly, inside
  `tf.function` and under `jit_compile=True`. Subclasses compute in float64
  (exact for any step below 2**53) and `Value` rounds once to float32.

  Differs from Lingvo (docs/lingvo.md): the default `name` is
  'lr_schedule' (Lingvo: 'LRSched'); `Value(step)` takes the step (Lingvo:
  None reads the global step) and ignores `p.dtype`; validation is eager
  (ValueError at construction; Lingvo asserts or fails inside `Value()`).

  Subclasses validate their params in `__init__` and raise `ValueError`
  naming the offending parameter (see `_Fail`).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = DEFAULT_NAME
    return p

  def Value(self, step):
    """Returns the schedule's value at `step`.

    Args:
      step: a Python int, or an int32/int64 scalar tensor (a count of applied
        updates unless the learner says otherwise).

    Returns:
      A float32 scalar tensor.

    Raises:
      TypeError: if `step` is a floating point or non-scalar tensor.
    """
    step = ToInt64Step(step)
    return tf.cast(self.FProp(self.theta, step), tf.float32)

  def FProp(self, theta, step):
    """Returns the value at the int64 scalar tensor `step`."""
    raise NotImplementedError('%s must implement FProp(theta, step).' %
                              type(self).__name__)

  def UpdateWithMetric(self, step, value, mode=None):
    """Records a dev metric after an evaluation; most schedules ignore it.

    The trainer calls it on every schedule of every learner after each
    evaluation with `task.eval.dev_metric` set; a schedule whose value
    depends on the metric (DevBasedSchedule) overrides it.

    Args:
      step: the learner's num_updates when the model was evaluated.
      value: float, the dev metric.
      mode: None, 'min'/'minimize' or 'max'/'maximize'.

    Returns:
      None here (an override may return its new factor).
    """
    del step, value, mode

  def Boundaries(self):
    """Returns the sorted steps (Python ints) where the schedule changes phase.

    Used by `python -m schedules.plot` to print the value at each boundary
    (end of warmup, decay start/end, piecewise boundaries). The base class
    has none.
    """
    return []

  # ---- helpers for subclasses -------------------------------------------------

  def _Fail(self, param, problem, fix):
    """Raises ValueError naming this schedule and the parameter `param`.

    Args:
      param: name of the offending parameter.
      problem: what is wrong, e.g. 'must be > 0'.
      fix: how to fix it.
    """
    value = self.params.Get(param) if param in self.params else None
    raise ScheduleValueError(type(self).__name__, self.params.name, param,
                             _Short(value), problem, fix)

  def _CheckBoundaries(self, param='boundaries', allow_empty=True):
    """Checks that params.<param> is a strictly increasing list of numbers.

    Lingvo accepts equal neighbours (the value between them is never used);
    here they are refused as a likely typo (docs/lingvo.md).
    """
    b = self.params.Get(param)
    if b is None:
      b = []
    if not isinstance(b, (list, tuple)):
      self._Fail(param, 'must be a list of steps', 'Set e.g. [1000, 2000].')
    if not allow_empty and not b:
      self._Fail(param, 'must not be empty', 'Give at least one step.')
    for x in b:
      if checks.Real().Problem(x):
        self._Fail(param, 'must hold finite numbers only',
                   'Use steps such as 1000.')
    for a, c in zip(b[:-1], b[1:]):
      if not a < c:
        self._Fail(param, 'must be strictly increasing (%r is followed by %r)'
                   % (a, c), 'Sort the boundaries and remove duplicates.')
    return list(b)

  def _CheckPositive(self, param, allow_zero=False):
    """Checks that params.<param> is a finite number > 0 (or >= 0)."""
    return self._CheckSpec(param, checks.Real(0, low_open=not allow_zero))

  def _CheckRange(self, param, low=None, high=None, low_open=False,
                  high_open=False, example=None, none_ok=False):
    """Checks that params.<param> is a finite number in the given range.

    Bounds are inclusive unless `low_open` / `high_open`; None is unbounded.
    A bool, NaN or inf is refused (params/checks.py).
    """
    return self._CheckSpec(param, checks.Real(
        low, high, low_open=low_open, high_open=high_open, none_ok=none_ok,
        example=example))

  def _CheckInt(self, param, low=None, example=None, none_ok=False):
    """Checks that params.<param> is an int (not bool or float) >= low."""
    return self._CheckSpec(param, checks.Int(low, none_ok=none_ok,
                                             example=example))

  def _CheckSpec(self, param, spec):
    """Raises through `_Fail` unless `spec` (a checks.Spec) accepts the
    value of params.<param>; returns the value."""
    v = self.params.Get(param)
    problem = spec.Problem(v)
    if problem is not None and isinstance(v, str) and re.search(
        r'\d\s*(examples?|epochs?)\s*$', v):
      self._Fail(param, 'is a duration; only the trainer converts durations '
                 'to updates', 'Build it through the trainer, or convert '
                 'first with schedules.durations.ResolveDurations.')
    if problem is not None:
      example = spec.example
      fix = ('Set e.g. %s=%r' % (param, example) if example is not None
             else 'Set %s to %s' % (param, spec.Describe()))
      if isinstance(v, str) and spec.integer:
        fix += (", or a duration such as '3 epochs' or '2000 examples' (the "
                'trainer converts it)')
      self._Fail(param, '%s; it must be %s' % (problem, spec.Describe()),
                 fix + '.')
    return v

  def _CheckListOf(self, param, element_ok, what, example):
    """Checks that params.<param> is a list whose elements pass `element_ok`.

    Args:
      param: name of the parameter.
      element_ok: predicate on one element (bools are refused before it).
      what: the elements in the message, e.g. 'positive ints'.
      example: a valid value for the fix, e.g. '[1000, 500]'.

    Returns:
      The value, as given.
    """
    v = self.params.Get(param)
    if not isinstance(v, (list, tuple)) or any(
        isinstance(x, bool) or not element_ok(x) for x in v):
      self._Fail(param, 'must be a list of %s' % what,
                 'Set e.g. %s=%s.' % (param, example))
    return v

  def _CheckCount(self, param, values, expected, expected_text, fix):
    """Checks that `values` (of params.<param>) has `expected` entries.

    The message reads 'has <n> entries but <expected_text>'.
    """
    if len(values) != expected:
      self._Fail(param, 'has %d entries but %s' % (len(values), expected_text),
                 fix)

  def _CheckNumber(self, param):
    """Checks that params.<param> is a finite number (int or float, not
    bool)."""
    return self._CheckSpec(param, checks.Real(example=0.5))

  def _CheckStepValuePair(self, param):
    """Checks that params.<param> is a pair (step, value) of numbers."""
    v = self.params.Get(param)
    if (not isinstance(v, (list, tuple)) or len(v) != 2 or
        any(checks.Real().Problem(x) for x in v)):
      self._Fail(param, 'must be a pair (step, value) of finite numbers',
                 'Set e.g. %s=(1000, 0.1).' % param)
    return v

  def _CheckStartBeforeLimit(self):
    """Checks that the step of params.start is before that of params.limit."""
    p = self.params
    if not p.start[0] < p.limit[0]:
      self._Fail('start', 'is not before limit=%r (start[0] must be < '
                 'limit[0])' % (p.limit,),
                 'Swap them or move the start step before the limit step.')

  def _CheckScheduleParams(self, param, value=None, what='must be'):
    """Checks that `value` (default params.<param>) is a schedule's params."""
    value = self.params.Get(param) if value is None else value
    cls = getattr(value, 'cls', None) if isinstance(value, Params) else None
    if not (isinstance(cls, type) and issubclass(cls, BaseSchedule)):
      self._Fail(param, '%s the params of a BaseSchedule subclass (got %s)' %
                 (what, type(value).__name__ if cls is None else cls.__name__),
                 'Use e.g. schedules.Constant.Params().')

  def _CheckScheduleList(self, param):
    """Checks that params.<param> is a non-empty list of schedule params."""
    value = self.params.Get(param)
    if not isinstance(value, (list, tuple)) or not value:
      self._Fail(param, 'must be a non-empty list of schedule params',
                 'Set e.g. [schedules.LinearSchedule.Params().Set(...)].')
    for v in value:
      self._CheckScheduleParams(param, v, 'must hold only')
    return list(value)

  @staticmethod
  def _ChildValue(child, child_theta, step):
    """Returns float64 `child.FProp(child_theta, step)` (int64 `step`)."""
    return tf.cast(child.FProp(child_theta, step), tf.float64)

  def _CreateScheduleChild(self, name, params):
    """CreateChild for a sub-schedule; a default-named child takes `name`."""
    params = params.Copy(frozen=False)
    if params.name == DEFAULT_NAME:
      params.name = name
    return self.CreateChild(name, params)

  def _CreateScheduleChildren(self, name, params_list):
    """CreateChildren for sub-schedules, named '<name>_<i>' unless named."""
    fixed = []
    for i, p in enumerate(params_list):
      p = p.Copy(frozen=False)
      if p.name == DEFAULT_NAME:
        p.name = '%s_%d' % (name, i)
      fixed.append(p)
    return self.CreateChildren(name, fixed)


def _Short(value):
  """repr of a param value, with nested Params shown by their class only."""
  if isinstance(value, Params):
    cls = value.cls if 'cls' in value else None
    return '<%s params>' % (cls.__name__ if isinstance(cls, type) else
                            type(value).__name__)
  if isinstance(value, (list, tuple)) and any(
      isinstance(v, Params) for v in value):
    return '[%s]' % ', '.join(_Short(v) for v in value)
  return repr(value)


def ToInt64Step(step):
  """Converts a Python int or an integer scalar tensor to an int64 tensor.

  Raises:
    TypeError: for a floating point or non-scalar step.
  """
  if isinstance(step, (int,)) and not isinstance(step, bool):
    return tf.constant(step, tf.int64)
  step = tf.convert_to_tensor(step)
  if not step.dtype.is_integer:
    raise TypeError('A schedule step must be an integer, got dtype %s. Pass '
                    'a Python int or an int32/int64 tensor.' % step.dtype.name)
  if step.shape.rank not in (None, 0):
    raise TypeError('A schedule step must be a scalar, got shape %s.' %
                    step.shape)
  return tf.cast(step, tf.int64)


def StepAsFloat(step):
  """Returns the int64 `step` as a float64 tensor (exact below 2**53)."""
  return tf.cast(step, tf.float64)


def NumReplicasInSync(strategy=None):
  """Python int: replicas that compute one global batch together (all workers).

  The one definition of the replica count: of `strategy`, else of the
  current tf.distribute strategy (1 outside any strategy scope). Schedules
  use it where Lingvo inferred the number of splits from its cluster; the
  trainer's datasets and checks through `cluster.strategy.NumReplicas`, the
  learner's collectives through `cross_replica.NumReplicas`.

  Args:
    strategy: a tf.distribute.Strategy, or None for the current one.
  """
  strategy = strategy or tf.distribute.get_strategy()
  return int(strategy.num_replicas_in_sync)


class Constant(BaseSchedule):
  """A constant value at every step (Lingvo's `Constant`).

  Value(step) = value.

  Raises:
    ValueError: at construction, if value is not a finite number.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('value', 1.0, 'The constant value (a multiplier, no unit).')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckNumber('value')

  def FProp(self, theta, step):
    del step
    return tf.constant(self.params.value, tf.float64)


class ConstantOne(Constant):
  """The multiplier 1.0 at every step (Lingvo's `ConstantOne`)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.value = 1.0
    return p

