"""Checkpointer: rolling checkpoints, resume, the best checkpoint, warm start.

One `tf.train.Checkpoint` over the task (weights, optimizer slots,
accumulators, EMA copies, counters, tracker statistics, the global step) and,
in one process, the input iterator. Saves go through
`tf.train.CheckpointManager`, which writes the checkpoint files first and
then atomically replaces the small `checkpoint` state file, so a crash while
saving leaves the state pointing at the previous, complete checkpoint. If
the newest checkpoint still cannot be read (a truncated or corrupted file),
`Restore` reports it and falls back to the previous one.

Checkpoints are numbered by global step: `ckpt-<global_step>`.
"""

import json
import os
import re

from absl import logging
import tensorflow as tf

from params import BaseLayer
from learner.optimizers import base as base_optimizer
from learner.optimizers import var_grad

_VAR_SUFFIX = '/.ATTRIBUTES/VARIABLE_VALUE'
VARIABLE_NAMES_FILE = 'variable_names.json'


class Checkpointer:
  """Saves and restores a tf.train.Checkpoint in `directory`.

  Args:
    checkpoint: the tf.train.Checkpoint to save and restore.
    directory: where checkpoints go (created on the first save).
    max_to_keep: rolling checkpoints kept.
    variable_names: optional {variable name: checkpoint key}, written once as
      `variable_names.json` next to the checkpoints so that another run can
      warm-start from them by variable name (see `InitFromCheckpoint`).
    report: callable(str) that shows a warning to the user (default: print
      to stdout); warnings also go to the absl log.
  """

  def __init__(self, checkpoint, directory, max_to_keep=3,
               variable_names=None, report=None):
    self._report = report or (lambda msg: print(msg, flush=True))
    self._checkpoint = checkpoint
    self._directory = directory
    self._manager = tf.train.CheckpointManager(
        checkpoint, directory, max_to_keep=max_to_keep)
    self._variable_names = variable_names

  @property
  def directory(self):
    return self._directory

  @property
  def latest_checkpoint(self):
    """Path prefix of the newest checkpoint, or None."""
    return self._manager.latest_checkpoint

  def Save(self, step):
    """Saves `ckpt-<step>` and returns its path prefix."""
    path = self._manager.save(checkpoint_number=int(step))
    if self._variable_names is not None:
      names_path = os.path.join(self._directory, VARIABLE_NAMES_FILE)
      if not tf.io.gfile.exists(names_path):
        tmp = names_path + '.tmp'
        with tf.io.gfile.GFile(tmp, 'w') as f:
          json.dump(self._variable_names, f, indent=1, sort_keys=True)
        tf.io.gfile.rename(tmp, names_path, overwrite=True)
    return path

  def Restore(self, expect_partial=False):
    """Restores the newest readable checkpoint; returns its path or None.

    Tries the checkpoints from newest to oldest; each unreadable one is
    reported with a warning (path and error) and skipped.

    Args:
      expect_partial: True when the checkpoint holds objects this run does
        not build (e.g. optimizer slots in an eval-only run).

    Raises:
      RuntimeError: if checkpoints exist but none can be read.
    """
    candidates = list(reversed(self._manager.checkpoints))
    if not candidates:
      return None
    errors = []
    for path in candidates:
      try:
        status = self._checkpoint.restore(path)
        if expect_partial:
          status.expect_partial()
        else:
          status.assert_existing_objects_matched()
      except Exception as e:  # pylint: disable=broad-except
        # A damaged file surfaces as OpError, IndexError, ValueError, ...
        msg = '%s: %s' % (type(e).__name__, str(e).split('\n')[0])
        logging.warning('Checkpoint %s is unreadable (%s); trying the '
                        'previous one.', path, msg)
        self._report('WARNING: checkpoint %s is unreadable (%s); using the '
                     'previous one.' % (path, msg))
        errors.append((path, msg))
        continue
      if errors:
        logging.warning('Restored %s after skipping %d unreadable '
                        'checkpoint(s).', path, len(errors))
      return path
    raise RuntimeError(
        'No checkpoint in %s can be read: %s. Delete the directory to start '
        'over.' % (self._directory, errors))


