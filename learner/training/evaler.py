r"""The evaler: a job that evaluates each new checkpoint of a run, once.

    python -m learner.trainer --model=digits.MlpMomentum --logdir=D --mode=train &
    python -m learner.trainer --model=digits.MlpMomentum --logdir=D --mode=evaler

Lingvo runs an `evaler` job next to the trainer and Model Garden a
`continuous_eval` mode: a process of its own that waits for the trainer's
checkpoints (`tf.train.checkpoints_iterator`), restores each and evaluates
it, so evaluation never slows training down and can run on another machine
that sees the logdir. It stops after the final checkpoint (global step >=
p.task.train.max_steps, or the step at which the trainer stopped early) or
when no new checkpoint came for `timeout_secs`.

Everything it writes is under `<logdir>/evaler/` (it never touches the
trainer's files, params.txt included):
  * the TensorBoard run 'evaler': every eval metric at each checkpoint's
    global step;
  * `metrics.json`: every evaluation ({'global_step', 'checkpoint',
    'metrics'}), in step order, the best one by `p.task.eval.dev_metric`
    ('best': metric, mode, value, global step, checkpoint) and, once it has
    stopped, why ('stopped').
`metrics.json` is rewritten (atomically) after each evaluation and read at
start: a restarted evaler does not evaluate a recorded checkpoint again.

Each time the iterator reports a new newest checkpoint, every checkpoint
still listed in `<logdir>/ckpt/checkpoint` that is newer than the last one
evaluated is evaluated, oldest first, so none is missed when the trainer
saved several between two looks (a checkpoint deleted by the trainer's
rolling `save_max_to_keep` before its turn is reported and skipped).

Checkpoints are restored strictly (`checkpointer.RestoreForEval`): one that
does not restore every model variable stops the evaler with an error
naming the variables (it was written by another model). When the task's
learners average their weights (Ema), the averages are evaluated, as in
the trainer's evaluations.

`EvalMetrics` is the evaluation itself (one pass over the eval input,
weighted means), shared with the trainer's evaluations.
"""

import contextlib
import json
import os
import re
import sys

from absl import flags
import tensorflow as tf

from learner.training import checkpointer as checkpointer_lib
from learner.training import early_stop as early_stop_lib
from learner.training import summary as summary_lib
from learner.training import validate

METRICS_FILE = 'metrics.json'


