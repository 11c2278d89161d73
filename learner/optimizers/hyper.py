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
