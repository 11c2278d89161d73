"""Mechanic: a learned scale of an inner optimizer's updates (a wrapper).

  n = num_betas;  beta_i = 1 - 0.1^i (i = 1..n);  S = sum_i s_i (s before
  this update);  x0 the weights at the first update;  x the weights now;
  u the inner optimizer's update of x (x_inner = x + u)
  g' = g + wd S ||g|| / (||x|| + eps) x        (norms over all variables)
  Delta = (x0 - x) / (S + eps)
  h = sum <g', Delta>                          (over all variables)
  m_i <- max(beta_i m_i, |h| + eps)    (the old m clips h: hc = clip(h, +-m_i))
  v_i <- beta_i^2 v_i + h^2
  r_i <- beta_i r_i + hc s_i
  s_i <- (s_init / n m_i + max(0, r_i)) / (sqrt(v_i) + eps)
  x <- x0 - (sum_i s_i) (Delta - u)

Source: Cutkosky, Defazio & Mehta, "Mechanic: A Learning Rate Tuner",
NeurIPS 2023 (arXiv:2306.00144), Algorithm 1 (the memory-efficient form
that recomputes Delta from x0); optax 0.2.8 `optax.contrib.mechanize`
(its clipping of h by the old m, added after the paper, included).
"""

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper
from params import checks

# The dtype r, m, v, s are stored in (a float32 value round-trips exactly);
# the update computes in the variables' narrowest dtype, as optax.
_STATE_DTYPE = tf.float64


def _Cast(x, dtype):
  """`x` in `dtype`: a Python number made there directly (tf.cast would
  round it to float32 first), a tensor cast."""
  return tf.cast(x, dtype) if tf.is_tensor(x) else tf.constant(x, dtype)


