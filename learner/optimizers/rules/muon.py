"""Muon: momentum orthogonalised by a Newton-Schulz iteration.

  t = num_updates + 1;  m <- beta m + (1 - beta) g
  u = beta m / (1 - beta^(t+1)) + (1 - beta) g / (1 - beta^t)   (nesterov)
    = m / (1 - beta^t)                                          (otherwise)
  O = NS5(u as a [fan_in, fan_out] matrix);  w <- w - lr * s * O
  NS5: X = U / (||U||_F (1 + ns_safety) + eps), transposed if rows > cols;
       for i < ns_steps: A = X X^T;  X <- a_i X + (b_i A + c_i A A) X,
       (a_i, b_i, c_i) = (3.4445, -4.7750, 2.0315) (K. Jordan) or row i of
       a table (Polar Express, Amsel et al. 2025); transposed back.
  s = sqrt(max(1, fan_out / fan_in))            (rate_scaling 'width')
    = rms_rate * sqrt(max(fan_in, fan_out))     (rate_scaling 'moonlight')

Source: K. Jordan et al., "Muon: An optimizer for hidden layers in neural
networks" (2024, github.com/KellerJordan/Muon, modded-nanogpt); the numbers
are those of optax 0.2.8 `optax.contrib.muon` (its bias-corrected Nesterov
form above); Liu et al., "Muon is Scalable for LLM Training" (Moonlight,
arXiv:2502.16982) for the 'moonlight' scaling that matches AdamW's update
RMS; Amsel, Persson, Musco, Gower, "The Polar Express" (arXiv:2505.16932)
for the per-step table `POLAR_EXPRESS` (modded-nanogpt's rows), checked
against optax 0.2.8 given the table as its (n, 3) `ns_coeffs`.
"""

import collections
import math

import tensorflow as tf

from learner.optimizers import cautious as cautious_lib
from learner.optimizers import home_sharding
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.kernels import accelerators
from learner.optimizers.kernels import low_precision
from learner.optimizers.rules import adam
from params import NestedMap
from params import checks

MOMENTUM_FORMS = ('optax', 'reference')
RATE_SCALINGS = ('width', 'moonlight')


# Polar Express (Amsel, Persson, Musco, Gower 2025, "The Polar Express:
# Optimal Matrix Sign Methods and Their Application to the Muon Algorithm",
# arXiv:2505.16932): one (a, b, c) per iteration, each step's quintic the
# minimax-optimal one for the interval of singular values the previous steps
# leave, made safe against rounding with the paper's safety factor 2e-2.
# These are the five rows modded-nanogpt uses (github.com/KellerJordan/
# modded-nanogpt, train_gpt.py, `polar_express_coeffs`, computed by the
# paper's code for 5 steps with safety 2e-2; pytorch-optimizer 4.1.0's
# 8-row 'polar_express_safer' shares its first four rows), where x is first
# divided by ||x||_F * (1 + 2e-2) + 1e-6: our ns_safety=0.02, epsilon=1e-6.
POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
JORDAN = ((3.4445, -4.7750, 2.0315),)  # K. Jordan's one triple, every step.
NS_TABLES = {'jordan': JORDAN, 'polar_express': POLAR_EXPRESS}


def CoefficientTable(ns_coeffs):
  """ns_coeffs (a name, one triple or a list of triples) as a list of triples.

  Args:
    ns_coeffs: None (K. Jordan's), a key of `NS_TABLES` ('jordan',
      'polar_express'), three
      numbers (a, b, c) used at every step, or a list of such triples (one
      per step; the last one repeats when there are fewer than the steps).

  Returns:
    A list of (a, b, c) tuples of Python floats, or None when `ns_coeffs`
    is none of these forms (so the caller can refuse it, naming its key).
  """
  if ns_coeffs is None:
    return list(JORDAN)
  if isinstance(ns_coeffs, str):
    table = NS_TABLES.get(ns_coeffs)
    return [tuple(row) for row in table] if table else None
  if not isinstance(ns_coeffs, (list, tuple)) or not ns_coeffs:
    return None
  rows = ([ns_coeffs] if not isinstance(ns_coeffs[0], (list, tuple))
          else list(ns_coeffs))
  out = []
  for row in rows:
    if (not isinstance(row, (list, tuple)) or len(row) != 3 or
        any(isinstance(k, (bool, list, tuple, str)) or
            checks.Real().Problem(k) for k in row)):
      return None
    out.append(tuple(float(k) for k in row))
  return out


