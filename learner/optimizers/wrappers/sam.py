"""Sam: sharpness-aware minimization, a wrapper around an optimizer.

One update of SAM at the weights w, with the batch's gradient g = dL/dw(w):

  e   <- rho * g / ||g||                   (||.||: global L2 norm over the
                                            variables Sam is bound to)
  g'  <- dL/dw(w + e)                      (a second forward/backward pass
                                            on the same batch)
  w   <- inner optimizer's update of w with g'   (w itself, not w + e)

Adaptive SAM (ASAM, `adaptive=True`) scales the ascent per element with
T = |w| + adaptive_eta:  e <- rho * T^2 g / ||T g||.

Source: Foret, Kleiner, Mobahi & Neyshabur, "Sharpness-Aware Minimization
for Efficiently Improving Generalization", ICLR 2021, Algorithm 1; ASAM:
Kwon, Kim, Park & Choi, "ASAM: Adaptive Sharpness-Aware Minimization",
ICML 2021, eq. 11 (T_w = |w| + eta, eta = 0.01 there). Reference
implementation: optax.contrib.sam with adv_optimizer =
chain(normalize(), sgd(rho)) (tests/data/optax_sam.json).
"""

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper
from params import checks


class Sam(wrapper.BaseWrapper):
  """Sharpness-aware minimization around an inner optimizer.

  The wrapper holds the ascent step; the learner runs the two passes
  (learner/gradient_tape.py, docs/DESIGN.md "One training step, as data"):
  an optimizer whose class sets `NEEDS_SECOND_PASS = True` is given, by
  `Learner.Apply`, the gradient of a second forward pass at
  w + `Perturbation(g)`, taken after the first gradient g was all-reduced
  over the replicas; the weights are put back (bit for bit, from a copy)
  before the inner optimizer applies that gradient. `Apply` itself only
  delegates to the inner optimizer, so the learner's clipping, checks and
  skip logic act on the second gradient (`Learner.ApplyGradients` applies
  the gradients it is given: no second pass). In a Composite, only the
  Sam's group is perturbed. Costs one more forward and backward pass, one
  more all-reduce under several replicas and one copy of the bound weights
  per update.
  Formula and source: the module docstring.

  Raises:
    ValueError: at construction, if rho is not > 0 or adaptive_eta < 0
      (finite numbers), if `p.optimizer` is not optimizer params or is a
      gradient accumulation, or this wrapper's own decoupled_weight_decay
      is set. The learner refuses a gradient accumulation around a Sam,
      two Sams in one learner, and `Apply` without `fprop_fn`.
  """

  NEEDS_SECOND_PASS = True
  INNER_OPTIMIZER_DOC = (
      'Params of the inner optimizer that applies the gradient taken at the '
      'perturbed weights.')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'sam'
    p.Define('rho', 0.05,
             'Radius of the ascent step (L2 norm of the perturbation, in '
             'weight units); > 0. Foret et al. use 0.05.')
    p.Define('adaptive', False,
             'If True, ASAM: the ascent is scaled per element by '
             'T = |w| + adaptive_eta (Kwon et al. 2021).')
    p.Define('adaptive_eta', 0.01,
             'ASAM\'s eta, added to |w| in T; >= 0. Unused unless '
             'adaptive.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        rho=checks.Real(0, low_open=True, example=0.05,
                        why='rho = 0 is the inner optimizer alone'),
        adaptive_eta=checks.Real(0, example=0.01))
    return specs

  def __init__(self, params):
    super().__init__(params)
    if not isinstance(self.params.adaptive, bool):
      raise ValueError(
          'Sam %r: adaptive : %r is not a bool; set adaptive : True (ASAM) '
          'or False (SAM).' % (self.path, self.params.adaptive))

  def Perturbation(self, var_grads):
    """The ascent step e for each variable with a gradient.

    Args:
      var_grads: NestedMap of VarGrad (the first pass's gradient, already
        all-reduced under several replicas); grads dense or IndexedSlices,
        of the variable's shape and dtype.

    Returns:
      A list of (variable, e) for the variables bound to this Sam (in a
      Composite, its group only): e a dense Tensor of the variable's shape
      and dtype. The norm is taken over all of them, in float64 when any
      variable is float64 (float32 otherwise). e is 0 everywhere when that
      norm is 0 or not finite (a step the learner will skip), so the
      perturbation never writes NaN into the weights.
    """
    p = self.params
    bound = self.bound_variables
    pairs = [(vg.var, var_grad_lib.DensifyGradient(vg.grad))
             for vg in var_grads.Flatten() if vg.grad is not None and
             var_grad_lib.VarName(vg.var) in bound]
    if not pairs:
      return []
    wide = (tf.float64 if any(v.dtype.base_dtype == tf.float64
                              for v, _ in pairs) else tf.float32)
    scales, squares = [], []
    for var, g in pairs:
      t = None
      if p.adaptive:
        t = tf.abs(var.read_value()) + tf.constant(p.adaptive_eta, var.dtype)
        g = t * g
      scales.append(t)
      squares.append(tf.reduce_sum(tf.square(tf.cast(g, wide))))
    norm = tf.sqrt(tf.add_n(squares))
    ok = tf.logical_and(norm > 0, tf.math.is_finite(norm))
    factor = tf.where(ok, tf.constant(p.rho, wide) / tf.where(ok, norm, 1.), 0.)
    out = []
    for (var, g), t in zip(pairs, scales):
      e = g * tf.cast(factor, g.dtype)   # rho * g / ||g||
      if t is not None:
        e = t * t * e                     # rho * T^2 g / ||T g||
      out.append((var, tf.where(ok, e, tf.zeros_like(e))))
    return out
