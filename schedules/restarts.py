"""Cosine decay with warm restarts (SGDR).

  P = first_decay_steps, x = step / P; the restart index i and the fraction
  r of period i done:
    t_mul == 1:  i = floor(x),  r = x - i
    t_mul != 1:  i = floor(log(1 - x (1 - t_mul)) / log(t_mul)),
                 r = (x - (1 - t_mul^i) / (1 - t_mul)) / t_mul^i
  (period i lasts P t_mul^i steps) and
    Value = (1 - alpha) * m_mul^i * (1 + cos(pi r)) / 2 + alpha.

Source: Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm
Restarts", ICLR 2017, eq. (5); the same params, defaults and values as
Keras's `keras.optimizers.schedules.CosineDecayRestarts` (tested against
it), as a multiplier of the learner's rate (Keras's initial_learning_rate
is the learner's `learning_rate` here).
"""

import math

import tensorflow as tf

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import StepAsFloat


class CosineWithRestarts(BaseSchedule):
  """Cosine decay restarting every period; periods grow by t_mul.

  With P = first_decay_steps, x = step / P, restart i and fraction r:
    t_mul == 1:  i = floor(x),  r = x - i
    otherwise:   i = floor(log(1 - x (1 - t_mul)) / log(t_mul)),
                 r = (x - (1 - t_mul^i) / (1 - t_mul)) / t_mul^i
    Value = (1 - alpha) * m_mul^i * (1 + cos(pi r)) / 2 + alpha
  A multiplier of the learner's `learning_rate`: 1 at step 0 and at each
  restart (times m_mul^i); the floor alpha is not decayed by m_mul, as in
  Keras. Steps count applied updates.
  Source: Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm
  Restarts", ICLR 2017; Keras `CosineDecayRestarts` (same params and
  values).

  Raises:
    ValueError: at construction, if first_decay_steps is not an int > 0,
      t_mul is not a finite number >= 1 (a shrinking period would end the
      schedule), m_mul is not in (0, 1], or alpha is not in [0, 1].
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('first_decay_steps', 0, 'Length of the first period in '
             'applied updates; > 0.')
    p.Define('t_mul', 2.0, 'Each period is t_mul times longer than the one '
             'before; >= 1.')
    p.Define('m_mul', 1.0, 'Each restart starts at m_mul times the peak of '
             'the one before; in (0, 1].')
    p.Define('alpha', 0.0, 'Floor of the value, in [0, 1].')
    return p

  def __init__(self, params):
    super().__init__(params)
    self._CheckInt('first_decay_steps', low=1, example=1000)
    self._CheckRange('t_mul', 1.0, example=2.0)
    self._CheckRange('m_mul', 0.0, 1.0, low_open=True, example=1.0)
    self._CheckRange('alpha', 0.0, 1.0, example=0.0)

  def FProp(self, theta, step):
    p = self.params
    x = StepAsFloat(step) / float(p.first_decay_steps)
    t_mul = float(p.t_mul)
    if t_mul == 1.0:
      i = tf.floor(x)
      r = x - i
    else:
      t_mul_t = tf.constant(t_mul, tf.float64)
      i = tf.floor(tf.math.log(1.0 - x * (1.0 - t_mul)) / math.log(t_mul))
      # The log ratio can land an ulp off an integer at a restart (log(8) /
      # log(2) < 3 in tf.function), so correct i by one either way so that
      # done(i) <= x < done(i + 1).
      def _Done(k):
        return (1.0 - tf.pow(t_mul_t, k)) / (1.0 - t_mul)
      i += (tf.cast(x >= _Done(i + 1.0), tf.float64) -
            tf.cast(x < _Done(i), tf.float64))
      done = _Done(i)
      r = (x - done) / tf.pow(t_mul_t, i)
    peak = tf.pow(tf.constant(float(p.m_mul), tf.float64), i)
    return ((1.0 - p.alpha) * peak * 0.5 * (1.0 + tf.cos(math.pi * r)) +
            p.alpha)

  def Boundaries(self):
    """The first three restarts (steps where the value jumps back up)."""
    p = self.params
    out, start, period = [], 0.0, float(p.first_decay_steps)
    for _ in range(3):
      start += period
      out.append(int(round(start)))
      period *= float(p.t_mul)
    return out
