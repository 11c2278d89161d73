"""Learning-rate-free Adam: D-Adaptation AdamW and Prodigy (a tree-wide d).

Both scale Adam's step by d, an estimate of the distance to the solution
grown from d0 by sums over EVERY variable the optimizer updates (A and
sum|s| below), so the step of one element reads all of them: not
elementwise (no ZeRO-1, no lazy sparse rows). t = num_updates + 1;
bc = sqrt(1 - beta2^t) / (1 - beta1^t) (1 with bias_correction=False);
dlr = d lr bc; sums run over all variables; d and r are scalars kept in
float64 variables (checkpointed), computed in the variables' dtype.

DAdaptAdamW (Defazio & Mishchenko, "Learning-Rate-Free Learning by
D-Adaptation", ICML 2023, arXiv:2301.07733, Algorithm 4 (Adam); optax
0.2.8 optax.contrib.dadapt_adamw), sb2 = sqrt(beta2):
  A = sum <g, s / (sqrt(v) + eps)>            (s, v before this step)
  m <- beta1 m + (1 - beta1) dlr g;   v <- beta2 v + (1 - beta2) g^2
  s <- sb2 s + (1 - sb2) dlr g;       r <- sb2 r + (1 - sb2) dlr A
  d <- max(d, r / ((1 - sb2) sum|s|))          (the next step's d)
  w <- w - m / (sqrt(v) + eps) - wd dlr w

Prodigy (Mishchenko & Defazio, "Prodigy: An Expeditiously Adaptive
Parameter-Free Learner", ICML 2024, arXiv:2306.06101, Algorithm 4;
optax 0.2.8 optax.contrib.prodigy), w0 the weights before the first
update, beta3 = sqrt(beta2) unless set:
  A = sum <g, w0 - w>
  m <- beta1 m + (1 - beta1) d g;     v <- beta2 v + (1 - beta2) d^2 g^2
  s <- beta3 s + dlr d g / d0         (safeguard_warmup: d d g / d0)
  r <- beta3 r + (d / d0) dlr A
  d' = max(d, d_coef r / sum|s|)
  w <- w - dlr m / (sqrt(v) + d' eps) - wd dlr w

Weight decay is optax's (decoupled, times dlr: d lr bc, not lr), applied
inside the step. Where sum|s| is 0 (every gradient 0 so far) d stays
(optax would divide by 0 and give NaN; the authors' torch code skips the
step). The authors' torch packages differ only in defaults and options:
prodigyopt 1.1.2 `Prodigy` and dadaptation 3.2 `DAdaptAdam` default to
use_bias_correction=False (here bias_correction=False gives their
numbers) and DAdaptAdam to coupled decay (decouple=False: wd w added to
the gradient; not offered here); both keep a `growth_rate` cap (default
inf, not offered) and compute d in Python float64 (ours: the variables'
dtype, as optax). Measured: tests/test_optimizers/test_d_adaptation.py.
"""

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.kernels import accelerators
from learner.optimizers.kernels import low_precision
from params import NestedMap
from params import checks

# The dtype d and r are stored in (a float32 value round-trips exactly).
_STATE_DTYPE = tf.float64


def _Cast(x, dtype):
  """`x` in `dtype`: a Python number made there directly (tf.cast would
  round it to float32 first), a tensor cast."""
  return tf.cast(x, dtype) if tf.is_tensor(x) else tf.constant(x, dtype)


def _LowestDtype(variables):
  """The narrowest float dtype of `variables` (optax's 'lowest')."""
  return min((v.dtype.base_dtype for v in variables), key=lambda d: d.size)


