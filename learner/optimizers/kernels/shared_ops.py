"""The small graph tests and tensor helpers every fast path shares.

One home for what the learner, the gradient pipeline, the optimizers and
the accumulation all ask: are we being compiled by XLA (`InXla`), is every
element of these tensors finite (`AllFinite`, `SumOfSquaresFinite`),
`scale * grad` for a dense or sparse gradient (`ScaleGradient`), and a sum
of squares (or of |x|) in the form XLA:CPU reduces fast (`BlockSum`).
tests/test_structure/test_utility_room.py fails when a module outside
learner/optimizers/kernels/ writes one of these again.
"""

import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla as tf2xla  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.framework import ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import


def InXla():
  """True while tracing a function compiled with `jit_compile=True`.

  `tf.function(jit_compile=True)` enters an XLA control-flow context on the
  graph it is called from; the traced FuncGraph (and any cond/while branch
  or nested function inside it) reaches that context through its chain of
  outer graphs. Eager execution and plain `tf.function` give False.

  Returns:
    Python bool, at trace time.
  """
  if tf.executing_eagerly():
    return False
  return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


def AllFinite(tensors):
  """bool scalar: every element of every tensor is finite (None if none).

  Exact for any finite values. A scalar (a loss) costs one IsFinite op;
  larger tensors one more (All).

  Args:
    tensors: list of float Tensors (any shapes), possibly empty.

  Returns:
    bool scalar Tensor, or None for an empty list.
  """
  if not tensors:
    return None
  out = None
  for t in tensors:
    t = tf.convert_to_tensor(t)
    finite = tf.math.is_finite(t)
    if t.shape.rank != 0:
      finite = tf.reduce_all(finite)
    out = finite if out is None else tf.logical_and(out, finite)
  return out


def SumOfSquaresFinite(grads):
  """bool scalar: sum(g^2)/2 over all `grads` is finite (one L2Loss each).

  Cheaper than `AllFinite` on large tensors (one reduction pass, no bool
  tensor); a NaN or Inf anywhere makes it False, and so does a sum that
  overflows float32 (values beyond ~1e19), which no trained gradient
  reaches. The accumulation's micro-batch check.

  Args:
    grads: list of dense float Tensors, possibly empty (then True).

  Returns:
    bool scalar Tensor.
  """
  if not grads:
    return tf.constant(True)
  if InXla():
    return tf.math.is_finite(tf.add_n(
        [BlockSum(tf.cast(g, tf.float32)) for g in grads]))
  return tf.math.is_finite(tf.add_n(
      [tf.nn.l2_loss(tf.cast(g, tf.float32)) for g in grads]))


# `BlockSum`'s block edge: XLA:CPU's tree reduction rewriter splits a
# reduced dimension only when it is longer than 32.
XLA_BLOCK = 32


def BlockSum(x, square=True):
  """sum(x^2) / 2 (or sum(|x|)) as XLA:CPU reduces it in one read pass.

  For graphs compiled with jit_compile. XLA:CPU rewrites a reduction over
  more than 32 elements (tf.nn.l2_loss, tf.reduce_sum) into a multiply
  written to a full-size temporary, a reduce-window of 32-element windows
  (slow, unvectorised) and a reduce of the window sums: three passes.
  Here x is flattened, zero-padded to a multiple of 32 x 32 and seen as
  blocks [32, 32]; stage one sums each block's 32 rows (a reduce over the
  middle dimension, 32 long: XLA fuses it with the square, does not split
  it, and vectorises it along the 32 columns), writing 1/32 of x's size;
  stage two sums those (an optimization barrier between the stages keeps
  XLA's simplifier from merging them back into one split reduce). On the
  benchmark machine it reads the resnet50 set ~5x faster than L2Loss
  (benchmarks/README.md, "Under jit_compile"). Float32 partial sums of
  32 terms, then XLA's own tree over the partials: the value agrees with
  tf.nn.l2_loss to float32 rounding (rtol ~1e-7 on 1e6 elements).

  Args:
    x: a float32 Tensor of any static shape.
    square: True gives sum(x^2) / 2 (tf.nn.l2_loss's value); False gives
      sum(|x|).

  Returns:
    float32 scalar. A tensor whose shape is not fully known (not the case
    under XLA) falls back to tf.nn.l2_loss / tf.reduce_sum(tf.abs(x)).
  """
  if not x.shape.is_fully_defined():
    return (tf.nn.l2_loss(x) if square else
            tf.reduce_sum(tf.abs(x)))
  x = tf.reshape(x, [-1])
  n = x.shape.num_elements()
  terms = tf.square(x) if square else tf.abs(x)
  if n > XLA_BLOCK:
    pad = -n % (XLA_BLOCK * XLA_BLOCK)
    if pad:
      terms = tf.pad(terms, [[0, pad]])
    terms = tf.reduce_sum(
        tf.reshape(terms, [-1, XLA_BLOCK, XLA_BLOCK]), axis=1)
    terms = tf2xla.optimization_barrier(terms)[0]
  total = tf.reduce_sum(terms)
  return 0.5 * total if square else total


def ScaleGradient(grad, scale):
  """`scale * grad` for a Tensor or tf.IndexedSlices (values scaled).

  Args:
    grad: a float Tensor or tf.IndexedSlices.
    scale: a scalar (cast to grad's dtype).

  Returns:
    The same kind as `grad`, same shape and dtype.
  """
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(grad.values * tf.cast(scale, grad.values.dtype),
                            grad.indices, grad.dense_shape)
  return grad * tf.cast(scale, grad.dtype)
