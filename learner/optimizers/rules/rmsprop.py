"""RMSProp (plain and centered), with TF1's (Lingvo's) semantics.

  ms <- decay * ms + (1 - decay) * g^2
  centered: mg <- decay * mg + (1 - decay) * g;  denom = ms - mg^2
  mom <- momentum * mom + lr * g / sqrt(denom + epsilon);  w <- w - mom

Source: Tieleman & Hinton, Coursera lecture 6.5, 2012; Graves, "Generating
Sequences With Recurrent Neural Networks", 2013, eq. 38-41 (centered);
reference implementation TF's ResourceApply[Centered]RMSProp, as Lingvo
0.14.2 wraps it.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import DefineLingvoBaseParams
from params import NestedMap
from params import checks


class RMSProp(BaseOptimizer):
  """RMSProp with TF1's (Lingvo's) semantics (ResourceApply[Centered]RMSProp).

  ms <- decay * ms + (1 - decay) * g^2
  centered: mg <- decay * mg + (1 - decay) * g;  denom = ms - mg^2
  mom <- momentum * mom + lr * g / sqrt(denom + epsilon);  w <- w - mom
  epsilon is inside the square root and the rate inside the momentum
  accumulator. The mean-square slot 'ms' starts at 1.0, as in TF1's
  RMSPropOptimizer (so the first steps are small: ms = 1 + ...);
  'mom' (and 'mg' when centered) start at zero. Defaults are Lingvo's:
  decay 0.9, momentum 0.9, epsilon 1.0.
  `keras_semantics=True` starts 'ms' at zero instead, as Keras's RMSprop
  (whose update is otherwise this one: epsilon inside the sqrt, rate inside
  the momentum; its defaults are momentum 0, epsilon 1e-7, set them too).
  Sparse: ResourceSparseApply[Centered]RMSProp, lazy by default as in TF1.
  Source: Tieleman & Hinton, COURSERA Neural Networks lecture 6.5, 2012;
  centered form: Graves, "Generating Sequences With RNNs", 2013, eq. 38-45;
  Lingvo 0.14.2 `lingvo/core/optimizer.py` RMSProp (same params and
  defaults; `centered` and `keras_semantics` are extensions, off by
  default).
  Differs from Lingvo: the slots are 'ms' and 'mom' (TF1: 'rms',
  'momentum'); decay > 1 and momentum >= 1 are refused (below); and as
  every update rule (BaseOptimizer, docs/lingvo.md).
  Schedulable (`hyper_schedules`, BaseOptimizer): decay, momentum and
  decoupled_weight_decay (the TF kernels take them as scalar tensors).

  Raises:
    ValueError: at construction, if decay is not in [0, 1], momentum is not
      in [0, 1) or epsilon < 0; a bool, NaN or inf is refused too (the
      message names the param; docs/lingvo.md).
  """

  SUPPORTS_LAZY_SPARSE = True
  ELEMENTWISE = True
  NONNEGATIVE_SLOTS = ('ms',)  # slot_dtype=tf.int8: the unsigned map.
  ACCELERATOR = 'rmsprop'
  SCHEDULABLE_PARAMS = BaseOptimizer.SCHEDULABLE_PARAMS + ('decay',
                                                          'momentum')

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.lazy_sparse_updates = True  # TF1's (Lingvo's) sparse RMSProp.
    p.Define('decay', 0.9, 'Decay (Keras: rho) of the mean square.')
    p.Define('momentum', 0.9, 'Momentum coefficient.')
    p.Define('epsilon', 1.0, 'Added to the mean square inside the sqrt.')
    p.Define('centered', False,
             'Normalise by the centered second moment (variance estimate).')
    p.Define('keras_semantics', False, 'If True the mean-square slot starts '
             'at 0 (Keras); if False at 1 (TF1 and Lingvo).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        decay=checks.Real(0, 1, example=0.9),
        momentum=checks.Real(0, 1, high_open=True, example=0.9,
                             why='momentum >= 1 lets the update grow '
                             'without bound'),
        epsilon=checks.Real(0, example=1.0))
    return specs

  def _CreateSlots(self, var):
    slots = {'ms': 0.0 if self.params.keras_semantics else 1.0, 'mom': None}
    if self.params.centered:
      slots['mg'] = None
    return slots

  def _Scalars(self, update, dtype):
    return NestedMap(lr=tf.cast(update.lr, dtype),
                     decay=tf.cast(self.Hyper('decay'), dtype),
                     momentum=tf.cast(self.Hyper('momentum'), dtype),
                     epsilon=tf.cast(self.params.epsilon, dtype),
                     centered=self.params.centered)

  def _Step(self, s, w, g, slots):
    del w
    new = {'ms': slots['ms'] + (tf.square(g) - slots['ms']) * (1. - s.decay)}
    denominator = new['ms'] + s.epsilon
    if s.centered:
      new['mg'] = slots['mg'] + (g - slots['mg']) * (1. - s.decay)
      denominator = new['ms'] - tf.square(new['mg']) + s.epsilon
    new['mom'] = slots['mom'] * s.momentum + s.lr * g / tf.sqrt(denominator)
    return new['mom'], new