class _TreeWideD(BaseOptimizer):
  """What DAdaptAdamW and Prodigy share: the d estimate from tree-wide sums.

  `_BeginUpdate` reads every present variable once (gradient scaled and
  densified as the base's step sees it) and sums the subclass's
  `_Sums(c, w, g, slots)` -> (A term, sum|s_new|); the new d and r are
  stored by `_EndUpdate`. `_Step` then runs per variable with the update's
  scalars. Sparse gradients are densified.
  """

  ELEMENTWISE = False
  DEFAULT_LEARNING_RATE = 1.0  # Rate-free: the rate multiplies d.
  DECAY_IN_STEP = True  # wd dlr w, with dlr = d lr bc (optax), in `_Step`.

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.9, 'Decay of the first moment m.')
    p.Define('beta2', 0.999, 'Decay of the second moment v.')
    p.Define('epsilon', 1e-8, 'Added to sqrt(v) (Prodigy: d times it).')
    p.Define('d0', 1e-6, 'Initial (under-)estimate d0 of d (optax: '
             'estim_lr0).')
    p.Define('bias_correction', True,
             'True: dlr = d lr sqrt(1 - beta2^t) / (1 - beta1^t) (optax); '
             'False: dlr = d lr (the torch packages\' default '
             'use_bias_correction=False).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, high_open=True, example=0.9),
        beta2=checks.Real(0, 1, high_open=True, example=0.999,
                          why='beta2 = 1 makes sqrt(beta2) = 1 and d 0/0'),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 divides by 0 where v is 0'),
        d0=checks.Real(0, low_open=True, example=1e-6,
                       why='d starts at d0 and only grows by d0 > 0'))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    for key in self._BOOLS:
      if not isinstance(p.Get(key), bool):
        raise ValueError('%s: %s=%r is not a bool. Set %s to True or False.'
                         % (checks.Where(self), key, p.Get(key), key))
    self._d = self.CreateVariable('d', [], init=float(p.d0), trainable=False,
                                  dtype=_STATE_DTYPE)
    self._r = self.CreateVariable('r', [], init=0.0, trainable=False,
                                  dtype=_STATE_DTYPE)

  _BOOLS = ('bias_correction',)

  @property
  def d(self):
    """float64 scalar variable: the current estimate d (starts at d0)."""
    return self._d

  def _Decays(self, w):
    """True if decoupled weight decay acts on the variable `w`."""
    return self.WeightDecayOn() and self._decay_mask.get(
        var_grad_lib.VarName(w), True)

  def _BeginUpdate(self, lr, vgs, grad_scale):
    """The base's NestedMap plus d, dlr (the compute dtype: the narrowest
    of the variables'), `first` (no update applied yet) and, from the sums
    over `vgs`, the new d and r."""
    update = super()._BeginUpdate(lr, vgs, grad_scale)
    if not vgs:
      return update
    dtype = _LowestDtype([vg.var for vg in vgs])
    p = self.params
    t = tf.cast(self.num_updates + 1, tf.float64)
    bc = 1.0
    if p.bias_correction:
      bc = (tf.sqrt(1. - tf.pow(tf.constant(p.beta2, tf.float64), t)) /
            (1. - tf.pow(tf.constant(p.beta1, tf.float64), t)))
    d64 = self._d.read_value()
    update.d = tf.cast(d64, dtype)
    update.dlr = tf.cast(d64 * tf.cast(lr, tf.float64) * bc, dtype)
    update.first = tf.equal(self.num_updates, 0)
    update.d_new = None
    acc, l1 = tf.constant(0, dtype), tf.constant(0, dtype)
    for vg in vgs:
      var = vg.var
      g = accelerators.Scaled(tf.convert_to_tensor(vg.grad), grad_scale)
      slots = {k: low_precision.ReadSlot(x, var.dtype)
               for k, x in self.GetSlots(var).items()}
      a, s = self._Sums(self._Scalars(update, var.dtype), var, g, slots)
      acc += tf.cast(a, dtype)
      l1 += tf.cast(s, dtype)
    update.r_new, update.d_new = self._NewD(update, acc, l1, dtype)
    return update

  def _EndUpdate(self, update, ops):
    """Stores the new d and r after the update."""
    if 'r_new' not in update:
      return []
    with tf.control_dependencies([o for o in ops if o is not None]):
      return [self._d.assign(tf.cast(update.d_new, _STATE_DTYPE)),
              self._r.assign(tf.cast(update.r_new, _STATE_DTYPE))]

  def _Scalars(self, update, dtype):
    """lr, d, dlr, the new d (None inside `_BeginUpdate`), `first`, the
    betas and 1 - betas, epsilon and the weight decay, in `dtype`."""
    p = self.params
    c = lambda x: _Cast(x, dtype)
    s = NestedMap(lr=c(update.lr), d=c(update.d), dlr=c(update.dlr),
                  first=update.first,
                  d_new=None if update.d_new is None else c(update.d_new),
                  beta1=c(p.beta1), one_minus_beta1=c(1. - p.beta1),
                  beta2=c(p.beta2), one_minus_beta2=c(1. - p.beta2),
                  epsilon=c(p.epsilon), d0=c(p.d0),
                  wd=c(self.Hyper('decoupled_weight_decay', dtype)))
    return self._MoreScalars(s, c)

  def _Decay(self, s, w, step):
    """`step` plus wd dlr w (optax's decay) where decay is on for `w`."""
    if not self._Decays(w):
      return step
    return s.wd * s.dlr * tf.identity(w) + step


