r"""Shows a learning-rate schedule before anyone trains with it.

Usage:
  python -m schedules.plot --model=digits.MlpMomentum [--learner=0] \
      [--start=0] [--end=10000] [--num_points=200] [--png=/tmp/lr.png]
  python -m schedules.plot --params_text="cls : Class('schedules.cosine.CosineDecay'); total_steps : 1000" --end=1200
  python -m schedules.plot --params_text=/path/to/params.txt --end=5000
  python -m schedules.plot --params_text=/logs/stable/params.txt \
      --branch_step=8000 --branch_params_text=/tmp/cooldown_schedule.txt
  (the branch's text is the schedule the run resumed with; a logdir's
  params.txt keeps its first run's params, so write the new one out, e.g.
  from the --params_override you resumed with)

--model takes a registered experiment (params.registry key); the schedule is
task.train.learner[--learner].lr_schedule. --params_text takes the text (or
a file holding it) of a schedule's params, a learner's params or a whole
experiment's params (the text `Params.ToText()` writes); the schedule is the
root params if its `cls` is a schedule, else the `lr_schedule` in it. The
text is read as data (README, "Params text is data"): only the schedules of
`schedules/` (imported by this command) and registered names resolve, and
nothing else in the text is decoded.

Prints a small text plot and the key values: the peak (value and step), the
value at the end, and the value on both sides of each boundary (end of
warmup, decay boundaries, ...). --png writes a PNG with matplotlib, if it is
installed (`pip install matplotlib`, or the package's `plot` extra).

--branch_step=N with --branch_params_text draws a schedule changed at resume
(docs/DESIGN.md, "Changing the schedule at resume"), e.g. a cooldown branched
off a stable-phase checkpoint of `WarmupStableDecay`: the first schedule
below step N, the branch's (the same forms as --params_text) from N on, as the
rate of the resumed run is; the branch step is printed as a boundary.

Steps are the schedule's steps: applied updates by default (see docs/DESIGN.md,
"Words with one meaning").
"""

import os
import sys

from absl import flags
import numpy as np
import tensorflow as tf

from params import hyperparams
from params import params_text
from params import value_codec
from params import registry
from schedules import keras_adapter
from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import DEFAULT_NAME

_NO_TEXT = '<no text form: '


def _ParseLines(text):
  """Returns {dotted key: value text} for 'key : value' lines of `text`.

  Uses the reader of `Params.FromText` (`params_text.TextLines`), with its
  size bounds; nothing is decoded here.
  """
  return {key: value for _, _, key, value in params_text.TextLines(text)}


def _Decode(key, value_text):
  if value_text.startswith(_NO_TEXT):
    raise ValueError('Key %r holds a value with no text form (%s); set it in '
                     'code, or write the schedule with text-serializable '
                     'values.' % (key, value_text))
  try:
    return value_codec.DecodeValue(
        value_text, params_classes=hyperparams.PARAMS_CLASSES)
  except ValueError as e:
    shown = value_text if len(value_text) <= 80 else value_text[:80] + '...'
    raise ValueError('Key %r: cannot read the value %r: %s' %
                     (key, shown, e)) from None


def _Build(entries, prefix):
  """Builds the params whose keys start with `prefix` (its cls line first)."""
  key = prefix + 'cls'
  if key not in entries:
    raise ValueError('No %r line: cannot tell which class %r builds.' %
                     (key, prefix.rstrip('.')))
  cls = _Decode(key, entries[key])
  if not (isinstance(cls, type) and issubclass(cls, BaseSchedule)):
    raise ValueError('%r = %r is not a schedule class (a subclass of '
                     'schedules.base_schedule.BaseSchedule).' % (key, cls))
  text = '\n'.join('%s : %s' % (k[len(prefix):], v)
                   for k, v in entries.items() if k.startswith(prefix))
  # Params.FromText rebuilds nested params from their cls lines.
  return cls.Params().FromText(text)


