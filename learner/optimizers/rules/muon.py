"""Muon: momentum orthogonalised by a Newton-Schulz iteration.

  t = num_updates + 1;  m <- beta m + (1 - beta) g
  u = beta m / (1 - beta^(t+1)) + (1 - beta) g / (1 - beta^t)   (nesterov)
    = m / (1 - beta^t)                                          (otherwise)
  O = NS5(u as a [fan_in, fan_out] matrix);  w <- w - lr * s * O
  NS5: X = U / (||U||_F + eps), transposed if rows > cols; 5 times
       A = X X^T;  X <- a X + (b A + c A A) X,  (a, b, c) = (3.4445, -4.7750,
       2.0315); transposed back.
  s = sqrt(max(1, fan_out / fan_in))            (rate_scaling 'width')
    = rms_rate * sqrt(max(fan_in, fan_out))     (rate_scaling 'moonlight')

Source: K. Jordan et al., "Muon: An optimizer for hidden layers in neural
networks" (2024, github.com/KellerJordan/Muon, modded-nanogpt); the numbers
are those of optax 0.2.8 `optax.contrib.muon` (its bias-corrected Nesterov
form above); Liu et al., "Muon is Scalable for LLM Training" (Moonlight,
arXiv:2502.16982) for the 'moonlight' scaling that matches AdamW's update
RMS.
"""

import math

import tensorflow as tf

from learner.optimizers import home_sharding
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.rules import adam
from params import NestedMap
from params import checks

MOMENTUM_FORMS = ('optax', 'reference')
RATE_SCALINGS = ('width', 'moonlight')


def NewtonSchulz(x, steps, coeffs, eps):
  """The quintic Newton-Schulz iteration: approximately U V^T of x = U S V^T.

  Each step maps X to a X + b (X X^T) X + c (X X^T)^2 X; the coefficients
  maximise the slope at 0, so the singular values land near 1 (in about
  [0.7, 1.2]) rather than exactly on it (K. Jordan et al. 2024). Runs on the
  wide orientation (x transposed when it has more rows than columns, so
  X X^T is the smaller Gram matrix) and transposes back.

  Args:
    x: float tensor [rows, cols] (static shape).
    steps: Python int, the iterations.
    coeffs: (a, b, c) Python floats.
    eps: Python float added to the Frobenius norm x is divided by first.

  Returns:
    A tensor of x's shape and dtype.
  """
  transposed = x.shape[0] > x.shape[1]
  if transposed:
    x = tf.transpose(x)
  x = x / (tf.norm(x) + tf.constant(eps, x.dtype))
  a, b, c = [tf.constant(k, x.dtype) for k in coeffs]
  for _ in range(steps):
    gram = tf.matmul(x, x, transpose_b=True)
    x = a * x + tf.matmul(b * gram + c * tf.matmul(gram, gram), x)
  return tf.transpose(x) if transposed else x


def MatrixShape(shape):
  """[fan_in, fan_out] that Muon sees a variable of `shape` as.

  A matrix [in, out] is itself; a conv kernel [kh, kw, cin, cout] (or
  [k, cin, cout]) is flattened to [kh*kw*cin, cout], as optax with
  `MuonDimensionNumbers(reduction_axis=(0, 1, 2), output_axis=3)`.

  Args:
    shape: a list of Python ints, rank >= 2.

  Returns:
    [fan_in, fan_out] Python ints.
  """
  return [int(math.prod(shape[:-1])), int(shape[-1])]


