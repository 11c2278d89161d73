r"""The evaler: a job that evaluates each new checkpoint of a run, once.

    python -m learner.trainer --model=digits.MlpMomentum --logdir=D --mode=train &
    python -m learner.trainer --model=digits.MlpMomentum --logdir=D --mode=evaler

Lingvo runs an `evaler` job next to the trainer and Model Garden a
`continuous_eval` mode: a process of its own that waits for the trainer's
checkpoints (as `tf.train.checkpoints_iterator` does), restores each and
evaluates it, so evaluation never slows training down and can run on
another machine that sees the logdir. It says at start what it waits for
and its timeout; a logdir that does not exist yet is waited for. It stops
after the final checkpoint (global step >= p.task.train.max_steps, or the
step at which the trainer stopped early), when no new checkpoint came for
`timeout_secs` (default 3600 s, `--evaler_timeout_secs`), or on SIGINT
(Ctrl-C) or SIGTERM, with one line (exit 130 or 143, as the trainer; see
`stops`).

Everything it writes is under `<logdir>/evaler/` (`<logdir>/evaler_<dataset>/`
for a dataset other than the experiment's default, see `--evaler_dataset`),
or under `--evaler_dir` when given (it never touches the trainer's files,
params.txt included; on a read-only logdir without `--evaler_dir` it refuses
in one line, exit 2, before any work):
  * the TensorBoard run 'evaler': every eval metric at each checkpoint's
    global step;
  * `metrics.json`: every evaluation ({'global_step', 'checkpoint',
    'metrics'}), in step order, the best one by `p.task.eval.dev_metric`
    ('best': metric, mode, value, global step, checkpoint), the checkpoints
    it skipped ('skipped': {'global_step', 'reason': 'rotated' or
    'unreadable', and for the latter 'checkpoint', 'error'}) and, once it
    has stopped, why ('stopped').
`metrics.json` is rewritten (atomically) after each evaluation or skip and
read at start: a restarted evaler does not try a recorded checkpoint again.

Every checkpoint is accounted for. Each time the state file names a new
newest checkpoint, every checkpoint newer than the last one accounted for
(listed in `<logdir>/ckpt/checkpoint` or complete in the directory) is
evaluated, oldest first. A step the trainer saved (a multiple of
p.task.train.save_interval_steps) that its rolling `save_max_to_keep`
deleted before its turn is reported, with the fix (a larger
save_max_to_keep or a slower save interval); a checkpoint that cannot be
read is reported in one line naming it and skipped.

Checkpoints are restored strictly (`eval_restore.RestoreForEval`, the
restore of every read-only job): one that does not restore every model
variable stops the evaler with an error naming the variables (it was
written by another model). The variables of a learner that averages its
weights (Ema, given as optimizer params or through optimizer_fn) are
evaluated on their averages, the others on their raw weights, as in the
trainer's evaluations.

`EvalMetrics` is the evaluation itself (one pass over the eval input,
weighted means), shared with the trainer's evaluations.
"""

import contextlib
import json
import os
import re
import signal
import sys
import time

from absl import flags
import tensorflow as tf

from learner.training.services import checkpointer as checkpointer_lib
from learner.training.services import early_stop as early_stop_lib
from learner.training.jobs import eval_restore
from learner.training.services import logdir as logdir_lib
from learner.training.services import stops
from learner.training.services import summary as summary_lib
from learner.training.jobs import validate
from params import registry

METRICS_FILE = 'metrics.json'
DEFAULT_TIMEOUT_SECS = 3600.0


