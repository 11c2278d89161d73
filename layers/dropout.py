"""DropoutLayer: inverted dropout, applied only when training.

Srivastava et al. 2014, "Dropout: A Simple Way to Prevent Neural Networks
from Overfitting" (JMLR), in the inverted form: kept units are scaled by
1 / keep_prob at training time, so evaluation is the identity.

Training versus evaluation is an FProp argument: `FProp(theta, x,
training=False)`. Every layer in `layers/` that has dropout takes the same
`training` keyword (default False: evaluation, deterministic) and passes it
on to its children, so a model is trained with `training=True` and
evaluated with the default.

Inside a train step of a task (`params.step_seeds.StepSeeds`, opened by
`BaseTask`) the mask is stateless, drawn from (the layer's seed, the global
step), so a resumed run draws the masks of the uninterrupted one; elsewhere
(a layer called on its own) it is `tf.nn.dropout`'s stateful draw.
"""

import zlib

import tensorflow as tf

from params import BaseLayer
from params import checks
from params import remat
from params import step_seeds


class DropoutLayer(BaseLayer):
  """Drops each element with probability 1 - keep_prob when training.

  Input: float tensor of any shape and dtype. Output: same shape and dtype;
  x unchanged if not training or keep_prob == 1, else x * mask / keep_prob
  with mask ~ Bernoulli(keep_prob) (broadcast over
  `noise_shape_broadcast_dims`).
  No variables.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('keep_prob', 1.0,
             'Probability of keeping an element, in (0, 1] (Lingvo\'s name; '
             'the drop rate is 1 - keep_prob). 1.0 disables dropout.')
    p.Define(
        'noise_shape_broadcast_dims', None,
        'Dimensions (ints, may be negative) along which one mask value is '
        'shared, e.g. [1] on [batch, time, dim] for one mask per sequence '
        '(the same units dropped at every step). None: an independent mask '
        'value per element.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['keep_prob'] = checks.Real(
        0, 1, low_open=True, example=0.9,
        why='the probability of keeping, not of dropping')
    return specs

  def FProp(self, theta, x, training=False):
    """x [any shape] -> same shape; dropout only if `training`."""
    p = self.params
    if not training or p.keep_prob == 1.0:
      return x
    noise_shape = None
    if p.noise_shape_broadcast_dims:
      shape = tf.unstack(tf.shape(x))
      for d in p.noise_shape_broadcast_dims:
        shape[d] = 1
      noise_shape = tf.stack(shape)
    seed = step_seeds.NextSeed(self._LayerSeed())
    if seed is not None:
      return _StatelessDropout(x, 1.0 - p.keep_prob, seed, noise_shape)
    return tf.nn.dropout(x, rate=1.0 - p.keep_prob, noise_shape=noise_shape,
                         seed=p.random_seed)

  def _LayerSeed(self):
    """p.random_seed, or the crc32 of the layer's path (the same each run)."""
    if self.params.random_seed is not None:
      return int(self.params.random_seed)
    return zlib.crc32(self.path.encode('utf-8'))


def _StatelessDropout(x, rate, seed, noise_shape):
  """tf.nn.experimental.stateless_dropout's ops, its mask `remat.Kept`.

  The same numbers as `tf.nn.experimental.stateless_dropout(x, rate, seed,
  noise_shape=noise_shape)` (TF 2.21: x * (1 / (1 - rate)) where
  stateless_uniform(noise_shape, seed) >= rate, else 0), with the bool
  keep mask computed through `remat.Kept`: in a rematerialized layer the
  recomputation reuses the first run's mask instead of drawing it again
  (params/remat.py).

  Args:
    x: float tensor, any shape.
    rate: Python float in (0, 1), the drop probability.
    seed: [2] int64 tensor (`step_seeds.NextSeed`).
    noise_shape: None (x's shape) or a 1-D int tensor broadcastable to it.

  Returns:
    A tensor like x.
  """
  shape = tf.shape(x) if noise_shape is None else noise_shape
  keep = remat.Kept(lambda: tf.random.stateless_uniform(
      shape, seed=seed, dtype=x.dtype) >= rate)
  scaled = x * tf.constant(1 / (1 - rate), dtype=x.dtype)
  out = tf.where(keep, scaled, tf.constant(0, dtype=x.dtype))
  if not tf.executing_eagerly():
    out.set_shape(x.shape)
  return out
