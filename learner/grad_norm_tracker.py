"""GradNormTracker: rejects steps whose gradient norm is an outlier.

Lingvo's `GradNormTracker` (lingvo/core/layers.py), in TF2 form. It keeps
exponential moving averages of log(1 + grad_norm) and of its square, and
rejects a step whose log norm is more than `clip_threshold` standard
deviations above the mean, once the averages have enough weight.
"""

import tensorflow as tf

from params import BaseLayer
from params import checks

# Lingvo triggers only once the moving averages' total weight exceeds this.
_WARMUP_WEIGHT = 0.75
_EPS = 1e-6


class GradNormTracker(BaseLayer):
  """Tracks gradient-norm statistics and rejects outlier steps.

  With `decay` d, each accepted or rejected finite step updates, for
  x = log(1 + max(grad_norm, grad_norm_lower_cap)):

    cap          = max(mean + clip_threshold * std, log(1 + grad_norm_clip_cap_min))
    x_c          = min(x, cap)
    log_mean         += (1 - d) * (x_c   - log_mean)
    log_mean_squared += (1 - d) * (x_c^2 - log_mean_squared)
    total_weight     += (1 - d) * (1     - total_weight)

  where mean = log_mean / max(total_weight, 1e-6) (the bias-corrected moving
  average), var = log_mean_squared / max(total_weight, 1e-6) - mean^2 and
  std = sqrt(max(var, 1e-6)), all from before this step's update. After n
  updates total_weight = 1 - d^n, so the warm-up (total_weight > 0.75) lasts
  ceil(log(0.25) / log(d)) steps (277 for d = 0.995), during which no step is
  rejected for its norm. A step is rejected when it is past warm-up and
  x > cap, or when `has_nan` is true; a step with has_nan leaves the moving
  averages unchanged. Every rejected step adds 1 to `total_rejections`. With
  `dry_run` the tracker does all of this but `Check` always returns True.

  Variables (float32 scalars, trainable=False, checkpointed with the layer):
  `log_mean`, `log_mean_squared`, `total_weight`; `total_rejections` (int64).
  They are created with aggregation NONE: in a tf.distribute replica context
  each replica updates its own copy without a merge_call (so `Check` may run
  inside tf.cond, as under gradient accumulation). Under several replicas
  the learner does not call `Check`: each replica asks `Reject`, the
  answers are combined (any replica rejects), and every replica then
  `Record`s the combined verdict with the all-reduced gradient's norm, so
  the copies stay equal and the step is skipped everywhere or nowhere.

  Source: Lingvo, lingvo/core/layers.py `GradNormTracker` (same params,
  defaults and decisions). Differs from Lingvo (docs/lingvo.md): the
  default `name` is 'grad_norm_tracker' (Lingvo: ''); `Check` returns a
  bool (Lingvo's FProp: 1.0 or 0.0) and counts a non-finite norm as
  has_nan; `total_rejections` is int64 (Lingvo: float32); no summaries
  (`Statistics()` instead); the params are validated (Lingvo: not at all).

  Raises:
    ValueError: at construction, if `decay` is not in (0, 1), `clip_threshold`
      is not > 0, or `grad_norm_lower_cap` / `grad_norm_clip_cap_min` < 0
      (each must be a finite number, not a bool).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'grad_norm_tracker'
    p.Define('decay', 0.995,
             'Decay of the moving averages of the log gradient norm, in (0, '
             '1), per checked step.')
    p.Define('grad_norm_lower_cap', 1e-2,
             'Gradient norms below this are raised to it before the log; '
             '>= 0.')
    p.Define(
        'clip_threshold', 4.0,
        'A step is rejected when its log(1 + norm) is more than this many '
        'standard deviations above the moving mean; > 0.')
    p.Define(
        'grad_norm_clip_cap_min', 0.0,
        'Never reject a step whose gradient norm is at most this value '
        '(the cap in log space is at least log(1 + this)); >= 0.')
    p.Define(
        'dry_run', False,
        'If True, statistics and total_rejections are updated as usual but '
        'Check() always accepts, to observe what the tracker would do.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        decay=checks.Real(0, 1, low_open=True, high_open=True, example=0.995),
        grad_norm_lower_cap=checks.Real(0, example=1e-2),
        clip_threshold=checks.Real(0, low_open=True, example=4.0,
                                   why='a number of standard deviations'),
        grad_norm_clip_cap_min=checks.Real(0, example=0.0))
    return specs

  def __init__(self, params):
    super().__init__(params)
    kw = dict(trainable=False,
              aggregation=tf.VariableAggregation.NONE)
    self._log_mean = self.CreateVariable(
        'log_mean', [], init=0.0, dtype=tf.float32, **kw)
    self._log_mean_squared = self.CreateVariable(
        'log_mean_squared', [], init=0.0, dtype=tf.float32, **kw)
    self._total_weight = self.CreateVariable(
        'total_weight', [], init=0.0, dtype=tf.float32, **kw)
    self._total_rejections = self.CreateVariable(
        'total_rejections', [], init=0, dtype=tf.int64, **kw)

  @property
  def total_rejections(self):
    """int64 scalar variable: the number of rejected steps so far."""
    return self._total_rejections

  def Statistics(self):
    """Returns a dict of float32 scalars: mean, std and cap of log(1+norm).

    `mean` and `std` are those of log(1 + grad_norm); `cap` is the log-space
    threshold the next `Check` compares against. Read-only.
    """
    mean, std, cap = self._Stats()
    return {'log_grad_norm_mean': mean, 'log_grad_norm_std': std,
            'log_grad_norm_cap': cap}

  def _Stats(self):
    p = self.params
    total_weight = tf.maximum(self._total_weight.read_value(), _EPS)
    mean = self._log_mean.read_value() / total_weight
    var = self._log_mean_squared.read_value() / total_weight - mean * mean
    std = tf.sqrt(tf.maximum(var, _EPS))
    cap = tf.maximum(mean + std * p.clip_threshold,
                     tf.math.log(tf.constant(1.0 + p.grad_norm_clip_cap_min,
                                             tf.float32)))
    return mean, std, cap

  def Check(self, grad_norm, has_nan=None):
    """Updates the statistics with this step and says whether to apply it.

    `Reject` and then `Record` with its answer.

    Args:
      grad_norm: a float scalar tensor (any float dtype; cast to float32),
        the global gradient norm of the step. A non-finite norm is treated as
        has_nan=True.
      has_nan: optional bool scalar tensor, True if the step's gradients
        contain NaN/Inf.

    Returns:
      A bool scalar tensor: True to apply the step, False to skip it (always
      True with dry_run).
    """
    decided = self._Decide(grad_norm, has_nan)
    self._Record(*decided)
    reject = decided[3]
    if self.params.dry_run:
      return tf.constant(True)
    return tf.logical_not(reject)

  def Reject(self, grad_norm, has_nan=None):
    """Whether this step would be rejected; changes no statistic.

    The first half of `Check`, for replicas that decide together
    (learner/gradient_pipeline.py, `SkipFlags`): each replica asks, the
    answers are combined, and `Record` is then given the combined answer.

    Args:
      grad_norm, has_nan: as in `Check`.

    Returns:
      bool scalar: True for an outlier past the warm-up or a bad step,
      whatever `dry_run` is.
    """
    return self._Decide(grad_norm, has_nan)[3]

  def Record(self, grad_norm, has_nan, rejected):
    """Updates the statistics with a step and its (combined) verdict.

    The second half of `Check`: the moving averages move with this step's
    norm (not for a bad step) and `total_rejections` by `rejected`.

    Args:
      grad_norm, has_nan: as in `Check`.
      rejected: bool scalar, the step's verdict (e.g. `Reject` of any
        replica).
    """
    log_norm, bad, cap, _, total_weight = self._Decide(grad_norm, has_nan)
    self._Record(log_norm, bad, cap, tf.convert_to_tensor(rejected),
                 total_weight)

  def _Decide(self, grad_norm, has_nan):
    """(log(1 + norm raised to the lower cap), bad, cap, reject,
    total_weight), from the statistics before this step."""
    p = self.params
    grad_norm = tf.cast(tf.convert_to_tensor(grad_norm), tf.float32)
    bad = tf.logical_not(tf.math.is_finite(grad_norm))
    if has_nan is not None:
      bad = tf.logical_or(bad, tf.cast(has_nan, tf.bool))
    # Keep the arithmetic finite; a bad step does not touch the averages.
    safe_norm = tf.where(bad, tf.zeros_like(grad_norm), grad_norm)
    safe_norm = tf.maximum(safe_norm, p.grad_norm_lower_cap)
    log_norm = tf.math.log(safe_norm + 1.0)
    _, _, cap = self._Stats()
    total_weight = self._total_weight.read_value()
    reject = tf.logical_and(log_norm > cap, total_weight > _WARMUP_WEIGHT)
    return log_norm, bad, cap, tf.logical_or(reject, bad), total_weight

  def _Record(self, log_norm, bad, cap, reject, total_weight):
    """Moves the averages by x_c = min(log_norm, cap) (not when bad)."""
    capped = tf.minimum(log_norm, cap)
    rate = tf.where(bad, 0.0, 1.0 - self.params.decay)
    self._log_mean.assign_add(rate * (capped - self._log_mean))
    self._log_mean_squared.assign_add(rate *
                                      (capped * capped - self._log_mean_squared))
    self._total_weight.assign_add(rate * (1.0 - total_weight))
    self._total_rejections.assign_add(tf.cast(reject, tf.int64))