def ScheduleParamsFromText(text, learner=0):
  """Builds a schedule's params from params text, finding the schedule in it.

  The schedule is the root params if its `cls` is a schedule, else the
  (outermost) `lr_schedule` params in the text; it is built with
  `cls.Params().FromText(...)` on its lines, which rebuilds nested params
  from their `cls` lines.

  Args:
    text: 'key : value' lines (or ';'-separated) as `Params.ToText()`
      writes: a schedule's params, a learner's (lr_schedule.*) or an
      experiment's (task.train.learner[i].lr_schedule.*).
    learner: which learner's lr_schedule to take when the text has several.

  Returns:
    The schedule's InstantiableParams.

  Raises:
    ValueError: if no schedule is found (listing what was), a key is
      unknown (with close names), a value cannot be read, or `learner` does
      not match one of several lr_schedules.
  """
  entries = _ParseLines(text)
  root_cls = entries.get('cls')
  root_error = ''
  if root_cls is not None:
    try:
      cls = _Decode('cls', root_cls)
    except ValueError as e:
      # E.g. a learner's class, whose module this command never imports.
      cls, root_error = None, ' (%s)' % e
    if isinstance(cls, type) and issubclass(cls, BaseSchedule):
      return _Build(entries, '')
  prefixes = sorted({k[:-len('cls')] for k in entries
                     if k.endswith('lr_schedule.cls')})
  # Keep only the outermost lr_schedule of each learner.
  prefixes = [x for x in prefixes
              if not any(x != y and x.startswith(y) for y in prefixes)]
  # An experiment's text holds Lingvo's legacy task.train.lr_schedule too;
  # it is unused (and left out here) when task.train.learner is set.
  if any(x.startswith('task.train.learner') for x in prefixes):
    prefixes = [x for x in prefixes if x != 'task.train.lr_schedule.']
  if not prefixes:
    raise ValueError(
        'The text holds no schedule: its root cls is %s%s and no '
        '"...lr_schedule.cls" line was found. Give a schedule\'s params '
        '(with a cls line), a learner\'s or an experiment\'s.' %
        (root_cls or 'missing', root_error))
  if len(prefixes) > 1:
    chosen = [x for x in prefixes if '[%d].lr_schedule.' % learner in x]
    if len(chosen) != 1:
      raise ValueError('The text has %d lr_schedules (%s); --learner=%d '
                       'matches none of them. Use an index in range.' %
                       (len(prefixes), prefixes, learner))
    prefixes = chosen
  return _Build(entries, prefixes[0])


def ScheduleFromExperiment(model, learner=0):
  """Returns (lr_schedule params, learning_rate or None) of an experiment.

  Args:
    model: a params.registry key, e.g. 'digits.MlpMomentum'.
    learner: index into task.train.learner when it is a list.

  Raises:
    LookupError: unknown experiment (from the registry).
    ValueError: if the experiment has no task.train.learner, the index is
      out of range, or the learner has no lr_schedule.
  """
  p = registry.GetParams(model)
  try:
    learners = p.task.train.learner
  except AttributeError:
    raise ValueError('Experiment %r has no task.train.learner.' % model)
  if not isinstance(learners, (list, tuple)):
    learners = [learners]
  if not 0 <= learner < len(learners):
    raise ValueError('--learner=%d is out of range: experiment %r has %d '
                     'learner(s) (0..%d).' % (learner, model, len(learners),
                                              len(learners) - 1))
  lp = learners[learner]
  if 'lr_schedule' not in lp:
    raise ValueError('Learner %d of %r has no lr_schedule param.' %
                     (learner, model))
  rate = lp.learning_rate if 'learning_rate' in lp else None
  if keras_adapter.IsKerasSchedule(lp.lr_schedule):
    # As the learner does: wrapped, and its rate multiplies 1.0 if None.
    return (keras_adapter.KerasSchedule.FromKeras(lp.lr_schedule),
            1.0 if rate is None else rate)
  return lp.lr_schedule.Copy(frozen=False), rate


def Evaluate(schedule, steps):
  """Returns float64 numpy values of `schedule` at the int `steps`."""
  fn = tf.function(schedule.Value)
  return np.array([float(fn(tf.constant(int(s), tf.int64))) for s in steps])


def Summarize(schedule, start, end, num_points):
  """Evaluates `schedule` on [start, end] and finds its key values.

  Returns:
    A dict: steps, values (sampled, boundaries and their neighbours
    included), peak_step, peak, end_value, boundaries (a list of (step,
    value before, value at)).
  """
  sampled = np.unique(np.round(np.linspace(start, end, num_points)).astype(
      np.int64))
  bounds = [b for b in schedule.Boundaries() if start <= b <= end]
  extra = {s for b in bounds for s in (b - 1, b, b + 1) if start <= s <= end}
  steps = np.array(sorted(set(sampled.tolist()) | extra), dtype=np.int64)
  values = Evaluate(schedule, steps)
  at = dict(zip(steps.tolist(), values.tolist()))
  i = int(np.argmax(values))
  return dict(
      steps=steps, values=values, peak_step=int(steps[i]),
      peak=float(values[i]), end_value=float(at[int(end)]),
      boundaries=[(b, at.get(b - 1, at[b]), at[b]) for b in bounds])


