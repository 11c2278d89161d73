"""DevBasedSchedule: decay when the dev metric stops improving."""

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import ToInt64Step

_MODES = {'min': 'min', 'minimize': 'min', 'minimise': 'min',
          'max': 'max', 'maximize': 'max', 'maximise': 'max'}


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

  Source: Lingvo `lingvo/core/schedule.py` DevBasedSchedule.

  Raises:
    ValueError: at construction, if tolerance or window is negative, decay
      is not in (0, 1], min_factor is not in [0, 1], or metric_mode is not
      'min' or 'max'.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('tolerance', 0.0, 'Minimum improvement of the metric that '
             'counts as better; >= 0.')
    p.Define('window', 10000, 'Applied updates since the best step or the '
             'last decay before decaying; >= 0.')
    p.Define('decay', 0.5, 'Factor by which cur_factor is multiplied; in '
             '(0, 1].')
    p.Define('min_factor', 0.01, 'Floor of cur_factor; in [0, 1].')
    p.Define('metric_mode', 'min', '"min" if a lower dev metric is better '
             '(a loss), "max" if higher is (an accuracy). UpdateWithMetric\'s '
             'mode argument overrides it.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('tolerance', allow_zero=True)
    self._CheckPositive('window', allow_zero=True)
    if not (isinstance(p.decay, (int, float)) and 0 < p.decay <= 1):
      self._Fail('decay', 'must be in (0, 1]', 'Set e.g. decay=0.5.')
    if not (isinstance(p.min_factor, (int, float)) and
            0 <= p.min_factor <= 1):
      self._Fail('min_factor', 'must be in [0, 1]', 'Set e.g. 0.01.')
    if p.metric_mode not in _MODES:
      self._Fail('metric_mode', 'must be "min" or "max"',
                 'Set metric_mode="min" for a loss, "max" for an accuracy.')
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
      mode: None (use params.metric_mode), 'min'/'minimize' or
        'max'/'maximize'.

    Returns:
      The new cur_factor as a float32 scalar tensor (eagerly: after the
      update; in tf.function: ordered after the assignments).

    Raises:
      ValueError: for an unknown mode, naming it.
    """
    p = self.params
    given = p.metric_mode if mode is None else mode
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
