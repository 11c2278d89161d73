"""Schedules for an optimizer's hyperparameters (momentum, betas, decay).

An optimizer's `hyper_schedules` param maps a param name to BaseSchedule
params; the rule then reads that hyperparameter through `Hyper(name)`,
which gives the schedule's value at the learner's step (the step its
`lr_schedule` sees: `num_updates` by default, the global step with
`lr_schedule_step='global_step'`; an optimizer used without a learner
counts its own `num_updates`). A name left out keeps the param's constant,
and `Hyper` returns that Python number unchanged, so an optimizer without
schedules builds exactly the graph it built before this option existed.

The same idea as optax's `inject_hyperparams` (which evaluates the schedule
at its own update count, 0 on the first update, as here) and PyTorch's
OneCycleLR momentum cycling.

Which names a class accepts is its `SCHEDULABLE_PARAMS` tuple (a class
attribute, docs/DESIGN.md "Where things go"); this module checks a config
against it and against the class's `ValueChecks()` ranges, and builds the
schedules as children of the optimizer.
"""

import contextlib

import tensorflow as tf

from params import checks
from schedules import base_schedule

# Each scheduled param's schedule is the optimizer's child '<prefix><name>'.
CHILD_PREFIX = 'hyper_'


def CheckConfig(layer, schedules_map, allowed):
  """Raises unless `schedules_map` is {allowed name: BaseSchedule params}.

  Args:
    layer: the optimizer being built (for the message).
    schedules_map: the value of its `hyper_schedules` param.
    allowed: tuple of the param names its class may schedule.

  Raises:
    ValueError: one line naming the key and the fix, if `schedules_map` is
      not a dict, a name is not in `allowed` (the message lists them), or a
      value is not BaseSchedule params.
  """
  if not isinstance(schedules_map, dict):
    raise ValueError(
        '%s: hyper_schedules=%r is not a dict. Set it to {param name: '
        'schedule params}, e.g. {%r: schedules.LinearSchedule.Params()}, '
        'or {} for none.' % (checks.Where(layer), schedules_map,
                             allowed[0] if allowed else 'beta1'))
  for name, sched in sorted(schedules_map.items(), key=lambda kv: str(kv[0])):
    if name not in allowed:
      raise ValueError(
          '%s: hyper_schedules[%r] names no schedulable param of %s. %s' %
          (checks.Where(layer), name, type(layer).__name__,
           ('Use one of %s.' % ', '.join(repr(a) for a in allowed))
           if allowed else 'It schedules none; leave hyper_schedules {}.'))
    cls = getattr(sched, 'cls', None)
    if not (isinstance(cls, type) and
            issubclass(cls, base_schedule.BaseSchedule)):
      raise ValueError(
          '%s: hyper_schedules[%r]=%r is not schedule params. Set it to '
          'BaseSchedule params, e.g. schedules.LinearSchedule.Params().Set('
          'start=(0, 0.85), limit=(1000, 0.95)).' %
          (checks.Where(layer), name, cls if cls else sched))


def CheckValues(layer, name, schedule, spec):
  """Raises if `schedule` leaves `spec`'s range at step 0 or a boundary.

  The schedule is evaluated eagerly at step 0 and at each step of its
  `Boundaries()` (where a piecewise or linear schedule takes its extreme
  values); a schedule whose range depends on a dev metric is checked at
  those steps only.

  Args:
    layer: the optimizer (for the message).
    name: the scheduled param.
    schedule: the built BaseSchedule.
    spec: the param's `checks.Spec` from `ValueChecks()`, or None (nothing
      to check).

  Raises:
    ValueError: one line naming hyper_schedules[name], the step, the value
      and the param's range.
  """
  if spec is None:
    return
  for step in [0] + [s for s in schedule.Boundaries() if s > 0]:
    value = float(schedule.Value(step).numpy())
    problem = spec.Problem(value)
    if problem is not None:
      why = (' (%s)' % spec.why) if spec.why else ''
      raise ValueError(
          '%s: hyper_schedules[%r] (%s) gives %s=%.7g at step %d, which %s%s. '
          'Make the schedule stay %s.' %
          (checks.Where(layer), name, type(schedule).__name__, name, value,
           step, problem, why,
           spec.Describe().replace('a finite number ', '')))


