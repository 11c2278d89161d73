"""VarGrad: the (variable, gradient) pair that learners and optimizers pass."""

import tensorflow as tf

from params import NestedMap
from params import VariableName as VarName  # The one definition (params/base_layer.py).


class VarGrad:
  """A variable and its gradient (a Tensor, a tf.IndexedSlices, or None).

  A NestedMap of VarGrads (`var_grads`) is what `Learner.Apply` builds and
  `BaseOptimizer.Apply` consumes. It is ONE leaf for tf.nest and for
  NestedMap, as Lingvo's code treats it: `tf.nest.flatten(var_grads)` gives
  one entry per variable, not a variable and a gradient. (A namedtuple
  would be split in two by tf.nest.) `v, g = vg` still unpacks it, and two
  VarGrads are equal when their variable and gradient are the same objects.

  Attributes:
    var: the tf.Variable.
    grad: its gradient, or None.
  """
  __slots__ = ('var', 'grad')

  def __init__(self, var, grad):
    self.var = var
    self.grad = grad

  def __iter__(self):
    return iter((self.var, self.grad))

  def __len__(self):
    return 2

  def __getitem__(self, i):
    return (self.var, self.grad)[i]

  def __eq__(self, other):
    return (isinstance(other, VarGrad) and self.var is other.var and
            self.grad is other.grad)

  def __ne__(self, other):
    return not self == other

  def __hash__(self):
    return hash((id(self.var), id(self.grad)))

  def __repr__(self):
    return 'VarGrad(var=%r, grad=%r)' % (self.var, self.grad)


def SanitizedName(var_name):
  """A form of a variable name usable as a checkpoint / NestedMap key."""
  out = []
  for ch in var_name:
    out.append(ch if ch.isalnum() or ch == '_' else '_')
  s = ''.join(out)
  if s and s[0].isdigit():
    s = '_' + s
  return s


def DensifyGradient(grad):
  """Returns a dense tensor for a tf.IndexedSlices (merging duplicates)."""
  if isinstance(grad, tf.IndexedSlices):
    return tf.convert_to_tensor(grad)
  return grad


def MergeDuplicateIndices(grad):
  """Returns tf.IndexedSlices with unique indices (duplicate rows summed)."""
  unique, positions = tf.unique(grad.indices)
  values = tf.math.unsorted_segment_sum(grad.values, positions,
                                        tf.shape(unique)[0])
  return tf.IndexedSlices(values, unique, grad.dense_shape)


def MergeTiedGradients(var_grads):
  """One VarGrad per variable: a variable given under several keys.

  Args:
    var_grads: NestedMap of VarGrad with grads present.

  Returns:
    `var_grads` itself if every variable appears once; else a NestedMap
    holding each variable at its first key with the sum of its grads (a
    tied variable's gradient is the sum of its uses), the other keys
    dropped.
  """
  items = var_grads.FlattenItems()
  first = {}
  for key, vg in items:
    first.setdefault(id(vg.var), []).append((key, vg))
  if len(first) == len(items):
    return var_grads
  out = NestedMap()
  for group in first.values():
    key, vg = group[0]
    grads = [g.grad for _, g in group]
    if all(isinstance(g, tf.IndexedSlices) for g in grads):
      total = MergeDuplicateIndices(tf.IndexedSlices(
          tf.concat([g.values for g in grads], 0),
          tf.concat([tf.cast(g.indices, tf.int64) for g in grads], 0),
          grads[0].dense_shape))
    else:
      total = tf.add_n([tf.convert_to_tensor(g) for g in grads])
    out.Set(key, VarGrad(vg.var, total))
  return out
