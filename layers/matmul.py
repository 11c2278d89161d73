"""MatMulLastDim: a dense projection of the last dimension of any tensor."""

import tensorflow as tf


def MatMulLastDim(x, w, transpose_w=False):
  """x [..., i] @ w [i, o] (or w [o, i] transposed) -> [..., o].

  One 2-D matmul on x reshaped to [-1, i]. `tf.einsum('...i,io->...o')`
  computes the same, but tracing its gradient in a tf.function did not end
  within 90 s for a 2-block Transformer (TF 2.21, dynamic batch and time);
  a broadcasting batch matmul would sum its weight gradient over the batch.
  """
  out_dim = w.shape[0] if transpose_w else w.shape[1]
  y = tf.matmul(tf.reshape(x, [-1, tf.shape(x)[-1]]), w,
                transpose_b=transpose_w)
  return tf.reshape(y, tf.concat([tf.shape(x)[:-1], [out_dim]], 0))
