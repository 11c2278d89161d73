"""Helpers shared by the update-rule families."""

import tensorflow as tf


def Cast(x, var):
  """Casts a Python number or tensor to the dtype of `var`.

  Args:
    x: a Python number or a tensor of any float dtype.
    var: the tf.Variable whose dtype the result takes.

  Returns:
    A tensor of `var.dtype`, the shape of `x`.
  """
  return tf.cast(x, var.dtype)


def ContractFirst(x, q, transpose_q=False):
  """x's first dim contracted with q's first (or, transpose_q, second) dim.

  tf.tensordot(x, q, axes=[[0], [1 if transpose_q else 0]]) as one matmul
  of x viewed as [d_0, rest] through the transpose flags: the same
  products, without the transposed copy of x tensordot makes first
  (benchmarks/README.md, "SOAP without transposes": a tenth of SOAP's step
  on the resnet50 set).

  Args:
    x: float tensor [d_0, ...] (static shape, rank >= 2).
    q: float tensor [d_0, k] ([k, d_0] when transpose_q), x's dtype.
    transpose_q: Python bool.

  Returns:
    A tensor [..., k]: x's other dims in order, then q's free dim.
  """
  rest = x.shape.as_list()[1:]
  out = tf.matmul(tf.reshape(x, [x.shape[0], -1]), q, transpose_a=True,
                  transpose_b=transpose_q)
  return tf.reshape(out, rest + [q.shape[0] if transpose_q else q.shape[1]])


def GramAlong(g, i):
  """G_(i) G_(i)^T [d_i, d_i]: g contracted with itself over every dim but i.

  tf.tensordot(g, g, axes=[others, others]) as one matmul of g viewed as
  [d_i, rest] (for the last dim, [rest, d_i]) through a transpose flag;
  only a middle dim reorders g's dims first.

  Args:
    g: float tensor (static shape, rank >= 1); i: a Python int in [0, rank).

  Returns:
    A tensor [d_i, d_i] of g's dtype.
  """
  rank = g.shape.rank
  d = g.shape[i]
  if i == rank - 1:
    flat = tf.reshape(g, [-1, d])
    return tf.matmul(flat, flat, transpose_a=True)
  if i:
    g = tf.transpose(g, [i] + [j for j in range(rank) if j != i])
  flat = tf.reshape(g, [d, -1])
  return tf.matmul(flat, flat, transpose_b=True)


def ContractEachDim(x, qs, transpose_q=False):
  """x contracted with qs[i] along each dim i in turn (ContractFirst).

  Each step contracts dim 0 (with q's first dim, or its second when
  transpose_q) and appends the new dim last; a None in `qs` moves dim 0
  last unchanged. After len(qs) steps the dims are in their order again:
  x x_0 Q_0 x_1 Q_1 ... (SOAP's rotation into and out of its eigenbases;
  DistributedShampoo's preconditioning, Lingvo's tensordot per dim).

  Args:
    x: float tensor of rank len(qs) (static shape).
    qs: per dim of x, a [d_i, k_i] tensor ([k_i, d_i] when transpose_q) of
      x's dtype, or None.
    transpose_q: Python bool.

  Returns:
    A tensor [k_0, k_1, ...] (d_i where qs[i] is None), x's dtype.
  """
  rank = len(qs)
  for q in qs:
    if q is None:
      x = tf.transpose(x, list(range(1, rank)) + [0])
    else:
      x = ContractFirst(x, q, transpose_q)
  return x
