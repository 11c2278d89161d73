"""Checks a whole experiment before a job writes its first file.

`Experiment(params, strategy, train=..., evaluate=...)` instantiates
everything the job will use and checks what only the built objects know:

  * every value: the task, its layers, the learners, optimizers and
    schedules are instantiated (their constructors check types and ranges)
    under the job's strategy, and the input generators too;
  * `bprop_variable_filter` / `bprop_variable_exclusion` against the real
    variable names (a regex that does not compile, or matches no trainable
    variable, is refused naming its key), the regex lists of the optimizers
    and `init_from_checkpoint_rules` (they must compile);
  * each learner's `loss_name` against the metrics the task's FProp returns
    (found by tracing FProp on the input's batch spec: nothing runs);
  * the batch size against the data (`CheckBatchSize`), replicas to
    aggregate against the strategy;
  * `task.eval.dev_metric` against the metrics an evaluation produces.

Every refusal is an `ExperimentError` (a ValueError; `ExperimentTypeError`
also a TypeError) whose message is one line naming the key, the value and
the fix; the trainer prints it as `ERROR: <message>` and exits 2 (the
traceback only with --verbose). Warnings that do not stop the job (max_steps
past the end of a decaying schedule) are returned in `Checked.warnings`.

The built task and inputs are returned, and the job uses them: nothing is
built twice.
"""

import contextlib
import re

from absl import logging
import tensorflow as tf

from params import NestedMap
from params import hyperparams
from learner.optimizers import var_grad
from learner.optimizers.base import BaseOptimizer
from learner.training.cluster import distribution
from learner.training.services import errors
from learner.training.services import warm_start
from params import IsTrainable
from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import ScheduleValueError

# Optimizer params holding lists of regexes on variable names.
_REGEX_LIST_KEYS = ('weight_decay_exclude', 'exclude',
                    'exclude_from_weight_decay',
                    'exclude_from_layer_adaptation')


# The refusal type lives in services/ (logdir and checkpoints raise it too).
ExperimentError = errors.ExperimentError
ExperimentTypeError = errors.ExperimentTypeError
OneLine = errors.OneLine


@contextlib.contextmanager
def Refusing(where=''):
  """Turns any error raised inside into a one-line ExperimentError.

  ValueError and TypeError messages are our constructors' (they name the
  param and the fix) and are kept; any other error is shown with its type.

  Args:
    where: optional prefix naming what was being built, e.g. 'train_input'.
  """
  try:
    yield
  except (ExperimentError, distribution.ClusterStartupError):
    raise  # A peer that did not start is not a bad value (exit 1, not 2).
  except Exception as e:  # pylint: disable=broad-except
    msg = OneLine(e)
    if not isinstance(e, (ValueError, TypeError)):
      msg = '%s: %s' % (type(e).__name__, msg)
    if where and not msg.startswith(where):
      msg = '%s: %s' % (where, msg)
    cls = ExperimentTypeError if isinstance(e, TypeError) else ExperimentError
    raise cls(msg) from e


class Checked:
  """What `Experiment` built and checked.

  Attributes:
    task: the built task (with its learners when training).
    train_input: the train input generator, or None.
    eval_input: the eval input generator, or None.
    warnings: list of one-line warnings to show before the job runs.
  """

  def __init__(self, task, train_input=None, eval_input=None, warnings=()):
    self.task = task
    self.train_input = train_input
    self.eval_input = eval_input
    self.warnings = list(warnings)


