"""One restore path for the jobs that only read a run's checkpoints.

`--mode=eval`, `--mode=evaler` and `--mode=export` build the task without
its learners (no optimizer, no slot) and restore a training checkpoint into
it with `RestoreForEval`:

  * strictly: every model variable and the global step must come from the
    checkpoint (one written by another model is refused, naming the
    variables it lacks); optimizer slots, the input iterator and counters
    are not needed and are not read;
  * on the averages where the run keeps them: a learner whose optimizer is
    an averaging one (`Ema`, `Lookahead` (its slow weights), `SWA`, or any
    optimizer whose `EvalAverageClasses` says so, given as `optimizer`
    params or through `optimizer_fn`, e.g.
    `get_optimizer_wrapper_fn('ema', ...)`) has its variables evaluated on
    their averages; the variables of the other learners keep their raw
    weights. This is what the trainer's own evaluations (train_and_eval)
    do by swapping each averaging optimizer's copies in.
    `EvalWeightsLabel` names them in the jobs' messages.

Which checkpoint: `EvalCandidates(directory)` lists the checkpoints a job
may read in a directory (those its state file lists and those complete on
disk, oldest first); `ResolveEvalCheckpoint(logdir, checkpoint)` turns the
`--checkpoint` flag (a prefix, or a directory such as `<logdir>/best`, or
none: `<logdir>/ckpt`) into the candidates, newest first, led by any newer
one the state file lists whose `.index` is gone, so that
`RestoreNewestForEval` says in one line which checkpoint it skipped and
which one it used instead.

Nothing here writes a file: a read-only logdir restores as any other.
"""

import os
import re

import tensorflow as tf

from learner.optimizers import base as base_optimizer
from learner.optimizers import factory as optimizer_factory
from learner.optimizers import var_grad
from learner.training.services import checkpointer as checkpointer_lib
from learner.training.services import failed_restore
from params import IsTrainable

CheckpointMismatchError = checkpointer_lib.CheckpointMismatchError


class NoCheckpointError(checkpointer_lib.CheckpointError):
  """The checkpoint a read-only job was given (or its default) is not there."""


def _StepOf(path):
  """The N of a checkpoint prefix '<name>-<N>' (int), or -1."""
  m = re.search(r'-(\d+)$', path or '')
  return int(m.group(1)) if m else -1


def EvalCandidates(directory):
  """The checkpoints a read-only job may evaluate in `directory`.

  Those the directory's `checkpoint` state file lists (when it can be read)
  and those complete on disk (`checkpointer.CompleteCheckpoints`), each
  once, and only if its `.index` file exists. Reads only.

  Args:
    directory: e.g. '<logdir>/ckpt' or '<logdir>/best'.

  Returns:
    list of checkpoint prefixes (str), oldest (smallest step) first; [] for
    a directory that does not exist or holds none.
  """
  if not tf.io.gfile.isdir(directory):
    return []
  listed = []
  try:
    state = tf.train.get_checkpoint_state(directory)
  except (tf.errors.OpError, ValueError):  # Damaged or being replaced.
    state = None
  if state is not None:
    listed = [p if os.path.isabs(p) else os.path.join(directory, p)
              for p in state.all_model_checkpoint_paths]
  found = {}
  for path in listed + checkpointer_lib.CompleteCheckpoints(directory):
    if tf.io.gfile.exists(path + '.index'):
      found.setdefault(os.path.normpath(path), None)
  return sorted(found, key=lambda p: (_StepOf(p), p))


def _ListedWithoutIndex(directory, newer_than):
  """The checkpoints the state file lists, newer than step `newer_than`,
  whose `.index` file is missing (deleted, or never finished), newest
  first; [] when the state file cannot be read."""
  try:
    state = tf.train.get_checkpoint_state(directory)
  except (tf.errors.OpError, ValueError):
    return []
  listed = [p if os.path.isabs(p) else os.path.join(directory, p)
            for p in (state.all_model_checkpoint_paths if state else [])]
  return sorted({os.path.normpath(p) for p in listed
                 if _StepOf(p) > newer_than and
                 not tf.io.gfile.exists(p + '.index')},
                key=lambda p: (-_StepOf(p), p))