def EvalMetrics(params, task, swaps=()):
  """Evaluates `task` on `params.eval_input`; returns {metric: mean}.

  Each metric is the mean over every evaluated batch weighted by the
  metric's weight (examples), so it equals the metric of the whole eval
  set. `p.task.eval.samples` > 0 stops after the batch that reaches that
  many examples; 0 evaluates one pass (num_epochs is set to 1).

  Args:
    params: the experiment's params ('task', 'eval_input').
    task: the built task (weights already restored).
    swaps: objects with a `SwapAverages()` context (Ema optimizers): inside,
      their weights are swapped for their averages (and back after).

  Returns:
    {metric name: float}; a metric whose weights sum to 0 is NaN.

  Raises:
    ValueError: the eval input yields no batch.
  """
  ep = params.eval_input.Copy()
  samples = params.task.eval.samples
  if not samples and 'num_epochs' in ep:
    ep.num_epochs = 1
  input_gen = ep.Instantiate()
  sums, weights = {}, {}
  seen = 0
  with contextlib.ExitStack() as stack:
    for ema in swaps:
      stack.enter_context(ema.SwapAverages())
    for batch in input_gen.GetDataset():
      metrics = summary_lib.MetricsToDict(task.EvalStep(batch))
      for name, (v, w) in metrics.items():
        sums[name] = sums.get(name, 0.0) + v * w
        weights[name] = weights.get(name, 0.0) + w
      seen += int(tf.nest.flatten(batch)[0].shape[0])
      if samples and seen >= samples:
        break
  if not sums:
    raise ValueError('The eval input yielded no batch; check eval_input '
                     '(split %r, batch_size %d).' % (
                         ep.split if 'split' in ep else None, ep.batch_size))
  return {k: sums[k] / weights[k] if weights[k] else float('nan')
          for k in sums}


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
      `<logdir>/ckpt`, everything is written to `<logdir>/evaler`.
    timeout_secs: stop when no new checkpoint came for this many seconds
      (None: wait for ever); checked about once a second.
    poll_secs: at least this many seconds between two evaluations' starts
      (`min_interval_secs` of `tf.train.checkpoints_iterator`).
    stream: where progress lines go (default sys.stdout).

  Attributes:
    evaluated_steps: the global steps this `Run` evaluated, in order.
  """

  def __init__(self, params, logdir, timeout_secs=3600.0, poll_secs=1.0,
               stream=None):
    self._params = params
    self._logdir = logdir
    self._ckpt_dir = os.path.join(logdir, 'ckpt')
    self._dir = os.path.join(logdir, 'evaler')
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
      json.dump(self.record, f, indent=1, sort_keys=True)
    tf.io.gfile.rename(path + '.tmp', path, overwrite=True)

  def _LastStep(self):
    evals = self.record['evaluations']
    return evals[-1]['global_step'] if evals else -1

  def _FinalStep(self):
    """The step of the run's last checkpoint: max_steps or an early stop."""
    stopped = early_stop_lib.StoppedAt(self._logdir)
    max_steps = self._params.task.train.max_steps
    return max_steps if stopped is None else min(stopped, max_steps)

  def _Pending(self, newest):
    """Checkpoints newer than the last evaluated, up to `newest`, by step."""
    state = tf.train.get_checkpoint_state(self._ckpt_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    if newest not in paths:
      paths.append(newest)
    last, top = self._LastStep(), CheckpointStep(newest)
    steps = {CheckpointStep(p): p for p in paths}
    return [steps[s] for s in sorted(steps)
            if s is not None and last < s <= top]

  def Run(self):
    """Evaluates checkpoints until the final one or the timeout.

    Returns:
      The record written to `<logdir>/evaler/metrics.json`.

    Raises:
      checkpointer.CheckpointMismatchError: a checkpoint does not restore
        every model variable of the task.
    """
    task = self._params.task.Instantiate()
    newest = tf.train.latest_checkpoint(self._ckpt_dir)
    if newest:  # Another model's checkpoints are refused now, not later.
      checkpointer_lib.RestoreForEval(newest, task)
    final = self._FinalStep()
    stopped = None
    if self._LastStep() >= final:
      stopped = ('the final checkpoint (global step %d) was already '
                 'evaluated' % self._LastStep())
    for newest in ([] if stopped else tf.train.checkpoints_iterator(
        self._ckpt_dir, min_interval_secs=self._poll,
        timeout=self._timeout)):
      for path in self._Pending(newest):
        self._EvaluateCheckpoint(task, path)
      final = self._FinalStep()
      if self._LastStep() >= final:
        stopped = 'evaluated the final checkpoint (global step %d)' % (
            self._LastStep())
        break
    if stopped is None:
      stopped = ('timeout: no new checkpoint in %s for %s s' %
                 (self._ckpt_dir, self._timeout))
    self.record['stopped'] = stopped
    if self.record['evaluations']:  # Nothing evaluated: nothing written.
      self._WriteRecord()
    self._Print('Evaler stopped: %s; %d checkpoint(s) evaluated now, %d in '
                'all (%s).' % (stopped, len(self.evaluated_steps),
                               len(self.record['evaluations']),
                               os.path.join(self._dir, METRICS_FILE)
                               if self.record['evaluations'] else
                               'nothing evaluated, nothing written'))
    return self.record

  def _EvaluateCheckpoint(self, task, path):
    """Restores `path`, evaluates it and records it (a gone one is skipped)."""
    try:
      step, num_ema = checkpointer_lib.RestoreForEval(path, task)
    except tf.errors.NotFoundError:
      self._Print('Evaler: %s was deleted before its turn (the trainer keeps '
                  'p.task.train.save_max_to_keep checkpoints); skipped.' %
                  path)
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
        ', EMA averages of %d variables' % num_ema if num_ema else '',
        ', '.join('%s %.5g' % (k, v) for k, v in sorted(results.items()))))

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
      'evaler_timeout_secs', 3600.0,
      '--mode=evaler: stop when no new checkpoint came for this many '
      'seconds (it stops by itself after the final checkpoint).')
  flags.DEFINE_float(
      'evaler_poll_secs', 1.0,
      '--mode=evaler: at least this many seconds between two evaluations.')


def Main(params, flag_values):
  """`--mode=evaler`: runs the evaler; returns the exit status (0, or 2)."""
  try:  # Every value (dev_metric, eval input...) before anything is written.
    validate.Experiment(params, tf.distribute.get_strategy(), train=False,
                        evaluate=True)
  except validate.ExperimentError as e:
    print('ERROR: %s' % validate.OneLine(e), file=sys.stderr)
    return 2
  evaler = Evaler(params, flag_values.logdir,
                  timeout_secs=flag_values.evaler_timeout_secs,
                  poll_secs=flag_values.evaler_poll_secs)
  try:
    evaler.Run()
  except checkpointer_lib.CheckpointMismatchError as e:
    print('ERROR: %s' % e, file=sys.stderr)
    return 2
  return 0
