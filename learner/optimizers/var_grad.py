"""VarGrad: the (variable, gradient) pair that learners and optimizers pass."""

import collections

import tensorflow as tf


class VarGrad(collections.namedtuple('VarGrad', ['var', 'grad'])):
  """A variable and its gradient (a Tensor, a tf.IndexedSlices, or None).

  A NestedMap of VarGrads (`var_grads`) is what `Learner.Apply` builds and
  `BaseOptimizer.Apply` consumes. NestedMap treats VarGrad as a leaf.
  """
  __slots__ = ()


def VarName(var):
  """The variable's name without the ':0' suffix, e.g. 'task/enc/w'.

  Every regex in the framework (bprop_variable_filter, weight_decay_exclude,
  Composite's map, Lars exclusions) is matched with re.search on this name.
  Under tf.distribute the name of the primary copy is used.
  """
  name = getattr(var, 'name', None)
  if name is None:
    raise TypeError('%r has no name.' % (var,))
  if name.endswith(':0'):
    name = name[:-2]
  return name


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
