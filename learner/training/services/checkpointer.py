"""Checkpointer: rolling checkpoints, resume, the best checkpoint.

One `tf.train.Checkpoint` over the task (weights, optimizer slots,
accumulators, EMA copies, counters, tracker statistics, the global step) and,
in one process, the input iterator (unless
task.train.checkpoint_input_iterator is False; `Restore(optional=...)` takes
a checkpoint with or without it). Saves go through
`tf.train.CheckpointManager`, which writes the checkpoint files first and
then atomically replaces the small `checkpoint` state file, so a crash while
saving leaves the state pointing at the previous, complete checkpoint. A
kill after the files and before the state file leaves a complete checkpoint
newer than the state names: it is found from the files (`NewerComplete`),
reported in one line and resumed from, so those steps are not lost. If
the newest checkpoint still cannot be read (a truncated or corrupted file),
`Restore` reports it and falls back to the previous one.

Checkpoints are numbered by global step: `ckpt-<global_step>`.

Faults it survives, each reported in one line: a missing or unreadable
`checkpoint` state file (the newest complete checkpoint is found from the
directory's own files, `CompleteCheckpoints`); `ckpt-<N>_temp/` directories
left by a killed save (removed by `PrepareForTraining`, which also probes
that the directory is writable before any training work); a checkpoint of
another model (refused, naming the variables it lacks); a damaged
`best/best.json` or `variable_names.json` (an error naming the file).
Nothing here deletes a checkpoint except the rolling `max_to_keep`.

The jobs that only read checkpoints (eval, evaler, export) restore with
`learner.training.jobs.eval_restore.RestoreForEval`, built on the functions here.
A warm start from another run's checkpoint is `warm_start.InitFromCheckpoint`.
"""

import contextlib
import errno
import glob
import json
import math
import os
import re
import time

from absl import logging
import tensorflow as tf
from tensorflow.python.checkpoint import graph_view  # pylint: disable=g-direct-tensorflow-import

from learner.optimizers.wrappers import replica_local
from learner.training.services import failed_restore
from learner.training.services import skipped_steps
from params import BaseLayer
from params import VariableName

VAR_SUFFIX = '/.ATTRIBUTES/VARIABLE_VALUE'
VARIABLE_NAMES_FILE = 'variable_names.json'
STATE_FILE = 'checkpoint'
_PROBE_FILE = '.write_probe'
_OTHER_LOGDIR = ('If this logdir belongs to another run or model, choose '
                 'another --logdir')


class CheckpointError(ValueError):
  """A checkpoint or a file next to it cannot be used; the message says why."""


class NoReadableCheckpointError(CheckpointError, RuntimeError):
  """Checkpoints exist but none of them can be read."""


class CheckpointMismatchError(CheckpointError):
  """A checkpoint does not hold every variable of the model restoring it."""


class CheckpointSaveError(CheckpointError):
  """A save failed (full disk, file-size limit); the last one is intact."""


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_DISK_FULL_TEXTS = tuple(os.strerror(n) for n in _DISK_FULL_ERRNOS)


def IsDiskFull(error):
  """True if `error` (OSError or tf.errors.OpError) is a full disk.

  ENOSPC (no space left), EFBIG (a file-size limit, RLIMIT_FSIZE) or
  EDQUOT (a quota), by errno or, for TensorFlow's errors, by their text.
  """
  return (getattr(error, 'errno', None) in _DISK_FULL_ERRNOS or
          any(t in str(error) for t in _DISK_FULL_TEXTS))


@contextlib.contextmanager
def DiskFullAsOneLine(logdir):
  """Turns a full disk while a train job writes `logdir` into one line.

  Any write of the job (summaries, params, metrics; the checkpoint saves
  raise `CheckpointSaveError` themselves) that fails because the disk is
  full (`IsDiskFull`) is raised again as a `CheckpointSaveError` naming the
  logdir and its last good checkpoint. Other errors pass unchanged.
  """
  try:
    yield
  except (OSError, tf.errors.OpError) as e:
    if not IsDiskFull(e):
      raise
    last = NewestCheckpoint(os.path.join(logdir, 'ckpt'))
    raise CheckpointSaveError(
        'Writing to %s failed (%s: %s): its disk is full or a file-size '
        'limit was reached. %s' % (
            logdir, type(e).__name__, _LastLine(e),
            _ResumeFrom(last))) from None


