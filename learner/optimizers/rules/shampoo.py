"""DistributedShampoo: Lingvo 0.14.2's Shampoo, grafted onto diagonal AdaGrad.

  t = num_updates (Lingvo: the global step), lr the rate, m = momentum
  Diagonal AdaGrad (every variable):
    a <- a + g^2;  d = g rsqrt(a + 1e-30)
    D <- D + (D (m - 1) + (1 - m) d)              (d itself when m = 0)
  A variable of rank >= 2 whose dims are all <= max_any_dim (and not all
  1) is cut into blocks (a dim > block_partition_threshold_size into
  block_size pieces); per block B and per dim i of B with
  1 < d_i <= fallback_to_diagonal_dim, when t % statistics_computation_
  frequency == 0:
    H_i <- H_i + B_(i) B_(i)^T     (second_moment_averaging = 1; else
                                    H_i <- H_i + (beta - 1) H_i + (1 - beta)
                                    B_(i) B_(i)^T)
    P(B) = B x_1 R_1 .. x_k R_k    (R_i the stored root of H_i; rank 2:
                                    R_1 B R_2)
    S <- S m + P (1 - m);  S <- S max(|D|, 1e-30) / max(|S|, 1e-30)  (the
    grafting: Shampoo's direction, AdaGrad's norm; |.| Frobenius, over the
    whole variable; 1 where |S| = 0)
    s = [t >= start];  u = min(1, max((t - start) / start, 0))
    w <- w - (s lr (u S + (1 - u) D) + (1 - s) lr D)
  Other variables: w <- w - lr D.
  The roots, every preconditioning_compute_steps updates (after the
  update whose count t + 1 is a multiple): for each H_i of a block with r
  preconditioned dims, in float64,
    U S V^T = svd(H_i + eps I);  R_i = U max(S, eps)^(-1/(2r)) V^T
    stored (as float32) only when max|U - V| < 5e-2 (else R_i is kept);
    eps = matrix_epsilon (computed from eigh, the same: `InversePthRoots`,
    all the statistics of one optimizer in one LAPACK call). A dim > 4096
    with 2r in {2, 4, 8} takes the
    coupled Newton iteration instead (`NewtonInversePthRoot`).

Source: Anil, Gupta, Koren, Regan & Singer, "Scalable Second Order
Optimization for Deep Learning" (arXiv:2002.09018, 2020); Lingvo 0.14.2
lingvo/core/optimizer.py `DistributedShampoo` and
lingvo/core/distributed_shampoo.py (the update and statistics), with the
roots of the C++ "preconditioner captain" (lingvo/core/ops/
preconditioner_captain.cc: it runs the graph of `_inverse_pth_root_graph`
and keeps a result when its diff is below kEpsilon = 5e-2; Lingvo's
trainer asks for the roots after each TPU loop, ApplyPostTrainingLoop).
Recorded against Lingvo by tools/record_lingvo_shampoo.py
(tests/data/lingvo_0_14_2_shampoo.json, tests/test_optimizers/
test_shampoo.py).
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import DefineLingvoBaseParams
from learner.optimizers.kernels import host_eigh
from learner.optimizers.rules import common
from params import NestedMap
from params import checks

# preconditioner_captain.cc kEpsilon: a root whose max|U - V| is not below
# this is dropped (the previous root stays).
ROOT_ERROR_LIMIT = 5e-2
# distributed_shampoo.py: SVD for dims up to this, Newton above (p 2, 4, 8).
SVD_MAX_DIM = 4096


def PartitionSizes(shape, threshold, block_size):
  """Lingvo's TensorPartitioner.partition_metadata: per dim, its split
  sizes (a dim > threshold cut into block_size pieces, the remainder last;
  a dim < block_size whole).

  Args:
    shape: list of Python ints; threshold, block_size: Python ints.

  Returns:
    A list (one per dim) of lists of Python ints summing to the dim.
  """
  out = []
  for d in shape:
    sizes = [d]
    if d > threshold:
      n = d // block_size
      sizes = [block_size] * n + ([d % block_size] if d % block_size else [])
      sizes = sizes or [d]
    out.append(sizes)
  return out


def Partition(x, sizes):
  """Lingvo's TensorPartitioner.partition_tensor: the blocks of `x`, split
  from the last dim to the first (so the first dim's pieces vary fastest).

  Args:
    x: a tensor; sizes: `PartitionSizes` of its shape.
  """
  parts = [x]
  rank = len(sizes)
  for axis in reversed(range(rank)):
    if len(sizes[axis]) > 1:
      parts = [piece for item in parts
               for piece in tf.split(item, sizes[axis], axis=axis)]
  return parts


def Reform(parts, sizes):
  """Lingvo's TensorPartitioner.reform_tensor: the inverse of `Partition`."""
  for axis, split in enumerate(sizes):
    n = len(split)
    if n > 1:
      parts = [tf.concat(parts[i * n:(i + 1) * n], axis=axis)
               for i in range(len(parts) // n)]
  return parts[0]


def NewtonInversePthRoot(mat, p, iter_count=40, ridge_epsilon=1e-6,
                         error_tolerance=1e-6):
  """(mat + ridge I)^(-1/p) by the coupled Schur-Newton iteration, float64.

  Lingvo 0.14.2 lingvo/core/matrix_functions.py
  `inlined_matrix_inverse_pth_root` (the path distributed_shampoo.py takes
  for a dim > 4096 with p in {2, 4, 8}; Guo & Higham, SIAM J. Matrix
  Anal. Appl. 28(3), 2006, eq. 3.2), written again: a = -1/p, z = (1 +
  p) / (2 |mat + ridge I|_F), M = z (mat + ridge I), H = z^(1/p) I; while
  i < iter_count and (error > error_tolerance or the error fell below 1.2
  times the previous one): X = (1 - a) I + a M, M <- X^p M, H <- H X,
  error = max|M - I|. The last H is kept if the last step's error fell,
  else the one before.

  Args:
    mat: [d, d] float64 symmetric PSD tensor (d a Python int); p: 2, 4 or
      8; iter_count, ridge_epsilon, error_tolerance: Python numbers.

  Returns:
    (root [d, d] float64, error: float64 scalar max|M - I|).
  """
  alpha = tf.constant(-1.0 / p, tf.float64)
  d = mat.shape[0]
  if d == 1:
    return tf.pow(mat + ridge_epsilon, alpha), tf.constant(0., tf.float64)
  eye = tf.eye(d, dtype=tf.float64)

  def Body(i, mat_m, mat_h, _, error, unused_run_step):
    mat_m_i = (1 - alpha) * eye + alpha * mat_m
    new_m = tf.matmul(_Power(mat_m_i, p), mat_m)
    new_h = tf.matmul(mat_h, mat_m_i)
    new_error = tf.reduce_max(tf.abs(new_m - eye))
    return i + 1, new_m, new_h, mat_h, new_error, new_error < error * 1.2

  damped = mat + ridge_epsilon * eye
  z = (1 - 1 / alpha) / (2 * tf.norm(damped))
  mat_m = damped * z
  mat_h = eye * tf.pow(z, -alpha)
  _, mat_m, mat_h, old_h, _, converged = tf.while_loop(
      lambda i, m, h, o, e, run: tf.logical_and(
          i < iter_count, tf.logical_or(e > error_tolerance, run)),
      Body, [tf.constant(0), mat_m, mat_h, mat_h,
             tf.reduce_max(tf.abs(mat_m - eye)), tf.constant(True)])
  error = tf.reduce_max(tf.abs(mat_m - eye))
  return tf.where(converged, mat_h, old_h), error


def _Power(m, p):
  """m^p for p in {2, 4, 8} by squaring (Lingvo's unrolled powers)."""
  for _ in range({2: 1, 4: 2, 8: 3}[p]):
    m = tf.matmul(m, m)
  return m


def InversePthRoot(stat, rank, epsilon):
  """(root, error): Lingvo's `_inverse_pth_root_graph` on one statistic
  (`InversePthRoots` of a list of one)."""
  return InversePthRoots([stat], [rank], epsilon)[0]


def InversePthRoots(stats, ranks, epsilon):
  """[(root, error)]: Lingvo's `_inverse_pth_root_graph` on each statistic.

  Lingvo (dims <= 4096, or 2 rank not in {2, 4, 8}): U S V^T = svd(H +
  eps I) in float64, root = U max(S, eps)^e V^T with e = -1/(2 rank)
  rounded to float32 (the graph's placeholder), error = max|U - V|.
  Computed here from the eigendecomposition H + eps I = Q diag(l) Q^T
  (LAPACK's dsyevd on the host, all of them in one call, or tf.linalg.eigh
  under XLA: kernels/host_eigh.py; tf.linalg.svd takes twice eigh's
  time at 512 x 512, dsyevd a third to a half of it): the SVD
  of a symmetric matrix has S = |l| and, per eigenvector q_i, u_i = v_i =
  q_i when l_i >= 0 and u_i = -v_i when l_i < 0. So root = Q diag(sign(l)
  max(|l|, eps)^e) Q^T and error = max over l_i < 0 of 2 max|q_i| (0 when
  H + eps I is positive semi-definite; Lingvo's SVD then gives rounding,
  ~1e-13). The 5e-2 test keeps or drops the same roots as Lingvo's unless
  an eigenvalue is within rounding (1e-16 |H|) of -eps. Larger dims: the
  Newton iteration (`NewtonInversePthRoot`) and its error.

  Args:
    stats: list of [d, d] float tensors (the H_i); ranks: list of Python
      ints r >= 1, one per statistic; epsilon: Python float
      (matrix_epsilon).

  Returns:
    A list of (root [d, d] float32, error: float32 scalar), one per
    statistic.
  """
  out = [None] * len(stats)
  eigen = []  # (index, H + eps I in float64, exponent)
  for k, (stat, rank) in enumerate(zip(stats, ranks)):
    d = stat.shape[0]
    exponent = tf.cast(tf.constant(-1.0 / (2.0 * rank), tf.float32),
                       tf.float64)
    x = tf.cast(stat, tf.float64)
    if d > SVD_MAX_DIM and 2 * rank in (2, 4, 8):
      root, error = NewtonInversePthRoot(x, 2 * rank, ridge_epsilon=epsilon)
      out[k] = tf.cast(root, tf.float32), tf.cast(error, tf.float32)
    else:
      eigen.append((k, x + tf.eye(d, dtype=tf.float64) * epsilon, exponent))
  decomposed = host_eigh.SymmetricEigen([x for _, x, _ in eigen])
  for (k, _, exponent), (lam, q) in zip(eigen, decomposed):
    negative = lam < 0
    power = tf.pow(tf.maximum(tf.abs(lam), epsilon), exponent)
    power = tf.where(negative, -power, power)
    root = tf.matmul(q * tf.reshape(power, [1, -1]), q, adjoint_b=True)
    error = tf.reduce_max(tf.where(
        negative, 2. * tf.reduce_max(tf.abs(q), axis=0),
        tf.zeros_like(lam)))
    out[k] = tf.cast(root, tf.float32), tf.cast(error, tf.float32)
  return out


class DistributedShampoo(BaseOptimizer):
  """Lingvo's DistributedShampoo: Shampoo's direction with diagonal
  AdaGrad's step size, blended in after start_preconditioning_steps.

  Formula: the module docstring. Params, defaults and names are Lingvo
  0.14.2's, plus `preconditioning_compute_steps` (Lingvo: the trainer's
  loop, p.train.tpu_steps_per_loop, default 1000). The roots are computed
  in `_EndUpdate`, after the weights are assigned (the weights' update does
  not wait for them, but the step that computes them ends after them), in
  a tf.cond on the update count whose branch also writes them, so the
  steps between pay nothing for them. Cost (lm.CharTransformer on 2 shared
  CPU cores, CPU time of all threads, 2026-12-07; benchmarks/README.md,
  "Shampoo's step"): about 12.5 ms per update for the optimizer alone
  (Adam's fused kernel: about 1 ms), and about 230 ms per refresh of its
  18 float64 roots (LAPACK's eigendecompositions 173 ms, the products
  Q diag Q^T 56 ms; with tf.linalg.eigh 400 ms); in the train step,
  roots every 10 updates, 1.18-1.26x Adam's CPU time per step.

  Slots (Lingvo's names): 'accumulator' (initial_accumulator_value) and
  'momentum' (momentum > 0) of the variable's shape; for a preconditioned
  variable also 'precond_grad_momentum' (momentum > 0) and per block b
  (of n) and dim i with a preconditioner 'mat_statistics_<i>' and
  'mat_preconditioner_<i>' [d_i, d_i] ('<b>_mat_...' when n > 1). Memory:
  up to 3 copies of the variable plus 2 d_i^2 per block dim. Roots: one
  float64 SVD per block dim every preconditioning_compute_steps updates.
  Not elementwise: whole tensors (no ZeRO-1 sharding: refused at Bind;
  sparse gradients are densified).

  Differences from Lingvo 0.14.2 (docs/lingvo.md, "Update rules: behaviour
  that differs"): `block_partition_threshold_size` and
  `fallback_to_diagonal_dim` are used (Lingvo's GetOptimizer does not
  pass them on: there they are always 1000000 and 4096); the update count
  num_updates replaces the global step (the same from a fresh start);
  the roots are computed synchronously, every preconditioning_compute_
  steps updates (Lingvo's captain runs them on a thread pool, so a root
  may arrive one loop later); sparse gradients are densified and applied
  (Lingvo's sparse apply is a no-op).

  Raises:
    ValueError: at construction, momentum outside [0, 1),
      second_moment_averaging outside (0, 1], initial_accumulator_value
      < 0, matrix_epsilon <= 0,
      start_preconditioning_steps, statistics_computation_frequency,
      preconditioning_compute_steps, block_size,
      block_partition_threshold_size, max_any_dim or
      fallback_to_diagonal_dim not an int >= 1 (one line naming the key,
      the value and the fix).
  """

  SCHEDULABLE_PARAMS = BaseOptimizer.SCHEDULABLE_PARAMS

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.Define('momentum', 0.9, 'Momentum parameter.')
    p.Define('start_preconditioning_steps', 1000,
             'When to start approximate full matrix preconditioning.')
    p.Define('initial_accumulator_value', 0.0,
             'Initial accumulator value.')
    p.Define('block_size', 4096, 'Block size for partitioning.')
    p.Define('block_partition_threshold_size', 1000000,
             'Threshold for block partitioning.')
    p.Define('max_any_dim', 8192,
             'max dimension before skipping preconditioning altogether.')
    p.Define('matrix_epsilon', 1e-6,
             'Minimum eigen value used to improve the conditioning.')
    p.Define(
        'second_moment_averaging', 1.0,
        'Averaging coefficient, with special case of (1.0) means sum '
        'of squares while less than 1.0 is RMSProp style moving'
        ' average modification.')
    p.Define(
        'fallback_to_diagonal_dim', 4096,
        'If any dimension is larger than this value, the optimizer falls back'
        ' to the diagonal.')
    p.Define(
        'statistics_computation_frequency', 1,
        'How often to compute statistics. Greater than 1 speeds up training.')
    p.Define(
        'preconditioning_compute_steps', 1000,
        'Ours: the roots of the statistics are computed after every this '
        'many updates (Lingvo: after each training loop, '
        'p.train.tpu_steps_per_loop steps, default 1000).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        momentum=checks.Real(0, 1, high_open=True, example=0.9,
                             why='momentum 1 never lets a gradient in'),
        second_moment_averaging=checks.Real(
            0, 1, low_open=True, example=1.0,
            why='1 sums the squares (Lingvo\'s default), < 1 is an '
            'exponential average, 0 would keep only the last gradient'),
        initial_accumulator_value=checks.Real(0, example=0.0),
        matrix_epsilon=checks.Real(
            0, low_open=True, example=1e-6,
            why='0 leaves a singular statistic without an inverse root'),
        start_preconditioning_steps=checks.Int(
            1, example=1000,
            why='Lingvo divides by it for the warm-up weight'),
        statistics_computation_frequency=checks.Int(1, example=1),
        preconditioning_compute_steps=checks.Int(1, example=1000),
        block_size=checks.Int(1, example=4096),
        block_partition_threshold_size=checks.Int(1, example=1000000),
        max_any_dim=checks.Int(1, example=8192),
        fallback_to_diagonal_dim=checks.Int(1, example=4096))
    return specs

  # ---- shapes -----------------------------------------------------------

  def Diagonal(self, shape):
    """True when a variable of `shape` (list of ints) is plain diagonal
    AdaGrad: rank <= 1, a dim > max_any_dim, or every dim 1."""
    return (len(shape) <= 1 or any(d > self.params.max_any_dim for d in shape)
            or all(d == 1 for d in shape))

  def Blocks(self, shape):
    """(`PartitionSizes` of `shape`, [per block: [per dim: has a
    preconditioner]]), blocks in `Partition`'s order."""
    p = self.params
    sizes = PartitionSizes(shape, p.block_partition_threshold_size,
                           p.block_size)
    return sizes, [[1 < d <= p.fallback_to_diagonal_dim for d in b]
                   for b in _PartitionOrder(sizes)]

  @staticmethod
  def _Key(kind, block, dim, num_blocks):
    """Lingvo's slot name: 'mat_<kind>_<dim>' or '<block>_mat_<kind>_<dim>'."""
    name = 'mat_%s_%d' % (kind, dim)
    return name if num_blocks == 1 else '%d_%s' % (block, name)

  def _CreateSlots(self, var):
    p = self.params
    shape = var.shape.as_list()
    slots = {'accumulator': float(p.initial_accumulator_value)}
    if p.momentum > 0:
      slots['momentum'] = None
    if self.Diagonal(shape):
      return slots
    if p.momentum > 0:
      slots['precond_grad_momentum'] = None
    sizes, avail = self.Blocks(shape)
    for b, (block, has) in enumerate(zip(_PartitionOrder(sizes), avail)):
      for i, (d, h) in enumerate(zip(block, has)):
        if h:
          for kind in ('statistics', 'preconditioner'):
            slots[self._Key(kind, b, i, len(avail))] = tf.zeros([d, d],
                                                               var.dtype)
    return slots

  # ---- the update ---------------------------------------------------------

  def _Scalars(self, update, dtype):
    """lr, momentum; s (1 once t >= start), the warm-up weight u and
    whether this update adds to the statistics (t = num_updates)."""
    p = self.params
    t = tf.cast(self.num_updates, tf.int32)
    start = tf.constant(float(p.start_preconditioning_steps), tf.float32)
    warm = tf.minimum(1.0, tf.maximum(
        (tf.cast(t, tf.float32) - start) / start, 0.0))
    return NestedMap(
        lr=tf.cast(update.lr, dtype),
        momentum=tf.constant(p.momentum, dtype),
        on=tf.cast(t >= p.start_preconditioning_steps, dtype),
        warmup=tf.cast(warm, dtype),
        stats=tf.equal(tf.math.floormod(
            t, p.statistics_computation_frequency), 0))

  def _Step(self, s, w, g, slots):
    """Diagonal AdaGrad (momentum), then for a preconditioned variable the
    statistics, Shampoo's grafted direction and the warm-up blend."""
    p = self.params
    new = {}
    acc = slots['accumulator'] + g * g
    new['accumulator'] = acc
    scaled = g * tf.math.rsqrt(acc + tf.constant(1e-30, g.dtype))
    if p.momentum > 0:
      gbar = slots['momentum']
      gbar = gbar + (gbar * (s.momentum - 1.0) +
                     (1.0 - s.momentum) * scaled)
      new['momentum'] = gbar
    else:
      gbar = scaled
    shape = w.shape.as_list()
    if self.Diagonal(shape):
      return s.lr * gbar, new
    sizes, avail = self.Blocks(shape)
    parts = Partition(g, sizes)
    stats = self._Statistics(s, slots, parts, avail)
    new.update(stats)
    precond = Reform([self._Precondition(part, b, has, slots, len(avail))
                      for b, (part, has) in enumerate(zip(parts, avail))],
                     sizes)
    if p.momentum > 0:
      precond = (slots['precond_grad_momentum'] * s.momentum +
                 precond * (1.0 - s.momentum))
      new['precond_grad_momentum'] = precond
    pnorm = tf.sqrt(tf.reduce_sum(tf.square(precond)))
    dnorm = tf.sqrt(tf.reduce_sum(tf.square(gbar)))
    tiny = tf.constant(1e-30, g.dtype)
    multiplier = tf.where(pnorm > 0,
                          tf.maximum(dnorm, tiny) / tf.maximum(pnorm, tiny),
                          tf.constant(1.0, g.dtype))
    precond = precond * multiplier
    warmup_update = s.on * s.lr * (s.warmup * precond +
                                   (1.0 - s.warmup) * gbar)
    fallback_update = (1 - s.on) * (s.lr * gbar)
    return warmup_update + fallback_update, new

  def _Statistics(self, s, slots, parts, avail):
    """{statistics slot: H_i + B_(i) B_(i)^T} (or the moving average), on
    the updates where t % statistics_computation_frequency == 0 (a tf.cond:
    the other updates compute nothing)."""
    p = self.params
    keys, items = [], []
    for b, (part, has) in enumerate(zip(parts, avail)):
      for i in range(part.shape.rank):
        if has[i]:
          keys.append(self._Key('statistics', b, i, len(avail)))
          items.append((part, i, slots[keys[-1]]))

    def Added():
      out = []
      for part, i, stat in items:
        outer = common.GramAlong(part, i)
        if p.second_moment_averaging == 1.0:
          out.append(stat + outer)
        else:
          out.append(stat + ((p.second_moment_averaging - 1.0) * stat +
                             (1.0 - p.second_moment_averaging) * outer))
      return out

    if p.statistics_computation_frequency <= 1 or not items:
      return dict(zip(keys, Added()))
    return dict(zip(keys, tf.cond(s.stats, Added,
                                  lambda: [stat for _, _, stat in items])))

  def _Precondition(self, part, b, has, slots, num_blocks):
    """One block times its roots along each dim (Lingvo's
    _compute_preconditioned_raw_grad: R_1 B R_2 for a rank-2 block with
    both roots, else a tensordot per dim, transposing past a dim without
    one: `common.ContractEachDim`)."""
    rank = part.shape.rank
    roots = [slots[self._Key('preconditioner', b, i, num_blocks)]
             if has[i] else None for i in range(rank)]
    if rank == 2 and all(has):
      return tf.matmul(tf.matmul(roots[0], part), roots[1])
    return common.ContractEachDim(part, roots)

  # ---- the roots, after the update -----------------------------------------

  def _EndUpdate(self, update, ops):
    """After the update (when num_updates + 1 is a multiple of
    preconditioning_compute_steps): each statistic's inverse root, stored
    in its 'mat_preconditioner_<i>' slot when its error is below 5e-2."""
    p = self.params
    pairs = []
    for var in self.bound_variables.values():
      shape = var.shape.as_list()
      if self.Diagonal(shape):
        continue
      slots = self.GetSlots(var)
      sizes, avail = self.Blocks(shape)
      for b, has in enumerate(avail):
        rank = sum(has)
        for i, h in enumerate(has):
          if h:
            pairs.append((slots[self._Key('statistics', b, i, len(avail))],
                          slots[self._Key('preconditioner', b, i,
                                          len(avail))], rank))
    if not pairs:
      return []
    due = tf.equal(tf.math.floormod(self.num_updates + 1,
                                    p.preconditioning_compute_steps), 0)

    def Roots():
      computed = InversePthRoots([stat.read_value() for stat, _, _ in pairs],
                                 [rank for _, _, rank in pairs],
                                 p.matrix_epsilon)
      for (_, root, _), (value, error) in zip(pairs, computed):
        root.assign(tf.where(error < ROOT_ERROR_LIMIT,
                             tf.cast(value, root.dtype), root.read_value()),
                    read_value=False)
      return tf.constant(True)

    # The assignments are in the branch that computes the roots: the other
    # updates neither read nor write the roots here.
    with tf.control_dependencies([o for o in ops if o is not None]):
      return [tf.cond(due, Roots, lambda: tf.constant(False))]


def _PartitionOrder(sizes):
  """The block shapes in `Partition`'s list order (the first dim's pieces
  vary fastest)."""
  blocks = [[]]
  for axis in reversed(range(len(sizes))):
    if len(sizes[axis]) > 1:
      blocks = [b + [s] for b in blocks for s in sizes[axis]]
    else:
      blocks = [b + [sizes[axis][0]] for b in blocks]
  return [list(reversed(b)) for b in blocks]
