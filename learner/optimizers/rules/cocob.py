"""COCOB-Backprop: coin betting, no learning rate.

Per element, t counting updates from 1, g_t = lr * gradient (lr the
learner's rate, 1.0 by default: optax's learning_rate, flip_sign=False):
  L_t = max(L_{t-1}, |g_t|)                   L_0 = epsilon
  G_t = G_{t-1} + |g_t|                       G_0 = 0
  R_t = max(R_{t-1} - g_t (w_t - x0), 0)      R_0 = 0   (the reward)
  C_t = C_{t-1} - g_t                         C_0 = 0
  w_{t+1} = x0 + C_t / (L_t max(G_t + L_t, alpha L_t)) (L_t + R_t)
with x0 the weights at the first update.

Source: Orabona & Tommasi, "Training Deep Networks without Learning Rates
Through Coin Betting", NeurIPS 2017 (arXiv:1705.07795), Algorithm 2.
optax.contrib.cocob (0.2.8) gives the same numbers
(tests/test_optimizers/test_cocob.py); its `weight_decay` (an L2 term
added to the gradient) is the learner's `l2_regularizer_weight` here.
Fused kernel: TfLearnerMultiApplyCOCOB (kernels/multi_tensor_rules.cc),
the same numbers bit for bit.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks


class COCOB(BaseOptimizer):
  """COCOB-Backprop: each weight is x0 plus a bet of its wealth (module
  docstring); no learning rate to tune.

  Slots: 'x0' (the weights at the first update: taken then, not at Bind,
  so ZeRO-1's shards and weights restored after Bind count), 'scale' (L,
  starts at epsilon), 'subgradients' (G), 'reward' (R),
  'cumulative_gradients' (C) (optax's init_particles, scale, subgradients,
  reward, cumulative_gradients). Elementwise: ZeRO-1 shards it. The
  learner's rate multiplies the gradient (keep it 1.0). Defaults:
  optax.contrib.cocob's (0.2.8: alpha 100, eps 1e-8).

  Raises:
    ValueError: at construction, if alpha or epsilon is not > 0, or
      decoupled_weight_decay is set (the step sets the weights to x0 plus
      the bet, so a decay after it is undone by the next step; use the
      learner's l2_regularizer_weight, optax's weight_decay).
  """

  ELEMENTWISE = True
  FIRST_UPDATE_SLOTS = ('x0',)  # Under XLA: kernels/first_update.py.
  ACCELERATOR = 'cocob'  # Fused: kernels/multi_tensor_rules.cc.
  SCHEDULABLE_PARAMS = ()
  DEFAULT_LEARNING_RATE = 1.0  # Rate-free (optax's default rate).

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('alpha', 100.0,
             'Bounds the bet early: the fraction is at most 1 / alpha '
             'while G < alpha L.')
    p.Define('epsilon', 1e-8, 'The first value of the scale L (> 0).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        alpha=checks.Real(0, low_open=True, example=100.0,
                          why='0 divides by 0 at the first step'),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 divides by 0 on a zero gradient'),
        decoupled_weight_decay=checks.Real(
            0, 0, example=0.0,
            why='COCOB sets the weights to x0 plus its bet, so the next '
            'step undoes a decay; use the learner\'s l2_regularizer_weight'))
    return specs

  def _CreateSlots(self, var):
    return {'x0': None, 'scale': float(self.params.epsilon),
            'subgradients': None, 'reward': None,
            'cumulative_gradients': None}

  def _Scalars(self, update, dtype):
    """lr, alpha and `first` (bool: the first update, when x0 is taken)."""
    return NestedMap(lr=tf.cast(update.lr, dtype),
                     alpha=tf.constant(self.params.alpha, dtype),
                     first=tf.equal(self.num_updates, 0))

  def _Step(self, s, w, g, slots):
    w = tf.convert_to_tensor(w)
    g = s.lr * g
    x0 = tf.where(s.first, w, slots['x0'])
    scale = tf.maximum(slots['scale'], tf.abs(g))
    subgrads = slots['subgradients'] + tf.abs(g)
    reward = tf.maximum(slots['reward'] - g * (w - x0), 0.)
    cumulative = slots['cumulative_gradients'] - g
    bet = cumulative / (scale * tf.maximum(subgrads + scale, s.alpha * scale))
    new = x0 + bet * (scale + reward)
    return w - new, {'x0': x0, 'scale': scale, 'subgradients': subgrads,
                     'reward': reward, 'cumulative_gradients': cumulative}