def _ResumeFrom(last):
  """The end of a full-disk message: the last good checkpoint, the fix."""
  if not last:
    return ('No checkpoint was saved yet: free space on that disk (or raise '
            'the limit), then run the same command again.')
  return ('The last good checkpoint, %s, is intact: free space on that disk '
          '(or raise the limit), then run the same command again to resume '
          'from it.' % last)


def _LastLine(error):
  """The cause in an error's text: its first line less TF's op prefix.

  E.g. '{{function_node ...}} /d/ckpt-30_temp/part...; File too large
  [Op:SaveV2]' -> 'File too large'.
  """
  text = str(error).split('\n')[0]
  text = re.sub(r'\s*\[Op:\w+\]$', '', text)
  return text.rsplit('; ', 1)[-1].strip() or type(error).__name__


def CompleteCheckpoints(directory, prefix='ckpt'):
  """Path prefixes of the complete checkpoints in `directory`, oldest first.

  Found from the files themselves, not the state file: a checkpoint
  `<prefix>-<N>` is complete when its `.index` and every data shard its
  file names announce (`.data-00000-of-0000K` .. `K-1`) exist.

  Returns:
    list of str, sorted by N.
  """
  found = []
  for index in tf.io.gfile.glob(os.path.join(directory, prefix + '-*.index')):
    base = index[:-len('.index')]
    m = re.fullmatch(re.escape(prefix) + r'-(\d+)', os.path.basename(base))
    shards = tf.io.gfile.glob(base + '.data-*-of-*')
    if not m or not shards:
      continue
    total = int(shards[0].rsplit('-of-', 1)[1])
    names = {'%s.data-%05d-of-%05d' % (base, i, total) for i in range(total)}
    if names <= set(shards):
      found.append((int(m.group(1)), base))
  return [b for _, b in sorted(found)]


def _Step(path):
  """The N of a checkpoint path prefix `.../<prefix>-<N>` (-1 if none)."""
  m = re.search(r'-(\d+)$', path or '')
  return int(m.group(1)) if m else -1


def NewerComplete(directory, latest):
  """The complete checkpoints of `directory` newer than `latest`, oldest first.

  A save killed after its files were written and before the state file was
  replaced leaves such a checkpoint (`CompleteCheckpoints` finds it from
  its files); the state file still names `latest`.

  Args:
    directory: the checkpoint directory.
    latest: path prefix of the newest checkpoint the state file names.

  Returns:
    list of str path prefixes, by step; [] when there is none.
  """
  newest = _Step(latest)
  return [c for c in CompleteCheckpoints(directory) if _Step(c) > newest]


def _WriteStateFile(directory, paths, state=None):
  """Writes the state file listing `paths` (oldest first; the last newest).

  CheckpointManager rotates only the listed checkpoints whose timestamp is
  after the state's `last_preserved_timestamp`, and lists (so restores)
  only those: each path keeps its timestamp from `state` (the previous
  state file) or gets its index file's time, so every one is rotated and
  restorable as if the manager had saved it.
  """
  old = {}
  preserved = 0.0
  if state is not None:
    preserved = state.last_preserved_timestamp
    old = dict(zip(state.all_model_checkpoint_paths,
                   state.all_model_checkpoint_timestamps))
  stamps = [old.get(p) or max(os.path.getmtime(p + '.index'), preserved + 1e-3)
            for p in paths]
  tf.compat.v1.train.update_checkpoint_state(
      directory, paths[-1], all_model_checkpoint_paths=paths,
      all_model_checkpoint_timestamps=stamps,
      last_preserved_timestamp=preserved)


