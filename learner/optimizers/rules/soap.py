"""SOAP: Adam run in the eigenbasis of Shampoo's preconditioner.

  G: the gradient reshaped to its (merged) shape [d_1, .., d_k];
  t = num_updates (the first update, t = 0, only starts the statistics)
  For t >= 1, with the bases Q_i of the previous update:
    G' = G x_1 Q_1^T .. x_k Q_k^T       (project: Q_i^T along dim i)
    m <- beta1 m + (1 - beta1) G        (m in the weights' own space)
    v <- beta2 v + (1 - beta2) G'^2     (v in the rotated space)
    N = project_back((project(m)) / (sqrt(v) + epsilon))   (Q_i along dim i)
    N <- N / (rms(N) + epsilon)                      (normalize_grads only)
    w <- (w - lr sqrt(1 - beta2^t) / (1 - beta1^t) N) (1 - lr wd)
  Then, every update (t >= 0), for each dim i with d_i <= max_precond_dim:
    L_i <- sb L_i + (1 - sb) G_(i) G_(i)^T     (G_(i): G unfolded along i;
                                                sb = shampoo_beta or beta2)
    t = 0:                     Q_i = eigh(L_i), eigenvalues descending
    t > 0, t % frequency = 0:  one QR power iteration: order the columns
                               of Q_i by diag(Q_i^T L_i Q_i) descending
                               (v's dim i follows the same order), then
                               Q_i = qr(L_i Q_i)
  A dim larger than max_precond_dim is not rotated (no L_i, Q_i); a 1-D
  variable is plain Adam unless precondition_1d (then one L, Q).

Source: Vyas, Morwani, Zhao, Shapira, Brandfonbrener, Janson & Kakade,
"SOAP: Improving and Stabilizing Shampoo using Adam", arXiv:2409.11321
(2024), Algorithm 1 and the authors' github.com/nikhilvyas/SOAP soap.py;
the numbers are those of pytorch-optimizer 4.1.0's `SOAP`
(pytorch_optimizer/optimizer/soap.py, a port of the authors' code), tested
in tests/test_optimizers/test_soap.py against tests/data/torch_soap.json.
"""

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.rules import common
from params import NestedMap
from params import checks

_BOOLS = ('merge_dims', 'precondition_1d', 'correct_bias', 'normalize_grads')


