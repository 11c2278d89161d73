"""The gradient pipeline of one applied update, as named stages.

docs/DESIGN.md, "One training step, as data": between the (all-reduced,
window-averaged) gradient and the optimizer, the update step
(learner/update_step.py, `UpdateStep.PipelineAndApply`) runs

  Prescale -> Regularize -> Mask -> Norms -> Adjust -> CheckFinite -> Track
    -> ClipByNorm -> Scale -> [ClipAdaptive] -> ClipByValue

and then applies or skips. ClipAdaptive runs with the Learner's
adaptive_clip_ratio, whose params, checks and units are here too. Under
several replicas `Track` is `SkipFlags`, combined over the replicas by the
update step (`UpdateStep.AgreeAndApply`), then `AgreedSkip`.

Each stage is a function of lists aligned with `variables` (a gradient is
a Tensor, a tf.IndexedSlices or None) and returns its result and, when it
measures anything, a dict {metric name: float32 scalar}. The metric names
are the constants below, defined here only; `MetricNames` gives the order
in which a learner reports them.

Costs the stages keep low (see benchmarks/README.md): all norms of a step
are one fused multi-tensor op (`HalfSquaredNorms`; on the pure-TF path one
`tf.nn.l2_loss` per tensor and one add_n, under XLA one `kernels.BlockSum`
per tensor, which XLA:CPU reduces in one fused read); a global scale (clipping, the
1 / sum(weight) of an accumulation window) is carried as a scalar
(`Scaling`) and folded into the optimizer's own kernel (`ApplyScaled`)
when no elementwise clip needs the scaled values.
"""

import collections

import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
from params import VariableName
from params import checks
from params import SKIP_LP_REGULARIZATION
from params import VarCollections

# ---- metric names (each spelled here only) ---------------------------------

LEARNING_RATE = 'learning_rate'
LR_SCHEDULE = 'lr_schedule'
L1_LOSS = 'l1_loss'
L2_LOSS = 'l2_loss'
GRAD_NORM = 'grad_norm/all'
VAR_NORM = 'var_norm/all'
GRAD_NORM_CLIPPED = 'grad_norm/clipped'
GRAD_SCALE = 'grad_scale_all'
HAS_NAN_OR_INF = 'has_nan_or_inf'
GRAD_NORM_IS_NAN_OR_INF = 'grad_norm_is_nan_or_inf'
NUM_UPDATES = 'num_updates'
NUM_SKIPPED_STEPS = 'num_skipped_steps'
LOSS_SCALE = 'loss_scale'
NUM_DROPPED_MICROBATCHES = 'num_dropped_microbatches'
ADAPTIVE_CLIPPED_UNITS = 'adaptive_clip/clipped_units'


def GradNormName(var_name):
  """'grad_norm/<variable name>': one variable's gradient norm."""
  return 'grad_norm/' + var_name


def VarNormName(var_name):
  """'var_norm/<variable name>': one variable's L2 norm."""
  return 'var_norm/' + var_name


def MetricNames(p, variables):
  """The pipeline's metric names, in the order a learner reports them.

  Args:
    p: the Learner's params (l1/l2_regularizer_weight, var_norm_metrics,
      per_variable_norm_metrics decide which metrics exist).
    variables: list of the updated variables.

  Returns:
    list of str: [l1_loss], [l2_loss] (when the weight is not None, as in
    Lingvo), grad_norm/all, [var_norm/all], grad_norm/clipped,
    grad_scale_all, grad_norm_is_nan_or_inf, has_nan_or_inf,
    [adaptive_clip/clipped_units] (with adaptive_clip_ratio), then
    grad_norm/<var>, var_norm/<var> per variable if per_variable_norm_metrics.
  """
  names = []
  if p.l1_regularizer_weight is not None:
    names.append(L1_LOSS)
  if p.l2_regularizer_weight is not None:
    names.append(L2_LOSS)
  names.append(GRAD_NORM)
  if p.var_norm_metrics:
    names.append(VAR_NORM)
  names += [GRAD_NORM_CLIPPED, GRAD_SCALE, GRAD_NORM_IS_NAN_OR_INF,
            HAS_NAN_OR_INF]
  if p.adaptive_clip_ratio:
    names.append(ADAPTIVE_CLIPPED_UNITS)
  if p.per_variable_norm_metrics:
    for v in variables:
      n = var_grad_lib.VarName(v)
      names += [GradNormName(n), VarNormName(n)]
  return names