class Branched:
  """A schedule changed at a resume: `first` below `step`, `branch` from it.

  The rate a run sees when it trains under `first`, saves a checkpoint at
  global step `step` and resumes under `branch` (schedules are pure
  functions of the step, so the branch continues from `step`). Has the
  two methods `Summarize` reads: `Value(step)` (float32 scalar) and
  `Boundaries()` (first's below `step`, `step`, branch's from `step` on).
  """

  def __init__(self, first, branch, step):
    self.first, self.branch, self.step = first, branch, int(step)

  def Value(self, step):
    """float32 scalar: first.Value(step) if step < self.step, else branch's."""
    step = tf.convert_to_tensor(step)
    return tf.where(step < tf.cast(self.step, step.dtype),
                    self.first.Value(step), self.branch.Value(step))

  def Boundaries(self):
    """Sorted int steps where the value may jump or change its form."""
    return sorted({b for b in self.first.Boundaries() if b < self.step} |
                  {self.step} |
                  {b for b in self.branch.Boundaries() if b >= self.step})


def TextPlot(steps, values, width=64, height=12):
  """Returns a small text plot of values against steps (one '*' per column)."""
  steps = np.asarray(steps, np.float64)
  values = np.asarray(values, np.float64)
  lo, hi = float(np.min(values)), float(np.max(values))
  span = hi - lo if hi > lo else 1.0
  grid = [[' '] * width for _ in range(height)]
  s0, s1 = steps[0], steps[-1]
  for col in range(width):
    x = s0 + (s1 - s0) * col / max(width - 1, 1)
    j = min(int(np.searchsorted(steps, x)), len(steps) - 1)
    row = int(round((values[j] - lo) / span * (height - 1)))
    grid[height - 1 - row][col] = '*'
  lines = []
  for r, row in enumerate(grid):
    label = hi if r == 0 else (lo if r == height - 1 else None)
    lines.append('%12s |%s' % ('%.6g' % label if label is not None else '',
                               ''.join(row)))
  lines.append('%12s +%s' % ('', '-' * width))
  left, right = '%d' % s0, '%d' % s1
  lines.append('%12s  %s%s%s' % ('', left, ' ' * max(
      1, width - len(left) - len(right)), right))
  return '\n'.join(lines)