def MergedShape(shape, max_precond_dim):
  """The shape SOAP's statistics see with merge_dims: neighbouring dims
  multiplied together while the product stays <= max_precond_dim.

  pytorch-optimizer's `merge_small_dims`, except that a shape merged into
  one dim gives [its size] (the authors' code; pytorch-optimizer 4.1.0
  returns [1] there and its reshape fails).

  Args:
    shape: list of Python ints (rank >= 1).
    max_precond_dim: Python int >= 1.

  Returns:
    A list of Python ints with the same product.
  """
  merged, product = [], 1
  for dim in shape:
    product *= dim
    if product > max_precond_dim:
      merged.append(product // dim)
      product = dim
  merged.append(product)
  return merged


def Project(x, bases, back=False):
  """x rotated by Q_i^T (or Q_i when `back`) along each dim i.

  Args:
    x: tensor of rank len(bases) (the merged shape).
    bases: per dim, a [d_i, d_i] tensor or None (that dim not rotated).
    back: False: x x_i Q_i^T (into the eigenbasis); True: x x_i Q_i.

  Returns:
    A tensor of x's shape: each step contracts dim 0 and appends the
    rotated dim last, so after len(bases) steps the order is restored.
    (`common.ContractEachDim`: one matmul per rotated dim, no transposed
    copy of x.)
  """
  return common.ContractEachDim(x, bases, transpose_q=back)


class SOAP(BaseOptimizer):
  """SOAP: Adam's moments in the eigenbases of Shampoo's L_i, refreshed by a
  QR power iteration every `precondition_frequency` updates.

  Formula: the module docstring. The first update (num_updates 0) only
  accumulates L_i from the gradient and takes Q_i = eigh(L_i): the
  weights do not move (no decay either), as the authors' code and
  pytorch-optimizer; the bias corrections count from the second update
  (t = num_updates). Decoupled weight decay is applied after the step, w
  <- (w - step) (1 - lr wd), the reference's order (not the base's w -
  step - lr wd w_old); `weight_decay_exclude` applies. Default
  decoupled_weight_decay 0.01, the reference's.

  Shapes: every variable; a tensor of rank >= 2 gets one L_i [d_i, d_i]
  and Q_i per dim d_i <= max_precond_dim of its shape, or of its merged
  shape with merge_dims (`MergedShape`; a conv kernel [kh, kw, cin, cout]
  is merged in that order, the reference's channels_first rule applied to
  our layout); a vector is Adam (the rotation is skipped) unless
  precondition_1d. Slots: 'm' and 'v' (the variable's shape), 'gg<i>'
  (L_i) and 'q<i>' (Q_i) [d_i, d_i] per rotated dim i. Memory: m, v and
  sum_i 2 d_i^2 numbers per variable. Not elementwise: whole tensors
  (no ZeRO-1 sharding, no lazy sparse rows; sparse gradients densified).
  The eigendecompositions run in the variable's dtype (the reference casts
  the QR to float32; for float32 variables the same). XLA: tf.linalg.eigh
  and tf.linalg.qr compile; the refresh is a tf.cond on num_updates.

  Differences from the reference (pytorch-optimizer 4.1.0 `SOAP`): merge
  of all dims into one (see `MergedShape`); `data_format` (channels_last
  permutes 4-D NHWC tensors before merging) is not offered: our kernels
  are HWIO and merged as they are. From the authors' code: m is kept in
  the weights' space and projected each update (the authors keep it in
  the rotated space and rotate it back and forth at each refresh: the
  same up to rounding); normalize_grads divides by rms + epsilon
  (authors: rms + 1e-30). Ours only: each stored basis vector's sign is
  fixed (`CanonicalSigns`), which changes no update.

  Raises:
    ValueError: at construction, a beta, or a shampoo_beta that is not
      None, outside [0, 1); epsilon <= 0; precondition_frequency or
      max_precond_dim not an int >= 1; merge_dims, precondition_1d,
      correct_bias or normalize_grads not a bool (one line naming the key,
      the value and the fix).
  """

  DECAY_IN_STEP = True  # After the step: w <- (w - step) (1 - lr wd).
  # Per-dimension eigenbases of one variable: ZeRO-1 homes each variable on
  # one replica (home_sharding.py), balanced by its slots' bytes.
  WHOLE_TENSOR = True

  @classmethod
  def Params(cls):
    p = super().Params()
    p.decoupled_weight_decay = 0.01  # pytorch-optimizer's weight_decay.
    p.Define('beta1', 0.95, 'Decay of m (Adam\'s first moment).')
    p.Define('beta2', 0.95, 'Decay of v (Adam\'s second moment, rotated).')
    p.Define('shampoo_beta', None, 'Decay of the statistics L_i; None: '
             'beta2 (the reference\'s).')
    p.Define('epsilon', 1e-8, 'Added to sqrt(v) (and to rms(N) with '
             'normalize_grads).')
    p.Define('precondition_frequency', 10, 'Updates between QR refreshes '
             'of the bases Q_i (num_updates % frequency == 0).')
    p.Define('max_precond_dim', 10000, 'A dim (of the merged shape) larger '
             'than this gets no L_i, Q_i: it is not rotated.')
    p.Define('merge_dims', False, 'Merge neighbouring dims while their '
             'product stays <= max_precond_dim before the statistics.')
    p.Define('precondition_1d', False, 'Rotate vectors too (one L, Q); '
             'False: a vector gets Adam.')
    p.Define('correct_bias', True, 'Scale the step by sqrt(1 - beta2^t) / '
             '(1 - beta1^t).')
    p.Define('normalize_grads', False, 'Divide the direction N by its RMS '
             '(+ epsilon) before the step.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    beta = dict(high_open=True, example=0.95)
    specs.update(
        beta1=checks.Real(0, 1, why='beta1 = 1 never lets a gradient in',
                          **beta),
        beta2=checks.Real(0, 1, why='beta2 = 1 divides by 1 - beta2^t = 0',
                          **beta),
        shampoo_beta=checks.Real(0, 1, none_ok=True, **beta),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 gives 0/0 = NaN where v is 0'),
        precondition_frequency=checks.Int(1, example=10),
        max_precond_dim=checks.Int(1, example=10000))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    for key in _BOOLS:
      if not isinstance(getattr(p, key), bool):
        raise ValueError(
            '%s: %s=%r is not a bool; set %s to True or False.' %
            (checks.Where(self), key, getattr(p, key), key))

  def RotatedDims(self, shape):
    """(the shape the statistics see, [True where dim i is rotated]).

    Args:
      shape: the variable's shape, a list of Python ints.
    """
    p = self.params
    if len(shape) == 1:
      return shape, [p.precondition_1d and shape[0] <= p.max_precond_dim]
    if p.merge_dims and shape:
      shape = MergedShape(shape, p.max_precond_dim)
    return shape, [d <= p.max_precond_dim for d in shape]

  def _CreateSlots(self, var):
    shape, rotated = self.RotatedDims(var.shape.as_list())
    slots = {'m': None, 'v': None}
    for i, (d, r) in enumerate(zip(shape, rotated)):
      if r:
        slots['gg%d' % i] = tf.zeros([d, d], var.dtype)
        slots['q%d' % i] = tf.zeros([d, d], var.dtype)
    return slots

  def _Scalars(self, update, dtype):
    """lr; the betas, shampoo_beta and their complements; epsilon; the
    step size lr sqrt(1 - beta2^t) / (1 - beta1^t) (t = num_updates, at
    least 1; in float64, then rounded, as the reference's Python floats);
    lr wd; t; whether this update is the first and whether it refreshes."""
    p = self.params
    sb = p.beta2 if p.shampoo_beta is None else p.shampoo_beta

    def Value(x):
      return tf.constant(x, dtype)

    t = tf.identity(self.num_updates)
    lr = tf.cast(update.lr, tf.float64)
    step = lr
    if p.correct_bias:
      tt = tf.cast(tf.maximum(t, 1), tf.float64)
      step = lr * tf.sqrt(1. - tf.pow(tf.constant(p.beta2, tf.float64), tt)
                          ) / (1. - tf.pow(tf.constant(p.beta1, tf.float64),
                                           tt))
    wd = tf.cast(self.Hyper('decoupled_weight_decay', tf.float64),
                 tf.float64)
    return NestedMap(
        lr=tf.cast(update.lr, dtype), beta1=Value(p.beta1),
        one_minus_beta1=Value(1. - p.beta1), beta2=Value(p.beta2),
        one_minus_beta2=Value(1. - p.beta2),
        one_minus_shampoo_beta=Value(1. - sb), epsilon=Value(p.epsilon),
        step_size=tf.cast(step, dtype), decay=tf.cast(lr * wd, dtype),
        first=tf.equal(t, 0),
        refresh=tf.logical_and(
            t > 0, tf.equal(t % p.precondition_frequency, 0)))

  def _Step(self, s, w, g, slots):
    """SOAP on a whole variable: the Adam step in the previous bases, then
    the statistics and (first update or refresh) the new bases."""
    shape, rotated = self.RotatedDims(w.shape.as_list())
    gm = tf.reshape(g, shape)
    bases = [slots['q%d' % i] if r else None for i, r in enumerate(rotated)]
    delta, m, v = tf.cond(
        s.first,
        lambda: (tf.zeros_like(g), slots['m'], slots['v']),
        lambda: self._AdamStep(s, w, g, slots, shape, bases))
    new = {'m': m}
    stats = []
    for i, r in enumerate(rotated):
      if r:
        gg = slots['gg%d' % i]
        gg = gg + s.one_minus_shampoo_beta * (common.GramAlong(gm, i) - gg)
        new['gg%d' % i] = gg
      stats.append(new.get('gg%d' % i))
    v = tf.reshape(v, shape)
    idx = [i for i, r in enumerate(rotated) if r]
    # tf.cond's branches return the rotated dims' Q_i (no None) and v.
    out = tf.cond(
        s.first, lambda: _Eigenbases([stats[i] for i in idx]) + [v],
        lambda: tf.cond(
            s.refresh, lambda: _PowerIteration(stats, bases, v, idx),
            lambda: [bases[i] for i in idx] + [v]))
    new['v'] = tf.reshape(out[-1], g.shape)
    for i, q in zip(idx, out[:-1]):
      new['q%d' % i] = q
    return delta, new

  def _AdamStep(self, s, w, g, slots, shape, bases):
    """(delta, m, v): Adam in the rotated space, the direction rotated back,
    the step and (after it) the decay; m, v of g's shape."""
    p = self.params
    m = slots['m'] + s.one_minus_beta1 * (g - slots['m'])
    gp = Project(tf.reshape(g, shape), bases)
    v = tf.reshape(slots['v'], shape)
    v = v + s.one_minus_beta2 * (tf.square(gp) - v)
    n = Project(Project(tf.reshape(m, shape), bases) /
                (tf.sqrt(v) + s.epsilon), bases, back=True)
    n = tf.reshape(n, g.shape)
    if p.normalize_grads:
      n = n / (tf.sqrt(tf.reduce_mean(tf.square(n))) + s.epsilon)
    delta = s.step_size * n
    if self._Decays(w):
      delta = delta + s.decay * (tf.identity(w) - delta)
    return delta, m, tf.reshape(v, g.shape)

  def _Decays(self, w):
    """True if decoupled weight decay acts on the variable `w`."""
    return self.WeightDecayOn() and self._decay_mask.get(
        var_grad_lib.VarName(w), True)


def CanonicalSigns(q):
  """q with each column negated where its largest-magnitude entry (the
  first, on a tie) is negative.

  SOAP's step is the same for either sign of a basis vector (it enters the
  projection and the projection back; v holds squares), so this changes no
  update: it makes the stored bases the same whatever sign convention the
  eigh / QR kernel (Eigen, XLA, LAPACK) has. Not in the reference.

  Args:
    q: [d, d] float tensor.
  """
  rows = tf.argmax(tf.abs(q), axis=0, output_type=tf.int32)
  lead = tf.gather(tf.transpose(q), rows, axis=1, batch_dims=1)
  return q * tf.where(lead < 0, tf.constant(-1, q.dtype),
                      tf.constant(1, q.dtype))


def _Eigenbases(stats):
  """[Q_i]: eigh(L_i + 1e-30 I) of each L_i of `stats`, the columns in
  descending eigenvalue order (the reference's first bases)."""
  out = []
  for gg in stats:
    eye = tf.eye(gg.shape[0], dtype=gg.dtype)
    _, q = tf.linalg.eigh(gg + tf.constant(1e-30, gg.dtype) * eye)
    out.append(CanonicalSigns(tf.reverse(q, axis=[1])))
  return out


def _PowerIteration(stats, bases, v, idx):
  """[Q_i for i in idx] + [v]: per rotated dim i (in order), the columns
  of Q_i ordered by their estimated eigenvalue diag(Q_i^T L_i Q_i)
  descending (v's dim i permuted alike), then Q_i = qr(L_i Q_i) (one power
  iteration)."""
  out = []
  for i in idx:
    product = tf.matmul(stats[i], bases[i])
    estimate = tf.reduce_sum(bases[i] * product, axis=0)
    order = tf.argsort(estimate, direction='DESCENDING', stable=True)
    v = tf.gather(v, order, axis=i)
    q_new, _ = tf.linalg.qr(tf.gather(product, order, axis=1))
    out.append(CanonicalSigns(q_new))
  return out + [v]