def Experiment(params, strategy, train, evaluate, init_rules=None):
  """Builds and checks the experiment; see the module docstring.

  Args:
    params: experiment Params ('task', 'train_input', 'eval_input').
    strategy: the job's tf.distribute.Strategy (the task is built under it).
    train: the job trains (learners, train input, loss names, schedules).
    evaluate: the job evaluates (eval input, dev_metric).
    init_rules: optional [(regex, replacement)] for init_from_checkpoint
      (default: p.task.train.init_from_checkpoint_rules).

  Returns:
    A `Checked`.

  Raises:
    ExperimentError: the first refused value (one line).
  """
  tp = params.task.train
  with Refusing(), strategy.scope():
    task = params.task.Instantiate()
  checked = Checked(task)
  if train:
    with Refusing():
      distribution.CheckReplicasToAggregate(
          tp.replicas_to_aggregate, strategy.num_replicas_in_sync)
    if tp.save_interval_steps is None and distribution.IsMultiWorker(
        strategy):
      raise ExperimentError(
          'task.train.save_interval_steps : None saves by each worker\'s '
          'clock (save_interval_seconds), and the workers could disagree on '
          'a save; set task.train.save_interval_steps (e.g. 1000) for a '
          'multi-worker run.')
    _CheckRules(tp.init_from_checkpoint_rules if init_rules is None else
                init_rules)
    with Refusing():
      _CheckFilters(task)
    with Refusing(), strategy.scope():
      _CreateLearners(task)
    checked.train_input = _BuildInput(params, 'train_input')
    _CheckLossNames(task, _MetricNames(task, checked.train_input,
                                       'train_input'))
    checked.warnings.extend(_ScheduleWarnings(task, tp.max_steps))
  if evaluate:
    checked.eval_input = _BuildInput(params, 'eval_input')
    names = _MetricNames(task, checked.eval_input, 'eval_input')
    _CheckDevMetric(params.task.eval.dev_metric, names)
    if train:
      _CheckEarlyStopMetric(tp.early_stop, names)
  return checked


def _CheckEarlyStopMetric(lingvo, metric_names):
  """Lingvo's early stop (window > 0) watches an eval metric of the task."""
  if metric_names is None or lingvo is None or not lingvo.window:
    return
  metric = lingvo.metric_history.metric
  if metric not in metric_names:
    raise ExperimentError(
        'task.train.early_stop.metric_history.metric : %r is not an eval '
        'metric of the task; its eval metrics: %s. Set it to one of them '
        '(and metric_history.minimize).' % (metric, metric_names))


def _CreateLearners(task):
  """task.CreateLearners(); a refused schedule value names its dotted key.

  Raises:
    ExperimentError: e.g. "task.train.learner[1].lr_schedule.warmup_steps :
      -5 is not >= 0 ... Set ..." where the schedule itself can only say
      "Warmup 'lr_schedule': warmup_steps=-5 ..." (for every learner alike).
  """
  try:
    task.CreateLearners()
  except ScheduleValueError as e:
    key = _ScheduleKey(task, e)
    if key is None:
      raise
    raise ExperimentError('%s.%s : %s %s. %s' % (
        key, e.param, e.value_text, e.problem, e.fix)) from e


def _ScheduleKey(task, error):
  """The dotted key of the first schedule params that raise `error`, or None.

  Searches each learner's params (in the order CreateLearners builds them)
  for a schedule params of the error's class holding the refused value,
  and confirms it by building that params alone (schedules are pure).
  """
  for key, lp in zip(_LearnerKeys(task), task.LearnerParamsList()):
    for sub_key, sub in hyperparams.NestedParamsWithKeys(lp, key):
      cls = sub.Get('cls') if 'cls' in sub else None
      if (getattr(cls, '__name__', None) != error.schedule_class or
          error.param not in sub):
        continue
      try:
        sub.Copy(frozen=False).Instantiate()
      except ScheduleValueError as again:
        if again.param == error.param and (
            again.value_text == error.value_text):
          return sub_key
      except Exception:  # pylint: disable=broad-except
        continue
  return None


def _LearnerKeys(task):
  """The params key of each learner: 'task.train.learner' or '...[i]'.

  'task.train' for the learner built from p.train's legacy keys.
  """
  lps = task.LearnerParamsList()
  if task.UsesLegacyLearner():
    return ['task.train']
  if isinstance(task.params.train.learner, (list, tuple)):
    return ['task.train.learner[%d]' % i for i in range(len(lps))]
  return ['task.train.learner'] * len(lps)


