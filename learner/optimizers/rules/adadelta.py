"""AdaDelta.

  a <- decay * a + (1 - decay) * g^2
  u = sqrt(au + epsilon) / sqrt(a + epsilon) * g
  w <- w - lr * u;  au <- decay * au + (1 - decay) * u^2

Source: Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012,
Algorithm 1; reference implementation TF's ResourceApplyAdadelta, as Lingvo
0.14.2 wraps it.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import DefineLingvoBaseParams
from params import NestedMap
from params import checks


class AdaDelta(BaseOptimizer):
  """AdaDelta (TF's ResourceApplyAdadelta).

  a <- decay * a + (1 - decay) * g^2
  u = sqrt(au + epsilon) / sqrt(a + epsilon) * g
  w <- w - lr * u;  au <- decay * au + (1 - decay) * u^2
  Slots 'accum', 'accum_update' (zeros). With lr = 1 this is the paper's
  method. `decay` is TF1's and Keras's `rho`. Sparse:
  ResourceSparseApplyAdadelta, lazy by default as in TF1.
  Source: Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012, Alg. 1;
  Lingvo 0.14.2 `lingvo/core/optimizer.py` AdaDelta (same params and
  defaults).
  Differs from Lingvo: epsilon = 0 and decay > 1 are refused (below), and
  as every update rule (BaseOptimizer, docs/lingvo.md).

  Raises:
    ValueError: at construction, if decay is not in [0, 1] or epsilon <= 0
      (every update would be 0); a bool, NaN or inf is refused too (the
      message names the param; docs/lingvo.md).
  """

  SUPPORTS_LAZY_SPARSE = True
  ELEMENTWISE = True
  # slot_dtype=tf.int8: the unsigned map.
  NONNEGATIVE_SLOTS = ('accum', 'accum_update')
  ACCELERATOR = 'adadelta'

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse AdaDelta.
    p.Define('decay', 0.95, 'Decay of both accumulators (TF1/Keras: rho).')
    p.Define('epsilon', 1e-8, 'Added inside both square roots.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        decay=checks.Real(0, 1, example=0.95),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 keeps every update at 0'))
    return specs

  def _CreateSlots(self, var):
    return {'accum': None, 'accum_update': None}

  def _Scalars(self, update, dtype):
    return NestedMap(lr=tf.cast(update.lr, dtype),
                     decay=tf.cast(self.params.decay, dtype),
                     epsilon=tf.cast(self.params.epsilon, dtype))

  def _Step(self, s, w, g, slots):
    del w
    accum = slots['accum'] * s.decay + tf.square(g) * (1. - s.decay)
    update = (tf.sqrt(slots['accum_update'] + s.epsilon) *
              tf.math.rsqrt(accum + s.epsilon) * g)
    accum_update = (slots['accum_update'] * s.decay +
                    tf.square(update) * (1. - s.decay))
    return s.lr * update, {'accum': accum, 'accum_update': accum_update}