class Mechanic(wrapper.BaseWrapper):
  """Learns the scale sum(s) of the inner optimizer's updates (Mechanic).

  Each update: the inner optimizer (`p.optimizer`, e.g. Adam, Momentum or
  Lion at its usual rate, or 1 times a schedule) applies the raw
  gradients, giving its update u; then every variable with a gradient is
  set to x0 - sum(s) ((x0 - x) / (S + eps) - u) (formula: the module
  docstring). State: per variable, x0 (the weights at the first update, so
  a warm start that assigns the weights after Bind is what x0 holds);
  the vectors r, m, v, s of `num_betas` entries (float64 variables;
  s starts at s_init). `ScaleSum()` reads sum(s). Variables without a
  gradient this step keep their values and are left out of the sums and
  norms. Sparse gradients are densified. `weight_decay` acts only on the
  g' Mechanic's h reads (not the inner optimizer's decay).
  Defaults: optax.contrib.mechanize's (0.2.8: weight_decay 1e-2, eps 1e-8,
  s_init 1e-6, num_betas 6). Not for normalised-update inner optimizers
  (LARS, LAMB), as optax says.

  Raises:
    ValueError: at construction, if weight_decay is not >= 0, epsilon or
      s_init is not > 0, num_betas is not an int in [1, 15] (beta = 1 -
      0.1^16 rounds to 1 in float64), or as BaseWrapper (inner params, an
      accumulation inside, the wrapper's own decoupled_weight_decay).
  """

  INNER_OPTIMIZER_DOC = ('Params of the inner optimizer whose updates '
                         'Mechanic scales.')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'mechanic'
    p.Define('weight_decay', 1e-2, 'wd of g\' = g + wd S ||g|| / (||x|| + '
             'eps) x (only in h; not the inner optimizer\'s decay).')
    p.Define('epsilon', 1e-8, 'eps of Mechanic\'s divisions and of m.')
    p.Define('s_init', 1e-6, 'Initial scale: each s_i starts at it.')
    p.Define('num_betas', 6, 'n: the betas 1 - 0.1^i, i = 1..n.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        weight_decay=checks.Real(0, example=1e-2),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 divides by 0 when S = 0 or v = 0'),
        s_init=checks.Real(0, low_open=True, example=1e-6,
                           why='s = 0 never grows: the weights stay x0'),
        num_betas=checks.Int(1, 15, example=6,
                             why='1 - 0.1^16 rounds to 1'))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    n = [p.num_betas]
    self._r = self.CreateVariable('r', n, init=0.0, trainable=False,
                                  dtype=_STATE_DTYPE)
    self._m = self.CreateVariable('m', n, init=0.0, trainable=False,
                                  dtype=_STATE_DTYPE)
    self._v = self.CreateVariable('v', n, init=0.0, trainable=False,
                                  dtype=_STATE_DTYPE)
    self._s = self.CreateVariable('s', n, init=float(p.s_init),
                                  trainable=False, dtype=_STATE_DTYPE)
    self._x0 = {}  # Sanitized variable name -> x0 (checkpointed).

  def Bind(self, vmap):
    """Binds the inner optimizer and creates x0 per new variable."""
    super().Bind(vmap)
    for name, var in self.bound_variables.items():
      key = var_grad_lib.SanitizedName(name)
      if key not in self._x0:
        with tf.init_scope():
          self._x0[key] = tf.Variable(
              var.read_value(), name='%s/%s/x0' % (self.path, name),
              trainable=False)
    return self

  def X0(self, var):
    """The x0 variable of the bound variable `var`."""
    return self._x0[var_grad_lib.SanitizedName(var_grad_lib.VarName(var))]

  def ScaleSum(self):
    """float64 scalar: sum(s), the scale of the next update's Delta."""
    return tf.reduce_sum(self._s)

  def _NewScales(self, h, dtype):
    """{'r', 'm', 'v', 's'}: the new state vectors (in `dtype`) from h."""
    p = self.params
    c = lambda x: _Cast(x, dtype)
    betas = tf.constant([1. - 0.1**i for i in range(1, p.num_betas + 1)],
                        dtype)
    m_old, s_old = c(self._m.read_value()), c(self._s.read_value())
    clipped = tf.minimum(tf.maximum(h, -m_old), m_old)  # jax.lax.clamp
    m = tf.maximum(betas * m_old, tf.abs(h) + c(p.epsilon))
    v = tf.square(betas) * c(self._v.read_value()) + tf.square(h)
    r = betas * c(self._r.read_value()) + clipped * s_old
    wealth = c(p.s_init / p.num_betas) * m + tf.maximum(c(0.), r)
    s = wealth / (tf.sqrt(v) + c(p.epsilon))
    return {'r': r, 'm': m, 'v': v, 's': s}

  def _ApplyWrapped(self, lr, var_grads):
    """The inner update, then the Mechanic step on every variable with a
    gradient (module docstring); returns the ops."""
    p = self.params
    vgs = [vg for vg in var_grads.Flatten() if vg.grad is not None]
    if not vgs:
      return [self.optimizer.Apply(lr, var_grads)]
    dtype = min((vg.var.dtype.base_dtype for vg in vgs), key=lambda d: d.size)
    c = lambda x: _Cast(x, dtype)
    first = tf.equal(self.num_updates, 0)
    xs = [tf.identity(vg.var.read_value()) for vg in vgs]
    gs = [var_grad_lib.DensifyGradient(vg.grad) for vg in vgs]
    x0s = [tf.where(first, x, self.X0(vg.var)) for x, vg in zip(xs, vgs)]
    op = self.optimizer.Apply(lr, var_grads)
    s_sum = c(tf.reduce_sum(self._s.read_value()))
    eps = c(p.epsilon)
    g_norm = c(tf.linalg.global_norm(gs))
    x_norm = c(tf.linalg.global_norm(xs))
    deltas = [(x0 - x) / (tf.cast(s_sum + eps, x.dtype))
              for x, x0 in zip(xs, x0s)]
    h = c(0.)
    for g, x, dp in zip(gs, xs, deltas):
      k = tf.cast(c(p.weight_decay) * s_sum * g_norm / (x_norm + eps),
                  x.dtype)
      h += c(tf.reduce_sum((g + k * x) * dp))
    new = self._NewScales(h, dtype)
    ops = []
    with tf.control_dependencies([op] if op is not None else []):
      scale = tf.reduce_sum(new['s'])
      for vg, x, x0, dp in zip(vgs, xs, x0s, deltas):
        u = tf.identity(vg.var.read_value()) - x
        ops.append(vg.var.assign(
            x0 - tf.cast(scale, x.dtype) * (dp - u), read_value=False))
        ops.append(self.X0(vg.var).assign(x0, read_value=False))
      with tf.control_dependencies([o for o in ops if o is not None]):
        ops += [getattr(self, '_' + k).assign(tf.cast(x, _STATE_DTYPE),
                                              read_value=False)
                for k, x in sorted(new.items())]
    return [op] + ops
