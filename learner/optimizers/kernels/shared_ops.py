"""The small graph tests and tensor helpers every fast path shares.

One home for what the learner, the gradient pipeline, the optimizers and
the accumulation all ask: are we being compiled by XLA (`InXla`), is every
element of these tensors finite (`AllFinite`, `SumOfSquaresFinite`), and
`scale * grad` for a dense or sparse gradient (`ScaleGradient`).
tests/test_structure/test_utility_room.py fails when a module outside
learner/optimizers/kernels/ writes one of these again.
"""

import tensorflow as tf
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
  return tf.math.is_finite(tf.add_n(
      [tf.nn.l2_loss(tf.cast(g, tf.float32)) for g in grads]))


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
