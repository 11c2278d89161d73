"""Early stopping on the dev metric, counted in evaluations.

In `train_and_eval`, after each evaluation at a multiple of
`p.task.eval.interval_steps` (the final one too when it falls on one) the dev
metric (`p.task.eval.dev_metric`, better by `dev_metric_mode`) is
compared with the best so far. When it has not beaten the best for
`p.task.eval.early_stop_patience` evaluations in a row, training stops at
that evaluation: the trainer saves the checkpoint of that step, runs the
final evaluation, and writes `early_stopped: true` and the reason into
`metrics.json`. A value beats the best only if strictly better (ties do
not), and the first evaluation is always the best so far.

This is `tf.keras.callbacks.EarlyStopping(patience=..., min_delta=0)` with
evaluations for epochs. Lingvo's `early_stop.EarlyStop` counts a `window`
of global steps instead; with evaluations every `interval_steps`, a
patience of n is Lingvo's window of n * interval_steps steps.

Only evaluations at multiples of interval_steps count, each step once, so a
run that ended at max_steps and is resumed with a larger one counts the
evaluations an uninterrupted run counts. Restarts: every evaluation's
(global step, value) goes to
`<logdir>/early_stop.json` before its checkpoint is saved; a resumed run
replays the entries up to the step it resumed at (a later entry belongs to
an evaluation whose checkpoint was never saved and is dropped), so it
stops where an uninterrupted run stops, and a rerun of a run that stopped
early does not train on.
"""

import json
import os

import tensorflow as tf

STATE_FILE = 'early_stop.json'


def CheckPatience(patience):
  """Returns `patience` if it is an int >= 0.

  Raises:
    ValueError: naming task.eval.early_stop_patience, for a bool, a
      non-int or a negative value.
  """
  if (not isinstance(patience, int) or isinstance(patience, bool) or
      patience < 0):
    raise ValueError(
        'task.eval.early_stop_patience must be an int >= 0 (evaluations '
        'without improvement; 0 = off), got %r.' % (patience,))
  return patience


