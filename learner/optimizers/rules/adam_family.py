"""The Adam family in optax's form: Nadam, RAdam, Adamax, AMSGrad, ADOPT.

  t = num_updates + 1;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
  m_hat = m / (1 - b1^t);  v_hat = v / (1 - b2^t)
  Nadam:   w <- w - lr (b1 m/(1-b1^(t+1)) + (1-b1) g/(1-b1^t))
                        / (sqrt(v_hat) + eps)
  RAdam:   rho_t = rho_inf - 2 t b2^t / (1 - b2^t), rho_inf = 2/(1-b2) - 1;
           w <- w - lr r_t m_hat / (sqrt(v_hat) + eps) if rho_t >= threshold,
           else w <- w - lr m_hat, with
           r_t = sqrt((rho_t-4)(rho_t-2) rho_inf / ((rho_inf-4)(rho_inf-2) rho_t))
  Adamax:  u <- max(|g| + eps, b2 u);  w <- w - lr m_hat / u
  AMSGrad: v_max <- max(v_max, v_hat);  w <- w - lr m_hat / (sqrt(v_max) + eps)
  ADOPT:   (k = num_updates) step 0 only sets v <- g^2; then
           m <- b1 m + (1 - b1) clip(g / max(sqrt(v_old), eps), k^(1/4));
           v <- b2 v + (1 - b2) g^2;  w <- w - lr m

Epsilon is added after the bias correction (optax's form; our Adam/AdamW
add it before, TF's form). Source: Dozat, "Incorporating Nesterov Momentum
into Adam", ICLR 2016 workshop; Liu et al., "On the Variance of the Adaptive
Learning Rate and Beyond", ICLR 2020; Kingma & Ba, ICLR 2015, section 7.1
(AdaMax); Reddi et al., "On the Convergence of Adam and Beyond", ICLR 2018;
Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any beta2 with the
Optimal Rate", NeurIPS 2024. Reference implementation: optax 0.2.8
(`nadam`, `radam`, `adamax`, `amsgrad`, `contrib.adopt`), whose numbers the
tests match (tests/data/optax_adam_family.json).

Each rule is one formula: its `_Step` on values (the base derives the
dense update, ZeRO-1 shards and `slot_dtype` storage from it;
learner/optimizers/base.py) from the scalars its `_Scalars` computes once
per variable. Fused kernels (kernels/multi_tensor_rules.cc, the same
numbers bit for bit) are the accelerators 'nadam' (TfLearnerMultiApplyNadam)
and 'amsgrad' (TfLearnerMultiApplyAMSGrad) in kernels/accelerators.py, fed
those scalars; RAdam, Adamax and ADOPT run `_Step` as TF ops.

One module: the five share the moment updates, the float64 bias
corrections, the checks of beta1/beta2/epsilon and the epsilon convention.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks

# Keras's (Dozat's) momentum schedule: mu_t = b1 (1 - 0.5 * 0.96^t). Beyond
# _DOZAT_TERMS steps 0.96^t < 2e-18, so 1 - 0.5 * 0.96^t is 1 in float64 and
# the running product needs no state.
_DOZAT_BASE = 0.96
_DOZAT_TERMS = 1000


def Cast(x, dtype):
  """`x` (Python number or tensor) as a tensor of `dtype`.

  A Python number is converted straight to `dtype` (not through float32,
  as a tf.cast of a Python float would), so float64 variables see epsilon =
  1e-3 exactly; a tensor (a float64 bias correction, the float32 rate) is
  cast with tf.cast.
  """
  if isinstance(x, (int, float)):
    return tf.constant(x, dtype)
  return tf.cast(x, dtype)


def _Choice(layer, key, value, choices):
  """Raises a one-line ValueError unless `value` is one of `choices`."""
  if not isinstance(value, str) or value not in choices:
    raise ValueError('%s: %s=%r is not one of %s. Set %s to one of them, e.g. '
                     '%r.' % (checks.Where(layer), key, value, list(choices),
                              key, choices[0]))


def _Bool(layer, key, value):
  """Raises a one-line ValueError unless `value` is a bool."""
  if not isinstance(value, bool):
    raise ValueError('%s: %s=%r is not a bool. Set %s to True or False.' %
                     (checks.Where(layer), key, value, key))


class _AdamFamily(BaseOptimizer):
  """What the family shares: beta1, beta2, epsilon, the moment updates.

  Each rule writes its scalars (`_Scalars`, once per variable) and its
  formula on values (`_Step`); the base applies them (BaseOptimizer: the
  dense update, ZeRO-1 shards, `slot_dtype` storage). Powers and bias
  corrections are computed in float64 from the int64 `num_updates` and
  cast to the variable's dtype (as optax with x64). Sparse gradients are
  densified (no lazy update). Slots (zeros) are named by each rule.

  Raises:
    ValueError: at construction, beta1 or beta2 not a finite number in
      [0, 1), or epsilon not > 0 (one line naming the key and the fix).
  """

  # slot_dtype=tf.int8: the unsigned map for the second moments.
  NONNEGATIVE_SLOTS = ('v', 'u', 'v_max')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.9, 'Decay of the first moment (b1).')
    p.Define('beta2', 0.999, 'Decay of the second moment (b2).')
    p.Define('epsilon', 1e-8, 'Added to the denominator after the bias '
             'correction (optax\'s eps).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta1=checks.Real(0, 1, high_open=True, example=0.9,
                          why='beta1 = 1 never moves m from 0'),
        beta2=checks.Real(0, 1, high_open=True, example=0.999,
                          why='beta2 = 1 never moves v from 0'),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 divides by 0 where a gradient is 0'))
    return specs

  def _T(self):
    """float64 scalar: t = num_updates + 1, the step being applied."""
    return tf.cast(self.num_updates + 1, tf.float64)

  @staticmethod
  def _Correction(decay, t, dtype):
    """1 - decay^t, computed in float64, as a `dtype` scalar."""
    return Cast(1. - tf.pow(tf.constant(decay, tf.float64), t), dtype)

  def _FamilyScalars(self, update, dtype):
    """The scalars every rule of the family reads, as `dtype` scalars.

    Returns:
      NestedMap: lr (the scheduled rate), beta1, one_minus_beta1, beta2,
      one_minus_beta2 and epsilon. 1 - beta is computed on the Python
      floats (float64) and then converted, never as 1 - a rounded beta.
    """
    p = self.params
    return NestedMap(lr=Cast(update.lr, dtype), beta1=Cast(p.beta1, dtype),
                     one_minus_beta1=Cast(1. - p.beta1, dtype),
                     beta2=Cast(p.beta2, dtype),
                     one_minus_beta2=Cast(1. - p.beta2, dtype),
                     epsilon=Cast(p.epsilon, dtype))

  @staticmethod
  def _NewFirstMoment(s, g, slots):
    """m after this step, on values: (1 - b1) g + b1 m_old (`s` from
    `_FamilyScalars`, g and the slots of one shape and dtype)."""
    return s.one_minus_beta1 * g + s.beta1 * slots['m']

  @classmethod
  def _NewMoments(cls, s, g, slots):
    """(m, v) after this step, on values: m as `_NewFirstMoment`, v =
    (1 - b2) g^2 + b2 v_old."""
    return (cls._NewFirstMoment(s, g, slots),
            s.one_minus_beta2 * tf.square(g) + s.beta2 * slots['v'])


class Nadam(_AdamFamily):
  """Nadam: Adam with a Nesterov look-ahead of the first moment.

  m_hat = u_{t+1} m / (1 - P_{t+1}) + (1 - u_t) g / (1 - P_t),
  P_t = u_1 ... u_t;  w <- w - lr m_hat / (sqrt(v / (1 - b2^t)) + eps).
  `momentum_schedule='constant'` (default): u_t = b1, P_t = b1^t, optax's
  `nadam` (our numbers equal it). `'dozat'`: u_t = b1 (1 - 0.5 * 0.96^t),
  the schedule of Dozat's paper as Keras 3's `Nadam` has it (m still
  decays with b1); with epsilon=1e-7 (Keras's default) it gives Keras's
  numbers. PyTorch's NAdam is 'dozat' with 0.96^(0.004 t), not offered.
  Epsilon after the bias correction (optax's and Keras's form). Dozat's
  Algorithm 2 has an extra factor b2 in v_hat that optax and Keras omit;
  so do we.
  Source: Dozat, "Incorporating Nesterov Momentum into Adam", ICLR 2016
  workshop; optax 0.2.8 `scale_by_adam(nesterov=True)`; Keras 3 `Nadam`.
  Slots: 'm', 'v'.

  Raises:
    ValueError: at construction, as the family (beta1, beta2 in [0, 1),
      epsilon > 0), or momentum_schedule not 'constant' or 'dozat'.
  """

  ELEMENTWISE = True
  ACCELERATOR = 'nadam'
  SCHEDULES = ('constant', 'dozat')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('momentum_schedule', 'constant',
             "'constant': u_t = beta1 (optax's nadam); 'dozat': u_t = beta1 "
             "(1 - 0.5 * 0.96^t) (Keras's Nadam).")
    return p

  def __init__(self, params):
    super().__init__(params)
    _Choice(self, 'momentum_schedule', self.params.momentum_schedule,
            self.SCHEDULES)

  def _CreateSlots(self, var):
    return {'m': None, 'v': None}

  def _Schedule(self, t):
    """(u_t, u_{t+1}, P_t, P_{t+1}) as float64 scalars."""
    b1 = tf.constant(self.params.beta1, tf.float64)
    if self.params.momentum_schedule == 'constant':
      return b1, b1, tf.pow(b1, t), tf.pow(b1, t + 1.)
    i = tf.range(1, _DOZAT_TERMS + 1, dtype=tf.float64)
    f = 1. - 0.5 * tf.pow(tf.constant(_DOZAT_BASE, tf.float64), i)
    prod = lambda n: tf.pow(b1, n) * tf.reduce_prod(tf.where(i <= n, f, 1.))
    u = lambda n: b1 * (1. - 0.5 * tf.pow(
        tf.constant(_DOZAT_BASE, tf.float64), n))
    return u(t), u(t + 1.), prod(t), prod(t + 1.)

  def _Scalars(self, update, dtype):
    """The family's scalars plus the schedule's: u_next = u_{t+1},
    one_minus_p_next = 1 - P_{t+1}, one_minus_u_t = 1 - u_t, one_minus_p_t
    = 1 - P_t and v_correction = 1 - b2^t (float64, then `dtype`)."""
    t = self._T()
    u_t, u_next, p_t, p_next = self._Schedule(t)
    s = self._FamilyScalars(update, dtype)
    s.u_next = Cast(u_next, dtype)
    s.one_minus_p_next = Cast(1. - p_next, dtype)
    s.one_minus_u_t = Cast(1. - u_t, dtype)
    s.one_minus_p_t = Cast(1. - p_t, dtype)
    s.v_correction = self._Correction(self.params.beta2, t, dtype)
    return s

  def _Step(self, s, w, g, slots):
    del w
    m, v = self._NewMoments(s, g, slots)
    m_hat = (s.u_next * (m / s.one_minus_p_next) +
             s.one_minus_u_t * (g / s.one_minus_p_t))
    v_hat = v / s.v_correction
    return s.lr * (m_hat / (tf.sqrt(v_hat) + s.epsilon)), {'m': m, 'v': v}


class RAdam(_AdamFamily):
  """RAdam: Adam with the variance of its adaptive rate rectified.

  rho_inf = 2 / (1 - b2) - 1;  rho_t = rho_inf - 2 t b2^t / (1 - b2^t)
  rho_t >= threshold: w <- w - lr r_t m_hat / (sqrt(v_hat) + eps),
    r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf /
               ((rho_inf - 4)(rho_inf - 2) rho_t));
  otherwise (the first steps): w <- w - lr m_hat (momentum SGD).
  `use_nesterov` takes Nadam's m_hat (b1 m/(1-b1^(t+1)) + (1-b1) g/(1-b1^t)).
  rho_t and r_t are computed in float64 (with b2 = 0.999, rho_5 = 4.996:
  float32 would blur the threshold). Epsilon after the bias correction
  (optax's form). Source: Liu et al., "On the Variance of the Adaptive
  Learning Rate and Beyond", ICLR 2020, Algorithm 2 (threshold 4 there; 5
  in the authors' code and in optax); optax 0.2.8 `radam`. Keras has no
  RAdam. Slots: 'm', 'v'.

  Raises:
    ValueError: at construction, as the family, or threshold not a finite
      number >= 4 (below 4, rho_t in (2, 4) gives the square root of a
      negative number: NaN weights), or use_nesterov not a bool.
  """

  ELEMENTWISE = True

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('threshold', 5.0, 'Rectify (adaptive step) once rho_t >= this; '
             'before, plain momentum SGD.')
    p.Define('use_nesterov', False, 'Nadam\'s look-ahead first moment.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['threshold'] = checks.Real(
        4, example=5.0, why='rho_t in (2, 4) gives sqrt of a negative: NaN')
    return specs

  def __init__(self, params):
    super().__init__(params)
    _Bool(self, 'use_nesterov', self.params.use_nesterov)

  def _CreateSlots(self, var):
    return {'m': None, 'v': None}

  def _Rectifier(self, t):
    """(rho_t, r_t): float64 scalars (r_t is 0 where rho_t < 4)."""
    b2 = self.params.beta2
    rho_inf = 2. / (1. - b2) - 1.
    b2t = tf.pow(tf.constant(b2, tf.float64), t)
    rho = rho_inf - 2. * t * b2t / (1. - b2t)
    r2 = ((rho - 4.) * (rho - 2.) * rho_inf /
          ((rho_inf - 4.) * (rho_inf - 2.) * rho))
    return rho, tf.sqrt(tf.where(rho >= 4., r2, tf.zeros_like(r2)))

  def _Scalars(self, update, dtype):
    """The family's scalars plus m_correction = 1 - b1^t, v_correction = 1
    - b2^t, next_correction = 1 - b1^(t+1) (Nadam's look-ahead; None
    without use_nesterov), r = r_t (float64, then `dtype`), the bool
    scalar tensor rectify = (rho_t >= threshold) and the Python bool
    use_nesterov."""
    p = self.params
    t = self._T()
    rho, r = self._Rectifier(t)
    s = self._FamilyScalars(update, dtype)
    s.m_correction = self._Correction(p.beta1, t, dtype)
    s.v_correction = self._Correction(p.beta2, t, dtype)
    s.next_correction = (self._Correction(p.beta1, t + 1., dtype)
                         if p.use_nesterov else None)
    s.r = Cast(r, dtype)
    s.rectify = rho >= p.threshold
    s.use_nesterov = p.use_nesterov
    return s

  def _Step(self, s, w, g, slots):
    del w
    m, v = self._NewMoments(s, g, slots)
    if s.use_nesterov:
      m_hat = (s.beta1 * (m / s.next_correction) +
               s.one_minus_beta1 * (g / s.m_correction))
    else:
      m_hat = m / s.m_correction
    v_hat = v / s.v_correction
    adaptive = s.r * m_hat / (tf.sqrt(v_hat) + s.epsilon)
    return (s.lr * tf.where(s.rectify, adaptive, m_hat),
            {'m': m, 'v': v})


class Adamax(_AdamFamily):
  """Adamax: Adam with the infinity norm in place of v.

  `epsilon_form='optax'` (default): u <- max(|g| + eps, b2 u);
    w <- w - lr (m / (1 - b1^t)) / u   (optax's `adamax`; our numbers).
  `epsilon_form='keras'`: u <- max(b2 u, |g|);
    w <- w - lr m / ((1 - b1^t) (u + eps))   (Keras 3's `Adamax`; with
    epsilon=1e-7, Keras's default, its numbers).
  The two differ only by where eps sits (and so by ~eps / |g|). u needs no
  bias correction. Source: Kingma & Ba, "Adam: A Method for Stochastic
  Optimization", ICLR 2015, section 7.1, Algorithm 2 (no eps there);
  optax 0.2.8 `adamax`; Keras 3 `Adamax`. Slots: 'm', 'u'.

  Raises:
    ValueError: at construction, as the family, or epsilon_form not
      'optax' or 'keras'.
  """

  ELEMENTWISE = True
  FORMS = ('optax', 'keras')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('epsilon_form', 'optax',
             "'optax': u = max(|g| + eps, b2 u), step m_hat / u; 'keras': "
             'u = max(b2 u, |g|), step m_hat / (u + eps).')
    return p

  def __init__(self, params):
    super().__init__(params)
    _Choice(self, 'epsilon_form', self.params.epsilon_form, self.FORMS)

  def _CreateSlots(self, var):
    return {'m': None, 'u': None}

  def _Scalars(self, update, dtype):
    """The family's scalars plus m_correction = 1 - b1^t (float64, then
    `dtype`) and the Python str epsilon_form."""
    s = self._FamilyScalars(update, dtype)
    s.m_correction = self._Correction(self.params.beta1, self._T(), dtype)
    s.epsilon_form = self.params.epsilon_form
    return s

  def _Step(self, s, w, g, slots):
    del w
    m = self._NewFirstMoment(s, g, slots)
    if s.epsilon_form == 'optax':
      u = tf.maximum(tf.abs(g) + s.epsilon, s.beta2 * slots['u'])
      step = (m / s.m_correction) / u
    else:
      u = tf.maximum(s.beta2 * slots['u'], tf.abs(g))
      step = m / (s.m_correction * (u + s.epsilon))
    return s.lr * step, {'m': m, 'u': u}


class AMSGrad(_AdamFamily):
  """AMSGrad: Adam whose denominator never shrinks.

  v_max <- max(v_max, v_hat);  w <- w - lr m_hat / (sqrt(v_max) + eps),
  with m_hat = m / (1 - b1^t) if `bias_correction_mu` else m, and v_hat =
  v / (1 - b2^t) if `bias_correction_nu` else v (both False: Reddi et al.'s
  Algorithm 2). Epsilon after the bias correction (optax's form; Keras's
  `Adam(amsgrad=True)` takes the max of the uncorrected v and adds eps
  TF-style, so its numbers differ). Source: Reddi et al., "On the
  Convergence of Adam and Beyond", ICLR 2018; optax 0.2.8 `amsgrad`.
  Slots: 'm', 'v', 'v_max'.

  Raises:
    ValueError: at construction, as the family, or bias_correction_mu /
      bias_correction_nu not a bool.
  """

  ELEMENTWISE = True
  ACCELERATOR = 'amsgrad'

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('bias_correction_mu', True, 'm_hat = m / (1 - b1^t) (else m).')
    p.Define('bias_correction_nu', True,
             'Correct v by 1 - b2^t before the running max (else raw v).')
    return p

  def __init__(self, params):
    super().__init__(params)
    _Bool(self, 'bias_correction_mu', self.params.bias_correction_mu)
    _Bool(self, 'bias_correction_nu', self.params.bias_correction_nu)

  def _CreateSlots(self, var):
    return {'m': None, 'v': None, 'v_max': None}

  def _Scalars(self, update, dtype):
    """The family's scalars plus m_correction = 1 - b1^t and v_correction
    = 1 - b2^t (float64, then `dtype`), each None when its
    bias_correction_* is False (then nothing divides)."""
    p = self.params
    t = self._T()
    s = self._FamilyScalars(update, dtype)
    s.m_correction = (self._Correction(p.beta1, t, dtype)
                      if p.bias_correction_mu else None)
    s.v_correction = (self._Correction(p.beta2, t, dtype)
                      if p.bias_correction_nu else None)
    return s

  def _Step(self, s, w, g, slots):
    del w
    m, v = self._NewMoments(s, g, slots)
    m_hat = m if s.m_correction is None else m / s.m_correction
    v_hat = v if s.v_correction is None else v / s.v_correction
    v_max = tf.maximum(slots['v_max'], v_hat)
    return (s.lr * (m_hat / (tf.sqrt(v_max) + s.epsilon)),
            {'m': m, 'v': v, 'v_max': v_max})


class ADOPT(_AdamFamily):
  """ADOPT: normalise g by the previous v, then take the momentum.

  k = num_updates. Step k = 0: v <- g^2, m and w stay. Then
    n = clip(g / max(sqrt(v_old), eps), -k^c, k^c)   (c = clip_exponent;
        no clip if not use_clipping)
    m <- b1 m + (1 - b1) n;  v <- b2 v + (1 - b2) g^2
    w <- w - lr m   (use_nesterov: w <- w - lr (b1 m + (1 - b1) n)).
  v_old excludes the current gradient (the paper's change to Adam, which
  lets any b2 converge); the clip (c = 1/4) is the paper's stabiliser for
  the first steps. Epsilon as optax: max(sqrt(v), eps).
  Defaults b2 = 0.9999, eps = 1e-6 (the paper's and optax's). Source:
  Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any beta2 with
  the Optimal Rate", NeurIPS 2024; optax 0.2.8
  `contrib.adopt`. Keras has no ADOPT. Slots: 'm', 'v'.

  Raises:
    ValueError: at construction, as the family, clip_exponent not a finite
      number > 0, or use_nesterov / use_clipping not a bool.
  """

  ELEMENTWISE = True

  @classmethod
  def Params(cls):
    p = super().Params()
    p.beta2 = 0.9999
    p.epsilon = 1e-6
    p.Define('use_nesterov', False, 'Step on b1 m + (1 - b1) n, not m.')
    p.Define('use_clipping', True,
             'Clip the normalised gradient to +-k^clip_exponent.')
    p.Define('clip_exponent', 0.25,
             'c of the clip value k^c at update k (the paper: 1/4).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['clip_exponent'] = checks.Real(
        0, low_open=True, example=0.25,
        why='k^0 = 1 would cap the normalised gradient at 1 for good')
    return specs

  def __init__(self, params):
    super().__init__(params)
    _Bool(self, 'use_nesterov', self.params.use_nesterov)
    _Bool(self, 'use_clipping', self.params.use_clipping)

  def _CreateSlots(self, var):
    return {'m': None, 'v': None}

  def _Scalars(self, update, dtype):
    """lr and epsilon; b1, c1, b2, c2: (beta1, 1 - beta1, beta2, 1 -
    beta2) after the first update, (1, 0, 0, 1) at it (m stays 0, v <-
    g^2), chosen in float64 then converted (1 - 0.9999 in float32 is 1.7e-5
    relative off, which ADOPT's g / sqrt(v) can magnify); clip = k^c in
    `dtype` (k = num_updates), or None without use_clipping; the Python
    bool use_nesterov."""
    p = self.params
    first = tf.equal(self.num_updates, 0)
    pick = lambda a, b: Cast(tf.where(first, tf.constant(a, tf.float64),
                                      tf.constant(b, tf.float64)), dtype)
    clip = None
    if p.use_clipping:
      k = tf.cast(self.num_updates, tf.float64)
      clip = Cast(tf.pow(k, p.clip_exponent), dtype)
    return NestedMap(lr=Cast(update.lr, dtype), b1=pick(1., p.beta1),
                     c1=pick(0., 1. - p.beta1), b2=pick(0., p.beta2),
                     c2=pick(1., 1. - p.beta2),
                     epsilon=Cast(p.epsilon, dtype), clip=clip,
                     use_nesterov=p.use_nesterov)

  def _Step(self, s, w, g, slots):
    del w
    n = g / tf.maximum(tf.sqrt(slots['v']), s.epsilon)
    if s.clip is not None:
      n = tf.clip_by_value(n, -s.clip, s.clip)
    m = s.c1 * n + s.b1 * slots['m']
    v = s.c2 * tf.square(g) + s.b2 * slots['v']
    step = (s.c1 * n + s.b1 * m) if s.use_nesterov else m
    return s.lr * step, {'m': m, 'v': v}
