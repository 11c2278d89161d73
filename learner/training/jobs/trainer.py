"""The Trainer: trains and/or evaluates one registered experiment in a logdir.

Its command line (`python -m learner.trainer`, usage and flags) is
`learner/training/jobs/cli.py`.

What a run writes to `--logdir` (each job its own files; see
`learner.training.services.logdir`):
  * `params.txt` (and the text summary 'params'): the run's params, written
    by the first train job (modes train, train_and_eval) only. A resume with
    other params keeps the file and says what differs and how to resume
    unchanged (`--params_file=<logdir>/params.txt`).
  * `ckpt/ckpt-<global step>`: rolling checkpoints (`p.task.train.
    save_interval_steps`, `save_max_to_keep`, and one at the end); a run on
    a logdir with a checkpoint resumes from it, at the same batch.
  * `best/`: the checkpoint with the best `p.task.eval.dev_metric`.
  * `train/`, `eval/`: TensorBoard event files.
  * `model_analysis.txt` (train and train_and_eval modes, when training
    starts): every model variable's name, shape, size, dtype and learners,
    the values each learner trains and the totals (as Lingvo writes it).
  * `metrics.json`: the final evaluation metrics (in 'train' mode, the last
    step's training metrics) and the global step. A rerun of a finished run
    writes nothing and prints these stored metrics.
  * `eval_job/` (mode eval, which only reads checkpoints): its TensorBoard
    run and `eval_job/metrics.json`; it never writes params.txt or
    metrics.json. `--eval_dir=<dir>` writes them there instead; on a
    read-only logdir without it the job writes nothing. Other
    checkpoint-reading jobs write their own directory (`evaler/`,
    `export/`). Eval and export read the newest checkpoint of `ckpt/` or
    `--checkpoint=<prefix or directory, e.g. <logdir>/best/>`.

Before the logdir is created the whole experiment is built and checked
(`learner.training.jobs.validate`): a refused value, or a flag the mode does
not read (`mode_keys.MODE_FLAGS`), is one `ERROR:` line (exit 2;
`--verbose` raises it with its traceback) and nothing is written.

The `Trainer` class does the work and is usable from Python and tests; the
command line (flags, `main`, exit codes) is `learner/training/jobs/cli.py`.
"""

import contextlib
import json
import os
import sys

import numpy as np
import tensorflow as tf

from params import checks
from learner.optimizers import sharded_state
from learner.optimizers.wrappers import replica_local
from learner.training.services import checkpointer as checkpointer_lib
from learner.training.cluster import distribution
from learner.training.services import early_stop as early_stop_lib
from learner.training.jobs import eval_restore
from learner.training.jobs import evaler as evaler_lib
from learner.training.services import logdir as logdir_lib
from learner.training.model import model_analysis
from learner.training.jobs.mode_keys import ModeKeys
from learner.training.services import progress as progress_lib
from learner.training.services import skipped_steps
from learner.training.services import stops
from learner.training.services import summary as summary_lib
from learner.training.services import warm_start
from learner.training.model import task_params
from learner.training.jobs import validate


# The EMA helpers live with the restore that the read-only jobs share.
LoadEmaAverages = eval_restore.LoadEmaAverages


def _Float(x):
  return float(np.asarray(x))