class ScheduledHyperparams:
  """BaseOptimizer's scheduled hyperparameters (a mixin; see the module).

  `_BuildHyperSchedules` (called from BaseOptimizer.__init__) checks and
  builds `hyper_schedules`; `Hyper(name)` reads a param's value for the
  current update; `HyperScope()` evaluates each schedule once per Apply;
  `UseScheduleStep` / `HyperStep` choose the step. It relies on the
  optimizer's `params`, `CreateChild`, `ValueChecks` and `_num_updates`.
  """


  def _BuildHyperSchedules(self, schedules_map):
    """Checks `hyper_schedules` and builds each as the child 'hyper_<name>'.

    Args:
      schedules_map: the `hyper_schedules` param.

    Raises:
      ValueError: see hyper.CheckConfig and hyper.CheckValues.
    """
    allowed = tuple(type(self).SCHEDULABLE_PARAMS)
    CheckConfig(self, schedules_map, allowed)
    built = {}
    for name in sorted(schedules_map):
      sp = schedules_map[name].Copy(frozen=False)
      sp.name = CHILD_PREFIX + name
      built[name] = self.CreateChild(CHILD_PREFIX + name, sp)
    specs = type(self).ValueChecks()
    with tf.init_scope():
      for name in sorted(built):
        CheckValues(self, name, built[name], specs.get(name))
    # Not tracked again (the children are): a plain dict in __dict__.
    self.__dict__['_hyper_schedules'] = built
    self.__dict__['_hyper_cache'] = None

  def ScheduleHyper(self, name, schedule):
    """Makes `Hyper(name)` read the built `schedule` (a child layer the
    caller created), as if `hyper_schedules` had named it (Ema's legacy
    decay_schedule)."""
    self.__dict__['_hyper_schedules'][name] = schedule

  @property
  def scheduled_hyperparams(self):
    """Sorted list of the names whose value comes from a schedule."""
    return sorted(self.__dict__.get('_hyper_schedules', {}))

  def UseScheduleStep(self, step_fn):
    """Makes `Hyper` evaluate schedules at `step_fn()` (an int64 scalar).

    The learner calls it at Bind on every optimizer below it with the step
    its own lr_schedule reads. Not tracked.
    """
    self.__dict__['_schedule_step_fn'] = step_fn

  def HyperStep(self, name=None):
    """int64 scalar: the step scheduled hyperparameters are evaluated at.

    The learner's (`UseScheduleStep`), else this optimizer's num_updates
    (before this update). `name` lets a subclass give one param another
    step (Ema's legacy decay_schedule).
    """
    del name
    fn = self.__dict__.get('_schedule_step_fn')
    return fn() if fn is not None else self._num_updates.read_value()

  def Hyper(self, name, dtype=None):
    """The value of the param `name` for the current update.

    Args:
      name: a param of `SCHEDULABLE_PARAMS`.
      dtype: optional tf dtype a scheduled value is cast to (an unscheduled
        one stays a Python number, so the graph is unchanged).

    Returns:
      `params.<name>` (a Python number) if not scheduled; else the float32
      (or `dtype`) scalar tensor schedule.Value(HyperStep()), evaluated
      once per `Apply`.
    """
    sched = self.__dict__['_hyper_schedules'].get(name)
    if sched is None:
      return self.params.Get(name)
    cache = self.__dict__.get('_hyper_cache')
    if cache is not None and name in cache:
      value = cache[name]
    else:
      value = sched.Value(self.HyperStep(name))
      if cache is not None:
        cache[name] = value
    return value if dtype is None else tf.cast(value, dtype)

  @contextlib.contextmanager
  def HyperScope(self):
    """Context: `Hyper` evaluates each schedule once inside (re-entrant).

    Every `Apply` runs inside one; a subclass that reads `Hyper` before
    calling `super().Apply` opens it around both.
    """
    if self.__dict__.get('_hyper_cache') is not None:
      yield
      return
    self.__dict__['_hyper_cache'] = {}
    try:
      yield
    finally:
      self.__dict__['_hyper_cache'] = None
