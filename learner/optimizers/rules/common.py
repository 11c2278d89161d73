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