class BestCheckpoint:
  """Keeps the checkpoint with the best dev metric apart, in `directory`.

  The best value and its step are in `directory/best.json`, so a resumed run
  keeps comparing against them.

  Args:
    checkpoint: the tf.train.Checkpoint to save.
    directory: e.g. '<logdir>/best'.
    mode: 'min' or 'max'.
  """

  def __init__(self, checkpoint, directory, mode):
    if mode not in ('min', 'max'):
      raise ValueError("BestCheckpoint: mode must be 'min' or 'max', got %r."
                       % (mode,))
    self._manager = tf.train.CheckpointManager(checkpoint, directory,
                                               max_to_keep=1)
    self._json = os.path.join(directory, 'best.json')
    self._mode = mode
    self.best = None
    if tf.io.gfile.exists(self._json):
      with tf.io.gfile.GFile(self._json) as f:
        self.best = json.load(f)

  def IsBetter(self, value):
    """True if `value` beats the best so far (or there is none)."""
    if self.best is None:
      return True
    if self._mode == 'min':
      return value < self.best['value']
    return value > self.best['value']

  def MaybeSave(self, step, value, metric_name):
    """Saves if `value` is the best so far; returns True if it saved."""
    value = float(value)
    if not self.IsBetter(value):
      return False
    path = self._manager.save(checkpoint_number=int(step))
    self.best = {'metric': metric_name, 'value': value, 'step': int(step),
                 'checkpoint': path}
    tmp = self._json + '.tmp'
    with tf.io.gfile.GFile(tmp, 'w') as f:
      json.dump(self.best, f, indent=1, sort_keys=True)
    tf.io.gfile.rename(tmp, self._json, overwrite=True)
    return True


def VariableCheckpointKeys(layer, root_key='task'):
  """Returns {variable name: checkpoint key} for a layer's variables.

  Keys are those of `tf.train.Checkpoint(<root_key>=layer)`, e.g.
  'task/_private_children/enc/_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE'.
  """
  out = {}

  def _Walk(obj, prefix):
    if isinstance(obj, BaseLayer):
      # pylint: disable=protected-access
      for name, var in obj._private_vars.items():
        out[_VarName(var)] = '%s/_private_vars/%s%s' % (prefix, name,
                                                         _VAR_SUFFIX)
      for name, child in obj._private_children.items():
        _Walk(child, '%s/_private_children/%s' % (prefix, name))
    elif isinstance(obj, (list, tuple)):
      for i, c in enumerate(obj):
        _Walk(c, '%s/%d' % (prefix, i))
    elif isinstance(obj, dict):
      for k, c in obj.items():
        _Walk(c, '%s/%s' % (prefix, k))

  _Walk(layer, root_key)
  return out


def _VarName(var):
  name = var.name
  return name[:-2] if name.endswith(':0') else name


def _ResolveCheckpointPath(path):
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is None:
      ckpt_dir = os.path.join(path, 'ckpt')
      latest = (tf.train.latest_checkpoint(ckpt_dir)
                if tf.io.gfile.isdir(ckpt_dir) else None)
    if latest is None:
      raise ValueError('init_from_checkpoint: no checkpoint in directory %r.'
                       % path)
    return latest
  return path


def InitFromCheckpoint(path, variables, rules=()):
  """Warm-starts `variables` from another run's checkpoint by variable name.

  Names in the source checkpoint come from its `variable_names.json` (written
  by `Checkpointer.Save`) or, without it, from its checkpoint keys
  ('task/_private_children/enc/_private_vars/w' -> 'task/enc/w'). Each source
  name is mapped with the first rule (regex, replacement) whose regex
  `re.search`-es it (`re.sub`), or kept as it is when `rules` is empty; a
  mapped name that is one of `variables` is assigned. Only `variables` are
  touched (pass the model variables: optimizer slots are not taken).

  Args:
    path: a checkpoint prefix, or a directory holding checkpoints (or a
      logdir whose 'ckpt' subdirectory holds them).
    variables: {variable name: tf.Variable} to initialise.
    rules: list of (regex, replacement) pairs.

  Returns:
    {our variable name: source variable name} of the variables assigned.

  Raises:
    ValueError: if the checkpoint cannot be found, a shape differs, or no
      variable at all is matched (the message lists both sets of names).
  """
  prefix = _ResolveCheckpointPath(path)
  try:
    reader = tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    raise ValueError('init_from_checkpoint: cannot read %r: %s' %
                     (path, e)) from None
  shapes = reader.get_variable_to_shape_map()
  names_file = os.path.join(os.path.dirname(prefix), VARIABLE_NAMES_FILE)
  if tf.io.gfile.exists(names_file):
    with tf.io.gfile.GFile(names_file) as f:
      source = json.load(f)
    source = {n: k for n, k in source.items() if k in shapes}
  else:
    source = {}
    for key in shapes:
      if not key.endswith(_VAR_SUFFIX):
        continue
      parts = key[:-len(_VAR_SUFFIX)].split('/')
      parts = [s for s in parts if s not in ('_private_children',
                                             '_private_vars')]
      source['/'.join(parts)] = key
  assigned = {}
  for src_name, key in sorted(source.items()):
    dst_name = src_name
    if rules:
      dst_name = None
      for regex, repl in rules:
        if re.search(regex, src_name):
          dst_name = re.sub(regex, repl, src_name)
          break
    if dst_name is None or dst_name not in variables:
      continue
    var = variables[dst_name]
    value = reader.get_tensor(key)
    if list(value.shape) != var.shape.as_list():
      raise ValueError(
          'init_from_checkpoint: %r (from %r) has shape %s in the checkpoint '
          'but %s here.' % (dst_name, src_name, list(value.shape),
                            var.shape.as_list()))
    var.assign(value)
    assigned[dst_name] = src_name
  if not assigned:
    raise ValueError(
        'init_from_checkpoint: no variable of %r matched. Checkpoint '
        'variables: %s; ours: %s; rules: %s. Add (regex, replacement) rules '
        'mapping their names to ours.' % (path, sorted(source),
                                          sorted(variables), list(rules)))
  logging.info('Warm-started %d variables from %s: %s', len(assigned), prefix,
               assigned)
  return assigned