def _Compile(key, regex):
  try:
    re.compile(regex)
  except (re.error, TypeError) as e:
    raise ExperimentError(
        '%s : %r is not a valid regex (%s). Fix the regex (Python re '
        'syntax, matched with re.search on variable names).' %
        (key, regex, e)) from None


def _CheckRules(rules):
  if isinstance(rules, (dict, warm_start.LingvoInitRules)):
    return  # Lingvo's form: task_params.InitFromCheckpoint checked it.
  for i, rule in enumerate(rules or ()):
    _Compile('task.train.init_from_checkpoint_rules[%d]' % i, rule[0])


def _TrainableNames(task):
  with Refusing():  # E.g. an unbuilt Keras layer: no variables to name.
    variables = task.ModelVars().Flatten()
  return [var_grad.VarName(v) for v in variables if IsTrainable(v)]


def _CheckFilters(task):
  """Each learner's variable filters compile and match some variable."""
  names = _TrainableNames(task)
  shown = names if len(names) <= 12 else names[:12] + ['...']
  for key, lp in zip(_LearnerKeys(task), task.LearnerParamsList()):
    for name in ('bprop_variable_filter', 'bprop_variable_exclusion'):
      regex = lp.Get(name) if name in lp else None
      if regex is None:
        continue
      _Compile('%s.%s' % (key, name), regex)
      if not any(re.search(regex, n) for n in names):
        raise ExperimentError(
            '%s.%s : %r matches no trainable variable of the task; its '
            'variables: %s. Fix the regex (re.search on these names) or set '
            'it to None.' % (key, name, regex, shown))
    _CheckSelectsSome(key, lp, names)
    _CheckRegexLists(key, lp)


def _CheckSelectsSome(key, lp, names):
  """The filter and the exclusion together leave the learner a variable."""
  keep = lp.Get('bprop_variable_filter') if (
      'bprop_variable_filter' in lp) else None
  drop = lp.Get('bprop_variable_exclusion') if (
      'bprop_variable_exclusion' in lp) else None
  if drop is None or not names:
    return
  if any((keep is None or re.search(keep, n)) and not re.search(drop, n)
         for n in names):
    return
  raise ExperimentError(
      '%s.bprop_variable_exclusion : %r excludes every variable %s, so the '
      'learner has nothing to train. Narrow the exclusion (re.search on the '
      'names: %s), or remove the learner.' % (
          key, drop, 'its bprop_variable_filter %r selects' % keep
          if keep is not None else 'of the task', names[:12]))


def _CheckRegexLists(key, p):
  """The optimizers' regex-list params (nested anywhere) compile."""
  if not isinstance(p, hyperparams.Params):
    return
  for name, value in p.IterParams():
    sub = '%s.%s' % (key, name)
    if name in _REGEX_LIST_KEYS and isinstance(value, (list, tuple)):
      for i, regex in enumerate(value):
        _Compile('%s[%d]' % (sub, i), regex)
    elif isinstance(value, hyperparams.Params):
      _CheckRegexLists(sub, value)
    elif isinstance(value, dict) and name == 'optimizer_map':
      for k, entry in value.items():
        if isinstance(entry, (list, tuple)) and entry:
          _CheckRegexLists('%s[%r][0]' % (sub, k), entry[0])


def _BuildInput(params, key):
  with Refusing(key):
    gen = params.Get(key).Instantiate()
    gen.CheckBatchSize()
  return gen