def WritePng(path, steps, values, title):
  """Writes a PNG plot with matplotlib.

  Raises:
    RuntimeError: if matplotlib is not installed, saying how to install it.
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise RuntimeError(
        '--png needs matplotlib, which is not installed. Install it with '
        "pip install matplotlib  (in a checkout: pip install -e '.[plot]'), "
        'or drop --png to get the text plot only.') from None
  fig, ax = plt.subplots(figsize=(7, 3.5))
  ax.plot(steps, values)
  ax.set_xlabel('step (applied updates)')
  ax.set_ylabel('value')
  ax.set_title(title)
  ax.grid(True, alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _DefineFlags(fv):
  flags.DEFINE_string('model', None, 'Registered experiment key, e.g. '
                      'digits.MlpMomentum.', flag_values=fv)
  flags.DEFINE_integer('learner', 0, 'Index of the learner in '
                       'task.train.learner.', flag_values=fv)
  flags.DEFINE_string('params_text', None, 'Params text of a schedule, a '
                      'learner or an experiment, or a file holding it.',
                      flag_values=fv)
  flags.DEFINE_integer('branch_step', None, 'With --branch_params_text: '
                       'the step of the resume that changed the schedule '
                       '(the branch\'s schedule from this step on).',
                       flag_values=fv)
  flags.DEFINE_string('branch_params_text', None, 'With --branch_step: the '
                      'schedule the run resumed with (the same forms as '
                      '--params_text, e.g. the resumed run\'s params.txt).',
                      flag_values=fv)
  flags.DEFINE_integer('start', 0, 'First step.', flag_values=fv)
  flags.DEFINE_integer('end', None, 'Last step; default: 1.2 x the last '
                       'boundary, or 1000.', flag_values=fv)
  flags.DEFINE_integer('num_points', 200, 'Steps evaluated (plus the '
                       'boundaries).', flag_values=fv)
  flags.DEFINE_string('png', None, 'Also write a PNG plot to this path '
                      '(needs matplotlib).', flag_values=fv)
  flags.DEFINE_integer('tf_log_level', None, 'TensorFlow\'s C++ log level '
                       '(TF_CPP_MIN_LOG_LEVEL), read by schedules/__init__.py '
                       'before TensorFlow loads: 0 shows every INFO line; '
                       'default 3 (only FATAL) unless the variable is set.',
                       flag_values=fv)


_HELP_FLAGS = ('-h', '-help', '--help', '-?', '--helpshort', '--helpfull')


def Help(fv=None):
  """Returns the --help text: the module docstring, then every flag.

  Args:
    fv: the command's flags.FlagValues (default: a fresh one with the
      command's flags defined).
  """
  if fv is None:
    fv = flags.FlagValues()
    _DefineFlags(fv)
  lines = [__doc__.strip(), '', 'Flags:']
  for name in sorted(fv):
    flag = fv[name]
    default = '' if flag.default is None else ' (default: %s)' % (
        flag.default,)
    lines.append('  --%s: %s%s' % (name, flag.help, default))
  lines.append('  -h, --help, --helpshort, --helpfull: show this help.')
  return '\n'.join(lines) + '\n'


def _ReadScheduleParams(text, learner):
  """Schedule params from params text or a file holding it (a flag value)."""
  if os.path.isfile(text):
    text = params_text.ReadTextFile(text, '--params_text')
  sp = ScheduleParamsFromText(text, learner)
  if not sp.name:
    sp.name = DEFAULT_NAME
  return sp


def _MaybeBranched(fv, schedule):
  """`schedule`, or `Branched` when --branch_step/--branch_params_text.

  Raises:
    ValueError: only one of the two flags is given, or --branch_step < 1.
  """
  if (fv.branch_step is None) != (fv.branch_params_text is None):
    raise ValueError('--branch_step and --branch_params_text go together: '
                     'give both (the resume step and the schedule resumed '
                     'with) or neither.')
  if fv.branch_step is None:
    return schedule
  if fv.branch_step < 1:
    raise ValueError('--branch_step=%d must be >= 1 (the step the run '
                     'resumed at).' % fv.branch_step)
  branch = _ReadScheduleParams(fv.branch_params_text, fv.learner)
  return Branched(schedule, branch.Instantiate(), fv.branch_step)


def Main(argv, out=None, err=None):
  """Runs the command with `argv` (argv[0] is the program); returns exit code."""
  out = out or sys.stdout
  err = err or sys.stderr
  fv = flags.FlagValues()
  _DefineFlags(fv)
  if any(a.split('=', 1)[0] in _HELP_FLAGS for a in list(argv)[1:]):
    out.write(Help(fv))
    return 0
  try:
    fv(list(argv))
  except flags.Error as e:
    err.write('error: %s\nUsage: python -m schedules.plot (--model=KEY | '
              '--params_text=TEXT) [--start --end --num_points --png]; '
              '--help lists every flag.\n' % e)
    return 2
  try:
    if bool(fv.model) == bool(fv.params_text):
      raise ValueError('Give exactly one of --model=<registry key> or '
                       '--params_text=<params text or file>.')
    if fv.num_points < 2:
      raise ValueError('--num_points=%d must be >= 2.' % fv.num_points)
    rate = None
    if fv.model:
      sp, rate = ScheduleFromExperiment(fv.model, fv.learner)
      source = '%s learner %d' % (fv.model, fv.learner)
    else:
      sp = _ReadScheduleParams(fv.params_text, fv.learner)
      source = 'params text'
    if not sp.name:
      sp.name = DEFAULT_NAME
    schedule = _MaybeBranched(fv, sp.Instantiate())
    end = fv.end
    if end is None:
      bounds = schedule.Boundaries()
      end = int(max(bounds) * 1.2) if bounds and max(bounds) > 0 else 1000
    if end <= fv.start:
      raise ValueError('--end=%d must be > --start=%d.' % (end, fv.start))
    summary = Summarize(schedule, fv.start, end, fv.num_points)
    name = type(schedule).__name__
    if isinstance(schedule, Branched):
      name = '%s, branched at step %d to %s' % (
          type(schedule.first).__name__, schedule.step,
          type(schedule.branch).__name__)
    out.write('%s (%s), steps %d..%d (applied updates)\n' %
              (name, source, fv.start, end))
    out.write(TextPlot(summary['steps'], summary['values']) + '\n')
    out.write('peak: %.6g at step %d\n' % (summary['peak'],
                                            summary['peak_step']))
    out.write('end:  %.6g at step %d\n' % (summary['end_value'], end))
    branch = schedule.step if isinstance(schedule, Branched) else None
    for b, before, after in summary['boundaries']:
      out.write('boundary %d%s: %.6g -> %.6g\n' % (
          b, ' (branch)' if b == branch else '', before, after))
    if rate is not None:
      out.write('learning_rate %.6g: peak rate %.6g, end rate %.6g\n' %
                (rate, rate * summary['peak'], rate * summary['end_value']))
    if fv.png:
      WritePng(fv.png, summary['steps'], summary['values'],
               '%s (%s)' % (name, source))
      out.write('wrote %s\n' % fv.png)
  except (ValueError, LookupError, RuntimeError, TypeError,
          registry.ExperimentModuleError) as e:
    err.write('error: %s\n' % e)
    return 1
  return 0


def ConsoleMain():
  """The `tf-learner-plot-schedule` console script."""
  registry.AddWorkingDirectoryToPath()  # The user's package, as python -m.
  sys.exit(Main(sys.argv))


if __name__ == '__main__':
  ConsoleMain()
