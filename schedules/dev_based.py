"""DevBasedSchedule: decay when the dev metric stops improving."""

import tensorflow as tf

from params import Params
from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import ToInt64Step

_MODES = {'min': 'min', 'minimize': 'min', 'minimise': 'min',
          'max': 'max', 'maximize': 'max', 'maximise': 'max'}


def MetricHistoryParams():
  """Params of the dev-metric history (Lingvo's early_stop.MetricHistory).

  Same names and defaults as Lingvo 0.14.2's MetricHistory.Params(). Here the
  trainer feeds the metric through DevBasedSchedule.UpdateWithMetric, so
  only `minimize` is read (by UpdateWithMetric when no mode is given); the
  others (which job and metric Lingvo's evaler wrote, where to) are kept
  so a ported config sets them without error, and have no effect: the
  trainer's `eval.dev_metric` names the metric.
  """
  p = Params()
  p.Define('name', 'MetricHistory', 'Name, for messages.')
  p.Define('jobname', 'eval_dev', 'Lingvo: the job whose metric is tracked. '
           'No effect here.')
  p.Define('metric', 'log_pplx', 'Lingvo: the metric tracked. No effect '
           'here (the trainer\'s eval.dev_metric names it).')
  p.Define('minimize', True, 'True if a lower metric is better (a loss), '
           'False if higher is (an accuracy).')
  p.Define('logdir', '', 'Lingvo: where the history file is. No effect here.')
  p.Define('tfevent_file', False, 'Lingvo: also write a tf event file. No '
           'effect here.')
  p.Define('local_filesystem', False, 'Lingvo: history on a local disk. No '
           'effect here.')
  return p