def _MetricNames(task, input_gen, key):
  """Sorted names of the metrics FProp returns on `input_gen`'s batches.

  FProp is traced (not run) on the batch spec of the input's dataset, so
  nothing changes: no random state is drawn, no statistic updated. It is
  traced in cross-replica context; under a strategy with several replicas a
  task whose FProp needs a replica context cannot be traced so, and gets
  None (its names are then checked by the first step).
  """
  with Refusing(key):
    spec = input_gen.GetDataset().element_spec
  if task.strategy.num_replicas_in_sync > 1:
    try:
      return _TracedMetricNames(task, spec)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('%s: FProp cannot be traced outside the replicas (%s); '
                      'loss_name and dev_metric are checked by the first '
                      'step.', key, OneLine(e))
      return None
  with Refusing('%s: the task\'s FProp fails on its batches' % key):
    return _TracedMetricNames(task, spec)


def _TracedMetricNames(task, spec):
  """The metric names of FProp traced on a batch of structure `spec`."""

  def _FProp(batch):
    batch = NestedMap(batch) if isinstance(batch, dict) else batch
    metrics, _ = task.FProp(task.theta, batch)
    return dict(metrics)

  try:
    fn = tf.function(_FProp, autograph=False).get_concrete_function(spec)
  except tf.errors.OperatorNotAllowedInGraphError:
    fn = tf.function(_FProp, autograph=True).get_concrete_function(spec)
  return sorted(fn.structured_outputs)


def _CheckLossNames(task, metric_names):
  if metric_names is None:
    return
  for key, learner in zip(_LearnerKeys(task), task.learners):
    for name in learner.loss_names:
      if name not in metric_names:
        raise ExperimentError(
            '%s.loss_name : %r is not a metric of the task; its metrics: %s. '
            'Set %s.loss_name to one of them.' % (key, name, metric_names,
                                                  key))


def _CheckDevMetric(dev_metric, metric_names):
  if metric_names is None:
    return
  if dev_metric is not None and dev_metric not in metric_names:
    raise ExperimentError(
        'task.eval.dev_metric : %r is not an eval metric of the task; its '
        'eval metrics: %s. Set task.eval.dev_metric to one of them (or None).'
        % (dev_metric, metric_names))


def _ScheduleSteps(learner, max_steps):
  """Schedule steps the learner takes in `max_steps` global steps."""
  if learner.params.lr_schedule_step == 'global_step':
    return max_steps
  return max_steps // learner.optimizer.MicroBatchesPerUpdate()