# ---- stages ----------------------------------------------------------------


def Prescale(grads, prescale, needs_gradient):
  """Materialises `prescale * grads` only when a later stage needs it.

  Args:
    grads: list of gradients (None = no gradient).
    prescale: None, or a float32 scalar s: the gradient is s * grads (an
      accumulation window's 1 / sum(weight)).
    needs_gradient: True when L1/L2, a mask or an adjuster will read the
      gradient's values; otherwise s stays a scalar that `Norms` and
      `Scale` fold in (no averaged copy of the sums is written).

  Returns:
    (grads, prescale): the scaled grads and None, or the inputs unchanged.
  """
  if prescale is None or not needs_gradient:
    return grads, prescale
  return [None if g is None else kernels.ScaleGradient(g, prescale)
          for g in grads], None


def Regularize(variables, grads, l1_weight, l2_weight, skip_1d):
  """Coupled L1/L2: adds l2*w and l1*sign(w) to each gradient.

  Lingvo 0.14.2 py_utils.AdjustGradientsWithLpLoss (called for L2, then
  L1, by Learner.AdjustGradients), in one pass:
  * a dense gradient g becomes g + l2*w + l1*sign(w); the loss counts all
    of w;
  * a tf.IndexedSlices gradient stays sparse: each of its rows i (indices
    kept as given, duplicates included) gets (l2*w[i] + l1*sign(w[i])) /
    count(i), where count(i) is how often i occurs in the indices, so the
    rows present receive exactly one term once duplicates are summed; the
    loss counts each present row once; absent rows get nothing;
  * a variable in the SKIP_LP_REGULARIZATION collection
    (params.VarCollections) gets no term and is not in the loss (Lingvo
    leaves it out of the loss but still adds the term to a sparse
    gradient; docs/lingvo.md).

  Args:
    variables: list of variables.
    grads: list like `variables` of gradients (None = no gradient), each a
      Tensor or a tf.IndexedSlices (rank-1 indices into axis 0).
    l1_weight, l2_weight: None (off) or Python floats >= 0; 0.0 adds
      nothing but reports the loss (0), as Lingvo does.
    skip_1d: if True, rank-1 variables (biases, norm scales) get no term
      either (our extension; False is Lingvo's).

  Returns:
    (grads, metrics): metrics has l1_loss = l1 * sum|w| and l2_loss =
    0.5 * l2 * sum(w^2) (float32 scalars, over the regularized variables,
    sparse ones over their present rows) for the weights that are not
    None; grads are unchanged if both are None or 0. Under XLA
    (jit_compile) a sparse gradient is densified first: tf.unique does not
    compile, so every row is regularized there, as after a multi-replica
    all-reduce, which is dense (docs/lingvo.md).
  """
  metrics = {}
  if l1_weight is not None and not l1_weight:
    metrics[L1_LOSS] = tf.constant(0.0)
  if l2_weight is not None and not l2_weight:
    metrics[L2_LOSS] = tf.constant(0.0)
  if not (l1_weight or l2_weight):
    return grads, metrics
  in_xla = kernels.InXla()
  l1_terms, l2_terms, out = [], [], []
  for v, g in zip(variables, grads):
    if (g is None or (skip_1d and v.shape.rank == 1) or
        SKIP_LP_REGULARIZATION in VarCollections(v)):
      out.append(g)
      continue
    if isinstance(g, tf.IndexedSlices) and not in_xla:
      g, w = _SparseLpGradient(v, g, l1_weight, l2_weight)
    else:
      w = v.read_value()
      g = tf.convert_to_tensor(g) + _LpTerm(w, l1_weight, l2_weight, g.dtype)
    out.append(g)
    w = tf.cast(w, tf.float32)
    if l2_weight:
      l2_terms.append(2.0 * kernels.BlockSum(w) if in_xla else
                      tf.reduce_sum(tf.square(w)))
    if l1_weight:
      l1_terms.append(kernels.BlockSum(w, square=False) if in_xla else
                      tf.reduce_sum(tf.abs(w)))
  if l1_weight:
    metrics[L1_LOSS] = l1_weight * tf.add_n(l1_terms + [tf.constant(0.0)])
  if l2_weight:
    metrics[L2_LOSS] = 0.5 * l2_weight * tf.add_n(
        l2_terms + [tf.constant(0.0)])
  return out, metrics