class DAdaptAdamW(_TreeWideD):
  """D-Adaptation AdamW: Adam whose rate d lr is learned (module docstring).

  Slots 'm', 'v', 's' (zeros); scalars d (starts at d0) and r, float64
  variables. `lr` is a multiplier of d: leave it at 1 (optax's default),
  or give a schedule with 1 at its peak. Weight decay:
  `decoupled_weight_decay` wd, w <- w - wd dlr w (optax's weight_decay).
  Defaults: optax.contrib.dadapt_adamw's (0.2.8: betas (0.9, 0.999), eps
  1e-8, d0 1e-6 (optax's estim_lr0), weight_decay 0, bias corrected).
  Source: Defazio & Mishchenko, ICML 2023 (arXiv:2301.07733).

  Raises:
    ValueError: at construction, if beta1 or beta2 is not a finite number
      in [0, 1), epsilon or d0 is not > 0, or bias_correction is not a
      bool (the message names the param); with shard_optimizer_state
      (the learner: not elementwise).
  """

  def _CreateSlots(self, var):
    return {'m': None, 'v': None, 's': None}

  def _MoreScalars(self, s, c):
    sb2 = self.params.beta2 ** 0.5
    s.sb2, s.one_minus_sb2 = c(sb2), c(1. - sb2)
    return s

  @staticmethod
  def _GradSum(s, slots, g):
    """s <- sb2 s + (1 - sb2) dlr g (optax's order of products)."""
    return s.sb2 * slots['s'] + s.one_minus_sb2 * s.dlr * g

  def _Sums(self, s, w, g, slots):
    del w
    a = tf.reduce_sum(g * (slots['s'] / (tf.sqrt(slots['v']) + s.epsilon)))
    return a, tf.reduce_sum(tf.abs(self._GradSum(s, slots, g)))

  def _NewD(self, update, acc, l1, dtype):
    """(r, d): r <- sb2 r + (1 - sb2) dlr A; d <- max(d, r / ((1 - sb2)
    sum|s|)), d kept where sum|s| = 0."""
    sb2 = self.params.beta2 ** 0.5
    c = lambda x: _Cast(x, dtype)
    r = (c(sb2) * c(self._r.read_value()) +
         c(1. - sb2) * update.dlr * acc)
    den = c(1. - sb2) * l1
    est = r / tf.where(den > 0, den, tf.ones_like(den))
    return r, tf.where(den > 0, tf.maximum(update.d, est), update.d)

  def _Step(self, s, w, g, slots):
    m = s.beta1 * slots['m'] + s.one_minus_beta1 * s.dlr * g
    v = s.beta2 * slots['v'] + s.one_minus_beta2 * g * g
    step = m / (tf.sqrt(v) + s.epsilon)
    return self._Decay(s, w, step), {'m': m, 'v': v,
                                     's': self._GradSum(s, slots, g)}