def _ReadStateFile(directory):
  """(problem or None): why the state file of `directory` cannot be used."""
  path = os.path.join(directory, STATE_FILE)
  if not tf.io.gfile.exists(path):
    return 'is missing'
  try:
    state = tf.train.get_checkpoint_state(directory)
  except (ValueError, tf.errors.OpError) as e:
    return 'is unreadable (%s)' % str(e).split('\n')[0]
  if state is None:
    return 'is unreadable (not a CheckpointState text proto)'
  return None


class Checkpointer:
  """Saves and restores a tf.train.Checkpoint in `directory`.

  Args:
    checkpoint: the tf.train.Checkpoint to save and restore.
    directory: where checkpoints go (created on the first save).
    max_to_keep: rolling checkpoints kept.
    variable_names: optional {variable name: checkpoint key}, written once as
      `variable_names.json` next to the checkpoints so that another run can
      warm-start from them by variable name (see
      `warm_start.InitFromCheckpoint`).
    report: callable(str) that shows a warning to the user (default: print
      to stdout); warnings also go to the absl log.
    keep_every_n_hours: also keep one checkpoint per this many hours beyond
      max_to_keep (Lingvo's save_keep_checkpoint_every_n_hours); None or 0:
      off.
  """

  def __init__(self, checkpoint, directory, max_to_keep=3,
               variable_names=None, report=None, model_variables=None,
               read_only=False, keep_every_n_hours=None):
    self._report = report or (lambda msg: print(msg, flush=True))
    self._checkpoint = checkpoint
    self._directory = directory
    self._variable_names = variable_names
    self._model_variables = list(model_variables or ())
    self._found, state_ok = self._FindWithoutStateFile(read_only)
    self.restored_objects = {'absent': [], 'not_built': []}
    # CheckpointManager reads the state file; a read-only job with a bad
    # one restores from `self._found` alone (and cannot save).
    self._manager = None if read_only and not state_ok else (
        tf.train.CheckpointManager(
            checkpoint, directory, max_to_keep=max_to_keep,
            keep_checkpoint_every_n_hours=keep_every_n_hours or None))

  def _FindWithoutStateFile(self, read_only):
    """The complete checkpoints, when the state file cannot list them.

    A missing or unreadable state file with checkpoints beside it is
    reported in one line; unless `read_only`, it is rewritten to list them
    (so CheckpointManager keeps rotating them), or, with no complete
    checkpoint, an unreadable one is moved aside to `checkpoint.unreadable`.

    Returns:
      (the complete checkpoints a read-only job restores from, oldest
      first, or [] when the manager's state file lists them (fine, or
      rewritten here) or there is none; False if the state file exists but
      cannot be read and was left in place).
    """
    if not tf.io.gfile.isdir(self._directory):
      return [], True
    problem = _ReadStateFile(self._directory)
    if problem is None:
      return self._FindNewerThanStateFile(read_only), True
    found = CompleteCheckpoints(self._directory)
    state = os.path.join(self._directory, STATE_FILE)
    if found:
      self._report(
          'WARNING: %s %s; found %d complete checkpoint(s) in the directory, '
          'the newest %s: resuming from the newest readable one%s.' % (
              state, problem, len(found), os.path.basename(found[-1]),
              '' if read_only else ' (state file rewritten)'))
      if not read_only:  # The manager reads the rewritten file.
        _WriteStateFile(self._directory, found)
        return [], True
    elif tf.io.gfile.exists(state) and not read_only:
      tf.io.gfile.rename(state, state + '.unreadable', overwrite=True)
      self._report('WARNING: %s %s and there is no complete checkpoint '
                   'beside it; moved it to %s.unreadable.' %
                   (state, problem, STATE_FILE))
      return [], True
    return found, not tf.io.gfile.exists(state)

  def _FindNewerThanStateFile(self, read_only):
    """The complete checkpoints newer than the (readable) state file's.

    Reported in one line; unless `read_only`, appended to the state file's
    list (its older entries unchanged, so CheckpointManager rotates what it
    rotated before and never a checkpoint it kept aside).

    Returns:
      For a read-only job with newer checkpoints, the state file's
      checkpoints followed by the newer ones, oldest first; else [] (the
      manager reads the state file, updated if it was behind).
    """
    state = tf.train.get_checkpoint_state(self._directory)  # Absolute paths.
    latest = state.model_checkpoint_path
    listed = list(state.all_model_checkpoint_paths) or [latest]
    newer = NewerComplete(self._directory, latest)
    if not newer:
      return []
    self._report(
        'WARNING: %s names %s, but %s beside it is complete and newer (a '
        'save stopped before it updated the state file): resuming from '
        '%s%s.' % (os.path.join(self._directory, STATE_FILE),
                   os.path.basename(latest) if latest else 'no checkpoint',
                   os.path.basename(newer[-1]), os.path.basename(newer[-1]),
                   '' if read_only else ' (state file updated)'))
    found = [p for p in listed if _Step(p) < _Step(newer[0])] + newer
    if read_only:
      return found
    _WriteStateFile(self._directory, found, state)
    return []

  @property
  def directory(self):
    return self._directory

  @property
  def latest_checkpoint(self):
    """Path prefix of the newest checkpoint, or None."""
    if self._found:  # A read-only job's, past a stale or bad state file.
      return self._found[-1]
    return self._manager.latest_checkpoint if self._manager else None

  def PrepareForTraining(self):
    """Before training: removes stale `*_temp` dirs, probes a write.

    A save killed half-way leaves `ckpt-<N>_temp/` (TF writes the shards
    there, then renames them); they are never complete, so they are
    removed (one line says how many). Then a small file is written and
    removed, so a read-only, unwritable or full directory fails now rather
    than at the first save.

    Raises:
      CheckpointError: the directory cannot be written (naming it, the
        error and what to do).
    """
    try:
      tf.io.gfile.makedirs(self._directory)
      stale = [d for d in glob.glob(os.path.join(self._directory,
                                                 'ckpt-*_temp'))
               if os.path.isdir(d)]
      for d in stale:
        tf.io.gfile.rmtree(d)
      if stale:
        self._report('Removed %d unfinished save(s) (%s) left in %s.' % (
            len(stale), ', '.join(sorted(os.path.basename(d)
                                         for d in stale)), self._directory))
      probe = os.path.join(self._directory, _PROBE_FILE)
      with tf.io.gfile.GFile(probe, 'w') as f:
        f.write('probe')
      tf.io.gfile.remove(probe)
    except (OSError, tf.errors.OpError) as e:
      raise CheckpointError(
          'Checkpoint directory %s cannot be written (%s: %s); nothing was '
          'trained. Make it writable or free space on its disk, or choose '
          'another --logdir.' % (self._directory, type(e).__name__,
                                 str(e).split('\n')[0])) from None

  def Save(self, step):
    """Saves `ckpt-<step>` and returns its path prefix.

    Raises:
      skipped_steps.NonFiniteTrainingError: a model variable given as
        `model_variables` is NaN/Inf (nothing is saved, so the newest
        checkpoint stays the last good one).
      CheckpointSaveError: the files cannot be written (a full disk, a
        file-size limit): one line naming the directory and the last good
        checkpoint, which is left intact.
    """
    if self._manager is None:
      raise CheckpointError('Checkpointer(read_only=True) of %s cannot save.'
                            % self._directory)
    bad = skipped_steps.NonFiniteVariables(self._model_variables)
    if bad:
      raise skipped_steps.NonFiniteTrainingError(
          'Not saving ckpt-%d: the weights %s are NaN/Inf (an applied update '
          'overflowed them); the last checkpoint, %s, is unchanged. Lower the '
          'learning rate or set the learner\'s check_finite_weights : True, '
          'which skips such an update.' % (int(step), bad[:5],
                                          self.latest_checkpoint or 'none'))
    try:
      path = self._manager.save(checkpoint_number=int(step))
    except (OSError, tf.errors.OpError) as e:
      raise self._SaveFailed(step, e) from None
    self._found = []
    if self._variable_names is not None:
      names_path = os.path.join(self._directory, VARIABLE_NAMES_FILE)
      if not tf.io.gfile.exists(names_path):
        tmp = names_path + '.tmp'
        with tf.io.gfile.GFile(tmp, 'w') as f:
          json.dump(self._variable_names, f, indent=1, sort_keys=True)
        tf.io.gfile.rename(tmp, names_path, overwrite=True)
    return path

  def _SaveFailed(self, step, error):
    """The CheckpointSaveError for a save of `step` that raised `error`.

    The half-written `ckpt-<step>_temp/` is removed (best effort; a next
    run's `PrepareForTraining` removes what is left). The state file was
    not updated, so the newest checkpoint is still the last good one.
    """
    for d in glob.glob(os.path.join(self._directory,
                                    'ckpt-%d_temp' % int(step))):
      if os.path.isdir(d):
        tf.io.gfile.rmtree(d)
    last = (self._manager.latest_checkpoint if self._manager else None)
    why = ('its disk is full or a file-size limit was reached'
           if IsDiskFull(error) else 'the directory cannot be written')
    return CheckpointSaveError(
        'Saving checkpoint ckpt-%d in %s failed (%s: %s): %s. %s' % (
            int(step), self._directory, type(error).__name__,
            _LastLine(error), why, _ResumeFrom(last or self.latest_checkpoint)))

  def Restore(self, expect_partial=False, optional=()):
    """Restores the newest readable checkpoint; returns its path or None.

    Tries the checkpoints from newest to oldest; each unreadable one is
    reported with a warning (path and error) and skipped. Every object this
    run built must be in the checkpoint (`assert_existing_objects_matched`),
    except the root objects named in `optional`. What the restored
    checkpoint lacked or held beyond this run is in `restored_objects`.

    Args:
      expect_partial: True when the checkpoint may hold objects this run
        does not build (e.g. optimizer slots in an eval-only run).
      optional: names of root objects of the tf.train.Checkpoint (e.g.
        'iterator') that a checkpoint may lack, or hold while this run does
        not build them: the first are left as they are (restored without
        them), the second are not read.

    Raises:
      CheckpointError: a checkpoint lacks variables this run built (written
        by another model: the message names them), or holds the copies of
        another replica count (EASGD / local SGD: one line, not a damaged
        file).
      NoReadableCheckpointError: checkpoints exist but none can be read.
    """
    candidates = list(reversed(self._found or (
        self._manager.checkpoints if self._manager else [])))
    if not candidates:
      return None
    errors = []
    for path in candidates:
      try:
        checkpoint, self.restored_objects = self._CheckpointFor(path,
                                                                optional)
        status = checkpoint.restore(path)
        if expect_partial or self.restored_objects['not_built']:
          status.expect_partial()
        status.assert_existing_objects_matched()
      except AssertionError as e:
        raise CheckpointMismatchError(self._MismatchMessage(path, e)) from None
      except replica_local.ReplicaCountError as e:  # Not a damaged file.
        failed_restore.QuietFailedRestore(e)
        raise CheckpointError('%s Nothing was trained.' % e) from None
      except Exception as e:  # pylint: disable=broad-except
        # A damaged file surfaces as OpError, IndexError, ValueError, ...
        failed_restore.QuietFailedRestore(e)
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
    raise NoReadableCheckpointError(
        'No checkpoint in %s can be read: %s. %s; if these files are '
        'damaged, put back a good copy of them.' % (
            self._directory, errors, _OTHER_LOGDIR))

  def _CheckpointFor(self, path, optional):
    """The checkpoint object to restore `path` into, and what differs.

    Returns:
      (the tf.train.Checkpoint: ours, or one over our root objects less
      those `path` lacks among `optional`; {'absent': sorted names of
      `optional` we build that `path` lacks, 'not_built': sorted names of
      `optional` that `path` holds and we do not build}).
    """
    differs = {'absent': [], 'not_built': []}
    if not optional:
      return self._checkpoint, differs
    saved = SavedRootObjects(path)
    # pylint: disable-next=protected-access
    ours = dict(self._checkpoint._trackable_children())
    differs['absent'] = sorted(n for n in optional
                               if n in ours and n not in saved)
    differs['not_built'] = sorted(n for n in optional
                                  if n in saved and n not in ours)
    if not differs['absent']:
      return self._checkpoint, differs
    kept = {n: o for n, o in ours.items()
            if n not in differs['absent'] and n != 'save_counter'}
    return tf.train.Checkpoint(**kept), differs

  def _MismatchMessage(self, path, error):
    """One line: which of our variables the checkpoint at `path` lacks."""
    missing = []
    task = getattr(self._checkpoint, 'task', None)
    try:
      keys = set(tf.train.load_checkpoint(path).get_variable_to_shape_map())
    except (tf.errors.OpError, ValueError):
      keys = None
    if task is not None and keys is not None:
      missing = sorted(name for name, key in
                       VariableCheckpointKeys(task).items() if key not in keys)
    what = ('lacks %d variable(s) of this model: %s%s' % (
        len(missing), missing[:8], ' ...' if len(missing) > 8 else '')
            if missing else 'does not match this model (%s)' %
            str(error).split('\n')[0][:300])
    return ('Checkpoint %s %s; it was written by another model or '
            'experiment. Use the --model that wrote it. %s.' %
            (path, what, _OTHER_LOGDIR))