class DevBasedSchedule(BaseSchedule):
  """A factor that decays when the dev metric has not improved for `window`.

  State, in non-trainable variables saved with the checkpoint:
  `cur_factor` (float32, starts at 1), `ref_step` (int64, the most recent
  decay or best step), `best_value` / `best_step` (the best metric so far
  and its step) and `num_evals`. `Value(step)` only reads `cur_factor`, so
  it is a pure read (works under jit_compile=True) and a resumed run sees
  the same factor. The trainer calls `UpdateWithMetric(step, value)` after
  each evaluation, with the learner's num_updates and the dev metric.

  Update, at each evaluation (step, value):
    improved   = value < best_value - tolerance   (min mode; first eval too)
                 value > best_value + tolerance   (max mode)
    if improved: best_value, best_step = value, step
    ref_step   = max(ref_step, best_step)
    if step - ref_step >= window:
      cur_factor = max(cur_factor * decay, min_factor)
      ref_step   = step   (if the factor changed)
  This is Lingvo's algorithm; Lingvo read the history from a file written by
  the evaler and updated the factor inside Value, here the history lives in
  the variables and Value has no side effects. Steps count applied updates.

  Departures (docs/lingvo.md): Lingvo always minimises (its BestStep op is
  called without `metric_history.minimize`); here `minimize=False` (or
  UpdateWithMetric's mode) maximises, and the default True is Lingvo's.
  Lingvo reads the history from the evaler's file; here the trainer calls
  UpdateWithMetric, so the other metric_history fields have no effect.
  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` DevBasedSchedule (same
  params and defaults; Lingvo's testDevBasedSchedule sequence gives the
  same factors).

  Raises:
    ValueError: at construction, if tolerance or window is negative, decay
      is not in (0, 1], min_factor is not in [0, 1], or
      metric_history.minimize is not a bool.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('metric_history', MetricHistoryParams(), 'The dev metric\'s '
             'history (Lingvo\'s MetricHistory params); minimize=True if a '
             'lower metric is better. UpdateWithMetric\'s mode overrides it.')
    p.Define('tolerance', 0.0, 'Minimum improvement of the metric that '
             'counts as better; >= 0.')
    p.Define('window', 10000, 'Applied updates since the best step or the '
             'last decay before decaying; >= 0.')
    p.Define('decay', 0.5, 'Factor by which cur_factor is multiplied; in '
             '(0, 1].')
    p.Define('min_factor', 0.01, 'Floor of cur_factor; in [0, 1].')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('tolerance', allow_zero=True)
    self._CheckPositive('window', allow_zero=True)
    self._CheckRange('decay', 0, 1, low_open=True, example=0.5)
    self._CheckRange('min_factor', 0, 1, example=0.01)
    history = p.metric_history
    if not isinstance(history, Params) or 'minimize' not in history:
      self._Fail('metric_history', 'must be MetricHistoryParams()',
                 'Use schedules.dev_based.MetricHistoryParams().')
    if not isinstance(history.minimize, bool):
      raise ValueError(
          'DevBasedSchedule %r: metric_history.minimize=%r must be a bool. '
          'Set True for a loss, False for an accuracy.' %
          (p.name, history.minimize))
    kw = dict(trainable=False,
              aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    self._cur_factor = self.CreateVariable('cur_factor', [], init=1.0,
                                           dtype=tf.float32, **kw)
    self._ref_step = self.CreateVariable('ref_step', [], init=0,
                                         dtype=tf.int64, **kw)
    self._best_value = self.CreateVariable('best_value', [], init=0.0,
                                           dtype=tf.float64, **kw)
    self._best_step = self.CreateVariable('best_step', [], init=0,
                                          dtype=tf.int64, **kw)
    self._num_evals = self.CreateVariable('num_evals', [], init=0,
                                          dtype=tf.int64, **kw)

  @property
  def cur_factor(self):
    """float32 variable: the current factor (the schedule's value)."""
    return self._cur_factor

  def FProp(self, theta, step):
    del step
    return tf.cast(theta.cur_factor, tf.float64)

  def UpdateWithMetric(self, step, value, mode=None):
    """Records the dev metric `value` measured at `step`; returns the factor.

    Args:
      step: Python int or int32/int64 scalar tensor, the learner's
        num_updates when the model was evaluated.
      value: float scalar (Python or tensor), the dev metric.
      mode: None (use params.metric_history.minimize), 'min'/'minimize' or
        'max'/'maximize'.

    Returns:
      The new cur_factor as a float32 scalar tensor (eagerly: after the
      update; in tf.function: ordered after the assignments).

    Raises:
      ValueError: for an unknown mode, naming it.
    """
    p = self.params
    if mode is None:
      mode = 'min' if p.metric_history.minimize else 'max'
    given = mode
    mode = _MODES.get(given)
    if mode is None:
      raise ValueError('DevBasedSchedule %r: mode=%r must be "min" or "max" '
                       '(or "minimize"/"maximize"): "min" for a loss, "max" '
                       'for an accuracy.' % (p.name, given))
    step = ToInt64Step(step)
    value = tf.cast(value, tf.float64)
    best = self._best_value.read_value()
    if mode == 'min':
      improved = value < best - p.tolerance
    else:
      improved = value > best + p.tolerance
    new_best = tf.logical_or(tf.equal(self._num_evals.read_value(), 0),
                             improved)
    best_step = tf.where(new_best, step, self._best_step.read_value())
    ref_step = tf.maximum(self._ref_step.read_value(), best_step)
    f = self._cur_factor.read_value()
    new_f = tf.where(step - ref_step >= p.window,
                     tf.maximum(tf.constant(p.min_factor, tf.float32),
                                f * p.decay), f)
    new_ref = tf.where(tf.equal(new_f, f), ref_step, step)
    ops = [
        self._best_value.assign(tf.where(new_best, value, best)),
        self._best_step.assign(best_step),
        self._ref_step.assign(new_ref),
        self._cur_factor.assign(new_f),
        self._num_evals.assign_add(1),
    ]
    with tf.control_dependencies(ops):
      return tf.identity(new_f)