def _LpTerm(w, l1_weight, l2_weight, dtype):
  """l2*w + l1*sign(w) in `dtype` (a zero weight contributes no op)."""
  w = tf.cast(w, dtype)
  term = tf.zeros_like(w)
  if l2_weight:
    term += tf.cast(l2_weight, dtype) * w
  if l1_weight:
    term += tf.cast(l1_weight, dtype) * tf.sign(w)
  return term


def _SparseLpGradient(var, grad, l1_weight, l2_weight):
  """Lingvo's L1/L2 of a sparse gradient: its rows only, 1/count weighted.

  Args:
    var: the variable (rank >= 1); grad: tf.IndexedSlices into its axis 0.

  Returns:
    (grad', rows): grad' is tf.IndexedSlices with grad's indices and
    dense_shape and values + (l2*w[i] + l1*sign(w[i])) / count(i); rows is
    w at the unique indices, for the loss.
  """
  ids = grad.indices
  unique, position, count = tf.unique_with_counts(ids)
  values = tf.gather(var, ids)
  dtype = grad.values.dtype
  weight = tf.math.reciprocal(tf.cast(tf.gather(count, position), dtype))
  weight = tf.reshape(weight, tf.concat(
      [tf.shape(weight), tf.ones([tf.rank(values) - 1], tf.int32)], 0))
  delta = weight * _LpTerm(values, l1_weight, l2_weight, dtype)
  return (tf.IndexedSlices(grad.values + delta, ids, grad.dense_shape),
          tf.gather(var, unique))


def Mask(variables, grads, gradient_mask):
  """Multiplies each gradient by its variable's entry of `gradient_mask`.

  Args:
    variables, grads: aligned lists (grad None = no gradient).
    gradient_mask: None, or {variable name (with or without ':0'): 0/1
      float or scalar tensor}; variables absent from it are unchanged.

  Returns:
    The masked list of gradients (no metrics).
  """
  if not gradient_mask:
    return grads
  mask = {}
  for k, m in gradient_mask.items():
    mask[k[:-2] if k.endswith(':0') else k] = m
  out = []
  for v, g in zip(variables, grads):
    m = mask.get(var_grad_lib.VarName(v))
    out.append(g if m is None or g is None else kernels.ScaleGradient(g, m))
  return out


class GradNorms(collections.namedtuple('GradNorms', ['half', 'norm'])):
  """The measured gradient: `half[i]` = sum(g_i^2) / 2, `norm` = global L2.

  Both float32; with a prescale s they measure s * g.
  """
  __slots__ = ()


def Norms(variables, grads, prescale, var_norms, per_variable):
  """Measures the gradient (before the adjuster and clipping).

  Args:
    variables, grads: aligned lists (grad None counts as 0).
    prescale: None, or a float32 scalar s: the gradient is s * grads (the
      1 / sum(weight) of an accumulation window), measured without
      materialising it: sum((s*g)^2) = s^2 * sum(g^2).
    var_norms: if True, also measure var_norm/all.
    per_variable: if True, also grad_norm/<var> and var_norm/<var>.

  Returns:
    (GradNorms, metrics): metrics has grad_norm/all and, as asked,
    var_norm/all, grad_norm/<var>, var_norm/<var> (float32 scalars).
  """
  # The variables are measured in the gradients' op: the update waits for
  # the gradient norm, so no read of a variable is still alive when it
  # writes in place (which would make TF copy the variable first). Under
  # XLA (one BlockSum per tensor) the update step passes the metrics through
  # the update's cond for the same reason (UpdateStep.ApplyOrSkip).
  reads = ([v.read_value() for v in variables]
           if var_norms or per_variable else [])
  half = HalfSquaredNorms(grads + reads)
  half, var_half = half[:len(grads)], half[len(grads):]
  total = tf.add_n(half + [tf.constant(0.0)])
  if prescale is not None:
    pre2 = prescale * prescale
    half = [h * pre2 for h in half]
    total = total * pre2
  grad_norm = tf.sqrt(2.0 * total)
  metrics = {GRAD_NORM: grad_norm}
  if var_norms:
    metrics[VAR_NORM] = tf.sqrt(2.0 * tf.add_n(var_half))
  if per_variable:
    for v, gh, vh in zip(variables, half, var_half):
      n = var_grad_lib.VarName(v)
      metrics[GradNormName(n)] = tf.sqrt(2.0 * gh)
      metrics[VarNormName(n)] = tf.sqrt(2.0 * vh)
  return GradNorms(half, grad_norm), metrics