def EvalMetrics(params, task, swaps=(), batches=None):
  """Evaluates `task` on `params.eval_input`; returns {metric: mean}.

  Each metric is the mean over every evaluated batch weighted by the
  metric's weight (examples), so it equals the metric of the whole eval
  set. `p.task.eval.samples` > 0 stops after the batch that reaches that
  many examples; 0 evaluates one pass (num_epochs is set to 1).

  Args:
    params: the experiment's params ('task', 'eval_input').
    task: the built task (weights already restored).
    swaps: objects with a `SwapAverages()` context (Ema, Lookahead, SWA),
      outermost first (`EvalAverages()`): inside, their weights are
      swapped for their averages (and back after). They are entered
      innermost first, so where one averaging optimizer wraps another the
      outermost's copy is evaluated, as `eval_restore.LoadEmaAverages`
      reads it from a checkpoint.
    batches: None (read `params.eval_input`), or the eval batches to use
      instead, e.g. `EvalBatches(params)` kept by a caller that evaluates
      many times (benchmarks/steps_to_target.py).

  Returns:
    {metric name: float}; a metric whose weights sum to 0 is NaN.

  Raises:
    ValueError: the eval input yields no batch.
  """
  sums, weights = {}, {}
  with contextlib.ExitStack() as stack:
    for ema in reversed(list(swaps)):
      stack.enter_context(ema.SwapAverages())
    for batch in (_EvalBatchIterator(params) if batches is None else batches):
      metrics = summary_lib.MetricsToDict(task.EvalStep(batch))
      for name, (v, w) in metrics.items():
        sums[name] = sums.get(name, 0.0) + v * w
        weights[name] = weights.get(name, 0.0) + w
  if not sums:
    ep = params.eval_input
    raise ValueError('The eval input yielded no batch; check eval_input '
                     '(split %r, batch_size %d).' % (
                         ep.split if 'split' in ep else None, ep.batch_size))
  return {k: sums[k] / weights[k] if weights[k] else float('nan')
          for k in sums}


def _EvalBatchIterator(params):
  """Yields the eval batches: one pass, or up to `task.eval.samples`.

  One pass sets the input's num_epochs to 1; with `samples` > 0 it stops
  after the batch that reaches that many examples.
  """
  ep = params.eval_input.Copy()
  samples = params.task.eval.samples
  if not samples and 'num_epochs' in ep:
    ep.num_epochs = 1
  seen = 0
  for batch in ep.Instantiate().GetDataset():
    yield batch
    seen += int(tf.nest.flatten(batch)[0].shape[0])
    if samples and seen >= samples:
      return


def EvalBatches(params):
  """The eval batches EvalMetrics reads, as a list (to evaluate repeatedly).

  Args:
    params: the experiment's params ('task', 'eval_input').

  Returns:
    A list of the input's batches (NestedMaps of tensors), in order.
  """
  return list(_EvalBatchIterator(params))


def _Steps(steps):
  """'3, 6, 9' for up to 12 steps, else the first 10, '...' and the last."""
  steps = sorted(steps)
  shown = steps if len(steps) <= 12 else steps[:10] + ['...', steps[-1]]
  return ', '.join(str(s) for s in shown)


def CheckpointStep(path):
  """The global step in a checkpoint path 'ckpt-<step>', or None."""
  m = re.search(r'-(\d+)$', path or '')
  return int(m.group(1)) if m else None


