"""What each job writes to a logdir, so that no job overwrites another's files.

One logdir holds one run. Its files belong to the jobs that write them:

  train jobs (`--mode=train`, `--mode=train_and_eval`):
    params.txt      the run's params, written by the first train job only
                    (`WriteParamsOnce`); a resume with other params is told
                    what differs and how to resume unchanged.
    metrics.json    the final metrics of the run (`train/...` metrics of the
                    last step, or the final evaluation), with 'global_step'.
    ckpt/, best/, train/, eval/ (the evaluations inside train_and_eval),
    model_analysis.txt
  the eval job (`--mode=eval`, reads checkpoints only):
    eval_job/       its TensorBoard run and eval_job/metrics.json (the
                    latest eval job's metrics and its global step); it
                    never writes or compares params.txt. With --eval_dir
                    these go there instead; on a read-only logdir without
                    it the job writes nothing (`IsWritable`).
  Other jobs that only read checkpoints write their own directory in the
  same way, named after the job (`evaler/`, `export/`), or the directory of
  their output flag (`--evaler_dir`, `--export_dir`); on a read-only logdir
  without it they refuse before any work (`CheckJobDirWritable`).

A rerun of a finished train job (`FinishedMetrics`) writes nothing and
returns the stored metrics, so metrics.json and params.txt stay
byte-identical.

Every job refuses a logdir whose params.txt is of another experiment
(`CheckNotAnotherExperiment`) before it writes anything, and one train job
at a time writes a logdir (`TrainLock`, a flock the kernel releases when
the process ends).
"""

import json
import math
import os
import re

import tensorflow as tf

from learner.training.services import errors

PARAMS_FILE = 'params.txt'
METRICS_FILE = 'metrics.json'
CKPT_DIR = 'ckpt'
EVAL_JOB_DIR = 'eval_job'
EVALER_DIR = 'evaler'


def EvalJobDir(dataset=None, default=None):
  """'eval_job', or 'eval_job_<dataset>' for --evaler_dataset=<dataset>.

  The experiment's default dataset (`default`, the one evaluated when
  none is named) is 'eval_job' whether named or not: one directory for
  the same evaluation.
  """
  return EVAL_JOB_DIR + ('_' + dataset if dataset not in (None, default)
                         else '')


def EvalerDir(dataset=None, default=None):
  """'evaler', or 'evaler_<dataset>' for --evaler_dataset=<dataset> other
  than the experiment's `default` (as `EvalJobDir`)."""
  return EVALER_DIR + ('_' + dataset if dataset not in (None, default)
                       else '')

_CKPT_INDEX_RE = re.compile(r'^ckpt-(\d+)\.index$')


def CheckpointSteps(logdir):
  """Sorted global steps of the complete checkpoints in `logdir/ckpt`.

  Read from the directory (`ckpt-<step>.index` files, written last by a
  save), not from the `checkpoint` state file, so a lost state file does
  not hide them.
  """
  ckpt_dir = os.path.join(logdir, CKPT_DIR)
  if not tf.io.gfile.isdir(ckpt_dir):
    return []
  steps = []
  for name in tf.io.gfile.listdir(ckpt_dir):
    m = _CKPT_INDEX_RE.match(name)
    if m:
      steps.append(int(m.group(1)))
  return sorted(steps)


def ReadMetrics(path):
  """The dict in a metrics.json, or None if it is missing or unreadable."""
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      metrics = json.load(f)
  except (ValueError, OSError, tf.errors.OpError):
    return None
  return metrics if isinstance(metrics, dict) else None


