"""Gradient combiners: one set of gradients from the gradients of several losses.

A learner with several `loss_name`s computes one gradient map per loss and
hands them to its `gradient_combiner` (after Lingvo's
lingvo/core/gradient_combiner.py, returning VarGrads instead of tensors).
"""

import tensorflow as tf

from params import BaseLayer
from params import NestedMap
from learner.optimizers.var_grad import VarGrad


class BaseGradientCombiner(BaseLayer):
  """Combines per-loss gradients into the gradients the optimizer applies.

  Subclasses implement `_CombineGrads(names, grads)`; `Combine` checks the
  inputs and handles the NestedMap plumbing.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'gradient_combiner'
    return p

  def Combine(self, vmap, losses_and_grads):
    """Returns the combined gradients.

    Args:
      vmap: NestedMap of the learner's variables (used to find a variable
        that no loss gives a VarGrad for).
      losses_and_grads: NestedMap (or dict) {loss_name: NestedMap(
        loss_metric=(value, weight), grads=<NestedMap of VarGrad>)}, in
        loss_name order. Every `grads` map has the same keys; a leaf may be
        None or a VarGrad whose grad is None (the loss does not depend on
        that variable). Grads are Tensors of the variable's shape or
        tf.IndexedSlices.

    Returns:
      A NestedMap of VarGrad with the same keys as each `grads` map. A
      variable that gets a gradient from no loss has grad None.

    Raises:
      ValueError: if losses_and_grads is empty, an entry has no `grads`, or
        the grads maps have different keys (the message names the loss and
        the differing keys).
    """
    names, items, keys = self._FlatGradMaps(losses_and_grads)
    variables, per_loss = self._GradsPerLoss(vmap, names, items, keys)
    combined = self._CombineGrads(names, variables, per_loss)
    template = losses_and_grads[names[0]]['grads']
    template = (template if isinstance(template, NestedMap) else
                NestedMap(template))
    return template.Pack(
        [VarGrad(v, g) for v, g in zip(variables, combined)])

  def _FlatGradMaps(self, losses_and_grads):
    """Checks the per-loss grads maps; returns (names, items, keys).

    items[i] is loss i's grads map as FlattenItems() pairs; keys are their
    common keys, in order. Raises the ValueErrors `Combine` documents.
    """
    if not losses_and_grads:
      raise ValueError(
          '%s %r: losses_and_grads is empty; expected one entry per loss '
          'name, {loss_name: NestedMap(loss_metric=..., grads=...)}.' %
          (type(self).__name__, self.path))
    names = list(losses_and_grads.keys())
    items = []
    for name in names:
      entry = losses_and_grads[name]
      grads = entry.get('grads') if isinstance(entry, dict) else None
      if not isinstance(grads, dict):
        raise ValueError(
            '%s %r: losses_and_grads[%r] has no NestedMap `grads`; expected '
            'NestedMap(loss_metric=(value, weight), grads=<NestedMap of '
            'VarGrad>).' % (type(self).__name__, self.path, name))
      grads = grads if isinstance(grads, NestedMap) else NestedMap(grads)
      items.append(grads.FlattenItems())
    keys = [k for k, _ in items[0]]
    for name, its in zip(names[1:], items[1:]):
      other = [k for k, _ in its]
      if other != keys:
        raise ValueError(
            '%s %r: the grads of loss %r have keys that differ from those '
            'of loss %r: only in %r: %s; only in %r: %s. Every loss must '
            'give a grads map over the same variables (None where it has '
            'no gradient).' %
            (type(self).__name__, self.path, name, names[0], name,
             sorted(set(other) - set(keys)), names[0],
             sorted(set(keys) - set(other))))
    return names, items, keys

  def _GradsPerLoss(self, vmap, names, items, keys):
    """Returns (variables, per_loss) from `_FlatGradMaps`' items.

    variables[k] is the variable at keys[k] (from the first VarGrad that
    has it, else from vmap, else None); per_loss[i][k] is loss i's grad for
    it, or None.
    """
    variables = []
    per_loss = [[] for _ in names]
    for pos, key in enumerate(keys):
      var = None
      for li, its in enumerate(items):
        leaf = its[pos][1]
        grad = None
        if isinstance(leaf, VarGrad):
          var = leaf.var if var is None else var
          grad = leaf.grad
        elif leaf is not None:
          raise ValueError(
              '%s %r: grads of loss %r at %r is %r; expected a VarGrad or '
              'None.' % (type(self).__name__, self.path, names[li], key,
                         type(leaf).__name__))
        per_loss[li].append(grad)
      if var is None and isinstance(vmap, NestedMap):
        try:
          var = vmap.Get(key)
        except (KeyError, AttributeError, ValueError, IndexError, TypeError):
          var = None
      variables.append(var)
    return variables, per_loss

  def _CombineGrads(self, names, variables, per_loss):
    """Returns one grad (or None) per variable.

    Args:
      names: loss names, in order.
      variables: the variables, one per position.
      per_loss: per_loss[i][k] is loss i's grad for variable k, or None.
    """
    raise NotImplementedError(type(self).__name__)


def _Dense(grad):
  if isinstance(grad, tf.IndexedSlices):
    return tf.convert_to_tensor(grad)
  return grad


class GradientSum(BaseGradientCombiner):
  """The plain sum of the per-loss gradients (what one summed loss gives).

  For each variable, the sum of the non-None gradients; if all of them are
  tf.IndexedSlices the result is an IndexedSlices (values and indices
  concatenated, which sums on densification); otherwise a dense Tensor.
  None if no loss gives the variable a gradient.
  """

  def _CombineGrads(self, names, variables, per_loss):
    out = []
    for k in range(len(variables)):
      grads = [g[k] for g in per_loss if g[k] is not None]
      if not grads:
        out.append(None)
      elif len(grads) == 1:
        out.append(grads[0])
      elif all(isinstance(g, tf.IndexedSlices) for g in grads):
        out.append(tf.IndexedSlices(
            tf.concat([g.values for g in grads], 0),
            tf.concat([g.indices for g in grads], 0),
            grads[0].dense_shape))
      else:
        out.append(tf.add_n([_Dense(g) for g in grads]))
    return out


class PCGrad(BaseGradientCombiner):
  """Projecting Conflicting Gradients ("gradient surgery").

  Each loss i's gradient g_i is the concatenation of its gradients of all
  the variables (a missing gradient counts as zeros). For each loss i, in
  loss_name order, with g_i^PC = g_i:
    for each other loss j != i, in loss_name order (the paper shuffles this
    order at random; here it is fixed so that runs are reproducible):
      if g_i^PC . g_j < 0 (and g_j != 0):
        g_i^PC <- g_i^PC - (g_i^PC . g_j) / |g_j|^2 * g_j
  The result is sum_i g_i^PC, split back into the variables (dense Tensors;
  a variable no loss gives a gradient stays None). Dot products and norms
  are computed in float32 over all variables together.

  Example: g_1 = [1, 0], g_2 = [-1, 1] conflict (dot -1): g_1^PC = [0.5, 0.5],
  g_2^PC = [0, 1]; the result is [0.5, 1.5].

  Source: Yu et al., "Gradient Surgery for Multi-Task Learning", NeurIPS
  2020 (arXiv:2001.06782), Algorithm 1.
  """

  def _CombineGrads(self, names, variables, per_loss):
    present = [any(g[k] is not None for g in per_loss)
               for k in range(len(variables))]
    # Dense float32 per-variable gradients of each loss, zeros where absent.
    flat = []
    for grads in per_loss:
      row = []
      for k, g in enumerate(grads):
        if not present[k]:
          row.append(None)
          continue
        if g is None:
          ref = next(x[k] for x in per_loss if x[k] is not None)
          row.append(tf.zeros_like(tf.cast(_Dense(ref), tf.float32)))
        else:
          row.append(tf.cast(_Dense(g), tf.float32))
      flat.append(row)

    def _Dot(a, b):
      terms = [tf.reduce_sum(x * y) for x, y in zip(a, b) if x is not None]
      return tf.add_n(terms) if terms else tf.constant(0.0)

    sq_norms = [_Dot(g, g) for g in flat]
    total = None
    for i, g_i in enumerate(flat):
      pc = list(g_i)
      for j, g_j in enumerate(flat):
        if j == i:
          continue
        dot = _Dot(pc, g_j)
        conflict = tf.logical_and(dot < 0.0, sq_norms[j] > 0.0)
        coeff = tf.where(conflict, dot / tf.where(conflict, sq_norms[j], 1.0),
                         0.0)
        pc = [None if x is None else x - coeff * y for x, y in zip(pc, g_j)]
      total = pc if total is None else [
          None if a is None else a + b for a, b in zip(total, pc)]

    out = []
    for k, t in enumerate(total):
      if t is None:
        out.append(None)
        continue
      ref = next(x[k] for x in per_loss if x[k] is not None)
      out.append(tf.cast(t, ref.dtype))
    return out
