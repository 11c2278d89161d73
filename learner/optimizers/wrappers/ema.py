"""Ema: exponential moving average of the weights, a wrapper around an optimizer."""

import tensorflow as tf

from learner.optimizers import wrapper
from params import checks
from schedules import base_schedule


class Ema(wrapper.BaseAveraging):
  """Keeps an exponential moving average of every bound variable.

  After each update of the inner optimizer (`p.optimizer`):
    avg <- decay * avg + (1 - decay) * w_new
  for every variable given to `Bind` (a variable without a gradient this
  step still moves its average toward its value). The averages are created
  at `Bind`, start at the variables' values then, and are tracked by this
  layer, so `tf.train.Checkpoint` saves and restores them.
  `decay` is fixed, or scheduled as any optimizer's hyperparameter:
  `hyper_schedules={'decay': schedule params}` (BaseOptimizer) gives it at
  the learner's step (the step its lr_schedule sees). `decay_schedule` (any
  BaseSchedule params, e.g. `schedules.EmaDecaySchedule`), the older
  spelling that task.train.ema_decay builds, is the same mechanism with
  one difference kept for existing configs: its step is this wrapper's
  own `num_updates` before the update (0 on the first update; equal to the
  learner's step unless lr_schedule_step='global_step'). Setting both is
  refused.
  `SwapAverages()` is a context manager that puts the averages into the
  variables (for evaluation) and the trained values back on exit. An Ema is
  found through `EvalAverages()` (built) or `EvalAverageClasses(p)`
  (params) of any optimizer around it, and `AverageCheckpointKeySuffix`
  names its averages in a checkpoint (all from `wrapper.BaseAveraging`,
  shared with Lookahead and SWA).
  Source: Polyak & Juditsky, "Acceleration of Stochastic Approximation by
  Averaging", 1992; TF's ExponentialMovingAverage.

  Raises:
    ValueError: at construction, if decay is outside [0, 1] or
      decay_schedule is not BaseSchedule params, if both decay_schedule
      and hyper_schedules['decay'] are set, if hyper_schedules['decay']
      leaves [0, 1] at step 0 or a boundary, if
      `p.optimizer` is not optimizer params or is a gradient accumulation
      (accumulation must be the outermost wrapper), or if this wrapper's own
      decoupled_weight_decay is set.
  """

  SCHEDULABLE_PARAMS = ('decay',)
  SHARDS_WITH_RULE = True  # ZeRO-1 shards the averages (elementwise move).

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'ema'
    p.Define('decay', 0.999,
             'Fixed decay of the average, in [0, 1]; unused when '
             'decay_schedule is set.')
    p.Define('decay_schedule', None,
             'Optional BaseSchedule params giving the decay at this '
             'wrapper\'s num_updates (e.g. EmaDecaySchedule); overrides decay. '
             'hyper_schedules={\'decay\': ...} is the same at the learner\'s '
             'step; set one of them.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['decay'] = checks.Real(0, 1, example=0.999)
    return specs

  EVAL_WEIGHTS_LABEL = 'EMA averages'

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.decay_schedule is not None:
      cls = getattr(p.decay_schedule, 'cls', None)
      if not (isinstance(cls, type) and
              issubclass(cls, base_schedule.BaseSchedule)):
        raise ValueError(
            '%s: decay_schedule must be BaseSchedule params (e.g. '
            'schedules.EmaDecaySchedule.Params()), got %r.' %
            (self.path, cls if cls else p.decay_schedule))
    if p.decay_schedule is not None:
      if 'decay' in self.scheduled_hyperparams:
        raise ValueError(
            '%s: decay_schedule and hyper_schedules[\'decay\'] are both set; '
            'set one (hyper_schedules counts the learner\'s step, '
            'decay_schedule this wrapper\'s num_updates).' % self.path)
      self.CreateChild('decay_schedule', p.decay_schedule)
      self.ScheduleHyper('decay', self.decay_schedule)

  def HyperStep(self, name=None):
    """The learner's step; for a decay given by decay_schedule, this
    wrapper's num_updates (as before hyper_schedules existed)."""
    if name == 'decay' and self.params.decay_schedule is not None:
      return self.num_updates.read_value()
    return super().HyperStep(name)

  def Decay(self):
    """float32 scalar: the decay the next update will use."""
    return tf.convert_to_tensor(self.Hyper('decay'), tf.float32)

  def _ApplyWrapped(self, lr, var_grads):
    """Applies the inner update, then moves every bound variable's average
    (`_ApplyAndMove`: whole, or on this replica's shards under ZeRO-1)."""
    decay = self.Decay()

    def _Move(w, avg):
      d = tf.cast(decay, avg.dtype)
      return d * avg + (1. - d) * w, None

    return self._ApplyAndMove(lr, var_grads, _Move)