def Adjust(var_grads, grads, gradient_adjuster):
  """Runs the user's `gradient_adjuster` on the measured gradients.

  Args:
    var_grads: NestedMap of VarGrad keyed like the vmap given to Apply (the
      keys are the variables' paths in it, e.g. `enc.w`); only its
      structure and variables are used.
    grads: list of the current gradients in `var_grads.Flatten()` order.
    gradient_adjuster: None, or a callable NestedMap -> NestedMap: it gets
      `var_grads` with these gradients and must return a NestedMap of the
      same structure (same keys) of VarGrad; each returned `.grad` replaces
      its key's gradient (a Tensor, tf.IndexedSlices or None).

  Returns:
    (grads, finite): the adjusted list, and a bool scalar, False if an
    adjusted gradient has a NaN or Inf (None when there is no adjuster).

  Raises:
    ValueError: if the adjuster returns another structure (naming the keys).
  """
  if gradient_adjuster is None:
    return grads, None
  given = var_grads.Pack([VarGrad(vg.var, g)
                          for vg, g in zip(var_grads.Flatten(), grads)])
  adjusted = gradient_adjuster(given)
  if not given.IsCompatible(adjusted):
    got = ([k for k, _ in adjusted.FlattenItems()]
           if isinstance(adjusted, NestedMap) else type(adjusted).__name__)
    raise ValueError(
        'gradient_adjuster returned %s; expected a NestedMap of VarGrad with '
        'the keys it was given: %s. Return the map with its .grad values '
        'replaced, e.g. var_grads.Transform(lambda vg: VarGrad(vg.var, '
        '...)).' % (got, [k for k, _ in given.FlattenItems()]))
  grads = [vg.grad for vg in adjusted.Flatten()]
  half = tf.add_n([HalfSquaredNorm(g) for g in grads] + [tf.constant(0.0)])
  return grads, tf.math.is_finite(half)


def CheckFinite(grad_norm, adjusted_finite=None, losses_finite=None):
  """has_nan_or_inf: a loss, the measured or the adjusted gradient is NaN/Inf.

  Args:
    grad_norm: float32 scalar from `Norms`.
    adjusted_finite: None, or the bool scalar from `Adjust`.
    losses_finite: None, or a bool scalar, False when a loss is NaN or Inf
      (its gradient may still be finite, e.g. an Inf constant term).

  Returns:
    (has_nan_or_inf bool scalar, metrics {grad_norm_is_nan_or_inf: the
    measured norm (before the adjuster) is not finite, has_nan_or_inf:
    that, the adjusted gradient or a loss is not finite}), each 0.0 or 1.0:
    Lingvo's are bools; ours are float32 like every eval metric, so they
    average over steps and go to summaries (docs/lingvo.md).
  """
  norm_bad = tf.logical_not(tf.math.is_finite(grad_norm))
  has_nan_or_inf = norm_bad
  for finite in (adjusted_finite, losses_finite):
    if finite is not None:
      has_nan_or_inf = tf.logical_or(has_nan_or_inf, tf.logical_not(finite))
  return has_nan_or_inf, {
      GRAD_NORM_IS_NAN_OR_INF: tf.cast(norm_bad, tf.float32),
      HAS_NAN_OR_INF: tf.cast(has_nan_or_inf, tf.float32)}