def EvalAverageClasses(task):
  """The averaging optimizer classes (Ema) in the task's learners' params.

  Asked through `BaseOptimizer.EvalAverageClasses`, which wrappers delegate
  to their inner optimizers, so no optimizer is built. A learner given
  `optimizer_fn` instead of `optimizer` params is not searched. A non-empty
  result means the task evaluates on the averages of its weights.
  """
  out = []
  for lp in task.LearnerParamsList():
    opt = lp.optimizer
    cls = getattr(opt, 'cls', None)
    if isinstance(cls, type) and issubclass(cls, base_optimizer.BaseOptimizer):
      out.extend(cls.EvalAverageClasses(opt))
  return out


def LoadEmaAverages(checkpoint_path, task, ema_classes):
  """Assigns each model variable its EMA average from a training checkpoint.

  Reads the averages that the averaging optimizers saved, under the keys
  their classes give (`AverageCheckpointKeySuffix`), without building any
  optimizer.

  Args:
    checkpoint_path: a checkpoint written while training.
    task: the built task whose model variables get the averages.
    ema_classes: the averaging optimizer classes (see `EvalAverageClasses`).

  Returns:
    The number of variables assigned.

  Raises:
    ValueError: if a trainable model variable has no average in the
      checkpoint.
  """
  reader = tf.train.load_checkpoint(checkpoint_path)
  keys = list(reader.get_variable_to_shape_map())
  n = 0
  for var in task.ModelVars().Flatten():
    suffixes = tuple(c.AverageCheckpointKeySuffix(var) for c in ema_classes)
    found = [k for k in keys if k.endswith(suffixes)]
    if not found:
      if var.trainable:
        raise ValueError(
            'Checkpoint %s has no EMA average of %r; it was not trained with '
            'this Ema learner.' % (checkpoint_path, var_grad.VarName(var)))
      continue
    var.assign(reader.get_tensor(found[0]))
    n += 1
  return n


class CheckpointMismatchError(ValueError):
  """A checkpoint does not hold every variable of the model restoring it."""


def RestoreForEval(checkpoint_path, task):
  """Restores a training checkpoint into a task built without learners.

  What the jobs that only read a run's checkpoints (the evaler, the export)
  restore with. Strict: every model variable and the global step must get a value from
  the checkpoint (its optimizer slots, iterator and counters are not
  needed and are ignored). When the task's learners average their weights
  (`EvalAverageClasses`), the model variables then get the averages, as
  evaluation uses them.

  Args:
    checkpoint_path: a checkpoint prefix, e.g. '<logdir>/ckpt/ckpt-200'.
    task: a BaseTask built from the run's params, without `CreateLearners`.

  Returns:
    (the checkpoint's global step as an int, the number of EMA averages
    loaded: 0 when the task does not evaluate on averages).

  Raises:
    CheckpointMismatchError: a variable of the task is not in the
      checkpoint, or has another shape (the checkpoint is of another
      model: the message names the variables and the fix).
    tf.errors.NotFoundError: the checkpoint's files are gone.
  """
  ckpt = tf.train.Checkpoint(task=task)
  try:
    status = ckpt.restore(checkpoint_path)
    status.expect_partial()  # No warnings about the slots left unread.
    status.assert_existing_objects_matched()
  except AssertionError as e:
    names = re.findall(r"<tf.Variable '([^']+?)(?::0)?'", str(e))
    raise CheckpointMismatchError(
        'Checkpoint %s does not restore every variable of %s (missing: %s). '
        'It was written by another model: give this job the --model and '
        'params the trainer ran with.' % (
            checkpoint_path, task.path,
            ', '.join(names) or str(e).split('\n')[0])) from None
  except ValueError as e:  # A shape that differs.
    raise CheckpointMismatchError(
        'Checkpoint %s does not fit %s: %s Give this job the --model and '
        'params the trainer ran with.' % (
            checkpoint_path, task.path, str(e).split('\n')[0])) from None
  ema_classes = EvalAverageClasses(task)
  n = LoadEmaAverages(checkpoint_path, task, ema_classes) if ema_classes else 0
  return int(task.global_step.numpy()), n