def SavedRootObjects(path):
  """Names of the root objects saved in the checkpoint `path`.

  E.g. {'task', 'iterator', 'save_counter'} for a trainer's checkpoint
  with its input iterator (keys 'iterator/.ATTRIBUTES/ITERATOR_STATE', ...).

  Raises:
    tf.errors.OpError, ValueError: the checkpoint cannot be read.
  """
  keys = tf.train.load_checkpoint(path).get_variable_to_shape_map()
  return {k.split('/', 1)[0] for k in keys if '/' in k}


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
      self.best = _ReadBestRecord(self._json,
                                  tf.train.latest_checkpoint(directory))

  def IsBetter(self, value):
    """True if `value` beats the best so far (or there is none)."""
    if self.best is None:
      return True
    if self._mode == 'min':
      return value < self.best['value']
    return value > self.best['value']

  def MaybeSave(self, step, value, metric_name):
    """Saves if `value` is the best so far; returns True if it saved.

    A NaN or infinite value is never the best (nor kept in best.json).
    """
    value = float(value)
    if not math.isfinite(value) or not self.IsBetter(value):
      return False
    path = self._manager.save(checkpoint_number=int(step))
    self.best = {'metric': metric_name, 'value': value, 'step': int(step),
                 'checkpoint': path}
    tmp = self._json + '.tmp'
    with tf.io.gfile.GFile(tmp, 'w') as f:
      # A best value is finite (a NaN or inf is never kept as best), so
      # this stays strict JSON.
      json.dump(self.best, f, indent=1, sort_keys=True, allow_nan=False)
    tf.io.gfile.rename(tmp, self._json, overwrite=True)
    return True