class Evaler:
  """Evaluates each new checkpoint of `<logdir>/ckpt` once (see the module).

  Args:
    params: the experiment's params, as the trainer ran it ('task',
      'eval_input').
    logdir: the training run's logdir; checkpoints are read from
      `<logdir>/ckpt`, everything is written to `<logdir>/<job_dir>`, or
      to `out_dir`.
    timeout_secs: stop when no new checkpoint came for this many seconds
      (None: wait for ever); checked about once a second.
    poll_secs: at least this many seconds between two evaluations' starts
      (`min_interval_secs` of `tf.train.checkpoints_iterator`).
    stream: where progress lines go (default sys.stdout).
    job_dir: the directory under the logdir it writes (default 'evaler';
      `logdir.EvalerDir(dataset)`).
    out_dir: optional directory to write instead of `<logdir>/<job_dir>`
      (e.g. when the logdir is read-only).

  Attributes:
    evaluated_steps: the global steps this `Run` evaluated, in order.
  """

  def __init__(self, params, logdir, timeout_secs=DEFAULT_TIMEOUT_SECS,
               poll_secs=1.0, stream=None, job_dir=None, out_dir=None):
    self._params = params
    self._logdir = logdir
    self._ckpt_dir = os.path.join(logdir, 'ckpt')
    self._job_dir = job_dir or logdir_lib.EvalerDir()
    self._out_dir = out_dir
    self._dir = (os.path.abspath(out_dir) if out_dir else
                 os.path.join(logdir, self._job_dir))
    self._timeout = timeout_secs
    self._poll = poll_secs
    self._stream = stream or sys.stdout
    self._writer = None
    self.evaluated_steps = []
    self.record = self._LoadRecord()

  def _Print(self, msg):
    self._stream.write(msg + '\n')
    self._stream.flush()

  def _LoadRecord(self):
    path = os.path.join(self._dir, METRICS_FILE)
    if not tf.io.gfile.exists(path):
      return {'evaluations': []}
    with tf.io.gfile.GFile(path) as f:
      record = json.load(f)
    record.pop('stopped', None)  # Running again.
    return record

  def _WriteRecord(self):
    tf.io.gfile.makedirs(self._dir)
    path = os.path.join(self._dir, METRICS_FILE)
    with tf.io.gfile.GFile(path + '.tmp', 'w') as f:
      logdir_lib.DumpJson(self.record, f)
    tf.io.gfile.rename(path + '.tmp', path, overwrite=True)

  def _LastStep(self):
    """The newest global step evaluated or skipped (-1: none yet)."""
    return max(self._Accounted(), default=-1)

  def _FinalStep(self):
    """The step of the run's last checkpoint: max_steps or an early stop."""
    stopped = early_stop_lib.StoppedAt(self._logdir)
    max_steps = self._params.task.train.max_steps
    return max_steps if stopped is None else min(stopped, max_steps)

  def _Accounted(self):
    """{global step: 'evaluated' or the reason it was skipped} so far."""
    out = {e['global_step']: 'evaluated' for e in self.record['evaluations']}
    out.update((e['global_step'], e['reason'])
               for e in self.record.get('skipped', []))
    return out

  def _Newest(self):
    """The newest checkpoint the state file lists, or None (none yet)."""
    try:
      return tf.train.latest_checkpoint(self._ckpt_dir)
    except (tf.errors.OpError, ValueError):  # A state file being replaced.
      return None

  def _Pending(self, newest):
    """Checkpoints newer than the last accounted for, up to `newest`.

    Those the state file lists and those complete in the directory (each
    one up to `newest` was finished before the state file named `newest`).

    Returns:
      (their paths, oldest first; the global steps the trainer saved in
      that range, by p.task.train.save_interval_steps, that are gone).
    """
    try:
      state = tf.train.get_checkpoint_state(self._ckpt_dir)
    except (tf.errors.OpError, ValueError):  # Being replaced: the files.
      state = None
    paths = list(state.all_model_checkpoint_paths) if state else []
    paths += checkpointer_lib.CompleteCheckpoints(self._ckpt_dir)
    paths.append(newest)
    last, top = self._LastStep(), CheckpointStep(newest)
    steps = {CheckpointStep(p): p for p in paths}
    pending = [steps[s] for s in sorted(steps)
               if s is not None and last < s <= top]
    # Saves by time (save_interval_steps None): no step is known to be due.
    interval = self._params.task.train.save_interval_steps or 0
    first = (max(last, 0) // interval + 1) * interval if interval > 0 else 1
    gone = [s for s in range(first, top + 1, max(interval, 1))
            if interval > 0 and s not in steps]
    return pending, gone

  def _Skip(self, steps, reason, path=None, error=None):
    """Records `steps` as skipped for `reason` ('rotated', 'unreadable')."""
    skipped = self.record.setdefault('skipped', [])
    for step in steps:
      entry = {'global_step': step, 'reason': reason}
      if path:
        entry.update(checkpoint=path, error=error)
      skipped.append(entry)
    self._WriteRecord()

  def _ReportRotated(self, steps):
    """One line: checkpoints deleted by the trainer before their turn."""
    if not steps:
      return
    self._Skip(steps, 'rotated')
    tp = self._params.task.train
    self._Print(
        'Evaler: %d checkpoint(s) (global step %s) were deleted by the '
        'trainer\'s rolling task.train.save_max_to_keep (%d) before their '
        'turn; not evaluated. To evaluate every checkpoint, raise '
        'save_max_to_keep or save_interval_steps (now %s).' % (
            len(steps), _Steps(steps), tp.save_max_to_keep,
            tp.save_interval_steps))

  def _Final(self, final):
    """Why to stop at `final` (the run's last step), or None to go on."""
    accounted = self._Accounted()
    last = self._LastStep()
    if last < final:
      return None
    how = accounted.get(last)
    return '%s the final checkpoint (global step %d)%s' % (
        'evaluated' if how == 'evaluated' else 'reached', last,
        '' if how == 'evaluated' else ' (%s: skipped)' % how)

  def _StartLine(self, final):
    """What the evaler waits for and until when (its timeout)."""
    if self._timeout is None:
      until = 'it waits for ever for a new one'
    else:
      until = ('it stops after %g s without a new one (--evaler_timeout_secs, '
               'default %g)' % (self._timeout, DEFAULT_TIMEOUT_SECS))
    where = self._ckpt_dir
    if not tf.io.gfile.isdir(self._logdir):
      where += ' (the logdir does not exist yet: waiting for its trainer)'
    self._Print('Evaler: waiting for checkpoints in %s, up to the final one '
                '(global step %d); %s. Ctrl-C stops it.' % (where, final,
                                                           until))

  def _Loop(self, task, stop):
    """Evaluates each checkpoint as it comes; returns why it stopped.

    Raises:
      stops.StopRequested: SIGINT or SIGTERM arrived (checked between two
        evaluations and every half second while waiting).
    """
    final = self._FinalStep()
    if self._LastStep() >= final:
      return self._AlreadyDone()
    self._StartLine(final)
    since = next_look = time.time()
    while True:
      self._StopIfRequested(stop)
      if time.time() < next_look:  # poll_secs between two looks' starts.
        time.sleep(min(0.5, next_look - time.time()))
        continue
      newest = self._Newest()
      if newest and CheckpointStep(newest) is not None and (
          CheckpointStep(newest) > self._LastStep()):
        next_look = time.time() + self._poll
        pending, gone = self._Pending(newest)
        for path in pending:
          self._StopIfRequested(stop)
          self._ReportRotated([s for s in gone if self._LastStep() < s <
                               CheckpointStep(path)])
          self._EvaluateCheckpoint(task, path)
        self._ReportRotated([s for s in gone if s > self._LastStep()])
        since = time.time()
        why = self._Final(self._FinalStep())
        if why:
          return why
      elif self._timeout is not None and time.time() - since >= self._timeout:
        return ('timeout: no new checkpoint in %s for %s s' %
                (self._ckpt_dir, self._timeout))
      # Short sleeps: a signal is looked at between two of them.
      time.sleep(0.05 if self._poll <= 0 else min(0.5, self._poll))

  def _AlreadyDone(self):
    last = self._LastStep()
    if self._Accounted().get(last) == 'evaluated':
      return 'the final checkpoint (global step %d) was already evaluated' % (
          last)
    return ('the final checkpoint (global step %d) was already skipped (%s)'
            % (last, self._Accounted().get(last)))

  def _StopIfRequested(self, stop):
    if stop.requested:
      raise stops.StopRequested(stop.signum, (
          'Evaler stopped by %s; %d checkpoint(s) evaluated now, %d in all '
          '(%s). Run the same command again to go on.' % (
              signal.Signals(stop.signum).name, len(self.evaluated_steps),
              len(self.record['evaluations']),
              os.path.join(self._dir, METRICS_FILE)
              if self.record['evaluations'] else 'nothing written')))

  def Run(self):
    """Evaluates checkpoints until the final one, the timeout or a signal.

    A logdir or checkpoint directory that does not exist yet is waited
    for (up to the timeout). Every checkpoint the trainer saved (by
    p.task.train.save_interval_steps, and any other it finds) is
    evaluated, or reported and recorded in metrics.json's 'skipped' as
    deleted before its turn ('rotated') or unreadable ('unreadable', one
    line naming it; a restarted evaler does not try it again).

    Returns:
      The record written to `<logdir>/evaler/metrics.json`.

    Raises:
      validate.ExperimentError: the logdir's params.txt is of another
        experiment, or the logdir is read-only and no `out_dir` was given
        (before anything is read or written).
      checkpointer.CheckpointMismatchError: a checkpoint does not restore
        every model variable of the task.
      stops.StopRequested: stopped by SIGINT or SIGTERM (main thread only;
        the message is the line to print).
    """
    if not self._out_dir:
      logdir_lib.CheckJobDirWritable(self._logdir, self._job_dir, 'evaler',
                                     'evaler_dir')
    logdir_lib.CheckNotAnotherExperiment(self._logdir, self._params.ToText())
    task = self._params.task.Instantiate()
    newest = self._Newest()
    if newest:  # Another model's checkpoints are refused now, not later.
      try:
        eval_restore.RestoreForEval(newest, task)
      except (ValueError, TypeError):  # Another model (a mismatch).
        raise
      except Exception:  # pylint: disable=broad-except
        pass  # Damaged or gone: reported at its turn.
    with stops.SignalStop() as stop:
      stopped = self._Loop(task, stop)
    self.record['stopped'] = stopped
    if self.record['evaluations'] or self.record.get('skipped'):
      self._WriteRecord()  # Nothing evaluated or skipped: nothing written.
    self._Print('Evaler stopped: %s; %d checkpoint(s) evaluated now, %d in '
                'all%s (%s).' % (stopped, len(self.evaluated_steps),
                                 len(self.record['evaluations']),
                                 self._SkippedNote(),
                                 os.path.join(self._dir, METRICS_FILE)
                                 if self.record['evaluations'] else
                                 'nothing evaluated, nothing written'))
    return self.record

  def _SkippedNote(self):
    skipped = self.record.get('skipped', [])
    if not skipped:
      return ''
    by = {}
    for e in skipped:
      by.setdefault(e['reason'], []).append(e['global_step'])
    return ', %d skipped (%s)' % (len(skipped), '; '.join(
        '%s: global step %s' % (k, _Steps(v)) for k, v in sorted(by.items())))

  def _EvaluateCheckpoint(self, task, path):
    """Restores `path`, evaluates it and records it; skips a bad one.

    A checkpoint whose files are gone (deleted by the trainer's rotation)
    or cannot be read (damaged) is reported in one line naming it and
    recorded in 'skipped', so that no later run tries it again.
    """
    try:
      step, num_ema = eval_restore.RestoreForEval(path, task)
    except (ValueError, TypeError):  # Another model (a mismatch): stops.
      raise
    except Exception as e:  # pylint: disable=broad-except
      # A damaged file surfaces as OpError ('not an sstable'), IndexError
      # ('Read less bytes than requested'), a protobuf DecodeError...
      self._SkipUnreadable(path, e)
      return
    results = EvalMetrics(self._params, task)
    if self._writer is None:
      tf.io.gfile.makedirs(self._dir)
      self._writer = tf.summary.create_file_writer(self._dir)
    summary_lib.WriteScalars(self._writer, step,
                             {k: (v, 1.0) for k, v in results.items()})
    self.record['evaluations'].append(
        {'global_step': step, 'checkpoint': path, 'metrics': results})
    self._UpdateBest(step, path, results)
    self._WriteRecord()
    self.evaluated_steps.append(step)
    self._Print('Evaler: global step %d (%s%s): %s' % (
        step, os.path.basename(path),
        ', %s of %d variables' % (eval_restore.EvalWeightsLabel(
            eval_restore.EvalAverageClasses(task)), num_ema)
        if num_ema else '',
        ', '.join('%s %.5g' % (k, v) for k, v in sorted(results.items()))))


  def _SkipUnreadable(self, path, error):
    """Reports and records `path` as rotated away or unreadable."""
    step = CheckpointStep(path)
    if isinstance(error, tf.errors.NotFoundError) or not tf.io.gfile.exists(
        path + '.index'):  # Its files were deleted (the rotation).
      self._ReportRotated([step])
      return
    cause = '%s: %s' % (type(error).__name__,
                        str(error).strip().split('\n')[0][:200])
    self._Skip([step], 'unreadable', path, cause)
    self._Print('Evaler: checkpoint %s (global step %d) cannot be read (%s); '
                'skipped, and not tried again by a restarted evaler.' % (
                    path, step, cause))

  def _UpdateBest(self, step, path, results):
    dev = self._params.task.eval
    if not dev.dev_metric:
      return
    if dev.dev_metric not in results:
      raise ValueError(
          'task.eval.dev_metric %r is not an eval metric; available: %s. Set '
          'task.eval.dev_metric to one of them.' % (dev.dev_metric,
                                                    sorted(results)))
    value = results[dev.dev_metric]
    best = self.record.get('best')
    if best is None or (value < best['value'] if dev.dev_metric_mode == 'min'
                        else value > best['value']):
      self.record['best'] = {'metric': dev.dev_metric,
                             'mode': dev.dev_metric_mode, 'value': value,
                             'global_step': step, 'checkpoint': path}


# ---- command line -----------------------------------------------------------


def DefineFlags():
  """The evaler's flags (the trainer's command line defines them)."""
  flags.DEFINE_float(
      'evaler_timeout_secs', DEFAULT_TIMEOUT_SECS,
      '--mode=evaler: stop when no new checkpoint came for this many '
      'seconds (it stops by itself after the final checkpoint).')
  flags.DEFINE_float(
      'evaler_poll_secs', 1.0,
      '--mode=evaler: at least this many seconds between two evaluations.')
  flags.DEFINE_string(
      'evaler_dir', None,
      '--mode=evaler: write its TensorBoard run and metrics.json here '
      'instead of <logdir>/evaler (needed for a read-only logdir, which it '
      'refuses without this flag).')


def Main(params, flag_values):
  """`--mode=evaler`: runs the evaler; returns the exit status.

  0 when it stopped by itself (final checkpoint, timeout), 2 for a refused
  value or logdir (one ERROR: line; a read-only logdir without
  --evaler_dir before any work), 128 + the signal number when stopped by
  SIGINT (130) or SIGTERM (143), with one line and no traceback.
  """
  job_dir = logdir_lib.EvalerDir(
      flag_values.evaler_dataset, registry.DefaultEvalDataset(
          flag_values.model))
  try:  # Every value (dev_metric, eval input...) before anything is written.
    if not flag_values.evaler_dir:
      logdir_lib.CheckJobDirWritable(flag_values.logdir, job_dir, 'evaler',
                                     'evaler_dir')
    validate.Experiment(params, tf.distribute.get_strategy(), train=False,
                        evaluate=True)
  except validate.ExperimentError as e:
    print('ERROR: %s' % validate.OneLine(e), file=sys.stderr)
    return 2
  evaler = Evaler(params, flag_values.logdir,
                  timeout_secs=flag_values.evaler_timeout_secs,
                  poll_secs=flag_values.evaler_poll_secs,
                  job_dir=job_dir, out_dir=flag_values.evaler_dir)
  try:
    evaler.Run()
  except (validate.ExperimentError,
          checkpointer_lib.CheckpointMismatchError) as e:
    print('ERROR: %s' % validate.OneLine(e), file=sys.stderr)
    return 2
  except stops.StopRequested as e:  # SIGINT/SIGTERM: one line, 130/143.
    print(str(e), file=sys.stderr, flush=True)
    return e.exit_code
  return 0