def Track(grad_norm, has_nan_or_inf, clip_to_zero, tracker, extra_skip=None):
  """The skip decision: True skips the update (no variable or slot moves).

  Args:
    grad_norm: float32 scalar from `Norms`.
    has_nan_or_inf: bool scalar from `CheckFinite` (always skips).
    clip_to_zero: Python float; > 0 skips when grad_norm >= it (0 = off).
    tracker: None, or a GradNormTracker whose `Check(grad_norm,
      has_nan_or_inf)` updates its statistics and returns False for an
      outlier step.
    extra_skip: None, or a bool scalar that also skips (an empty window).

  Returns:
    bool scalar (no metrics: the tracker keeps its own statistics).
  """
  skip = has_nan_or_inf
  if clip_to_zero:
    skip = tf.logical_or(skip, grad_norm >= clip_to_zero)
  if tracker is not None:
    accept = tracker.Check(grad_norm, has_nan_or_inf)
    skip = tf.logical_or(skip, tf.logical_not(accept))
  if extra_skip is not None:
    skip = tf.logical_or(skip, extra_skip)
  return skip


def SkipFlags(grad_norm, has_nan_or_inf, clip_to_zero, tracker,
              extra_skip=None):
  """`Track`'s decision in parts, for replicas that decide together.

  Under several replicas each replica computes these flags, the update step
  (UpdateStep.AgreeAndApply) combines them over the replicas in one collective
  (cross_replica.AnyReplica) and `AgreedSkip` turns the combined flags into
  the one decision every replica takes. Nothing is updated here (the
  tracker's statistics move in `AgreedSkip`).

  Args:
    as in `Track`.

  Returns:
    list of 3 bool scalars: [has_nan_or_inf, the tracker rejects (False
    without a tracker), clip-to-zero or extra_skip].
  """
  reject = tf.constant(False)
  if clip_to_zero:
    reject = tf.logical_or(reject, grad_norm >= clip_to_zero)
  if extra_skip is not None:
    reject = tf.logical_or(reject, extra_skip)
  tracked = (tracker.Reject(grad_norm, has_nan_or_inf) if tracker is not None
             else tf.constant(False))
  return [tf.convert_to_tensor(has_nan_or_inf), tracked, reject]


def AgreedSkip(flags, grad_norm, tracker):
  """The skip decision from `SkipFlags` combined over the replicas.

  Args:
    flags: the 3 bool scalars of `SkipFlags`, each the OR over replicas.
    grad_norm: float32 scalar from `Norms` (of the all-reduced gradient).
    tracker: None, or the GradNormTracker given to `SkipFlags`; it records
      this step with the combined flags (a non-finite step anywhere leaves
      its averages unchanged everywhere).

  Returns:
    bool scalar: True skips the update on every replica.
  """
  has_nan_or_inf, tracked, reject = flags
  skip = tf.logical_or(has_nan_or_inf, reject)
  if tracker is not None:
    tracked = tf.logical_or(tracked, has_nan_or_inf)
    tracker.Record(grad_norm, has_nan_or_inf, tracked)
    if not tracker.params.dry_run:
      skip = tf.logical_or(skip, tracked)
  return skip


class NormClip(collections.namedtuple('NormClip',
                                      ['scale', 'global_clip',
                                       'per_variable'])):
  """The clip-by-norm factors.

  scale: float32 scalar, grad_scale_all: c / max(norm, c) with global
    clipping (0 when not finite), else 1 (0 when not finite).
  global_clip: True if `scale` multiplies the gradient (global clipping).
  per_variable: None, or a list of float32 scalars c / max(|g_i|, c).
  """
  __slots__ = ()


