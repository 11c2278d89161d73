"""Lingvo's linear ramp-up schedules followed by a decay or constants."""

from params import checks
from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import NumReplicasInSync
from schedules.composite import CombinedMinimumSchedule
from schedules.exponential import ExponentialSchedule
from schedules.piecewise import PiecewiseConstantSchedule
from schedules.polynomial import LinearSchedule


class _CombinedMinimumOf(BaseSchedule):
  """A schedule defined as the minimum of the child 'combine' it builds."""

  def _Combine(self, schedule_params):
    self._CreateScheduleChild(
        'combine',
        CombinedMinimumSchedule.Params().Set(schedules=schedule_params))

  def FProp(self, theta, step):
    return self._ChildValue(self.combine, theta.combine, step)

  def Boundaries(self):
    return self.combine.Boundaries()


class LinearRampupExponentialDecayScaledByNumSplitSchedule(_CombinedMinimumOf):
  """Linear ramp to a peak of n = num_splits, hold, exponential decay, cap.

  With n splits: the value ramps linearly from warmup_init at step 0 to n at
  warmup * n, stays at n until max(warmup * n + 1, decay_start / n), decays
  exponentially to `min` at max(that + 1, decay_end / n), stays at `min`
  after, and is never above `max`. warmup=0 skips the ramp. Steps count
  applied updates.
  Differs from Lingvo (docs/lingvo.md): num_splits <= 0 is the strategy's
  replica count (Lingvo: its cluster's num_splits_per_client).
  Source: Lingvo `lingvo/core/schedule.py`
  LinearRampupExponentialDecayScaledByNumSplitSchedule.

  Raises:
    ValueError: at construction, if warmup < 0, min <= 0 (exponential decay
      needs positive values), or num_splits < 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup', 300, 'Ramp length: the value rises linearly until '
             'warmup * num_splits steps (applied updates).')
    p.Define('warmup_init', 1.0, 'Value at step 0.')
    p.Define('decay_start', 70000, 'Step (divided by num_splits) where the '
             'exponential decay starts.')
    p.Define('decay_end', 100000, 'Step (divided by num_splits) where the '
             'decay reaches min.')
    p.Define('min', 0.01, 'Value from decay_end on; > 0.')
    p.Define('max', 1e8, 'Cap on the value; 1e8 means no cap.')
    p.Define('num_splits', 0, 'Batch splits n (peak value and time scale); 0 '
             'uses the current tf.distribute strategy\'s '
             'num_replicas_in_sync at construction.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('warmup', allow_zero=True)
    self._CheckPositive('min')
    self._CheckPositive('num_splits', allow_zero=True)
    for name in ('warmup_init', 'decay_start', 'decay_end', 'max'):
      self._CheckNumber(name)
    splits = p.num_splits or NumReplicasInSync()
    warmup_end = p.warmup * splits
    decay_start = max(warmup_end + 1.0, p.decay_start / splits)
    peak = 1.0 * splits
    decay_end = max(decay_start + 1.0, p.decay_end / splits)
    scheds = [
        LinearSchedule.Params().Set(
            start=(warmup_end, peak), limit=(decay_start, peak)),
        ExponentialSchedule.Params().Set(
            start=(decay_start, peak), limit=(decay_end, p.min)),
        LinearSchedule.Params().Set(start=(0, p.max), limit=(decay_end, p.max)),
    ]
    if warmup_end > 0:
      scheds.insert(0, LinearSchedule.Params().Set(
          start=(0., p.warmup_init), limit=(warmup_end, peak)))
    self._Combine(scheds)


class LinearRampupExponentialDecay(
    LinearRampupExponentialDecayScaledByNumSplitSchedule):
  """Linear ramp from warmup_init (0) to 1, hold, exponential decay to min.

  The num_splits=1 case of LinearRampupExponentialDecayScaledByNumSplit-
  Schedule, with warmup_init=0: the value is 0 at step 0, as in Lingvo
  (use `Warmup` for a ramp whose first update already trains).
  Source: Lingvo `lingvo/core/schedule.py` LinearRampupExponentialDecay.

  Raises:
    ValueError: at construction, if num_splits != 1, or as the parent.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.num_splits = 1
    p.warmup_init = 0.0
    return p

  def __init__(self, params):
    if params.num_splits != 1:
      raise ValueError(
          'LinearRampupExponentialDecay %r: num_splits=%r must be 1. Use '
          'LinearRampupExponentialDecayScaledByNumSplitSchedule to scale by '
          'the number of splits.' % (params.name, params.num_splits))
    super().__init__(params)