def _ReadBestRecord(path, best_checkpoint):
  """best.json's record; CheckpointError naming the file if it is damaged.

  Not recovered by guessing: the value can only come from evaluating the
  best checkpoint again, and a record taken as empty would let a worse
  evaluation replace the best checkpoint (kept one at a time).
  """
  try:
    with tf.io.gfile.GFile(path) as f:
      record = json.load(f)
    value = float(record['value'])
    if value != value:
      raise ValueError('value is NaN')
    int(record['step'])
    return record
  except (OSError, tf.errors.OpError, ValueError, TypeError, KeyError) as e:
    raise CheckpointError(
        '%s cannot be read (%s: %s); it holds the best dev metric, whose '
        'checkpoint is %s. Write it back as {"metric": ..., "value": ..., '
        '"step": ..., "checkpoint": ...} with that checkpoint\'s value, or '
        'move the best/ directory aside to start a new record.' % (
            path, type(e).__name__, str(e).split('\n')[0],
            best_checkpoint or 'missing')) from None


def VariableCheckpointKeys(layer, root_key='task'):
  """Returns {variable name: checkpoint key} for a layer's variables.

  Keys are those of `tf.train.Checkpoint(<root_key>=layer)`, e.g.
  'task/_private_children/enc/_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE'.
  """
  out = {}

  def _Walk(obj, prefix):
    if isinstance(obj, BaseLayer):
      for name, var in obj.OwnVariables().items():
        out[VariableName(var)] = '%s/_private_vars/%s%s' % (prefix, name,
                                                         VAR_SUFFIX)
      for name, child in obj.OwnChildren().items():
        _Walk(child, '%s/_private_children/%s' % (prefix, name))
    elif isinstance(obj, (list, tuple)):
      for i, c in enumerate(obj):
        _Walk(c, '%s/%d' % (prefix, i))
    elif isinstance(obj, dict):
      for k, c in obj.items():
        _Walk(c, '%s/%s' % (prefix, k))

  _Walk(layer, root_key)
  _KerasVariableKeys(layer, root_key, out)
  return out