def ClipByNorm(norms, has_nan_or_inf, clip_norm, clip_single_norm):
  """Clip by the global norm, or by each variable's norm.

  Args:
    norms: GradNorms from `Norms`.
    has_nan_or_inf: bool scalar from `CheckFinite`.
    clip_norm: Python float c > 0 scales all gradients by c / max(norm, c)
      (TF's clip_by_global_norm); 0 = off.
    clip_single_norm: Python float c > 0 scales each gradient by
      c / max(|g_i|, c); 0 = off. Exclusive with clip_norm.

  Returns:
    (NormClip, metrics {grad_scale_all, grad_norm/clipped}).
  """
  finite_f = tf.cast(tf.logical_not(has_nan_or_inf), tf.float32)
  per_variable = None
  if clip_norm:
    c = tf.constant(clip_norm, tf.float32)
    scale = c / tf.maximum(norms.norm, c)
    scale = tf.where(has_nan_or_inf, 0.0, scale)
    clipped_norm = norms.norm * scale
  elif clip_single_norm:
    c = tf.constant(clip_single_norm, tf.float32)
    per_variable = [c / tf.maximum(tf.sqrt(2.0 * h), c) for h in norms.half]
    scale = finite_f
    clipped_norm = tf.sqrt(2.0 * tf.add_n(
        [h * k * k for h, k in zip(norms.half, per_variable)]))
  else:
    scale = finite_f
    clipped_norm = norms.norm
  clip = NormClip(scale, bool(clip_norm), per_variable)
  return clip, {GRAD_SCALE: scale, GRAD_NORM_CLIPPED: clipped_norm}


class Scaling(collections.namedtuple('Scaling',
                                     ['scale', 'per_variable',
                                      'clip_value'])):
  """How the applied gradient is made from the pipeline's `grads`.

  g'_i = clip(k * g_i, -clip_value, clip_value), where k is
  `per_variable[i]` if set, else `scale` (None = 1); clip_value 0 = off.
  """
  __slots__ = ()

  @property
  def foldable(self):
    """True if the optimizer can take `scale` itself (ApplyScaled)."""
    return self.scale is not None and not self.clip_value

  def Gradients(self, grads, fold=False):
    """The list of applied gradients; `fold` leaves `scale` out."""
    scale = None if fold else self.scale
    out = []
    for i, g in enumerate(grads):
      if g is None:
        out.append(None)
        continue
      if self.per_variable is not None:
        g = kernels.ScaleGradient(g, self.per_variable[i])
      elif scale is not None:
        g = kernels.ScaleGradient(g, scale)
      if self.clip_value:
        v = self.clip_value
        g = _MapValues(g, lambda x: tf.clip_by_value(x, -v, v))  # pylint: disable=cell-var-from-loop
      out.append(g)
    return out


def Scale(clip, prescale, clip_value):
  """Folds the clip factors and the prescale into one `Scaling`.

  Args:
    clip: NormClip from `ClipByNorm`.
    prescale: None, or the float32 scalar that turns `grads` into the
      gradient (1 / sum(weight) of an accumulation window).
    clip_value: Python float for `ClipByValue` (0 = off).

  Returns:
    Scaling (no metrics: grad_scale_all is ClipByNorm's).
  """
  scale = clip.scale if clip.global_clip else None
  per_variable = clip.per_variable
  if prescale is not None:
    if per_variable is not None:
      per_variable = [k * prescale for k in per_variable]
    else:
      scale = prescale if scale is None else scale * prescale
  return Scaling(scale, per_variable, clip_value)


# ---- adaptive gradient clipping (AGC), whole: params, checks, units, stage --
# Brock, De, Smith & Simonyan, "High-Performance Large-Scale Image Recognition
# Without Normalization", ICML 2021, section 4.1; units as optax's
# adaptive_grad_clip. The Learner defines the params, checks them and its
# variables at Bind; update_step runs ClipAdaptive after Scale.


def DefineAdaptiveClipParams(p):
  """Defines the Learner's AGC params on `p` (ClipAdaptive below)."""
  p.Define(
      'adaptive_clip_ratio', 0.0,
      'If > 0, adaptive gradient clipping (AGC; Brock et al. 2021): each '
      'unit\'s gradient (a dense layer\'s output column, a conv kernel\'s '
      'output channel, a whole vector) is scaled down to at most this ratio '
      'times the unit\'s weight norm (optax\'s adaptive_grad_clip), after '
      'norm clipping. Typical 0.01-0.16. 0 = off.')
  p.Define(
      'adaptive_clip_eps', 1e-3,
      'AGC: a unit\'s weight norm counts as at least this (> 0), so '
      'zero-initialised weights still move. Used when adaptive_clip_ratio > '
      '0.')