_VERBS = {'eval': 'evaluate', 'export': 'export'}


def ResolveEvalCheckpoint(logdir, checkpoint=None, flag='--checkpoint',
                          mode='eval'):
  """The checkpoints to try for `checkpoint`, newest first.

  Args:
    logdir: the run's logdir.
    checkpoint: None (the checkpoints of `<logdir>/ckpt`), a checkpoint
      prefix (only it), or a directory: its checkpoints (e.g.
      '<logdir>/best'), or, for a logdir, those of its `ckpt/`.
    flag: the flag's name, for the error message.
    mode: 'eval' or 'export', for the error message.

  Returns:
    A non-empty list of checkpoint prefixes, newest first. For a
    directory, it starts with the checkpoints its state file lists beyond
    the newest complete one whose `.index` is gone (they cannot be read:
    `RestoreNewestForEval` reports each and uses the next).

  Raises:
    NoCheckpointError: there is no such checkpoint, or none in the
      directory (one line naming the flag, the value and the fix).
  """
  if checkpoint and not tf.io.gfile.isdir(checkpoint):
    if tf.io.gfile.exists(checkpoint + '.index'):
      return [checkpoint]
    raise NoCheckpointError(
        '%s=%s: no such checkpoint (no %s.index). Give a checkpoint prefix '
        'such as %s, or a directory of checkpoints such as %s.' % (
            flag, checkpoint, os.path.basename(checkpoint),
            os.path.join(logdir, 'ckpt', 'ckpt-200'),
            os.path.join(logdir, 'best')))
  where = checkpoint or os.path.join(logdir, 'ckpt')
  found = EvalCandidates(where)
  if not found and checkpoint and EvalCandidates(os.path.join(where, 'ckpt')):
    where = os.path.join(where, 'ckpt')  # A logdir.
    found = EvalCandidates(where)
  if not found:
    raise NoCheckpointError(
        'mode=%s: %sno checkpoint in %s to %s. Train first (mode train or '
        'train_and_eval) with this logdir, or name one with --checkpoint='
        '<prefix or directory>.' % (
            mode, '%s=%s: ' % (flag, checkpoint) if checkpoint else '',
            where, _VERBS.get(mode, mode)))
  return _ListedWithoutIndex(where, _StepOf(found[-1])) + list(
      reversed(found))


def ChosenCheckpoint(flag_values):
  """(flag name, value) of the checkpoint a command line chose.

  ('--checkpoint', None) when none was given.

  `--checkpoint`, else its alias `--export_checkpoint` (the trainer's
  command line refuses both with different values).
  """
  for name in ('checkpoint', 'export_checkpoint'):
    value = getattr(flag_values, name, None)
    if value:
      return '--' + name, value
  return '--checkpoint', None


def LearnerAveragingClasses(lp):
  """The averaging optimizer classes of one learner's params (a list).

  Asked through `BaseOptimizer.EvalAverageClasses`, which wrappers delegate
  to their inner optimizers, so no optimizer is built. The optimizer is
  `lp.optimizer`, or the params `lp.optimizer_fn` gives (a factory from
  get_optimizer_fn / get_optimizer_wrapper_fn; another callable is called
  once, as the learner does).
  """
  opt = lp.Get('optimizer') if 'optimizer' in lp else None
  fn = lp.Get('optimizer_fn') if 'optimizer_fn' in lp else None
  if opt is None and fn is not None:
    opt, _ = optimizer_factory.OptimizerParamsFromFn(fn)
  cls = getattr(opt, 'cls', None)
  if isinstance(cls, type) and issubclass(cls, base_optimizer.BaseOptimizer):
    return list(cls.EvalAverageClasses(opt))
  return []


def EvalAverageClasses(task):
  """The averaging optimizer classes in all the task's learners' params.

  A non-empty result means some of the task's weights are evaluated on
  their averages (see `LearnerAveragingClasses`).
  """
  return [c for lp in task.LearnerParamsList()
          for c in LearnerAveragingClasses(lp)]