def _ScheduleWarnings(task, max_steps):
  """One line per learner whose schedule and run do not fit, else [].

  A warmup longer than the run (`_LongWarmups`): one line per such param,
  naming its key, its value and max_steps. Otherwise a run that ends while
  the schedule still rises (`_RisingAtEnd`) gets one line too.

  A schedule ends at its last boundary (`Boundaries()`) when its value is
  the same from there to the last step and lower than its peak (a floor,
  e.g. cosine decay's alpha); the steps past it all train at that floor.
  Only a schedule that decays into its end warns (its value falls within
  the segment before the last boundary); a piecewise-constant tail, whose
  last value is meant to hold, does not.
  """
  out = []
  for key, learner in zip(_LearnerKeys(task), task.learners):
    sched = getattr(learner, 'lr_schedule', None)
    bounds = sched.Boundaries() if sched is not None else []
    steps = _ScheduleSteps(learner, max_steps)
    value = lambda s: float(sched.Value(s).numpy())  # pylint: disable=cell-var-from-loop
    rising = (_RisingAtEnd(bounds, steps, value)
              if bounds and steps <= max(bounds) else None)
    long_warmups = _LongWarmups(key, learner, max_steps)
    out.extend(_WarmupLine(param, warmup, run, max_steps, rising)
               for param, warmup, run in long_warmups)
    if rising and not long_warmups:
      out.append(
          'WARNING: task.train.max_steps %d ends while %s.lr_schedule still '
          'rises (a warmup longer than the run?): its multiplier at the last '
          'step is %.4g, below the %.4g it reaches at step %d; raise '
          'max_steps or shorten the warmup.' % ((max_steps, key) + rising))
    if not bounds or steps <= max(bounds):
      continue
    end = max(bounds)
    floor = value(end)
    peak = max(value(b) for b in [0] + list(bounds))
    if not _DecaysInto(value, end, bounds):
      continue
    if floor < peak and all(value(s) == floor
                            for s in ((end + steps) // 2, steps - 1)):
      out.append(
          'WARNING: task.train.max_steps %d runs %d schedule steps past the '
          'end of %s.lr_schedule (at step %d it reaches its final multiplier '
          '%.4g, peak %.4g, and stays there); lengthen the schedule or lower '
          'max_steps.' % (max_steps, steps - end, key, end, floor, peak))
  return out


# The params that hold a warmup's length in steps, in every schedule and
# optimizer that has one (Warmup, WarmupStableDecay, the Transformer, sqrt
# and cosine ramps: warmup_steps; Lingvo's rampup schedules: warmup;
# schedule-free: warmup_steps counted in updates).
_WARMUP_PARAMS = ('warmup_steps', 'warmup')


def _LongWarmups(key, learner, max_steps):
  """(dotted key, value, run length) of each warmup longer than the run.

  Every schedule (the lr_schedule and any inside it, an optimizer's
  hyper_schedules) and every optimizer in the learner's params is looked
  at; a warmup of n steps is longer than the run when n exceeds the steps
  the run gives it: `_ScheduleSteps` for a schedule, applied updates
  (max_steps / micro-batches per update) for an optimizer's own warmup.
  """
  from_optimizer = max_steps // learner.optimizer.MicroBatchesPerUpdate()
  from_schedule = _ScheduleSteps(learner, max_steps)
  out = []
  for sub, p in hyperparams.NestedParamsWithKeys(learner.params, key):
    cls = getattr(p, 'cls', None)
    if not isinstance(cls, type):
      continue
    if issubclass(cls, BaseSchedule):
      run = from_schedule
    elif issubclass(cls, BaseOptimizer):
      run = from_optimizer
    else:
      continue
    for name in _WARMUP_PARAMS:
      n = p.Get(name) if name in p else None
      if isinstance(n, int) and not isinstance(n, bool) and n > run:
        out.append(('%s.%s' % (sub, name), n, run))
  return out


def _WarmupLine(param, warmup, run, max_steps, rising):
  """The warning for `param` : `warmup`, longer than a run of `run` steps."""
  unit = '' if run == max_steps else ' = %d schedule steps' % run
  line = ('WARNING: %s : %d is longer than the run (task.train.max_steps %d%s)'
          ': the warmup never ends' % (param, warmup, max_steps, unit))
  if rising:
    line += (' (the multiplier at the last step is %.4g, below the %.4g it '
             'reaches at step %d)' % rising)
  return line + '; shorten the warmup or raise max_steps.'


def _RisingAtEnd(bounds, steps, value):
  """(last, peak, peak step) if the run ends while the schedule rises.

  Rising: the value at the run's last schedule step is above the value at
  the start of its segment (the boundary before it, or 0) and below the
  value at the boundary that ends the segment, e.g. a warmup of 1000 steps
  in a run of 500. A decaying segment (a cosine before its restart) does
  not count. None otherwise.
  """
  if steps < 1:
    return None
  start = max([0] + [b for b in bounds if b < steps - 1])
  peak_step = min(b for b in bounds if b >= steps - 1)
  last, peak = value(steps - 1), value(peak_step)
  if not value(start) < last < peak:
    return None
  return last, peak, peak_step


def _DecaysInto(value, end, bounds):
  """True if `value(step)` falls within the segment that ends at `end`.

  The segment runs from the boundary before `end` (or step 0) to `end`; a
  step (constant on the segment, then a jump at `end`) does not decay.
  """
  start = max([0] + [b for b in bounds if b < end])
  return end - 1 > start and value(end - 1) < value(start)