def AdaptiveClipChecks():
  """{key: checks spec} of the AGC params, for Learner.ValueChecks."""
  return dict(
      adaptive_clip_ratio=checks.Real(
          0, example=0.01, why='the largest gradient/weight norm ratio of a '
          'unit; 0 turns it off'),
      adaptive_clip_eps=checks.Real(
          0, low_open=True, example=1e-3,
          why='the smallest weight norm a unit counts as'))


def CheckAdaptiveClipUnits(p, variables):
  """With AGC on, raises ValueError naming a variable of rank > 5 (no unit
  convention for it; UnitAxes)."""
  if p.adaptive_clip_ratio:
    for v in variables:
      UnitAxes(v.shape, VariableName(v))


def UnitAxes(shape, name='variable'):
  """The axes a unit's norm runs over (optax's `unitwise_norm`).

  Args:
    shape: the variable's static shape (a list of ints or TensorShape).
    name: the variable's name, for the error.

  Returns:
    None (the whole tensor is one unit) or a tuple of axes.

  Raises:
    ValueError: rank > 5.
  """
  shape = list(shape)
  if sum(1 for d in shape if d != 1) <= 1:
    return None
  if len(shape) in (2, 3):
    return (0,)
  if len(shape) in (4, 5):
    return tuple(range(len(shape) - 1))
  raise ValueError(
      'adaptive_clip_ratio: variable %r has shape %s (rank %d); adaptive '
      'clipping knows units of ranks 0-5 only (optax\'s unitwise_norm). '
      'Reshape the variable, exclude it from this learner '
      '(bprop_variable_exclusion) or set adaptive_clip_ratio=0.' %
      (name, shape, len(shape)))


def ClipAdaptive(variables, grads, scaling, ratio, eps):
  """Adaptive gradient clipping (AGC), unit-wise, after norm clipping.

  Brock, De, Smith & Simonyan, "High-Performance Large-Scale Image
  Recognition Without Normalization", ICML 2021, section 4.1 (unit-wise
  form); units as optax's `adaptive_grad_clip` (`unitwise_norm`): for each
  unit u of a variable w with (scaled) gradient g,
    limit_u = ratio * max(||w_u||, eps)
    g_u <- g_u                                  if ||g_u|| < limit_u
    g_u <- g_u * limit_u / max(||g_u||, 1e-6)   otherwise.
  A unit is the whole tensor for scalars, vectors and tensors with at most
  one dimension > 1; for rank 2 and 3 a slice along the last axes (the
  norm runs over axis 0: a dense layer's output column); for rank 4 and 5
  (conv kernels, HWIO / DHWIO) one output channel (norm over all axes but
  the last). It runs on the gradient as the optimizer would get it: after
  the prescale and ClipByNorm (optax.chain(clip_by_global_norm,
  adaptive_grad_clip, ...) does the same), before ClipByValue; under
  several replicas on the all-reduced gradient. A sparse gradient is
  densified (a unit spans every row). The norms are float32 (float64 for
  float64 gradients); the result keeps the gradient's dtype.

  Args:
    variables, grads: aligned lists (grad None = no gradient).
    scaling: Scaling from `Scale`.
    ratio: Python float > 0, the clipping ratio (the paper's lambda).
    eps: Python float > 0: weights of a smaller unit norm count as eps
      (so zero-initialised units still move).

  Returns:
    (grads, scaling, metrics): the clipped gradients with every factor of
    `scaling` already in them, the Scaling that remains (only its
    clip_value), and {grad_norm/clipped: global norm after AGC,
    adaptive_clip/clipped_units: the fraction of units clipped, float32}.

  Raises:
    ValueError: a variable of rank > 5 (no unit convention; naming it).
  """
  scaled = Scaling(scaling.scale, scaling.per_variable, 0.0).Gradients(grads)
  out, clipped, units = [], [], []
  for v, g in zip(variables, scaled):
    if g is None:
      out.append(None)
      continue
    g, n_clipped, n_units = _ClipUnits(v, tf.convert_to_tensor(g), ratio,
                                       eps)
    out.append(g)
    clipped.append(n_clipped)
    units += [n_units]
  fraction = (tf.add_n(clipped) / float(sum(units)) if units else
              tf.constant(0.0))
  metrics = {GRAD_NORM_CLIPPED: GlobalNorm(out),
             ADAPTIVE_CLIPPED_UNITS: fraction}
  return out, Scaling(None, None, scaling.clip_value), metrics