class Muon(BaseOptimizer):
  """Muon: Nesterov momentum, orthogonalised, scaled by the matrix's shape.

  t = num_updates + 1;  m <- beta m + (1 - beta) g
  momentum_form 'optax' (default; optax.contrib.muon, bias-corrected):
    u = beta m / (1 - beta^(t+1)) + (1 - beta) g / (1 - beta^t)  (nesterov)
    u = m / (1 - beta^t)                                         (otherwise)
  momentum_form 'reference' (K. Jordan's github.com/KellerJordan/Muon
  `muon_update`, no bias correction):
    u = beta m + (1 - beta) g  (nesterov);  u = m  (otherwise)
  O = NewtonSchulz(u as [fan_in, fan_out]);  w <- w - lr * s * O
  s = sqrt(max(1, fan_out / fan_in)) (rate_scaling 'width': optax's and K.
  Jordan's) or rms_rate * sqrt(max(fan_in, fan_out)) ('moonlight', Liu et
  al. 2025: the update's RMS ~ rms_rate, as AdamW's, so AdamW's rate and
  weight decay carry over).
  Decoupled weight decay is the base's `decoupled_weight_decay`: w <- w -
  lr * wd * w_old, as optax's (add_decayed_weights before the rate) and K.
  Jordan's (p *= 1 - lr * wd).

  The two momentum forms agree at t = 1 (NS5 divides by the norm, so only
  the direction of u counts) and differ from t = 2 on (their weights of the
  past gradients differ). Shapes: a variable of rank >= 2; [.., cin, cout]
  kernels are flattened to [prod(all but the last), cout] (`MatrixShape`).
  Computed in the variable's dtype (the learner's rate arrives as float32).
  Sparse gradients are densified. Slot: 'm' (zeros).

  Keras 3's `keras.optimizers.Muon` keeps m <- beta m + g (sum form) and
  steps along g + beta m, which is (1 - beta)^-1 times our 'reference' u:
  after NS5 the same up to eps; it scales by rms_rate * sqrt(max(rows,
  cols)) with rms_rate 0.2, divides by the norm + 1e-7, and sends every
  variable that is not 2-D, or has 'embedding' in its path, to its own
  AdamW. Its Muon numbers are ours with momentum_form='reference',
  rate_scaling='moonlight', rms_rate=0.2, epsilon=1e-7 (Keras's weight_decay
  is our decoupled_weight_decay); tested within 1e-5 relative
  (tests/test_optimizers/test_muon.py). Keras gives a conv kernel to AdamW;
  we flatten it to one matrix, as optax with reduction axes (0, 1, 2).

  Not a matrix, not Muon: optax.contrib.muon routes every non-2-D variable
  to its own AdamW; we refuse them at `Bind` instead, so the split is
  explicit: two learners, Muon on the matrices of the body, AdamW on
  embeddings, norms, biases and the head (`TwoLearners`).

  Raises:
    ValueError: at construction, a beta outside [0, 1), ns_steps < 1,
      epsilon <= 0, rms_rate <= 0, three ns_coeffs that are not finite
      numbers, or an unknown momentum_form / rate_scaling (one line naming
      the key, the value and the fix); at `Bind`, a variable of rank < 2
      (one line naming the variable and the fix).
  """

  # ZeRO-1 homes each matrix on one replica (home_sharding.py), balanced by
  # its Newton-Schulz FLOPs (`ShardCost`).
  WHOLE_TENSOR = True

  def ShardCost(self, var):
    """The FLOPs of `var`'s Newton-Schulz iterations (home_sharding.py)."""
    fan_in, fan_out = MatrixShape(var.shape.as_list())
    return home_sharding.NewtonSchulzFlops(fan_in, fan_out,
                                           self.params.ns_steps)

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta', 0.95, 'Momentum decay: m <- beta m + (1 - beta) g.')
    p.Define('nesterov', True, 'Orthogonalise the Nesterov look-ahead (beta '
             'm + (1 - beta) g, bias corrected in the optax form) instead of '
             'm.')
    p.Define('momentum_form', 'optax', 'optax: optax.contrib.muon\'s '
             'bias-corrected momentum; reference: K. Jordan\'s Muon (no bias '
             'correction; differs from the second update on).')
    p.Define('ns_steps', 5, 'Newton-Schulz iterations per update.')
    p.Define('ns_coeffs', [3.4445, -4.7750, 2.0315],
             'Quintic Newton-Schulz coefficients (a, b, c).')
    p.Define('epsilon', 1e-8, 'Added to the Frobenius norm before NS '
             '(optax 1e-8; K. Jordan and Keras 1e-7).')
    p.Define('rate_scaling', 'width', 'width: s = sqrt(max(1, fan_out / '
             'fan_in)) (optax, K. Jordan); moonlight: s = rms_rate * '
             'sqrt(max(fan_in, fan_out)) (Liu et al. 2025, Keras).')
    p.Define('rms_rate', 0.2, 'The update RMS that rate_scaling=moonlight '
             'aims at (AdamW\'s, ~0.2); unused by width.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta=checks.Real(0, 1, high_open=True, example=0.95,
                         why='beta = 1 never lets a gradient in'),
        ns_steps=checks.Int(1, example=5),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 gives 0/0 = NaN on a zero gradient'),
        rms_rate=checks.Real(0, low_open=True, example=0.2))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    for key, allowed in (('momentum_form', MOMENTUM_FORMS),
                         ('rate_scaling', RATE_SCALINGS)):
      if getattr(p, key) not in allowed:
        raise ValueError(
            '%s: %s=%r is not one of %s; set %s to one of them (default '
            '%r).' % (checks.Where(self), key, getattr(p, key), list(allowed), key,
                      allowed[0]))
    coeffs = p.ns_coeffs
    if (not isinstance(coeffs, (list, tuple)) or len(coeffs) != 3 or
        any(checks.Real().Problem(c) for c in coeffs)):
      raise ValueError(
          '%s: ns_coeffs=%r must be three finite numbers (a, b, c); set '
          'ns_coeffs=[3.4445, -4.775, 2.0315] (the default).' %
          (checks.Where(self), coeffs))

  def Bind(self, vmap):
    """Refuses a variable of rank < 2, then binds as every optimizer.

    Raises:
      ValueError: naming the first variable that is not a matrix or a
        kernel, and how to give it to another learner.
    """
    variables = vmap.Flatten() if hasattr(vmap, 'Flatten') else list(vmap)
    for var in variables:
      if var.shape.rank is None or var.shape.rank < 2:
        name = var_grad_lib.VarName(var)
        raise ValueError(
            '%s: variable %r has shape %s; Muon updates matrices and conv '
            'kernels only (rank >= 2). Give it to an AdamW learner: exclude '
            'it from this learner (bprop_variable_filter/'
            'bprop_variable_exclusion), e.g. with Muon.TwoLearners.' %
            (checks.Where(self), name, var.shape.as_list()
             if var.shape.rank is not None else None))
    return super().Bind(vmap)

  def _CreateSlots(self, var):
    return {'m': None}

  def _Scalars(self, update, dtype):
    """lr, beta and 1 - beta (constants of `dtype`, not rounded through
    float32) and, for momentum_form 'optax', the bias corrections
    1 - beta^t and 1 - beta^(t+1) with t = num_updates + 1."""
    p = self.params
    beta = tf.constant(p.beta, dtype)
    s = NestedMap(lr=tf.cast(update.lr, dtype), beta=beta,
                  one_minus_beta=tf.constant(1. - p.beta, dtype))
    if p.momentum_form == 'optax':
      t = tf.cast(self.num_updates + 1, dtype)
      s.correction = 1. - tf.pow(beta, t)
      s.next_correction = 1. - tf.pow(beta, t + 1.)
    return s

  def _Direction(self, s, g, m_new):
    """u, the tensor Newton-Schulz orthogonalises (g's shape and dtype)."""
    p = self.params
    if p.momentum_form == 'reference':
      return s.beta * m_new + (1. - s.beta) * g if p.nesterov else m_new
    if not p.nesterov:
      return m_new / s.correction
    return (s.beta * m_new / s.next_correction +
            (1. - s.beta) * g / s.correction)

  def _Scale(self, fan_in, fan_out):
    """s, the shape-dependent multiplier of the rate (a Python float)."""
    p = self.params
    if p.rate_scaling == 'moonlight':
      return p.rms_rate * math.sqrt(max(fan_in, fan_out))
    return math.sqrt(max(1., fan_out / fan_in))

  def _Step(self, s, w, g, slots):
    """Muon on a whole variable (only `w`'s shape is read)."""
    p = self.params
    m_new = s.beta * slots['m'] + s.one_minus_beta * g
    shape = w.shape.as_list()
    fan_in, fan_out = MatrixShape(shape)
    u = tf.reshape(self._Direction(s, g, m_new), [fan_in, fan_out])
    o = NewtonSchulz(u, p.ns_steps, p.ns_coeffs, p.epsilon)
    step = s.lr * tf.constant(self._Scale(fan_in, fan_out), g.dtype)
    return step * tf.reshape(o, shape), {'m': m_new}

  @classmethod
  def TwoLearners(cls, learner, matrices, muon=None, adamw=None,
                  muon_learning_rate=None, adamw_learning_rate=None):
    """Muon's recipe: two learners' params, Muon on `matrices`, AdamW the rest.

    Muon is for the hidden matrices of the body; embeddings, norms, biases
    and the output head go to AdamW (K. Jordan et al. 2024; Keras's and
    optax's Muon make the same split inside one optimizer). Both learners
    are copies of `learner` (the same loss, schedule, clipping, ...):

      'muon'  bprop_variable_filter=matrices,    optimizer `muon`
      'adamw' bprop_variable_exclusion=matrices, optimizer `adamw`

    Args:
      learner: Learner params to copy (learner.Learner.Params().Set(...)).
      matrices: regex (re.search on variable names) of the matrices (and
        conv kernels) Muon updates; it must not match a variable of rank < 2
        (Muon refuses it at Bind) and should not match the embedding or the
        head.
      muon: Muon params (default `Muon.Params()`).
      adamw: optimizer params for the rest (default `AdamW.Params()`).
      muon_learning_rate, adamw_learning_rate: each learner's
        learning_rate; None keeps `learner.learning_rate`.

    Returns:
      [muon learner params, adamw learner params].

    Raises:
      ValueError: if `matrices` is empty or not a string.
    """
    if not matrices or not isinstance(matrices, str):
      raise ValueError(
          'Muon.TwoLearners: matrices=%r must be a regex of the matrices '
          'Muon updates, e.g. r"/stack/.*/w\\w*$".' % (matrices,))
    out = []
    for name, opt, rate, key in (
        ('muon', muon or cls.Params(), muon_learning_rate,
         'bprop_variable_filter'),
        ('adamw', adamw or adam.AdamW.Params(), adamw_learning_rate,
         'bprop_variable_exclusion')):
      lp = learner.Copy().Set(name=name, optimizer=opt.Copy())
      lp.Set(**{key: matrices})
      if rate is not None:
        lp.learning_rate = rate
      out.append(lp)
    return out
