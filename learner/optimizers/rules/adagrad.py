"""Adagrad.

  a <- a + g^2;  w <- w - lr * g / (sqrt(a) + epsilon)

Source: Duchi, Hazan & Singer, "Adaptive Subgradient Methods", JMLR 2011;
reference implementation TF's ResourceApplyAdagradV2, as Lingvo 0.14.2
wraps it.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import DefineLingvoBaseParams
from params import NestedMap
from params import checks


class Adagrad(BaseOptimizer):
  """Adagrad (TF's ResourceApplyAdagradV2).

  a <- a + g^2;  w <- w - lr * g / (sqrt(a) + epsilon)
  Slot: 'accumulator' (initial_accumulator_value, Lingvo's default 1.0).
  With the default epsilon=0 this is TF1's AdagradOptimizer, which Lingvo
  wraps (no epsilon); `epsilon` is an extension (Keras adds 1e-7). Sparse:
  ResourceSparseApplyAdagradV2, lazy by default as in TF1 (for Adagrad a
  lazy and a dense update give the same numbers).
  Source: Duchi, Hazan & Singer, JMLR 2011; Lingvo 0.14.2
  `lingvo/core/optimizer.py` Adagrad (same params, defaults, validation).
  Differs from Lingvo: no `optimizer/adagrad_accum_<var>` summary, and as
  every update rule (BaseOptimizer, docs/lingvo.md).

  Raises:
    ValueError: at construction if initial_accumulator_value <= 0 (as TF1's
      AdagradOptimizer) or epsilon < 0.
  """

  SUPPORTS_LAZY_SPARSE = True
  ELEMENTWISE = True
  NONNEGATIVE_SLOTS = ('accumulator',)  # slot_dtype=tf.int8: unsigned.
  ACCELERATOR = 'adagrad'

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse Adagrad.
    p.Define('initial_accumulator_value', 1.0,
             'Starting value of the squared-gradient accumulator (> 0).')
    p.Define('epsilon', 0.0, 'Added to sqrt(accumulator); 0 is TF1/Lingvo, '
             'Keras uses 1e-7.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        initial_accumulator_value=checks.Real(
            0, low_open=True, example=0.1,
            why='TF1 and Lingvo refuse it too'),
        epsilon=checks.Real(0, example=1e-7))
    return specs

  def _CreateSlots(self, var):
    return {'accumulator': float(self.params.initial_accumulator_value)}

  def _Scalars(self, update, dtype):
    return NestedMap(lr=tf.cast(update.lr, dtype),
                     epsilon=tf.cast(self.params.epsilon, dtype))

  def _Step(self, s, w, g, slots):
    """A bfloat16 accumulator (slot_dtype) keeps 8 significant bits: once
    it exceeds ~256 g^2 an added g^2 rounds away (round to nearest), so its
    growth stalls."""
    del w
    a = slots['accumulator'] + tf.square(g)
    return s.lr * g / (tf.sqrt(a) + s.epsilon), {'accumulator': a}