def EvalWeightsLabel(classes):
  """How the jobs' messages name the weights evaluated instead (a str).

  Each class's EVAL_WEIGHTS_LABEL once, in order, joined by ' and ' (e.g.
  'EMA averages', 'Lookahead slow copies'); 'averages' for none.

  Args:
    classes: averaging optimizer classes (see `EvalAverageClasses`).
  """
  labels = []
  for cls in classes:
    label = cls.EVAL_WEIGHTS_LABEL or 'averages'
    if label not in labels:
      labels.append(label)
  return ' and '.join(labels) or 'averages'


def AveragedVariableNames(task):
  """{variable name: learner name} of the variables evaluated on averages.

  The trainable model variables each averaging learner trains, chosen as
  `Learner.GetTrainableVariables` does (re.search of its
  bprop_variable_filter / bprop_variable_exclusion on the name).
  """
  names = [var_grad.VarName(v) for v in task.ModelVars().Flatten()
           if IsTrainable(v)]
  out = {}
  for lp in task.LearnerParamsList():
    if not LearnerAveragingClasses(lp):
      continue
    keep = lp.Get('bprop_variable_filter')
    drop = lp.Get('bprop_variable_exclusion')
    for name in names:
      if (keep is None or re.search(keep, name)) and not (
          drop is not None and re.search(drop, name)):
        out.setdefault(name, lp.name)
  return out


def LoadEmaAverages(checkpoint_path, task, ema_classes, required=None):
  """Assigns model variables their averages from a training checkpoint.

  Reads the averages that the averaging optimizers saved, under the keys
  their classes give (`AverageCheckpointKeySuffix`), without building any
  optimizer. A variable without an average keeps its value (the raw
  weight restored before). Where one averaging optimizer wraps another,
  the outermost's copy is read (its key sorts first: the inner's key
  continues with '_private_children/' where the outer's has '_averages/'),
  as the trainer's evaluations swap it in last.

  Args:
    checkpoint_path: a checkpoint written while training.
    task: the built task whose model variables get the averages.
    ema_classes: the averaging optimizer classes (see `EvalAverageClasses`).
    required: {variable name: learner name} that must have an average
      (see `AveragedVariableNames`); None: every trainable variable.

  Returns:
    The number of variables assigned an average.

  Raises:
    CheckpointMismatchError: a required variable has no average in the
      checkpoint (it was not trained with that averaging optimizer).
  """
  reader = tf.train.load_checkpoint(checkpoint_path)
  keys = list(reader.get_variable_to_shape_map())
  n, missing = 0, []
  for var in task.ModelVars().Flatten():
    name = var_grad.VarName(var)
    suffixes = tuple(c.AverageCheckpointKeySuffix(var) for c in ema_classes)
    found = sorted(k for k in keys if k.endswith(suffixes))
    if found:
      var.assign(reader.get_tensor(found[0]))
      n += 1
    elif (name in required) if required is not None else IsTrainable(var):
      missing.append(name)
  if missing:
    learners = sorted({required[m] for m in missing} if required else ())
    raise CheckpointMismatchError(
        'Checkpoint %s has no average of %s, which %s evaluate on averages '
        '(an averaging optimizer: Ema, Lookahead, SWA); it was not trained with these params. Give '
        'this job the --model and params the trainer ran with.' % (
            checkpoint_path, missing,
            'learner(s) %s' % learners if learners else 'these params'))
  return n


def _MismatchMessage(path, task, error):
  """One line: the variables of `task` the checkpoint at `path` lacks."""
  try:
    keys = set(tf.train.load_checkpoint(path).get_variable_to_shape_map())
  except (tf.errors.OpError, ValueError):
    keys = set()
  missing = sorted(name for name, key in
                   checkpointer_lib.VariableCheckpointKeys(task).items()
                   if key not in keys)
  what = ('lacks %d variable(s) of this model: %s%s' % (
      len(missing), missing[:8], ' ...' if len(missing) > 8 else '')
          if missing else 'does not match this model (%s)' %
          str(error).split('\n')[0][:300])
  return ('Checkpoint %s %s; it was written by another model or experiment. '
          'Give this job the --model and params the trainer ran with. If '
          'this logdir belongs to another run or model, choose another '
          '--logdir.' % (path, what))


