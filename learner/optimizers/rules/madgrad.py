"""MADGRAD: momentumized, adaptive, dual-averaged gradient method.

Per element, k = num_updates (0 at the first update), lr the learner's
rate:
  lambda_k = (lr + epsilon) sqrt(k + 1)
  s_{k+1} = s_k + lambda_k g_k                    s_0 = 0
  nu_{k+1} = nu_k + lambda_k g_k^2                nu_0 = 0
  z_{k+1} = x0 - s_{k+1} / (nu_{k+1}^(1/3) + epsilon)
  w_{k+1} = (1 - momentum) z_{k+1} + momentum w_k
with x0 the weights at the first update. With decoupled weight decay (the
base's): also w <- w - lr wd w_old.

Source: Defazio & Jelassi, "Adaptivity without Compromise: A
Momentumized, Adaptive, Dual Averaged Gradient Method for Stochastic
Optimization", JMLR 2022 (arXiv:2101.11075), Algorithm 1 (lr + epsilon as
the reference PyTorch implementation, facebookresearch/madgrad).
optax.contrib.madgrad (0.2.8) gives the same numbers
(tests/test_optimizers/test_madgrad.py); its `weight_decay` (an L2 term
added to the gradient) is the learner's `l2_regularizer_weight` here.
The cube root: `CubeRoot` below, one float32 formula of plain operations
(fdlibm's bit guess, then Newton's steps), within 1 ulp of the rounded
root. Fused kernel: TfLearnerMultiApplyMADGRAD (kernels/multi_tensor_rules.cc),
the same numbers bit for bit (its cube root repeats `CubeRoot`).
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks


# CubeRoot's constants (float32): 1/3 rounded, the bit guess's magic number
# (an integer, exact in float32), 2^-50 (undoes a subnormal's 2^150).
_THIRD = 1. / 3.
_MAGIC = 1419910656.  # 0x54a21e00.
_SUBNORMAL_SCALE = 2. ** -50


def CubeRoot(x):
  """x^(1/3), for float32 as one formula of plain elementwise ops.

  float32: within 1 ulp of the correctly rounded cube root for every
  float32 (faithful: one of the two floats around the root; checked
  exhaustively by tools/check_cube_root.py: error at most 0.738 ulp, 8.5 %
  of the floats 1 ulp off the rounded root, none further). Like np.cbrt
  and C's cbrtf it is odd and keeps +-0, +-inf and NaN; a subnormal gets
  its own root. (MADGRAD's nu is a sum of squares: never negative, 0 before
  a nonzero gradient, inf once lambda g^2 overflows, NaN after a NaN
  gradient.) The fused kernel's CubeRoot (kernels/multi_tensor_rules.cc)
  repeats these float32 operations in this order (-ffp-contract=off): the
  fused and the pure-TF path give the same bits. Under XLA the ops fuse
  into the step's loop (no `power` op, which costs ~8 ns per element on
  XLA:CPU); XLA:CPU contracts a * b + c into fused multiply-adds, so
  there the last bit may differ (within 1 ulp still, 0.738 at most: every
  float checked the same way).

  The method: the bit guess of fdlibm's cbrt (s_cbrt.c: the float's bits
  divided by 3 plus a constant, an estimate of log2 x / 3), here for
  x^(-1/3) so that Newton's steps need no division (as the bit guess of
  the fast inverse square root), then one Newton step for x^(1/3) itself:
    w0 = bits(K - bits(x) / 3)                  within 3.5 %
    w <- w - (w (x w^3) - w) / 3, twice         2.3e-3, then 1.1e-5
    y = x w^2                                   2.2e-5
    y <- y + (x / y^2 - y) / 3                  < 5e-10 before rounding
  (K = 0x54a21e00, chosen for the smallest error after the second step;
  bits(x) / 3 taken in float32, off by < 1e-5 of a unit.) The last step's
  rounding decides the last bit: x / y^2 is off by at most (1/2 + 1/sqrt2)
  ulp, a third of it enters y, plus y's own rounding: < 0.9 ulp. The steps
  are written so that no chain of products mixes a scalar with tensors:
  grappler's arithmetic optimizer (MinimizeBroadcasts) would reorder those
  in a traced step, but not eagerly nor in the kernel. A subnormal x is
  taken as x 2^150 (its integer bits as a float, times 2: exact) and its
  root times 2^-50, so every intermediate is a normal float and the result
  does not depend on the flushing of subnormals (on in TF's threads).

  Other dtypes: float16 and bfloat16 through float32, rounded back;
  float64 keeps tf.pow(x, 1/3) (no kernel runs float64).

  Args:
    x: a float tensor.

  Returns:
    The cube root of x, x's shape and dtype.
  """
  if x.dtype == tf.float64:
    return tf.pow(x, tf.constant(1. / 3., tf.float64))
  if x.dtype != tf.float32:
    return tf.cast(CubeRoot(tf.cast(x, tf.float32)), x.dtype)
  u = tf.bitcast(x, tf.int32)
  ua = tf.bitwise.bitwise_and(u, 0x7fffffff)  # |x|'s bits.
  sub = ua < 0x00800000  # 0 or subnormal.
  xs = tf.where(sub, tf.cast(ua, tf.float32) * 2., tf.bitcast(ua, tf.float32))
  third = tf.constant(_THIRD, tf.float32)
  guess = _MAGIC - tf.cast(tf.bitcast(xs, tf.int32), tf.float32) * third
  w = tf.bitcast(tf.cast(guess, tf.int32), tf.float32)
  for _ in range(2):  # w (4 - x w^3) / 3, in grappler-proof form.
    w = w - (w * (xs * w * w * w) - w) * third
  y = xs * w * w
  y = y + (xs / (y * y) - y) * third
  y = y * tf.where(sub, _SUBNORMAL_SCALE, 1.)
  signed = tf.bitwise.bitwise_or(tf.bitcast(y, tf.int32),
                                 tf.bitwise.bitwise_xor(u, ua))
  # 0 < |x| < inf: ua - 1 < 0x7f7fffff unsigned.
  ok = tf.bitcast(ua - 1, tf.uint32) < 0x7f7fffff
  return tf.where(ok, tf.bitcast(signed, tf.float32), x)


class MADGRAD(BaseOptimizer):
  """MADGRAD: dual averaging with a cube-root denominator, then momentum
  as an average of the iterates (module docstring).

  Slots: 'x0' (the weights at the first update: taken then, not at Bind,
  so ZeRO-1's shards and weights restored after Bind count), 's' (the
  weighted sum of gradients), 'grad_sum_sq' (nu). Elementwise: ZeRO-1
  shards it. The learner's rate enters the sums (lambda_k), so a schedule
  on it weights later gradients less, as optax's. Defaults:
  optax.contrib.madgrad's (0.2.8: momentum 0.9, eps 1e-6; optax has no
  default rate, the reference implementation's is 1e-2).

  Raises:
    ValueError: at construction, if momentum is not in [0, 1) or epsilon
      is not > 0 (the message names the param).
  """

  ELEMENTWISE = True
  FIRST_UPDATE_SLOTS = ('x0',)  # Under XLA: kernels/first_update.py.
  ACCELERATOR = 'madgrad'  # Fused: kernels/multi_tensor_rules.cc.

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('momentum', 0.9,
             'Weight of the previous weights in the average with z.')
    p.Define('epsilon', 1e-6,
             'Added to the rate and to the cube root of nu.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        momentum=checks.Real(0, 1, high_open=True, example=0.9,
                             why='momentum = 1 never moves the weights'),
        epsilon=checks.Real(0, low_open=True, example=1e-6,
                            why='0 gives 0/0 = NaN where a gradient is 0'))
    return specs

  def _CreateSlots(self, var):
    return {'x0': None, 's': None, 'grad_sum_sq': None}

  def _Scalars(self, update, dtype):
    """lambda_k (in float64, then rounded), epsilon, momentum, 1 -
    momentum (taken before rounding) and `first` (bool: the first update,
    when x0 is taken)."""
    p = self.params
    k = tf.cast(self.num_updates, tf.float64)
    lam = (tf.cast(update.lr, tf.float64) + p.epsilon) * tf.sqrt(k + 1.)
    return NestedMap(lr=tf.cast(update.lr, dtype),
                     lamb=tf.cast(lam, dtype),
                     epsilon=tf.constant(p.epsilon, dtype),
                     momentum=tf.constant(p.momentum, dtype),
                     one_minus_momentum=tf.constant(1. - p.momentum, dtype),
                     first=tf.equal(self.num_updates, 0))

  def _Step(self, s, w, g, slots):
    w = tf.convert_to_tensor(w)
    x0 = tf.where(s.first, w, slots['x0'])
    grad_sum_sq = slots['grad_sum_sq'] + s.lamb * tf.square(g)
    s_sum = slots['s'] + s.lamb * g
    sigma = CubeRoot(grad_sum_sq) + s.epsilon
    z = x0 - s_sum / sigma
    new = s.one_minus_momentum * z + s.momentum * w
    return w - new, {'x0': x0, 's': s_sum, 'grad_sum_sq': grad_sum_sq}