class Prodigy(_TreeWideD):
  """Prodigy: D-Adaptation with gradients weighted toward recent ones.

  Formula: the module docstring. Slots 'm', 'v', 's' (zeros) and 'w0' (the
  weights at the first update: Bind's values until then, so a warm start
  that assigns the weights later is what w0 starts from); scalars d and r.
  `lr` multiplies d: leave it at 1 (optax's default) or give a schedule
  with 1 at its peak (the authors: cosine decay). Weight decay:
  `decoupled_weight_decay` wd, w <- w - wd dlr w (optax's weight_decay;
  prodigyopt's decouple=True). Defaults: optax.contrib.prodigy's (0.2.8:
  betas (0.9, 0.999), beta3 sqrt(beta2), eps 1e-8, d0 1e-6 (optax's
  estim_lr0), d_coef 1 (estim_lr_coef), weight_decay 0, safeguard_warmup False, bias
  corrected).
  Source: Mishchenko & Defazio (arXiv:2306.06101); prodigyopt 1.1.2 gives
  the same numbers with use_bias_correction=True (its default False is
  bias_correction=False here).

  Raises:
    ValueError: at construction, as DAdaptAdamW, and if beta3 is not None
      or a number in [0, 1), d_coef is not > 0 or safeguard_warmup is not
      a bool.
  """

  _BOOLS = ('bias_correction', 'safeguard_warmup')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta3', None, 'Decay of s and r; None: sqrt(beta2).')
    p.Define('d_coef', 1.0, 'The estimate of d is multiplied by it '
             '(optax: estim_lr_coef).')
    p.Define('safeguard_warmup', False,
             'True: s accumulates d d g / d0 instead of dlr d g / d0 (no '
             'lr in the denominator of d: for a warmup of lr).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta3=checks.Real(0, 1, high_open=True, none_ok=True, example=None),
        d_coef=checks.Real(0, low_open=True, example=1.0,
                           why='d would stay d0'))
    return specs

  def _CreateSlots(self, var):
    return {'m': None, 'v': None, 's': None,
            'w0': tf.identity(var.read_value())}

  def _Beta3(self):
    p = self.params
    return p.beta2 ** 0.5 if p.beta3 is None else p.beta3

  def _MoreScalars(self, s, c):
    s.beta3 = c(self._Beta3())
    return s

  def _GradSum(self, s, slots, dg):
    """s <- beta3 s + dlr dg / d0 (safeguard_warmup: d dg / d0)."""
    rate = s.d if self.params.safeguard_warmup else s.dlr
    return s.beta3 * slots['s'] + rate * dg / s.d0

  def _Sums(self, s, w, g, slots):
    w = tf.identity(w)
    w0 = tf.where(s.first, w, slots['w0'])
    a = tf.reduce_sum(g * (w0 - w))
    return a, tf.reduce_sum(tf.abs(self._GradSum(s, slots, s.d * g)))

  def _NewD(self, update, acc, l1, dtype):
    """(r, d'): r <- beta3 r + (d / d0) dlr A; d' = max(d, d_coef r /
    sum|s|), d kept where sum|s| = 0."""
    p = self.params
    c = lambda x: _Cast(x, dtype)
    r = (c(self._Beta3()) * c(self._r.read_value()) +
         (update.d / c(p.d0)) * update.dlr * acc)
    est = c(p.d_coef) * r / tf.where(l1 > 0, l1, tf.ones_like(l1))
    return r, tf.where(l1 > 0, tf.maximum(update.d, est), update.d)

  def _Step(self, s, w, g, slots):
    dg = s.d * g
    m = s.beta1 * slots['m'] + s.one_minus_beta1 * dg
    v = s.beta2 * slots['v'] + s.one_minus_beta2 * dg * dg
    step = s.dlr * m / (tf.sqrt(v) + s.d_new * s.epsilon)
    w0 = tf.where(s.first, tf.identity(w), slots['w0'])
    return self._Decay(s, w, step), {'m': m, 'v': v, 'w0': w0,
                                     's': self._GradSum(s, slots, dg)}