def StrictJson(value):
  """`value` with every non-finite float (NaN, inf) replaced by None.

  metrics.json is strict JSON (RFC 8259 has no NaN or Infinity; Python's
  json writes them by default and other readers, e.g. jq or JavaScript,
  refuse the file): a metric that is not a finite number is written as
  null. Nested dicts, lists and tuples are converted too.
  """
  if isinstance(value, float):
    return value if math.isfinite(value) else None
  if isinstance(value, dict):
    return {k: StrictJson(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [StrictJson(v) for v in value]
  return value


def DumpJson(value, f):
  """json.dump of `value` as strict JSON (StrictJson), sorted, indent 1."""
  json.dump(StrictJson(value), f, indent=1, sort_keys=True, allow_nan=False)


def WriteMetrics(path, metrics):
  """Writes `metrics` to `path` as sorted strict JSON (atomically: tmp +
  rename); a non-finite value is written as null (StrictJson)."""
  tmp = path + '.tmp'
  with tf.io.gfile.GFile(tmp, 'w') as f:
    DumpJson(metrics, f)
  tf.io.gfile.rename(tmp, path, overwrite=True)


# Keys every train job writes into metrics.json (the rest of a train_and_eval
# run's keys are its evaluation's metrics).
_TRAIN_ONLY_KEYS = ('global_step', 'num_skipped_steps', 'early_stopped',
                    'early_stop_reason')


def FinishedMetrics(logdir, max_steps, with_eval):
  """The stored metrics of a finished train run in `logdir`, else None.

  Finished means: metrics.json holds a global step >= `max_steps` (or says
  the run stopped early, `early_stopped`) and a checkpoint of at least that
  step exists; with `with_eval`
  (train_and_eval) it must also hold evaluation metrics (a run trained in
  'train' mode is not finished for train_and_eval: it still needs its
  final evaluation).

  Args:
    logdir: the run's (chief's) logdir.
    max_steps: int, the job's task.train.max_steps.
    with_eval: bool, the job ends with an evaluation.
  """
  metrics = ReadMetrics(os.path.join(logdir, METRICS_FILE))
  if not metrics or not isinstance(metrics.get('global_step'), int):
    return None
  step = metrics['global_step']
  steps = CheckpointSteps(logdir)
  stopped = metrics.get('early_stopped') is True
  if (step < max_steps and not stopped) or not steps or steps[-1] < step:
    return None
  if with_eval and not any(k not in _TRAIN_ONLY_KEYS and
                           not k.startswith(('train/', 'num_skipped_steps/'))
                           for k in metrics):
    return None
  return metrics


def _KeyValues(text):
  """{key: value text} of a Params.ToText() text ('key : value' lines)."""
  out = {}
  for line in text.splitlines():
    key, sep, value = line.partition(' : ')
    if sep:
      out[key.strip()] = value.strip()
    elif line.strip():
      out[line.strip()] = ''
  return out


def ParamsDiff(old_text, new_text):
  """Sorted [(key, old value or None, new value or None)] that differ."""
  old, new = _KeyValues(old_text), _KeyValues(new_text)
  return [(k, old.get(k), new.get(k)) for k in sorted(set(old) | set(new))
          if old.get(k) != new.get(k)]


def CheckSameTask(path, old_text, new_text):
  """Raises unless the run in params.txt `path` has this job's task class.

  A finished run of another experiment is not this job's to report as
  finished (its checkpoint would be refused on restore as well).

  Raises:
    errors.ExperimentError: naming both task classes and the fix.
  """
  old, new = _KeyValues(old_text), _KeyValues(new_text)
  if 'task.cls' in old and old.get('task.cls') != new.get('task.cls'):
    raise errors.ExperimentError(
        '%s is a run of another experiment (task.cls : %s; this one is %s). '
        'Choose another --logdir for this experiment.' %
        (path, old['task.cls'], new.get('task.cls')))


def ParamsChangeWarning(path, old_text, new_text, max_lines=None, hint=None):
  """The warning for a resume whose params differ from the run's params.txt.

  Args:
    path: the run's params.txt.
    old_text, new_text: its text and this job's `Params.ToText()`.
    max_lines: list at most this many keys (None: every one).
    hint: how to resume unchanged, e.g. 'rerun with
      --params_file=<logdir>/params.txt and without --params_override';
      default: give the params in `path`.

  Returns:
    A str: a header, then '- key : old' / '+ key : new' lines per changed
    key, then the hint. params.txt itself is kept as the first run wrote it.
  """
  diff = ParamsDiff(old_text, new_text)
  lines = []
  for key, old, new in diff[:max_lines]:
    if old is not None:
      lines.append('- %s : %s' % (key, old))
    if new is not None:
      lines.append('+ %s : %s' % (key, new))
  if max_lines is not None and len(diff) > max_lines:
    lines.append('... and %d more keys' % (len(diff) - max_lines))
  hint = hint or 'give the params in %s' % path
  return ('WARNING: these params differ from the earlier run in %s (%d '
          'keys; the file is kept as that run wrote it):\n  %s\nTo resume '
          'it unchanged, %s.' % (path, len(diff), '\n  '.join(lines), hint))


def ScheduleChangeNotice(old_text, new_text):
  """One line naming the schedule keys a resume changed, or None.

  A schedule is a pure function of the learner's step, so changing it at a
  resume (e.g. branching a cooldown off a stable-phase checkpoint) is
  allowed: every rate continues from the step restored from the checkpoint,
  under the new schedule (docs/DESIGN.md, "Changing the schedule at
  resume"). The keys are those with a part naming a schedule above the last
  (lr_schedule, decay_schedule, schedules[0], ...).

  Args:
    old_text, new_text: the run's params.txt and this job's params text.

  Returns:
    'NOTICE: ...' (str), or None when no schedule key changed.
  """
  keys = _ScheduleKeys(old_text, new_text)
  if not keys:
    return None
  return ('NOTICE: the schedule changed at this resume (%s): each rate '
          'continues from the step in the checkpoint under the new '
          'schedule (params.txt keeps the first run\'s).' % ', '.join(keys))


def _ScheduleKeys(old_text, new_text):
  """The changed keys with a part naming a schedule above the last."""
  return [key for key, _, _ in ParamsDiff(old_text, new_text)
          if any('schedule' in part for part in key.split('.')[:-1])]


def WriteParamsOnce(logdir, text, report, hint=None):
  """Writes logdir/params.txt for a new run; compares it on a resume.

  A logdir without a checkpoint starts a new run, so its params.txt is
  (re)written. With a checkpoint the run resumes: params.txt is kept, and if
  `text` differs `report` gets `ParamsChangeWarning`, and the one-line
  `ScheduleChangeNotice` when schedule keys changed (only the notice when
  nothing but schedule keys and max_steps changed: a branched cooldown).

  Args:
    logdir: the run's logdir (exists).
    text: this job's `Params.ToText()`.
    report: callable(str) for the warning.
    hint: passed to `ParamsChangeWarning`.

  Returns:
    True if params.txt was written.
  """
  path = os.path.join(logdir, PARAMS_FILE)
  if tf.io.gfile.exists(path) and CheckpointSteps(logdir):
    with tf.io.gfile.GFile(path) as f:
      old = f.read()
    if old != text:
      notice = ScheduleChangeNotice(old, text)
      changed = {key for key, _, _ in ParamsDiff(old, text)}
      if notice is None or not changed <= (
          set(_ScheduleKeys(old, text)) | {'task.train.max_steps'}):
        report(ParamsChangeWarning(path, old, text, hint=hint))
      if notice:
        report(notice)
    return False
  tmp = path + '.tmp'
  with tf.io.gfile.GFile(tmp, 'w') as f:
    f.write(text)
  tf.io.gfile.rename(tmp, path, overwrite=True)
  return True


def IsWritable(path):
  """True if this process may create or write `path` (a file or directory).

  Asked of `path` if it exists, else of its nearest existing parent
  (`os.access(..., W_OK)`, which also says True for root whatever the
  mode bits). A path with a scheme (gs://...) is taken as writable: its
  file system answers at the write.
  """
  if '://' in str(path):
    return True
  path = os.path.abspath(path)
  while not os.path.exists(path):
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  return os.access(path, os.W_OK)


def CheckTrainWritable(logdir, evaluates, keeps_best):
  """Refuses a train job on a logdir it cannot write, before any file.

  A train job writes the logdir itself (params.txt, metrics.json,
  model_analysis.txt), train/, ckpt/ and, evaluating, eval/ and best/; on
  a read-only one a resume would otherwise stop at its first summary with
  TF's PermissionDeniedError traceback (CreateSummaryFileWriter). Each is
  asked with `IsWritable` (itself if it exists, else its nearest existing
  parent), so a logdir that does not exist yet needs a writable parent.

  Args:
    logdir: the job's logdir (it need not exist).
    evaluates: the job writes eval/ (train_and_eval).
    keeps_best: it writes best/ when it evaluates (a dev_metric is set).

  Raises:
    errors.ExperimentError: one line naming the logdir, what cannot be
      written and the fixes; nothing has been read or written.
  """
  names = ['', 'train', CKPT_DIR] + (
      ['eval'] + (['best'] if keeps_best else []) if evaluates else [])
  bad = [name for name in names if not IsWritable(os.path.join(logdir, name))]
  if not bad:
    return
  what = ('it is' if bad[0] == '' else '%s %s' % (
      ', '.join(n + '/' for n in bad), 'is' if len(bad) == 1 else 'are'))
  steps = CheckpointSteps(logdir)
  kept = (' (its checkpoints, newest ckpt-%d, are untouched)' % steps[-1]
          if steps else '')
  raise errors.ExperimentError(
      '--logdir=%s cannot be written by this process: %s read-only; nothing '
      'was changed%s. Make it writable to train there, or give another '
      '--logdir (a copy of this one resumes the run); --mode=eval '
      '--eval_dir=<dir> evaluates a read-only logdir.' % (logdir, what, kept))


def CheckJobDirWritable(logdir, job_dir, mode, flag):
  """Refuses a read-only job that would write into an unwritable logdir.

  The evaler and the export write `<logdir>/<job_dir>` unless their output
  flag (`--evaler_dir`, `--export_dir`) names another directory; on a
  read-only logdir without that flag they would fail at their first write
  (TF's PermissionDeniedError traceback, after the work). Called before
  any work, so nothing is read, built or written.

  Args:
    logdir: the run's logdir (it need not exist yet).
    job_dir: the job's directory under it, e.g. 'evaler', 'export'.
    mode: the job's --mode value, for the message.
    flag: the output flag's name without dashes, e.g. 'evaler_dir'.

  Raises:
    errors.ExperimentError: one line naming the directory, the flag and the
      fix, when `<logdir>/<job_dir>` cannot be written (`IsWritable`).
  """
  path = os.path.join(logdir, job_dir)
  if IsWritable(path):
    return
  raise errors.ExperimentError(
      '--mode=%s writes %s, but %s is read-only (not writable by this '
      'process); nothing was done. Give --%s=<a writable directory> to write '
      'there instead.' % (mode, path, logdir, flag))


def CheckNotAnotherExperiment(logdir, text):
  """Refuses `logdir` if its params.txt is of another task class.

  Called by every job (train, train_and_eval, eval, evaler, export) before
  it writes anything, whether or not the other run finished; a logdir
  without params.txt (new, or written by an older trainer) passes.

  Args:
    logdir: the run's (chief's) logdir; it need not exist.
    text: this job's `Params.ToText()`.

  Raises:
    errors.ExperimentError: one line naming both task classes and the fix
      (see `CheckSameTask`).
  """
  path = os.path.join(logdir, PARAMS_FILE)
  if not tf.io.gfile.exists(path):
    return
  try:
    with tf.io.gfile.GFile(path) as f:
      old = f.read()
  except (OSError, tf.errors.OpError, UnicodeDecodeError):
    return  # Unreadable: the job's own checks (restore, resume) decide.
  CheckSameTask(path, old, text)


class LogdirInUseError(errors.ExperimentError):
  """Another live train job holds the logdir (see `TrainLock`)."""


class TrainLock:
  """Context manager: this process is the only train job writing `logdir`.

  An exclusive, non-blocking `flock` on the logdir directory itself: no
  file is written for it, and the kernel drops it when the process ends in
  any way (a `kill -9` never leaves a logdir locked). Only the chief of a
  multi-worker run takes it (its other workers write elsewhere, see
  `distribution.WorkerLogdir`). Jobs that only read checkpoints (eval,
  evaler, export) do not take it: they may run beside the trainer.

  Paths with a scheme (gs://..., hdfs://...) and file systems without
  flock are not locked (nothing is checked there).

  Args:
    logdir: the run's logdir; it must exist.

  Raises:
    LogdirInUseError: on entry, if another process holds the lock (one line
      naming the logdir and the fix).
  """

  def __init__(self, logdir):
    self._logdir = logdir
    self._fd = None

  def __enter__(self):
    if '://' in self._logdir:
      return self
    import fcntl  # pylint: disable=g-import-not-at-top (POSIX only)
    try:
      fd = os.open(self._logdir, os.O_RDONLY)
    except OSError:
      return self  # The makedirs before us reported any real problem.
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      raise LogdirInUseError(
          '%s is in use by another live train job (it holds the logdir\'s '
          'lock); nothing was written. Wait for that job to end or stop it, '
          'or choose another --logdir.' % self._logdir) from None
    except OSError:  # No flock on this file system: not locked.
      os.close(fd)
      return self
    self._fd = fd
    return self

  def __exit__(self, *unused_exc):
    if self._fd is not None:
      os.close(self._fd)  # Releases the flock.
      self._fd = None
    return False