def _ClipUnits(var, grad, ratio, eps):
  """(clipped grad, number of clipped units float32, number of units)."""
  axes = UnitAxes(var.shape, VariableName(var))
  dtype = tf.float64 if grad.dtype == tf.float64 else tf.float32
  g = tf.cast(grad, dtype)
  w = tf.cast(var.read_value(), dtype)
  g_norm = tf.sqrt(tf.reduce_sum(tf.square(g), axis=axes, keepdims=True))
  w_norm = tf.sqrt(tf.reduce_sum(tf.square(w), axis=axes, keepdims=True))
  limit = tf.cast(ratio, dtype) * tf.maximum(w_norm, tf.cast(eps, dtype))
  over = tf.logical_not(g_norm < limit)
  factor = tf.where(over, limit / tf.maximum(g_norm, tf.cast(1e-6, dtype)),
                    tf.ones_like(g_norm))
  n_units = int(g_norm.shape.num_elements())
  n_clipped = tf.reduce_sum(tf.cast(over, tf.float32))
  return tf.cast(g * factor, grad.dtype), n_clipped, n_units


def ClipByValue(grads, scaling):
  """Measures the gradient after elementwise clipping, if it is on.

  Args:
    grads: the pipeline's list of gradients.
    scaling: Scaling from `Scale`; its clip_value c > 0 clips every scaled
      element to [-c, c] (TF's clip_by_value), after norm clipping.

  Returns:
    metrics: {grad_norm/clipped: norm of the clipped gradient} if c > 0
    (it replaces ClipByNorm's), else {}.
  """
  if not scaling.clip_value:
    return {}
  return {GRAD_NORM_CLIPPED: GlobalNorm(scaling.Gradients(grads))}


# ---- helpers ---------------------------------------------------------------


def _MapValues(g, fn):
  if isinstance(g, tf.IndexedSlices):
    return tf.IndexedSlices(fn(g.values), g.indices, g.dense_shape)
  return fn(g)


def HalfSquaredNorm(g):
  """sum(g^2) / 2 as float32; 0.0 for None.

  One L2Loss kernel; under XLA `kernels.BlockSum`, the form XLA:CPU
  reduces in one fused read pass (L2Loss costs it three).
  """
  if g is None:
    return tf.constant(0.0)
  if isinstance(g, tf.IndexedSlices):
    g = g.values
  if g.dtype != tf.float32:
    g = tf.cast(g, tf.float32)
  if kernels.InXla():
    return kernels.BlockSum(g)
  return tf.nn.l2_loss(g)


def HalfSquaredNorms(tensors):
  """[sum(t^2) / 2 as float32 scalar] of a list of gradients or tensors.

  One fused multi-tensor op (learner/optimizers/kernels: one read pass,
  sums in float64) when it can run, else one L2Loss per tensor. None
  entries count 0; a tf.IndexedSlices counts its values.
  """
  fused = kernels.HalfSumSquares(tensors, 'gradient and variable norms')
  if fused is not None:
    return fused[0]
  return [HalfSquaredNorm(t) for t in tensors]


def GlobalNorm(grads):
  """sqrt(sum of squares) of a list of gradients; None entries count as 0.

  Args:
    grads: list of Tensors, tf.IndexedSlices (duplicate-free) or None.

  Returns:
    float32 scalar; 0.0 for an empty list or only None (acceptance case
    C-none-grads), never an error.
  """
  return tf.sqrt(2.0 * tf.add_n([HalfSquaredNorm(g) for g in grads] +
                                [tf.constant(0.0)]))
