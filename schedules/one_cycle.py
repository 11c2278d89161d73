"""One-cycle: the rate up then down, the momentum down then up.

  T = total_steps, p = pct_start, a = 1 / div_factor (the start),
  z = a / final_div_factor (the end); phases end at e1 = p T - 1 and
  e2 = T - 1 (three_phase: e1 = p T - 1, e2 = 2 p T - 2, e3 = T - 1):
    rate:      a -> 1 over [0, e1], 1 -> z over [e1, e2]
               (three_phase: a -> 1, 1 -> a, a -> z)
    momentum:  max -> base over [0, e1], base -> max over [e1, e2]
               (three_phase: max -> base, base -> max, max -> max)
  each phase annealed from its start value u to its end value v at the
  fraction q of the phase done: cos: v + (u - v) (1 + cos(pi q)) / 2;
  linear: u + (v - u) q.

Source: Smith & Topin, "Super-Convergence: Very Fast Training of Neural
Networks Using Large Learning Rates", 2018 (section 3, the 1cycle policy);
the phases, defaults and values of PyTorch's `torch.optim.lr_scheduler.
OneCycleLR` (written out here from its documented formula), as a multiplier
of the learner's rate (PyTorch's max_lr is the learner's `learning_rate`).
"""

import math

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat

ANNEAL_STRATEGIES = ('cos', 'linear')


def _Anneal(strategy, start, end, q):
  """The value a fraction q (float64 tensor) of the way from start to end."""
  if strategy == 'cos':
    return end + (start - end) / 2.0 * (tf.cos(math.pi * q) + 1.0)
  return start + (end - start) * q


class OneCycle(BaseSchedule):
  """Smith & Topin's one-cycle rate, as PyTorch's OneCycleLR (a multiplier).

  T = total_steps; start a = 1 / div_factor, end z = a / final_div_factor;
  phase ends e1 = pct_start * T - 1, e2 = T - 1 (three_phase: e1,
  e2 = 2 pct_start T - 2, e3 = T - 1). Value: a -> 1 over [0, e1], then
  1 -> z over [e1, T - 1] (three_phase: 1 -> a, then a -> z), each annealed
  with `anneal_strategy` ('cos': v + (u - v)(1 + cos(pi q)) / 2 from u to v
  at fraction q; 'linear'). Multiply by the learner's `learning_rate` (=
  PyTorch's max_lr). Steps count applied updates; from step T - 1 on the
  value stays z (PyTorch raises past T). `OneCycleMomentum` is the matching
  momentum cycle, for a scheduled momentum.
  Source: Smith & Topin, "Super-Convergence", 2018; PyTorch OneCycleLR
  (same params, defaults and values).

  Raises:
    ValueError: at construction, if total_steps is not an int > 0,
      pct_start is not in (0, 1) or leaves a phase shorter than one step,
      div_factor or final_div_factor is not a finite number > 0, or
      anneal_strategy is not 'cos' or 'linear'.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('total_steps', 0, 'Length of the cycle in applied updates; '
             '> 0.')
    p.Define('pct_start', 0.3, 'Fraction of the cycle spent rising, in '
             '(0, 1).')
    p.Define('anneal_strategy', 'cos', "'cos' or 'linear'.")
    p.Define('div_factor', 25.0, 'The start is 1 / div_factor of the peak.')
    p.Define('final_div_factor', 1e4, 'The end is the start / '
             'final_div_factor.')
    p.Define('three_phase', False, 'If True, a third phase: back down to '
             'the start, then to the end (PyTorch three_phase).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckInt('total_steps', low=1, example=1000)
    self._CheckRange('pct_start', 0.0, 1.0, low_open=True, high_open=True,
                     example=0.3)
    self._CheckRange('div_factor', 0.0, low_open=True, example=25.0)
    self._CheckRange('final_div_factor', 0.0, low_open=True, example=1e4)
    if p.anneal_strategy not in ANNEAL_STRATEGIES:
      self._Fail('anneal_strategy', 'is not a strategy',
                 "Set 'cos' or 'linear'.")
    ends = self.PhaseEnds()
    if any(b - a < 1.0 for a, b in zip([0.0] + ends, ends)):
      self._Fail('pct_start', 'leaves a phase shorter than one step with '
                 'total_steps=%d' % p.total_steps,
                 'Give a pct_start nearer 0.5 or a larger total_steps.')

  def PhaseEnds(self):
    """The steps (floats) where the phases end, as PyTorch computes them."""
    p = self.params
    first = float(p.pct_start * p.total_steps) - 1.0
    if p.three_phase:
      return [first, float(2 * p.pct_start * p.total_steps) - 2.0,
              float(p.total_steps) - 1.0]
    return [first, float(p.total_steps) - 1.0]

  def PhaseValues(self):
    """[(start, end)] of each phase (floats)."""
    p = self.params
    a = 1.0 / p.div_factor
    z = a / p.final_div_factor
    if p.three_phase:
      return [(a, 1.0), (1.0, a), (a, z)]
    return [(a, 1.0), (1.0, z)]

  def FProp(self, theta, step):
    x = StepAsFloat(step)
    ends = self.PhaseEnds()
    starts = [0.0] + ends[:-1]
    # The last phase first; each earlier phase overrides up to its end.
    value = None
    for start, end, (u, v) in reversed(list(zip(starts, ends,
                                                self.PhaseValues()))):
      q = tf.clip_by_value((x - start) / (end - start), 0.0, 1.0)
      phase = _Anneal(self.params.anneal_strategy, u, v, q)
      value = phase if value is None else tf.where(x <= end, phase, value)
    return value

  def Boundaries(self):
    return sorted({int(math.ceil(e)) for e in self.PhaseEnds()})


class OneCycleMomentum(OneCycle):
  """The momentum of the one-cycle policy: max -> base -> max (absolute).

  The same phases as `OneCycle` (same params), with values max_momentum ->
  base_momentum over the rise of the rate, base_momentum -> max_momentum
  over its fall (three_phase: then max_momentum flat), as PyTorch's
  OneCycleLR with cycle_momentum. Its values are the momentum itself (not a
  multiplier): give it as the schedule of a momentum or beta1.
  Source: Smith & Topin 2018; PyTorch OneCycleLR (base_momentum 0.85,
  max_momentum 0.95).

  Raises:
    ValueError: as OneCycle, and if base_momentum > max_momentum or either
      is outside [0, 1).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('base_momentum', 0.85, 'Momentum at the peak of the rate.')
    p.Define('max_momentum', 0.95, 'Momentum at the start and end.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckRange('base_momentum', 0.0, 1.0, high_open=True, example=0.85)
    self._CheckRange('max_momentum', 0.0, 1.0, high_open=True, example=0.95)
    if p.base_momentum > p.max_momentum:
      self._Fail('base_momentum', 'is above max_momentum=%r' %
                 p.max_momentum, 'Set base_momentum <= max_momentum.')

  def PhaseValues(self):
    p = self.params
    lo, hi = float(p.base_momentum), float(p.max_momentum)
    if p.three_phase:
      return [(hi, lo), (lo, hi), (hi, hi)]
    return [(hi, lo), (lo, hi)]