class Trainer:
  """Trains and/or evaluates one experiment in one logdir.

  Args:
    params: experiment Params ('task', 'train_input', 'eval_input'), e.g.
      from `LoadExperimentParams` or `registry.GetParams`.
    logdir: output directory (created).
    mode: one of ModeKeys.ALL.
    seed: optional int: sets TF's, numpy's and Python's global seeds and
      enables TF op determinism, so two runs with the same seed give
      identical weights.
    strategy: a tf.distribute.Strategy, or a name for
      `learner.distribution.CreateStrategy` ('default', 'mirrored', ...).
    init_from_checkpoint: optional checkpoint to warm-start the weights from
      (overrides p.task.train.init_from_checkpoint).
    init_from_checkpoint_rules: optional list of (regex, replacement)
      (overrides p.task.train.init_from_checkpoint_rules).
    tty: force the progress bar (True) or log lines (False); None asks
      whether stdout is a terminal.
    stream: where progress goes (default sys.stdout).
    resume_hint: how to resume a run unchanged, shown when a resume's params
      differ from the run's params.txt (the command line gives its flags).
    worker_register_timeout_secs: float seconds every worker of a
      multi_worker run may take to register at start-up (see
      `distribution.CreateStrategy`, register_timeout_seconds).
    checkpoint: mode eval: the checkpoint to evaluate, a prefix or a
      directory of checkpoints (e.g. '<logdir>/best'); None: the newest
      readable one of '<logdir>/ckpt'.
    checkpoint_flag: the flag that gave `checkpoint` (for messages).
    eval_dir: mode eval: where its TensorBoard run and metrics.json go
      instead of '<logdir>/eval_job' (e.g. when the logdir is read-only).
    eval_job_dir: mode eval: the directory under the logdir it writes
      ('eval_job'; `logdir.EvalJobDir`: 'eval_job_test' for another set).

  Raises:
    ValueError: unknown mode; params without 'task'; checkpoint or
      eval_dir with a mode other than eval.
  """

  def __init__(self, params, logdir, mode=ModeKeys.TRAIN, seed=None,
               strategy=None, init_from_checkpoint=None,
               init_from_checkpoint_rules=None, tty=None, stream=None,
               resume_hint=None,
               worker_register_timeout_secs=(
                   distribution.DEFAULT_REGISTER_TIMEOUT_SECONDS),
               checkpoint=None, checkpoint_flag='--checkpoint',
               eval_dir=None, eval_job_dir=logdir_lib.EVAL_JOB_DIR):
    if mode not in ModeKeys.ALL:
      raise ValueError('mode %r is not one of %s.' % (mode,
                                                     list(ModeKeys.ALL)))
    if 'task' not in params:
      raise ValueError('Trainer: params have no "task"; expected the params '
                       'of registry.GetParams(key).')
    for name, value in (('checkpoint', checkpoint), ('eval_dir', eval_dir)):
      if value is not None and mode != ModeKeys.EVAL:
        raise ValueError('Trainer: %s=%r applies to mode %r only, not %r; '
                         'leave it None.' % (name, value, ModeKeys.EVAL,
                                             mode))
    self._params = params.Copy(frozen=False)
    # params.txt and the summaries keep the params as given (durations in
    # examples or epochs as written); the task is built from the converted
    # copy (task_params.ResolveDurations), whose lines print at start.
    self._params_text = self._params.ToText()
    with validate.Refusing():
      self._duration_lines = task_params.ResolveDurations(self._params)
    self._logdir = logdir
    self._mode = mode
    self._checkpoint = checkpoint
    self._checkpoint_flag = checkpoint_flag
    self._eval_dir = eval_dir
    self._eval_job_dir = eval_job_dir
    self._seed = seed
    self._strategy_arg = strategy
    self._register_timeout = worker_register_timeout_secs
    tp = self._params.task.train
    with validate.Refusing():  # Lingvo's dict form: (its path, rules).
      task_ckpt, task_rules = task_params.InitFromCheckpoint(tp)
    self._init_ckpt = (init_from_checkpoint if init_from_checkpoint
                       is not None else task_ckpt)
    self._init_rules = (init_from_checkpoint_rules
                        if init_from_checkpoint_rules is not None else
                        task_rules)
    if not isinstance(self._init_rules, warm_start.LingvoInitRules):
      checks.CheckRewriteRules('Trainer', 'init_from_checkpoint_rules',
                               self._init_rules)
    self._tty = tty
    self._stream = stream or sys.stdout
    self._resume_hint = resume_hint
    self._checked = None
    self.task = None
    self._best = None
    self._writers = {}
    self._stop = stops.SignalStop()  # Active only while training (Run).

  # ---- set-up ------------------------------------------------------------

  def _Print(self, msg):
    self._EndProgressLine()  # A note never lands on the bar's line.
    self._stream.write(msg + '\n')
    self._stream.flush()

  def _EndProgressLine(self):
    progress = getattr(self, '_progress', None)
    if progress is not None:
      progress.Close()

  def _Strategy(self):
    s = self._strategy_arg
    if s is None or s == 'default':
      return tf.distribute.get_strategy()
    if isinstance(s, str):
      return distribution.CreateStrategy(
          s, register_timeout_seconds=self._register_timeout)
    return s

  def _Writer(self, name):
    if name not in self._writers:
      self._writers[name] = tf.summary.create_file_writer(
          os.path.join(self._logdir, name))
    return self._writers[name]

  def _WriteParams(self):
    """params.txt once per run (train jobs only) and the text summary."""
    text = self._params_text
    logdir_lib.WriteParamsOnce(self._logdir, text, self._Print,
                               hint=self._resume_hint)
    summary_lib.WriteParamsText(self._Writer('train'), text)

  def _WriteModelAnalysis(self, task):
    """Writes logdir/model_analysis.txt (training modes only, at the start)."""
    text = model_analysis.ModelAnalysis(task, task.learners)
    with tf.io.gfile.GFile(os.path.join(self._logdir, 'model_analysis.txt'),
                           'w') as f:
      f.write(text)

  def _WriteMetrics(self, metrics, job_dir=None):
    """metrics.json of the train job, or of `job_dir` (e.g. 'eval_job')."""
    directory = os.path.join(self._logdir, job_dir or '')
    tf.io.gfile.makedirs(directory)
    logdir_lib.WriteMetrics(
        os.path.join(directory, logdir_lib.METRICS_FILE), metrics)

  # ---- running -------------------------------------------------------------

  def Run(self):
    """Runs the mode; returns its metrics (also in its metrics.json).

    Raises:
      validate.ExperimentError: a refused value (before anything is
        written; see `learner.training.jobs.validate`), a logdir of another
        experiment, a logdir (or its train/, ckpt/...) a train job cannot
        write (`logdir.CheckTrainWritable`), or (`logdir.LogdirInUseError`)
        a logdir another live train job holds.
      NothingToEvaluateError: mode eval without a checkpoint to evaluate
        (none in the logdir, or `checkpoint` names none).
    """
    # First: --strategy=multi_worker must be created before any other op.
    with validate.Refusing():
      self._strategy = self._Strategy()
    # Seeded before the task is built, so Keras layers' initializers (and
    # anything else drawing from the global RNGs) repeat run after run.
    tf.keras.utils.set_random_seed(_GlobalSeed(self._seed, self._params))
    if self._seed is not None:
      tf.config.experimental.enable_op_determinism()
    # Multi-worker: only the chief writes to logdir; the other workers write
    # to a temporary directory and resume from the chief's checkpoints.
    self._chief_logdir = self._logdir
    self._logdir = distribution.WorkerLogdir(self._logdir, self._strategy)
    distribution.RemoveWorkerLogdir(self._chief_logdir, self._strategy)
    # Another experiment's logdir: one line, before anything is written.
    logdir_lib.CheckNotAnotherExperiment(self._chief_logdir,
                                         self._params_text)
    ckpt_dir = os.path.join(self._chief_logdir, 'ckpt')
    if self._mode == ModeKeys.EVAL:  # NothingToEvaluateError, one line.
      self._eval_candidates = eval_restore.ResolveEvalCheckpoint(
          self._chief_logdir, self._checkpoint, self._checkpoint_flag)
    trains = self._mode in (ModeKeys.TRAIN, ModeKeys.TRAIN_AND_EVAL)
    self._checked = validate.Experiment(
        self._params, self._strategy, train=trains,
        # A dev_metric is checked in 'train' too: the evaler of this run
        # and a later train_and_eval use it.
        evaluate=(self._mode != ModeKeys.TRAIN or
                  bool(self._params.task.eval.dev_metric)),
        init_rules=self._init_rules)
    if trains:
      stored = logdir_lib.FinishedMetrics(
          self._chief_logdir, self._params.task.train.max_steps,
          with_eval=self._mode == ModeKeys.TRAIN_AND_EVAL)
      if stored is not None:
        return self._ReportFinished(stored)
    if trains:  # One line each, not TF's traceback after a first file.
      logdir_lib.CheckTrainWritable(self._logdir, self._mode == (
          ModeKeys.TRAIN_AND_EVAL), bool(self._params.task.eval.dev_metric))
      with validate.Refusing():
        replica_local.CheckResumeReplicaCount(
            self._checked.task.learners, tf.train.latest_checkpoint(
                ckpt_dir), self._strategy.num_replicas_in_sync)
      self._CheckWarmStart(ckpt_dir)
    if trains:
      for line in self._duration_lines:
        self._Print('Schedule length: ' + line)
    for warning in self._checked.warnings:  # Only for a run that trains.
      self._Print(warning)
    if self._mode == ModeKeys.EVAL:  # Reads the logdir; writes its own dir.
      return self._RunEval()
    tf.io.gfile.makedirs(self._logdir)
    # One live train job per logdir (only the writer, the chief, locks).
    with logdir_lib.TrainLock(self._logdir) if (
        self._logdir == self._chief_logdir) else contextlib.nullcontext(), (
            checkpointer_lib.DiskFullAsOneLine(self._logdir)):
      self._WriteParams()
      with stops.SignalStop(self._Print) as self._stop:
        try:
          return self._RunTrain()
        finally:  # E.g. the stop line (stderr) starts on a line of its own.
          self._EndProgressLine()

  def _CheckWarmStart(self, ckpt_dir):
    """Refuses a warm start that cannot work, before any file is written.

    Only when the run would warm-start (init_from_checkpoint set and no
    checkpoint of its own to resume from): the checkpoint must be readable
    and the rules must map at least one of its variables onto ours.

    Raises:
      validate.ExperimentError: naming the path, the rules and the fix.
    """
    if not self._init_ckpt or tf.train.latest_checkpoint(ckpt_dir):
      return
    model_vars = warm_start.ByName(self._checked.task.ModelVars().Flatten())
    with validate.Refusing():
      warm_start.CheckInitFromCheckpoint(self._init_ckpt, model_vars,
                                         self._init_rules)

  def _ReportFinished(self, stored):
    """A rerun of a finished run: writes nothing, prints what is stored."""
    path = os.path.join(self._chief_logdir, logdir_lib.PARAMS_FILE)
    if tf.io.gfile.exists(path):
      with tf.io.gfile.GFile(path) as f:
        old = f.read()
      logdir_lib.CheckSameTask(path, old, self._params_text)
      if old != self._params_text:
        self._Print(logdir_lib.ParamsChangeWarning(
            path, old, self._params_text, hint=self._resume_hint))
    step = stored['global_step']
    self._Print('Training in %s is finished (global step %d, max_steps %d); '
                'nothing was run or written. For more steps raise '
                '--max_steps; for a new run use another --logdir.' %
                (self._chief_logdir, step,
                 self._params.task.train.max_steps))
    self._Print('Final metrics (global step %d, stored in %s): %s' % (
        step, os.path.join(self._chief_logdir, logdir_lib.METRICS_FILE),
        json.dumps(logdir_lib.StrictJson(stored), sort_keys=True)))
    return stored

  def _BuildTask(self, train):
    if self._checked is not None:  # Built and checked by validate.
      self.task = self._checked.task
      return self.task
    with self._strategy.scope():
      task = self._params.task.Instantiate()
      if train:
        task.CreateLearners()
    self.task = task
    return task

  def _RunTrain(self):
    p = self._params
    distribution.CheckReplicasToAggregate(
        p.task.train.replicas_to_aggregate,
        self._strategy.num_replicas_in_sync)
    task = self._BuildTask(train=True)
    notice = sharded_state.OneReplicaNotice(
        task.LearnerParamsList(), self._strategy.num_replicas_in_sync)
    if notice:
      self._Print(notice)
    sharded_bytes = sharded_state.ShardedBytesLine(
        [learner.optimizer for learner in task.learners])
    if sharded_bytes:
      self._Print(sharded_bytes)
    input_gen = (self._checked.train_input if self._checked is not None
                 else p.train_input.Instantiate())
    input_gen.CheckBatchSize()
    ckpt, ckpter, restored, iterator = self._RestoreTrainState(task,
                                                               input_gen)
    self._WriteModelAnalysis(task)
    dev = p.task.eval
    self._early_stop = early_stop_lib.EarlyStop.FromParams(
        dev, self._logdir, int(task.global_step.numpy()),
        evaluating=self._mode == ModeKeys.TRAIN_AND_EVAL,
        lingvo=p.task.train.early_stop)
    if not restored:  # Once per run, at its start.
      summary_lib.WriteHParams(self._Writer('train'), p)
    self._step_counter = summary_lib.StepCounter(
        p.train_input.batch_size if 'batch_size' in p.train_input else None)
    if self._mode == ModeKeys.TRAIN_AND_EVAL and dev.dev_metric:
      self._best = checkpointer_lib.BestCheckpoint(
          ckpt, os.path.join(self._logdir, 'best'), dev.dev_metric_mode)
    step, out, last_saved = self._TrainToMaxSteps(task, iterator, ckpter,
                                                  restored)
    if last_saved != step:
      ckpter.Save(step)
    result = {'global_step': step}
    result.update(skipped_steps.SkippedCounts(
        [(l.params.name, int(l.num_skipped_steps.numpy()))
         for l in task.learners]))
    if self._mode == ModeKeys.TRAIN_AND_EVAL:
      eval_metrics = self._EvaluateAndUpdate(task, step, final=True)
      # The state changed by the final evaluation (dev-based schedules) is
      # saved too, so a rerun on this logdir is a no-op.
      ckpter.Save(step)
      result.update(eval_metrics)
    else:
      last_train = (summary_lib.FlattenStepOutput(out, len(task.learners))
                    if out is not None else {})
      result.update({'train/%s' % k: v for k, (v, w) in last_train.items()
                     if w != 0})
    result.update(self._early_stop.Summary())
    self._WriteMetrics(result)
    self._Print('Final metrics (global step %d): %s' % (
        step, json.dumps(logdir_lib.StrictJson(result), sort_keys=True)))
    if distribution.IsMultiWorker(self._strategy):  # The launcher compares.
      self._Print('Final weights: sha256 %s' % distribution.WeightsDigest(
          _DigestedWeights(task)))
    return result

  def _Distributed(self):
    """True under a strategy other than the default one (any replicas)."""
    strategy = self._strategy
    return strategy.num_replicas_in_sync > 1 or (
        strategy is not tf.distribute.get_strategy())

  def _TrainIterator(self, input_gen, skip_batches):
    """The iterator of the train batches, `skip_batches` global batches on.

    One input path for every strategy (`input_gen.GetDataset` per input
    pipeline, `distribution.DistributeBatches`); on one device it is a
    tf.data iterator, which the checkpoint saves.
    """
    return iter(distribution.DistributeBatches(
        self._strategy,
        lambda ctx: distribution.WithoutAutotuneThread(
            input_gen.GetDataset(skip_batches, ctx)),
        input_gen.params.batch_size, skip_batches))

  def _RestoreTrainState(self, task, input_gen):
    """Restores (or warm-starts) the task; returns the train state.

    Resume continues at the next batch: one device saves the iterator in
    the checkpoint (unless p.task.train.checkpoint_input_iterator is
    False); otherwise, and under a strategy (whose distributed iterators
    TF 2.21 cannot checkpoint), the dataset is rebuilt after the restore,
    skipping the global steps already taken. A checkpoint written with the
    other checkpoint_input_iterator value also resumes by skip (the
    iterator it holds is not read; or, lacking one, this run's iterator is
    advanced past those steps), with one warning line.

    Returns:
      (tf.train.Checkpoint, Checkpointer of this logdir, the restored path
      or None, the train iterator).
    """
    objects = {'task': task}
    iterator = None
    if (not self._Distributed() and
        self._params.task.train.checkpoint_input_iterator):
      iterator = self._TrainIterator(input_gen, 0)
      objects['iterator'] = iterator
    ckpt = tf.train.Checkpoint(**objects)
    ckpter = checkpointer_lib.Checkpointer(
        ckpt, os.path.join(self._logdir, 'ckpt'),
        max_to_keep=self._params.task.train.save_max_to_keep,
        keep_every_n_hours=(
            self._params.task.train.save_keep_checkpoint_every_n_hours),
        variable_names=checkpointer_lib.VariableCheckpointKeys(task),
        report=self._Print, model_variables=task.ModelVars().Flatten())
    restorer = ckpter
    if self._logdir != self._chief_logdir:  # Non-chief: the chief's ckpt.
      restorer = checkpointer_lib.Checkpointer(
          ckpt, os.path.join(self._chief_logdir, 'ckpt'),
          report=self._Print, read_only=True)
    else:
      ckpter.PrepareForTraining()
    restored = restorer.Restore(optional=('iterator',))
    if restored:
      self._Print('Resumed from %s at global step %d.' %
                  (restored, int(task.global_step.numpy())))
      step = int(task.global_step.numpy())
      if self._ReportInputState(restored, restorer.restored_objects, step):
        distribution.AdvanceIterator(iterator, step)  # Not in the checkpoint.
    elif self._init_ckpt:
      model_vars = warm_start.ByName(task.ModelVars().Flatten())
      assigned = warm_start.InitFromCheckpoint(
          self._init_ckpt, model_vars, self._init_rules)
      self._Print('Warm-started %d variables from %s.' %
                  (len(assigned), self._init_ckpt))
    if iterator is None:
      iterator = self._TrainIterator(input_gen,
                                     int(task.global_step.numpy()))
    return ckpt, ckpter, restored, iterator

  def _ReportInputState(self, restored, differs, step):
    """One warning line when `restored` and this run keep the input apart.

    The key task.train.checkpoint_input_iterator may differ between the
    run that wrote the checkpoint and this one; either way the input
    resumes by skipping the `step` global steps already taken (exact for a
    pipeline with the same order every time).

    Returns:
      True if this run saves the iterator but `restored` lacks it.
    """
    key = 'task.train.checkpoint_input_iterator'
    skip = ('the input resumes by skipping the %d global steps already '
            'taken' % step)
    if 'iterator' in differs['not_built']:
      why = ('this run is distributed (its iterators cannot be restored)'
             if self._Distributed() else '%s is False' % key)
      self._Print('WARNING: checkpoint %s holds the input iterator\'s state '
                  'but %s: it is not read; %s.' % (restored, why, skip))
    if 'iterator' not in differs['absent']:
      return False
    self._Print('WARNING: checkpoint %s holds no input iterator state '
                '(written with %s : False) but this run has it True: %s, '
                'and its own checkpoints save the iterator.' %
                (restored, key, skip))
    return True

  def _TrainLoop(self, task, iterator, num_steps):
    """`task.TrainLoop` under the strategy; one output of plain values."""
    with distribution.ReportPeerFailure(self._strategy):
      out = task.TrainLoop(iterator, num_steps)
    return self._ReducePerReplica(out) if self._Distributed() else out

  def _TrainToMaxSteps(self, task, iterator, ckpter, restored):
    """Runs train loops to max_steps with summaries, logs, evals and saves.

    Every loop ends at the next step where something happens outside the
    graph (summary, log line, eval, checkpoint) or at max_steps, and runs
    at most p.task.train.steps_per_loop (else tpu_steps_per_loop) steps.

    Returns:
      (the global step reached, the last step's output or None, the step
      last saved or None).
    """
    tp, dev = self._params.task.train, self._params.task.eval
    step = int(task.global_step.numpy())
    progress = self._progress = progress_lib.Progress(
        tp.max_steps, step, tp.log_interval_steps, stream=self._stream,
        tty=self._tty, num_replicas=self._strategy.num_replicas_in_sync,
        strategy_name=distribution.StrategyName(self._strategy))
    train_writer = self._Writer('train')
    out = None
    last_saved = step if restored else None
    evaluating = self._mode == ModeKeys.TRAIN_AND_EVAL and dev.interval_steps
    intervals = [tp.summary_interval_steps]
    if tp.save_interval_steps:
      intervals.append(tp.save_interval_steps)
    saver = checkpointer_lib.SaveClock(tp)
    if evaluating:
      intervals.append(dev.interval_steps)
    # A group agrees at each loop's end on a stop: same ends, tty or not.
    group = distribution.GroupStopSignals(self._strategy)
    if not progress.is_tty or group:
      intervals.append(tp.log_interval_steps)
    skips = skipped_steps.SkipMonitor(task.learners,
                                      tp.max_consecutive_skipped_steps,
                                      self._Print, step)
    while step < tp.max_steps:
      if self._early_stop.stopped:  # At the evaluation that stopped it.
        break
      end = min([tp.max_steps, step + task_params.StepsPerLoop(tp)] +
                [(step // k + 1) * k for k in intervals])
      out = self._TrainLoop(task, iterator, end - step)
      step = end
      self._ReportTrainStep(task, step, out, progress, train_writer)
      skips.Check(step, step % tp.log_interval_steps == 0 or
                  step >= tp.max_steps, ckpter.latest_checkpoint,
                  task.ModelVars().Flatten())
      self._stop.StopIfRequested(step, lambda: os.path.join(  # The chief's.
          self._chief_logdir, os.path.relpath(
              ckpter.latest_checkpoint if last_saved == step else
              ckpter.Save(step), self._logdir)), group=group)
      if evaluating and step % dev.interval_steps == 0 and (
          step < tp.max_steps):
        progress.Close() if progress.is_tty else None
        self._EvaluateAndUpdate(task, step)
      if saver.Due(step):
        train_writer.flush()
        ckpter.Save(step)
        last_saved = step
        saver.Saved()
    train_writer.flush()
    progress.Close()
    return step, out, last_saved

  def _ReportTrainStep(self, task, step, out, progress, train_writer):
    """Writes the step's summaries (when due) and updates the progress."""
    tp = self._params.task.train
    num_learners = len(task.learners)
    tagged = None
    if step % tp.summary_interval_steps == 0 or step == tp.max_steps:
      tagged = summary_lib.FlattenStepOutput(out, num_learners)
      tagged.update(self._step_counter.Rates(step))
      summary_lib.WriteScalars(train_writer, step, tagged, flush=False)
    if progress.WantsValues(step):
      if tagged is None:
        tagged = summary_lib.FlattenStepOutput(out, num_learners)
      progress.Update(step, _LossOf(tagged),
                      progress_lib.LearningRates(tagged))
    else:
      progress.Update(step)

  def _ReducePerReplica(self, out):
    """Per-replica step outputs -> one output (weighted means of metrics)."""
    local = self._strategy.experimental_local_results

    def _Mean(vw):
      values = [_Float(v) for v in local(vw[0])]
      weights = [_Float(w) for w in local(vw[1])]
      total = sum(weights)
      if total == 0:
        return (values[0], 0.0)
      # A replica with weight 0 (no example) measured nothing: its value
      # (NaN for the mean over no example) is left out, not multiplied by 0.
      return (sum(v * w for v, w in zip(values, weights) if w) / total,
              total)

    metrics = {k: _Mean(vw) for k, vw in out['metrics'].items()}
    learners = {}
    for lname, em in out['learners'].items():
      learners[lname] = {k: (_Float(local(v)[0]), _Float(local(w)[0]))
                         for k, (v, w) in em.items()}
    return {'metrics': metrics, 'learners': learners}

  # ---- evaluation ------------------------------------------------------------

  def _EmaContexts(self, task):
    """The optimizers with weight averages (each has `SwapAverages()`)."""
    return [ema for learner in task.learners
            for ema in learner.optimizer.EvalAverages()]

  def Evaluate(self, task, step, use_ema_layers=(), summary_dir='eval'):
    """Evaluates on the eval input; returns {metric: weighted mean}.

    Metrics are averaged over all evaluated batches with their weights.
    Inside, the weights of every averaging optimizer in `use_ema_layers`
    (Ema, Lookahead, SWA) are swapped for their copies (and back after).
    The scalars go to the TensorBoard run `summary_dir` of the logdir.
    """
    results = evaler_lib.EvalMetrics(self._params, task, use_ema_layers)
    summary_lib.WriteScalars(self._Writer(summary_dir), step,
                             {k: (v, 1.0) for k, v in results.items()})
    return results

  def _EvaluateAndUpdate(self, task, step, final=False):
    emas = self._EmaContexts(task)
    if emas:
      self._Print('Evaluating on the %s of the weights.' %
                  eval_restore.EvalWeightsLabel([type(e) for e in emas]))
    results = self.Evaluate(task, step, emas)
    self._Print('Eval at global step %d%s: %s' % (
        step, ' (final)' if final else '',
        ', '.join('%s %.5g' % (k, v) for k, v in sorted(results.items()))))
    dev = self._params.task.eval
    if dev.dev_metric:
      if dev.dev_metric not in results:
        raise ValueError(
            'task.eval.dev_metric %r is not an eval metric; available: %s. '
            'Set task.eval.dev_metric to one of them.' %
            (dev.dev_metric, sorted(results)))
      value = results[dev.dev_metric]
      for learner in task.learners:
        learner.UpdateWithDevMetric(value, dev.dev_metric_mode)
      if self._best is not None and self._best.MaybeSave(step, value,
                                                         dev.dev_metric):
        self._Print('New best %s %.5g at global step %d.' %
                    (dev.dev_metric, value, step))
    watched = self._early_stop.metric
    if watched is not None and watched in results:
      if self._early_stop.Update(step, results[watched]):
        self._Print(self._early_stop.reason + '.')
    return results

  def _RunEval(self):
    """Mode eval: restores one checkpoint, evaluates it, reports it.

    The restore of every read-only job (`eval_restore.RestoreForEval`):
    averages for the variables of a learner that keeps them (Ema), raw
    weights for the others. Writes only its output directory
    (`_EvalOutputDir`), and nothing at all on a read-only logdir without
    `eval_dir`.
    """
    task = self._BuildTask(train=False)
    restored, step, n = eval_restore.RestoreNewestForEval(
        self._eval_candidates, task, self._Print)
    if n:
      self._Print('Evaluating on the %s of the weights (%d variables '
                  'restored from %s).' % (eval_restore.EvalWeightsLabel(
                      eval_restore.EvalAverageClasses(task)), n, restored))
    out_dir = self._EvalOutputDir()
    results = evaler_lib.EvalMetrics(self._params, task)
    if out_dir:
      writer = self._Writer(out_dir)
      summary_lib.WriteParamsText(writer, self._params_text)
      summary_lib.WriteScalars(writer, step,
                               {k: (v, 1.0) for k, v in results.items()})
    self._Print('Eval at global step %d%s: %s' % (
        step, '' if self._checkpoint is None else ' (%s)' % restored,
        ', '.join('%s %.5g' % (k, v) for k, v in sorted(results.items()))))
    result = dict(results, global_step=step)
    counts = skipped_steps.CheckpointSkippedCounts(
        tf.train.load_checkpoint(restored))
    if counts:
      result.update(skipped_steps.SkippedCounts(counts))
    if out_dir:
      self._WriteMetrics(result, job_dir=out_dir)
      self._Print('Eval metrics written to %s.' % os.path.join(
          self._logdir, out_dir, logdir_lib.METRICS_FILE))
    return result

  def _EvalOutputDir(self):
    """Where mode eval writes: eval_dir, '<logdir>/eval_job' or None.

    None (and one line saying so and the fix) when no eval_dir was given
    and the logdir cannot be written (`logdir.IsWritable`): the job still
    evaluates and prints its metrics, and leaves every file as it was.
    """
    if self._eval_dir:
      return os.path.abspath(self._eval_dir)
    job_dir = os.path.join(self._logdir, self._eval_job_dir)
    if logdir_lib.IsWritable(job_dir):
      return self._eval_job_dir
    self._Print('NOTE: %s is read-only: the eval results are printed, not '
                'written. Give --eval_dir=<a writable directory> to keep '
                'them (TensorBoard run and metrics.json).' % self._logdir)
    return None


def _DigestedWeights(task):
  """The weights whose digest the workers compare: the model variables, but
  for a replica-local optimizer (Easgd, LocalSgd, whose copies differ
  between replicas on purpose) the copies its evaluation reads."""
  kept = {}
  for learner in task.learners:
    kept.update(learner.DigestedWeights())
  return [kept.get(id(v), v) for v in task.ModelVars().Flatten()]


# --mode=eval with no checkpoint to evaluate (a ValueError).
NothingToEvaluateError = eval_restore.NoCheckpointError


# The warning for a resume with other params (kept here for its callers).
ParamsChangeWarning = logdir_lib.ParamsChangeWarning


def _LossOf(tagged):
  for key in ('loss',):
    if key in tagged:
      return tagged[key][0]
  for k, (v, _) in sorted(tagged.items()):
    if 'loss' in k:
      return v
  return None


# ---- command line -----------------------------------------------------------


def _GlobalSeed(seed, params):
  """The seed of numpy, Python and TF's global RNGs for a run (an int).

  `--seed` if given; else the task's `random_seed` (what seeds the
  variables `CreateVariable` makes); else 0. So two runs of the same
  command start from the same weights, Keras layers' included.
  """
  if seed is not None:
    return int(seed)
  task_seed = params.task.random_seed if 'task' in params else None
  return int(task_seed) % 2**32 if task_seed is not None else 0