def _KerasVariableKeys(layer, root_key, out):
  """Adds to `out` the keys of the Keras layers' variables in `layer`.

  A Keras layer (an attribute of a layer, or in a list/dict attribute)
  keys its variables by its own attribute names (e.g. Dense's kernel is
  '.../head/_kernel/...'), so they are read from TF's own object graph of
  the checkpoint: the path of each Keras variable from the root.
  """
  root = tf.train.Checkpoint(**{root_key: layer})  # The view holds a weakref.
  objects, paths = graph_view.ObjectGraphView(root).breadth_first_traversal()
  for obj in objects:
    if not isinstance(obj, tf.keras.Variable):
      continue
    name = VariableName(obj.value)
    if name not in out:
      out[name] = '/'.join(ref.name for ref in paths[obj]) + VAR_SUFFIX


def NewestCheckpoint(directory):
  """The newest checkpoint of `directory`: by its state file, else its files.

  Returns:
    str, the checkpoint's path prefix (e.g. '<dir>/ckpt-30'), or None when
    `directory` is missing or holds no complete checkpoint.
  """
  if not tf.io.gfile.isdir(directory):
    return None
  if _ReadStateFile(directory) is None:
    latest = tf.train.latest_checkpoint(directory)
    if latest:
      newer = NewerComplete(directory, latest)
      return newer[-1] if newer else latest
  found = CompleteCheckpoints(directory)
  return found[-1] if found else None


class SaveClock:
  """When the train loop saves: every save_interval_steps, else by time.

  Lingvo's rule: `save_interval_steps` (when not None) supersedes
  `save_interval_seconds`. By time, a checkpoint is due at the end of the
  first train loop that ends `save_interval_seconds` or more after the
  last save (or the start of this run). Several workers would each read
  their own clock and could disagree on a save, so a multi-worker run
  needs save_interval_steps (refused otherwise by the trainer's checks,
  `validate.Experiment`).

  Args:
    tp: the task's train params (`save_interval_steps`: int steps or None;
      `save_interval_seconds`: seconds).
  """

  def __init__(self, tp):
    self._steps = tp.save_interval_steps
    self._seconds = tp.save_interval_seconds
    self._last = time.monotonic()

  def Due(self, step):
    """True if a checkpoint is due at the end of a loop at global `step`."""
    if self._steps:
      return step % self._steps == 0
    return time.monotonic() - self._last >= self._seconds

  def Saved(self):
    """Restarts the clock: a checkpoint was just written."""
    self._last = time.monotonic()