def NewtonSchulz(x, steps, coeffs, eps, safety=0.0):
  """The quintic Newton-Schulz iteration: approximately U V^T of x = U S V^T.

  Each step maps X to a X + b (X X^T) X + c (X X^T)^2 X. K. Jordan's one
  triple maximises the slope at 0, so the singular values land near 1 (in
  about [0.7, 1.2]) rather than exactly on it (K. Jordan et al. 2024);
  Polar Express's per-step triples (`POLAR_EXPRESS`) bring them closer in
  the same five steps. The Gram matrix is the smaller one: X X^T for a
  wide x, X^T X for a tall one, whose step is then X a + X (b G + c G^2)
  (optax and K. Jordan transpose a tall x, iterate, and transpose back:
  the same products, read through matmul's transpose flags, without the
  two transposes, which took 0.55 ms of 3.40 for a 512x128 matrix; equal
  to float32 rounding, for that matrix bit for bit; benchmarks/README.md,
  "Newton-Schulz without transposes"). A batch of matrices [..., rows,
  cols] is iterated as one batched matmul chain (each matrix its own norm).

  Args:
    x: float tensor [..., rows, cols] (static shape).
    steps: Python int, the iterations.
    coeffs: one (a, b, c) triple of Python floats, or a list of triples:
      step i uses coeffs[min(i, len(coeffs) - 1)] (as pytorch-optimizer and
      modded-nanogpt; optax 0.2.8 runs exactly len(coeffs) steps of an
      (n, 3) table, the same when steps == n).
    eps: Python float added to the Frobenius norm x is divided by first.
    safety: Python float; the norm is multiplied by 1 + safety first
      (modded-nanogpt's Polar Express: 0.02; optax and K. Jordan: 0).

  Returns:
    A tensor of x's shape and dtype.
  """
  table = CoefficientTable(coeffs)
  tall = x.shape[-2] > x.shape[-1]
  norm = tf.norm(x, axis=[-2, -1], keepdims=True)
  if safety:
    norm *= tf.constant(1. + safety, x.dtype)
  x = x / (norm + tf.constant(eps, x.dtype))
  for i in range(steps):
    a, b, c = [tf.constant(k, x.dtype) for k in table[min(i, len(table) - 1)]]
    # G = X^T X [cols, cols] for a tall x (X G^k = (G^k X^T)^T), else
    # X X^T [rows, rows].
    gram = tf.matmul(x, x, transpose_a=tall, transpose_b=not tall)
    poly = b * gram + c * tf.matmul(gram, gram)
    x = a * x + (tf.matmul(x, poly) if tall else tf.matmul(poly, x))
  return x


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

  With batch_shapes=True (issue 40 item 2; off by default, which keeps
  the per-variable numbers bit for bit, as the checkpoints recorded at
  eb19daa require) the matrices of one shape and dtype that one apply
  steps (every Muon variable of the update, or under ZeRO-1 the ones this
  replica is the home of) are orthogonalised as one stack [n, fan_in,
  fan_out]: one batched matmul chain per shape instead of one per variable
  (`_ApplyItems`, the base's hook), the decay merged into the one
  assignment of the weights. A single matrix goes through the same batched
  matmul as a stack of one: a batched matmul rounds a matrix the same in
  any batch (this project's CPU, oneDNN on), so the grouping changes no
  number and ZeRO-1 stays bit-identical to unsharded; against
  batch_shapes=False, within 1e-6 (a batched matmul rounds differently
  from a single one).

  Fused path (issue 40 item 2; on one CPU device, without XLA or a
  strategy, float32, as every fused op: kernels/multi_tensor.py): the
  momentum and the directions of every variable in one op, Newton-Schulz
  in TF, then w <- w - lr s O (and the decay) of every variable in one op
  (`_FusedApply`, accelerators.py's 'muon' entry); the pure-TF path's
  float32 operations in its order, so the numbers are the same bit for bit
  (tests/test_optimizers/test_muon_fused.py).

  Not a matrix, not Muon: optax.contrib.muon routes every non-2-D variable
  to its own AdamW; we refuse them at `Bind` instead, so the split is
  explicit: two learners, Muon on the matrices of the body, AdamW on
  embeddings, norms, biases and the head (`TwoLearners`).

  Raises:
    ValueError: at construction, a beta outside [0, 1), ns_steps < 1,
      epsilon <= 0, rms_rate <= 0, ns_safety < 0, ns_coeffs that are not
      three finite numbers, a list of them or a table's name, or an unknown momentum_form / rate_scaling (one line naming
      the key, the value and the fix); at `Bind`, a variable of rank < 2
      (one line naming the variable and the fix).
  """

  # ZeRO-1 homes each matrix on one replica (home_sharding.py), balanced by
  # its Newton-Schulz FLOPs (`ShardCost`).
  WHOLE_TENSOR = True
  # Two fused ops around the Newton-Schulz iteration (`_FusedApply`).
  ACCELERATOR = 'muon'

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
    p.Define('ns_coeffs', None,
             'Quintic Newton-Schulz coefficients: None or \'jordan\' (K. '
             'Jordan\'s (3.4445, -4.7750, 2.0315) at every step), '
             '\'polar_express\' (Amsel et al. 2025, modded-nanogpt\'s five '
             'rows), one (a, b, c) for every step, or a list of triples '
             '(step i uses row min(i, n - 1)).')
    p.Define('ns_safety', 0.0, 'x is divided by ||x||_F * (1 + ns_safety) + '
             'epsilon before Newton-Schulz (modded-nanogpt\'s Polar Express: '
             '0.02; optax, K. Jordan: 0).')
    p.Define('epsilon', 1e-8, 'Added to the Frobenius norm before NS '
             '(optax 1e-8; K. Jordan and Keras 1e-7).')
    p.Define('rate_scaling', 'width', 'width: s = sqrt(max(1, fan_out / '
             'fan_in)) (optax, K. Jordan); moonlight: s = rms_rate * '
             'sqrt(max(fan_in, fan_out)) (Liu et al. 2025, Keras).')
    p.Define('batch_shapes', False, 'Orthogonalise the variables of one '
             '[fan_in, fan_out] and dtype that an apply steps (under ZeRO-1: '
             'one replica\'s homes) as one stack: one batched Newton-Schulz '
             'matmul chain per shape instead of one per variable (within '
             '1e-6 of False: a batched matmul rounds differently). False '
             'keeps the per-variable numbers bit for bit.')
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
        rms_rate=checks.Real(0, low_open=True, example=0.2),
        ns_safety=checks.Real(0, example=0.02,
                              why='a negative margin shrinks the norm'))
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
    if CoefficientTable(p.ns_coeffs) is None:
      raise ValueError(
          '%s: ns_coeffs=%r must be three finite numbers (a, b, c), a list '
          'of such triples or one of %s; set ns_coeffs=None (the default, '
          'K. Jordan\'s [3.4445, -4.775, 2.0315]) or \'polar_express\'.' %
          (checks.Where(self), p.ns_coeffs, sorted(NS_TABLES)))

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
    float32: the momentum's), 1 - beta computed in `dtype` (the direction's
    g term: eb19daa's numbers), the Python bool nesterov and, for
    momentum_form 'optax', the bias corrections 1 - beta^t and
    1 - beta^(t+1) with t = num_updates + 1."""
    p = self.params
    beta = tf.constant(p.beta, dtype)
    s = NestedMap(lr=tf.cast(update.lr, dtype), beta=beta,
                  one_minus_beta=tf.constant(1. - p.beta, dtype),
                  one_minus_beta_f32=1. - beta, nesterov=p.nesterov)
    if p.momentum_form == 'optax':
      t = tf.cast(self.num_updates + 1, dtype)
      s.correction = 1. - tf.pow(beta, t)
      s.next_correction = 1. - tf.pow(beta, t + 1.)
    return s

  def _Direction(self, s, g, m_new):
    """u, the tensor Newton-Schulz orthogonalises (g's shape and dtype)."""
    p = self.params
    if p.momentum_form == 'reference':
      return s.beta * m_new + s.one_minus_beta_f32 * g if p.nesterov else (
          m_new)
    if not p.nesterov:
      return m_new / s.correction
    return (s.beta * m_new / s.next_correction +
            s.one_minus_beta_f32 * g / s.correction)

  def _Scale(self, fan_in, fan_out):
    """s, the shape-dependent multiplier of the rate (a Python float)."""
    p = self.params
    if p.rate_scaling == 'moonlight':
      return p.rms_rate * math.sqrt(max(fan_in, fan_out))
    return math.sqrt(max(1., fan_out / fan_in))

  def _Momentum(self, s, g, slots):
    """(u, new slots): the momentum step and the direction to orthogonalise.

    Elementwise, so `g` and the slots may be one variable or a stack of
    several of one shape (`Muon` batches them); u has g's shape.
    """
    m_new = s.beta * slots['m'] + s.one_minus_beta * g
    return self._Direction(s, g, m_new), {'m': m_new}

  def _Orthogonalize(self, u):
    """NewtonSchulz of u [..., fan_in, fan_out] with this rule's params."""
    p = self.params
    return NewtonSchulz(u, p.ns_steps, p.ns_coeffs, p.epsilon, p.ns_safety)

  def _Finish(self, s, o, slots, new_slots):
    """(delta, new slots) from o = NS(u) [..., fan_in, fan_out]: lr * s * o.

    `slots` are the old values (a subclass may keep more state: NorMuon);
    every matrix of a batch has the same [fan_in, fan_out].
    """
    del slots
    return self._Rate(s, *o.shape.as_list()[-2:]) * o, new_slots

  def _Rate(self, s, fan_in, fan_out):
    """lr * s of a [fan_in, fan_out] matrix: a scalar of s.lr's dtype."""
    return s.lr * tf.constant(self._Scale(fan_in, fan_out), s.lr.dtype)

  def _Step(self, s, w, g, slots):
    """Muon on a whole variable (only `w`'s shape is read)."""
    shape = w.shape.as_list()
    u, new = self._Momentum(s, g, slots)
    o = self._Orthogonalize(tf.reshape(u, MatrixShape(shape)))
    delta, new = self._Finish(s, o, self._AsMatrix(slots, shape), new)
    return tf.reshape(delta, shape), new

  def _AsMatrix(self, slots, shape):
    """The slots of a variable of `shape` as `_Finish` reads them: those of
    the variable's shape reshaped to [fan_in, fan_out], the rest as they
    are."""
    return {k: tf.reshape(v, MatrixShape(shape))
            if v.shape.as_list() == list(shape) else v
            for k, v in slots.items()}

  # ---- the fused path: two ops around Newton-Schulz -------------------------

  def FusedApplyReason(self, vgs):
    """The base's reasons, and a subclass that changes a part of the
    step the fused ops repeat (`_Momentum`, `_Direction`, `_Finish`)."""
    for name in ('_Momentum', '_Direction', '_Finish'):
      if getattr(type(self), name) is not getattr(Muon, name):
        return '%s overrides %s of Muon' % (type(self).__name__, name)
    return super().FusedApplyReason(vgs)

  def _FusedApply(self, variables, grads, slots, s, grad_scale, wd_rate,
                  decay, measure):
    """Muon in two fused ops (issue 40 item 2): the momentum op (m and
    the directions u of every variable), `_Orthogonalize` in TF (batched by
    shape with batch_shapes), the apply op (w <- w - lr s O, the decay as
    the pure-TF path subtracts it). The same float32 operations in the
    same order as `_ApplyItems`: the same numbers bit for bit."""
    stages = self.Accelerator().multi
    directions = stages.before(grads, slots, s, grad_scale)
    matrices = [MatrixShape(v.shape.as_list()) for v in variables]
    o = self._OrthogonalizeAll([tf.reshape(u, m) for u, m in zip(
        directions, matrices)])
    return stages.after(
        variables, [tf.reshape(x, v.shape) for x, v in zip(o, variables)],
        [self._Rate(s, *m) for m in matrices], wd_rate, decay,
        self.params.batch_shapes, measure)

  def _OrthogonalizeAll(self, directions):
    """`_Orthogonalize` of each of `directions` ([fan_in, fan_out]
    tensors), one stack per shape and dtype with batch_shapes (as
    `_ApplyItems` groups them)."""
    if not self.params.batch_shapes:
      return [self._Orthogonalize(u) for u in directions]
    groups = collections.OrderedDict()
    for i, u in enumerate(directions):
      groups.setdefault((tuple(u.shape.as_list()), u.dtype), []).append(i)
    out = [None] * len(directions)
    for group in groups.values():
      stacked = self._Orthogonalize(tf.stack([directions[i] for i in group]))
      for i, o in zip(group, tf.unstack(stacked)):
        out[i] = o
    return out

  # ---- several matrices of one shape in one chain ---------------------------

  def _BatchReason(self, variables):
    """None if `variables` may be stepped in same-shape batches, else why
    not."""
    if not self.params.batch_shapes:
      return 'batch_shapes=False'
    if self.params.slot_dtype is not None:
      return 'slot_dtype (slots read and stored per variable)'
    if cautious_lib.Reason(self.params):
      return cautious_lib.Reason(self.params)
    if any(low_precision.HasMaster(self, v) for v in variables):
      return low_precision.MASTER_REASON
    return None

  def _ApplyItems(self, update, items):
    """The variables of one [fan_in, fan_out] and dtype orthogonalised as
    one stack (issue 40 item 2; the base's hook, BaseOptimizer._ApplyItems).

    `items` [(var, grad, slots)] are every variable of the update, or the
    ones this replica is the home of (ZeRO-1 whole-tensor sharding): those
    that share a matrix shape and dtype go through one `_ApplyStack`; a
    reason in `_BatchReason` takes the base's per-variable path.
    """
    if self._BatchReason([var for var, _, _ in items]):
      return super()._ApplyItems(update, items)
    groups = collections.OrderedDict()
    for item in items:
      key = (tuple(MatrixShape(item[0].shape.as_list())), item[0].dtype)
      groups.setdefault(key, []).append(item)
    return [self._ApplyStack(update, group) for group in groups.values()]

  def _ApplyStack(self, update, items):
    """The update of `items` (one matrix shape and dtype): `_Momentum` and
    `_Finish` per variable (no copy of the weights, gradients or slots),
    one `_Orthogonalize` of their stacked directions [n, fan_in, fan_out],
    and per variable one assignment of the slots and one of the weights:
    w <- w - (delta + lr * wd * w_old), the decay merged into the update."""
    matrix = MatrixShape(items[0][0].shape.as_list())
    dtype = items[0][0].dtype
    s = self._Scalars(update, dtype)
    rate = None
    if self.WeightDecayOn() and not type(self).DECAY_IN_STEP:
      rate = tf.cast(update.lr * self.Hyper('decoupled_weight_decay'), dtype)
    olds, directions, news = [], [], []
    for _, grad, slots in items:
      g = accelerators.Scaled(tf.convert_to_tensor(grad), update.grad_scale)
      olds.append({k: x.read_value() for k, x in slots.items()})
      u, new = self._Momentum(s, g, olds[-1])
      directions.append(tf.reshape(u, matrix))
      news.append(new)
    o = tf.unstack(self._Orthogonalize(tf.stack(directions)))
    ops = []
    for i, (var, _, slots) in enumerate(items):
      shape = var.shape.as_list()
      delta, new = self._Finish(s, o[i], self._AsMatrix(olds[i], shape),
                                news[i])
      delta = tf.reshape(delta, shape)
      if rate is not None and self._decay_mask.get(
          var_grad_lib.VarName(var), True):
        delta += rate * tf.identity(var.read_value())
      assigns = [slots[k].assign(tf.reshape(v, slots[k].shape),
                                 read_value=False)
                 for k, v in sorted(new.items())]
      with tf.control_dependencies(assigns):
        ops.append(var.assign_sub(delta, read_value=False))
    return None if tf.executing_eagerly() else tf.group(ops)

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
