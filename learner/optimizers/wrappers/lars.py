"""Lars: layer-wise adaptive rate scaling, a wrapper around an optimizer."""

import re

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper
from params import NestedMap
from params import checks


class Lars(wrapper.BaseWrapper):
  """Layer-wise Adaptive Rate Scaling around an inner optimizer.

  For each variable w with gradient g (not excluded):
    trust = eta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon)
            (1 when ||w|| or ||g|| is 0)
    g'    = trust * (g + weight_decay * w)
  and g' is handed to the inner optimizer (`p.optimizer`, e.g. Momentum),
  which applies it with the learner's rate. Excluded variables (matching a
  regex in `exclude`, or one-dimensional when `exclude_1d` — biases and
  normalisation scales) get neither decay nor adaptation: g' = g.
  Sparse gradients are densified (the norm needs the whole gradient).
  Source: You, Gitman & Ginsburg, "Large Batch Training of Convolutional
  Networks", 2017, Algorithm 1 (MoXing's `ratio` is eta).

  Raises:
    ValueError: at construction, if `p.optimizer` is not optimizer params or
      is a gradient accumulation (accumulation must be the outermost
      wrapper), or if this wrapper's own decoupled_weight_decay is set; if
      eta is not > 0, weight_decay or epsilon is not >= 0 (each a finite
      number), or a regex of `exclude` does not compile.
  """

  INNER_OPTIMIZER_DOC = (
      'Params of the inner optimizer that applies the scaled gradient.')
  # The trust ratio reads ||w|| and ||g|| of the full tensors each replica
  # holds: ZeRO-1 shards the inner rule (its flat slices or homes).
  SHARDS_INNER = True

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'lars'
    p.Define('eta', 0.001, 'Trust coefficient eta (MoXing: ratio).')
    p.Define('weight_decay', 0.0,
             'L2 decay added to the gradient before scaling: g + wd * w.')
    p.Define('epsilon', 0.0, 'Added to the trust ratio\'s denominator.')
    p.Define('exclude', [],
             'Regexes (re.search on variable names) of variables that get '
             'neither decay nor adaptation.')
    p.Define('exclude_1d', True,
             'Also exclude every variable of rank <= 1 (biases, norm '
             'scales), as You et al. do.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(eta=checks.Real(0, low_open=True, example=0.001,
                                 why='eta = 0 makes every update 0'),
                 weight_decay=checks.Real(0, example=1e-4),
                 epsilon=checks.Real(0, example=0.0))
    return specs

  def __init__(self, params):
    super().__init__(params)
    checks.CheckRegexList(self, 'exclude', self.params.exclude)

  def _Excluded(self, var):
    p = self.params
    if p.exclude_1d and var.shape.rank is not None and var.shape.rank <= 1:
      return True
    name = var_grad_lib.VarName(var)
    return any(re.search(r, name) for r in p.exclude)

  def ScaledGradient(self, var, grad):
    """Returns the gradient Lars hands to the inner optimizer for `var`.

    Args:
      var: the variable (any shape, float dtype).
      grad: its gradient, a Tensor or tf.IndexedSlices of var's shape.

    Returns:
      A dense Tensor of var's shape and dtype (`grad` itself if excluded).
    """
    grad = var_grad_lib.DensifyGradient(grad)
    if self._Excluded(var):
      return grad
    p = self.params
    w = tf.identity(var.read_value())
    w_norm = tf.norm(w)
    g_norm = tf.norm(grad)
    ok = tf.logical_and(w_norm > 0., g_norm > 0.)
    denom = g_norm + p.weight_decay * w_norm + p.epsilon
    trust = tf.where(ok, p.eta * w_norm / tf.where(ok, denom, 1.),
                     tf.ones_like(w_norm))
    return trust * (grad + p.weight_decay * w)

  def _ApplyWrapped(self, lr, var_grads):
    """Scales each gradient (`ScaledGradient`); the inner optimizer applies."""
    scaled = var_grads.Transform(
        lambda vg: vg if vg.grad is None else var_grad_lib.VarGrad(
            vg.var, self.ScaledGradient(vg.var, vg.grad)))
    return [self.optimizer.Apply(lr, NestedMap(scaled))]
