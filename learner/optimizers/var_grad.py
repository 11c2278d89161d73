"""VarGrad: the (variable, gradient) pair that learners and optimizers pass."""

import tensorflow as tf


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