class EarlyStop:
  """Counts evaluations without improvement of the dev metric.

  Args:
    metric: the dev metric's name (for the messages).
    mode: 'min' (lower is better) or 'max'.
    patience: evaluations without improvement after which to stop; 0 turns
      early stopping off (`Update` never stops).
    interval_steps: evaluations count at global steps that are multiples of
      this (others are ignored); 1 counts every step.
    path: optional JSON file keeping the history across restarts.
    resume_step: with `path`: the global step the run resumed at; history
      entries after it are dropped. None keeps them all.
    window: Lingvo's rule instead of the patience (lingvo/core/
      early_stop.py): stop when the best value is more than `window`
      global steps old, at a step >= `min_steps`; a value is better only
      by more than `tolerance`. 0: the patience decides.
    tolerance, min_steps: see `window`.

  Attributes:
    stopped: True once the patience ran out.
    reason: one sentence saying at which evaluation and why, or None.
    history: [(global step, value)] of every evaluation counted.
  """

  def __init__(self, metric, mode, patience, interval_steps=1, path=None,
               resume_step=None, window=0, tolerance=0.0, min_steps=0):
    if mode not in ('min', 'max'):
      raise ValueError("EarlyStop: mode must be 'min' or 'max', got %r." %
                       (mode,))
    CheckPatience(patience)
    self._metric, self._mode, self._patience = metric, mode, patience
    self._window, self._tolerance = int(window or 0), float(tolerance or 0)
    self._min_steps = int(min_steps or 0)
    self._interval = max(1, int(interval_steps))
    self._path = path
    self.history = []
    self.stopped = False
    self.reason = None
    self._best = None  # (step, value)
    self._wait = 0
    for step, value in self._LoadHistory(resume_step):
      self._Count(step, value)

  @property
  def metric(self):
    """The eval metric it watches, or None when it is off."""
    return self._metric if (self._patience or self._window) else None

  @classmethod
  def FromParams(cls, eval_params, logdir, resume_step, evaluating,
                 lingvo=None):
    """The early stop of a run from `p.task.eval`, kept in `logdir`.

    Args:
      eval_params: p.task.eval ('early_stop_patience', 'dev_metric',
        'dev_metric_mode', 'interval_steps').
      logdir: the run's logdir (the history is `<logdir>/early_stop.json`).
      resume_step: the global step the run starts or resumes at.
      evaluating: False when the run does not evaluate (mode 'train'):
        early stopping is off.
      lingvo: optional p.task.train.early_stop (Lingvo's EarlyStop params):
        a `window` > 0 watches `metric_history.metric` (lower is better if
        `minimize`) by Lingvo's rule (see the class).

    Raises:
      ValueError: early_stop_patience not an int >= 0 (in every mode), or
        > 0 in a run that evaluates, without a dev_metric or without evaluations before the end
        (interval_steps 0).
    """
    patience = CheckPatience(eval_params.early_stop_patience)
    patience = patience if evaluating else 0
    window = (lingvo.window if lingvo is not None else 0) if evaluating else 0
    if window:
      return cls._Lingvo(eval_params, lingvo, patience, logdir, resume_step)
    if patience:
      if not eval_params.dev_metric:
        raise ValueError(
            'task.eval.early_stop_patience is %d but task.eval.dev_metric is '
            'None: set task.eval.dev_metric (and dev_metric_mode) to the '
            'metric to watch, or early_stop_patience : 0.' % patience)
      if not eval_params.interval_steps:
        raise ValueError(
            'task.eval.early_stop_patience is %d but task.eval.'
            'interval_steps is 0 (one evaluation, at the end): set '
            'interval_steps > 0, or early_stop_patience : 0.' % patience)
    return cls(eval_params.dev_metric, eval_params.dev_metric_mode, patience,
               interval_steps=eval_params.interval_steps,
               path=os.path.join(logdir, STATE_FILE) if patience else None,
               resume_step=resume_step)

  @classmethod
  def _Lingvo(cls, eval_params, lp, patience, logdir, resume_step):
    """The early stop of p.task.train.early_stop (window > 0)."""
    if patience:
      raise ValueError(
          'task.train.early_stop.window : %r and task.eval.'
          'early_stop_patience : %r are both set; keep one (window counts '
          'global steps, as Lingvo; patience counts evaluations).' %
          (lp.window, patience))
    if not eval_params.interval_steps:
      raise ValueError(
          'task.train.early_stop.window : %r needs evaluations during '
          'training: set task.eval.interval_steps > 0.' % (lp.window,))
    mh = lp.metric_history
    return cls(mh.metric, 'min' if mh.minimize else 'max', 0,
               interval_steps=eval_params.interval_steps,
               path=os.path.join(logdir, STATE_FILE), resume_step=resume_step,
               window=lp.window, tolerance=lp.tolerance,
               min_steps=lp.min_steps)

  def _LoadHistory(self, resume_step):
    if not self._path or not tf.io.gfile.exists(self._path):
      return []
    with tf.io.gfile.GFile(self._path) as f:
      history = json.load(f)['history']
    return [(int(s), float(v)) for s, v in history
            if resume_step is None or s <= resume_step]

  def _Better(self, value):
    best = self._best[1]
    if self._mode == 'min':
      return value < best - self._tolerance
    return value > best + self._tolerance

  def _Count(self, step, value):
    """Counts one evaluation; returns True if it stops training."""
    self.history.append((int(step), float(value)))
    if self._best is None or self._Better(value):
      self._best, self._wait = (int(step), float(value)), 0
      return False
    self._wait += 1
    if self._window:
      return self._WindowStop(step, value)
    if self._patience and self._wait >= self._patience:
      self.stopped = True
      self.reason = (
          'Early stop at global step %d: %s %.6g has not been %s than its '
          'best %.6g (global step %d) for %d evaluations '
          '(task.eval.early_stop_patience %d)' % (
              step, self._metric, value,
              'lower' if self._mode == 'min' else 'higher', self._best[1],
              self._best[0], self._wait, self._patience))
      return True
    return False

  def _WindowStop(self, step, value):
    """Lingvo's rule: the best is more than `window` steps old."""
    if step - self._best[0] <= self._window or step < self._min_steps:
      return False
    self.stopped = True
    self.reason = (
        'Early stop at global step %d: %s %.6g; its best %.6g (global step '
        '%d) is more than %d global steps old (task.train.early_stop.window '
        '%d, tolerance %g)' % (
            step, self._metric, value, self._best[1], self._best[0],
            self._window, self._window, self._tolerance))
    return True

  def Update(self, step, value):
    """Counts the evaluation at `step`; returns True if training stops now.

    An evaluation off the interval grid, at a step already counted, or
    after the stop is not counted (returns False); with patience 0 nothing
    is counted.
    """
    if (self.metric is None or self.stopped or step % self._interval or
        (self.history and step <= self.history[-1][0])):
      return False
    stop = self._Count(step, value)
    if self._path:
      tmp = self._path + '.tmp'
      with tf.io.gfile.GFile(tmp, 'w') as f:
        json.dump({'metric': self._metric, 'mode': self._mode,
                   'patience': self._patience, 'history': self.history,
                   'stopped_at': self.history[-1][0] if self.stopped else None,
                   'reason': self.reason}, f, indent=1)
      tf.io.gfile.rename(tmp, self._path, overwrite=True)
    return stop

  def Summary(self):
    """What metrics.json gets: {} or {'early_stopped', 'early_stop_reason'}."""
    if not self.stopped:
      return {}
    return {'early_stopped': True, 'early_stop_reason': self.reason}


def StoppedAt(logdir):
  """The global step at which the run in `logdir` stopped early, or None."""
  path = os.path.join(logdir, STATE_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.load(f).get('stopped_at')