class LinearRampupPiecewiseConstantSchedule(_CombinedMinimumOf):
  """Linear ramp from 0 to lrs[0] * n, then piecewise constants lrs[i] * n.

  With n = num_splits, boundaries and lrs scaled as boundaries[i] / n and
  lrs[i] * n: the value ramps linearly from 0 at step 0 to lrs[0] at
  boundaries[0], and is lrs[i] on [boundaries[i], boundaries[i+1]). The
  value at step 0 is 0, as in Lingvo. Steps count applied updates.
  Differs from Lingvo (docs/lingvo.md): one boundary is accepted (Lingvo
  asserts at least 2); num_splits <= 0 is the strategy's replica count.
  Source: Lingvo `lingvo/core/schedule.py`
  LinearRampupPiecewiseConstantSchedule.

  Raises:
    ValueError: at construction, if boundaries are empty, not positive or
      not strictly increasing, len(lrs) != len(boundaries), or num_splits
      < 0.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('boundaries', [], 'Strictly increasing positive steps (applied '
             'updates, before dividing by num_splits); the ramp ends at the '
             'first.')
    p.Define('lrs', [], 'Multipliers, one per boundary: lrs[i] from '
             'boundaries[i] on.')
    p.Define('num_splits', 0, 'Batch splits n; 0 uses the current '
             'tf.distribute strategy\'s num_replicas_in_sync.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    bounds = self._CheckBoundaries('boundaries', allow_empty=False)
    if bounds[0] <= 0:
      self._Fail('boundaries', 'must be > 0 (the ramp ends at the first)',
                 'Use positive steps.')
    if not isinstance(p.lrs, (list, tuple)) or len(p.lrs) != len(bounds):
      self._Fail('lrs', 'must have one value per boundary (%d)' % len(bounds),
                 'Give len(lrs) == len(boundaries).')
    self._CheckListOf('lrs', lambda v: not checks.Real().Problem(v),
                      'finite numbers', '[1.0, 0.1]')
    self._CheckPositive('num_splits', allow_zero=True)
    splits = float(p.num_splits or NumReplicasInSync())
    bounds = [b / splits for b in bounds]
    lrs = [v * splits for v in p.lrs]
    self._Combine([
        LinearSchedule.Params().Set(start=(0., 0.), limit=(bounds[0], lrs[0])),
        PiecewiseConstantSchedule.Params().Set(
            boundaries=bounds, values=[1e8] + lrs),
    ])


class LinearRampupDecaySchedule(_CombinedMinimumOf):
  """Linear ramp from 0 to 1 at step `peak`, linear decay to 0 at `end`.

  Value(step) = step / peak before peak, (end - step) / (end - peak) between
  peak and end, 0 from end on (0 at step 0, as in Lingvo). Steps count
  applied updates.
  Source: Lingvo 0.14.2 `lingvo/core/schedule.py` LinearRampupDecaySchedule
  (same params, defaults and values). Departure (docs/lingvo.md): peak=0 is
  accepted here and skips the ramp (value 1 at step 0); Lingvo raises.

  Raises:
    ValueError: at construction, if peak < 0 or end <= peak.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('peak', 1, 'Step (applied updates) where the value is 1; >= 0.')
    p.Define('end', 2, 'Step where the value reaches 0; > peak.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('peak', allow_zero=True)
    self._CheckPositive('end')
    if not p.end > p.peak:
      self._Fail('end', 'must be > peak=%r' % p.peak,
                 'Put the end of the decay after the peak.')
    scheds = [LinearSchedule.Params().Set(start=(p.peak, 1.0),
                                          limit=(p.end, 0.0))]
    if p.peak > 0:
      scheds.insert(0, LinearSchedule.Params().Set(start=(0, 0.0),
                                                   limit=(p.peak, 1.0)))
    self._Combine(scheds)