def RestoreForEval(checkpoint_path, task):
  """Restores a training checkpoint into a task built without learners.

  The one restore of the jobs that only read a run's checkpoints (eval,
  evaler, export): strict on the model variables and the global step,
  then the averages where the task's learners keep them
  (`AveragedVariableNames`); the other variables keep their raw weights.

  Args:
    checkpoint_path: a checkpoint prefix, e.g. '<logdir>/ckpt/ckpt-200' or
      '<logdir>/best/ckpt-120'.
    task: a BaseTask built from the run's params, without `CreateLearners`.

  Returns:
    (the checkpoint's global step as an int, the number of variables given
    their average: 0 when no learner averages).

  Raises:
    CheckpointMismatchError: a variable of the task is not in the
      checkpoint, has another shape, or lacks the average its learner
      keeps (the checkpoint is of another model or other params).
    tf.errors.OpError and others: the checkpoint's files are gone or
      damaged (`RestoreNewestForEval` skips such a checkpoint).
  """
  ckpt = tf.train.Checkpoint(task=task)
  try:
    try:
      status = ckpt.restore(checkpoint_path)
    except Exception as e:  # Gone or damaged: the caller reports it.
      failed_restore.QuietFailedRestore(e)  # TF's 30 lines at exit.
      raise
    status.expect_partial()  # The slots, iterator, counters: not read.
    status.assert_existing_objects_matched()
  except AssertionError as e:
    raise CheckpointMismatchError(
        _MismatchMessage(checkpoint_path, task, e)) from None
  except ValueError as e:  # A shape that differs.
    raise CheckpointMismatchError(
        'Checkpoint %s does not fit %s: %s Give this job the --model and '
        'params the trainer ran with.' % (
            checkpoint_path, task.path, str(e).split('\n')[0])) from None
  ema_classes = EvalAverageClasses(task)
  n = 0
  if ema_classes:
    n = LoadEmaAverages(checkpoint_path, task, ema_classes,
                        required=AveragedVariableNames(task))
  return int(task.global_step.numpy()), n


def RestoreNewestForEval(candidates, task, report):
  """`RestoreForEval` of the newest readable checkpoint of `candidates`.

  Args:
    candidates: checkpoint prefixes, newest first (`ResolveEvalCheckpoint`).
    task: as for `RestoreForEval`.
    report: callable(str): shows, once a checkpoint is restored, one
      warning line per newer one that cannot be read (its `.index` gone,
      or damaged), naming it, why, and the checkpoint used instead.

  Returns:
    (the restored prefix, its global step, the number of averages loaded).

  Raises:
    CheckpointMismatchError: as `RestoreForEval` (not skipped: the next
      checkpoint would be of the same model).
    checkpointer.NoReadableCheckpointError: none of them can be read.
  """
  errors = []
  for path in candidates:
    if not tf.io.gfile.exists(path + '.index'):
      errors.append((path, 'no %s.index: deleted, or its save did not '
                     'finish' % os.path.basename(path)))
      continue
    try:
      step, n = RestoreForEval(path, task)
    except CheckpointMismatchError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      # A damaged file surfaces as OpError, IndexError, DecodeError...
      errors.append((path, '%s: %s' % (type(e).__name__,
                                        str(e).split('\n')[0][:200])))
      continue
    for bad, why in errors:
      report('WARNING: checkpoint %s cannot be read (%s); using %s (global '
             'step %d) instead.' % (bad, why, path, step))
    return path, step, n
  raise checkpointer_lib.NoReadableCheckpointError(
      'No checkpoint of %s can be read: %s. If these files are damaged, put '
      'back a good copy of them.' % (
          os.path.dirname(candidates[0]) if candidates else '?', errors))
