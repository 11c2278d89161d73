"""The update step: the gradient pipeline, then apply in one tf.cond or skip.

A learner's update (docs/DESIGN.md, "One training step, as data") is
`UpdateStep.PipelineAndApply`, from the gradients to the counted update:

  1. the pipeline's stages (learner/gradient_pipeline.py: regularize, mask,
     norms, adjust, check finite, track, clip, scale), whose verdict
     (`gradient_pipeline.Track` / `SkipFlags`) says whether to skip;
  2. under several replicas, that verdict ORed over them in one small
     collective (`cross_replica.AnyReplica`, `AgreeAndApply`), so all
     replicas skip or all apply;
  3. one branch of one `tf.cond` (`ApplyOrSkip`): the apply branch hands the
     scaled gradients to the optimizer (or the accumulation's window); the
     skip branch changes no model variable and no optimizer slot and counts
     the reason;
  4. with `check_finite_weights`, an update that makes a weight non-finite
     undone exactly (weights and optimizer variables put back,
     `_CheckedApply`).

Under accumulation, `AccumulateOrUpdate` runs the same update on the
micro-step that completes the window.

The counters are the learner's (`num_updates`, `num_skipped_steps`, both
checkpointed); the per-process statistics (`SkipStatistics`) live here and
are not checkpointed.
"""

import tensorflow as tf

from learner import cross_replica
from learner import gradient_pipeline as pipeline
from learner.optimizers import kernels
from learner.optimizers import sharded_state
from learner.optimizers.kernels import AllFinite
from learner.optimizers.var_grad import VarGrad
from params import NestedMap

# Why an update was skipped, as `Learner.SkipStatistics` counts it. A loss
# that is not finite wins over its gradient; 'other' is
# grad_norm_to_clip_to_zero, the grad_norm_tracker or an empty window.
SKIP_NON_FINITE_LOSS = 'non-finite loss'
SKIP_NON_FINITE_GRADIENT = 'non-finite gradient'
SKIP_NON_FINITE_WEIGHTS = 'non-finite updated weights'
SKIP_OTHER = 'other'
SKIP_REASONS = (SKIP_NON_FINITE_LOSS, SKIP_NON_FINITE_GRADIENT,
                SKIP_NON_FINITE_WEIGHTS, SKIP_OTHER)


class UpdateStep:
  """A learner's whole update: the pipeline, then apply or skip and count.

  Not a layer and not tracked by tf.Module: it holds references to the
  learner's counters and optimizer, and two process-local statistics.

  Args:
    path: the learner's path, for the statistics' variable names.
    optimizer: the learner's optimizer (a BaseOptimizer or accumulation).
    num_updates, num_skipped: the learner's int64 scalar counters.
    check_finite_weights: bool, the learner param of that name.
  """

  def __init__(self, path, optimizer, num_updates, num_skipped,
               check_finite_weights):
    accumulates = type(optimizer).IS_ACCUMULATION
    # What an undo puts back: not an accumulation's accumulators (the
    # window empties either way), so its inner optimizer.
    self._optimizer = optimizer
    self._inner = optimizer.optimizer if accumulates else optimizer
    self._num_updates = num_updates
    self._num_skipped = num_skipped
    self._check_finite_weights = bool(check_finite_weights)
    with tf.init_scope():
      self._stats = NestedMap(
          consecutive=tf.Variable(0, dtype=tf.int64, trainable=False,
                                  name=path + '/consecutive_skipped'),
          by_reason=tf.Variable(
              tf.zeros([len(SKIP_REASONS)], tf.int64), trainable=False,
              name=path + '/skipped_by_reason'))

  @property
  def by_reason(self):
    """int64 [len(SKIP_REASONS)] variable: this process's skips by reason."""
    return self._stats.by_reason

  def SkipStatistics(self):
    """(consecutive, {reason: count}) as Python ints (Learner's doc)."""
    counts = [int(c) for c in self._stats.by_reason.numpy()]
    return (int(self._stats.consecutive.numpy()),
            dict(zip(SKIP_REASONS, counts)))

  def AccumulateOrUpdate(self, p, var_grads, weight, update,
                         step_weight=None):
    """One micro-step of the accumulation; returns (stats, window weight).

    The accumulation's one entry point adds the micro-batch and, on the
    micro-step that completes the window, hands back the window: `update`
    then runs the pipeline on its sums with 1 / sum(weight) folded into the
    norms and the clip scale (no averaged copy), and applies through the
    window. Other micro-steps report zeros with weight 0. `step_weight` goes
    to the accumulation (a window that ends on weight counts it).
    """
    names = pipeline.MetricNames(p,
                                 [vg.var for vg in var_grads.Flatten()])

    def _ApplyWindow(window):
      stats = update(window.var_grads, window,
                     extra_skip=window.weight_sum <= 0.0,
                     window_finite=tf.equal(window.num_dropped, 0.0),
                     grad_prescale=window.grad_scale)
      return [stats[k] for k in names]

    all_reduce = (cross_replica.WeightedAllReduce
                  if cross_replica.NumReplicas() > 1 else None)
    values, is_apply = self._optimizer.AccumulateOrApply(
        var_grads, weight, _ApplyWindow,
        lambda: [tf.constant(0.0) for _ in names], all_reduce=all_reduce,
        step_weight=step_weight)
    if not isinstance(values, (list, tuple)):
      values = [values]
    return dict(zip(names, values)), tf.cast(is_apply, tf.float32)

  def PipelineAndApply(self, p, tracker, var_grads, lr, gradient_mask,
                       gradient_adjuster, applier, extra_skip=None,
                       grad_prescale=None, losses_finite=None, scattered=None):
    """The whole update: the pipeline's stages, the skip decision, the update.

    Runs learner/gradient_pipeline.py's stages, decides the skip (alone or
    over the replicas, `AgreeAndApply`), applies or skips in one tf.cond
    (`ApplyOrSkip`; with check_finite_weights, undoes a non-finite update).

    Args:
      p: the learner's Params (clipping, regularizers, norms).
      tracker: the learner's GradNormTracker, or None.
      var_grads: NestedMap of VarGrad (keys as in the vmap) whose grads are
        already averaged over replicas / the window, or - with
        `grad_prescale` - sums that `grad_prescale` turns into the gradient.
      lr: float32 scalar, the scheduled rate.
      gradient_mask, gradient_adjuster: as in Learner.Apply.
      applier: what applies the update: this learner's optimizer, or the
        accumulation's Window (its `Apply` / `ApplyScaled`).
      extra_skip: optional bool scalar that also skips the update.
      grad_prescale: optional float32 scalar: the gradient is
        `grad_prescale * grads` (accumulation: 1 / sum(weight)).
      losses_finite: optional bool scalar, False when a loss is not finite.
      scattered: None, or the variables `var_grads` slices (MeanOverReplicas).

    Returns:
      ({stat name: float32 scalar} in the order of `pipeline.MetricNames`,
      has_nan_or_inf: a bool scalar, agreed over replicas, for the loss
      scale).
    """
    variables = [vg.var for vg in var_grads.Flatten()]
    grads = [vg.grad for vg in var_grads.Flatten()]
    metrics = {}
    grads, grad_prescale = pipeline.Prescale(
        grads, grad_prescale, bool(
            p.l1_regularizer_weight or p.l2_regularizer_weight or
            gradient_mask or gradient_adjuster is not None))
    grads, m = pipeline.Regularize(variables, grads, p.l1_regularizer_weight,
                                   p.l2_regularizer_weight,
                                   p.skip_lp_1d_vectors)
    metrics.update(m)
    grads = pipeline.Mask(variables, grads, gradient_mask)
    defer = DefersVarNorm(p)
    norms, m = _Measure(p, variables, grads, grad_prescale, defer, scattered)
    metrics.update(m)
    grads, adjusted_finite = pipeline.Adjust(var_grads, grads,
                                             gradient_adjuster)
    has_nan_or_inf, m = pipeline.CheckFinite(norms.norm, adjusted_finite,
                                             losses_finite)
    metrics.update(m)
    # Lingvo's single-norm path (learner.py ScaleGradients) clips each
    # variable and nothing else: no clip-to-zero, no tracker. A non-finite
    # step is still skipped here (docs/lingvo.md, "Skipped step").
    single = bool(p.clip_gradient_single_norm_to_value)
    tracker = None if single else tracker
    track = (norms.norm, has_nan_or_inf,
             0.0 if single else p.grad_norm_to_clip_to_zero, tracker,
             extra_skip)
    # Several replicas decide together (AgreeAndApply); one decides alone.
    replicated = cross_replica.NumReplicas() > 1
    skip = (pipeline.SkipFlags(*track) if replicated else
            pipeline.Track(*track))
    grads, scaling = _Clip(p, variables, grads, norms, has_nan_or_inf,
                           grad_prescale, metrics)
    # Under XLA the metrics (var_norm/*, l1/l2_loss read the weights) go
    # through the update's cond, so their reads end before it writes.
    update, variables = (lr, var_grads, grads, scaling, applier), (
        scattered or variables)  # The learner's, also when sliced.
    kw = dict(measured=variables if defer else None,
              held=metrics if kernels.InXla() else None)
    if replicated:
      out, has_nan_or_inf = self.AgreeAndApply(skip, norms.norm, tracker,
                                               losses_finite, update, **kw)
    else:
      out = self.ApplyOrSkip(
          skip, lambda: SkipReason(has_nan_or_inf, losses_finite), *update,
          **kw)
    metrics.update(out)
    return ({k: metrics[k] for k in pipeline.MetricNames(p, variables)},
            has_nan_or_inf)

  def ApplyOrSkip(self, skip, reason, lr, var_grads, grads, scaling,
                  applier, measured=None, held=None):
    """Inside one tf.cond: applies the scaled `grads`, or counts a skip.

    A skipped step changes no model variable and no optimizer slot. When
    the scale can be folded (`scaling.foldable`), the optimizer gets it as
    a scalar (`ApplyScaled`, e.g. into Momentum's kernel). With
    check_finite_weights the update is undone if it made a weight
    non-finite (`_CheckedApply`).

    Args:
      skip: bool scalar, True skips.
      reason: zero-argument callable giving the int32 index in SKIP_REASONS
        counted on a skip (built inside the skip branch only).
      lr, var_grads, grads, scaling, applier: as `PipelineAndApply` has
        them (the scaled gradients are built in the apply branch, `UpdateFn`).
      measured: None, or the variables whose sum(w^2) / 2 before the update
        gives var_norm/all (inside a fused apply op when it can be,
        MeasuredApply; read in the skip branch).
      held: optional {name: float32 scalar}, passed through the cond
        unchanged (one stacked vector). Under XLA the learner passes its
        metrics: var_norm/* and l1/l2_loss read the weights, and a read
        still pending when the cond writes a weight in place makes XLA
        copy every weight first (a read and a write of all of them per
        step); as inputs of the cond they are computed before it.

    Returns:
      {name: value}: `held` as the cond outputs them, and var_norm/all
      with `measured` ({} without either).
    """
    names = sorted(held) if held else []
    packed = (tf.stack([tf.cast(held[k], tf.float32) for k in names])
              if names else None)

    def _Outputs(applied, half=None):
      out = {'applied': applied}
      if packed is not None:
        out['held'] = tf.identity(packed)
      if measured is not None:
        out['var_half'] = half
      return out

    def _DoUpdate():
      _Apply, applied = UpdateFn(lr, var_grads, grads, scaling, applier)
      if self._check_finite_weights:
        return _Outputs(self._CheckedApply(
            _Apply, [vg.var for vg in applied.Flatten()]))
      if measured is None:
        _Apply()
        return _Outputs(self.CountApplied())
      half = MeasuredApply(measured, applied.Flatten(), applier, _Apply)
      return _Outputs(self.CountApplied(), half)

    def _Skip():
      half = None if measured is None else WeightsHalf(measured)
      return _Outputs(self.CountSkipped(reason()), half)

    out = tf.cond(skip, _Skip, _DoUpdate)
    result = {}
    if packed is not None:
      result = dict(zip(names, tf.unstack(out['held'], num=len(names))))
    if measured is not None:
      result[pipeline.VAR_NORM] = tf.sqrt(2.0 * out['var_half'])
    return result

  def CountApplied(self):
    self._num_updates.assign_add(1)
    self._stats.consecutive.assign(0)
    return tf.constant(True)

  def CountSkipped(self, reason):
    self._num_skipped.assign_add(1)
    stats = self._stats
    stats.consecutive.assign_add(1)
    stats.by_reason.assign_add(
        tf.one_hot(reason, len(SKIP_REASONS), dtype=tf.int64))
    return tf.constant(False)

  def _CheckedApply(self, apply_fn, weights):
    """Applies, then undoes the update if a weight is no longer finite.

    Before the update, `weights` and every variable of the optimizer
    (slots, averages; not an accumulation's accumulators, which the window
    empties either way) are read; the update kernels then write copies
    (copy-on-write of a variable whose value is still referenced), and a
    non-finite weight afterwards puts the read values back and counts the
    reason 'non-finite updated weights'. Exact for every optimizer, at the
    price of those copies.

    Args:
      apply_fn: zero-argument callable that applies the update.
      weights: the model variables the update writes.

    Returns:
      bool scalar: True if the update stayed.
    """
    guarded = self._Guarded(weights)
    saved = [v.read_value() for v in guarded]
    with tf.control_dependencies(saved):
      apply_fn()
    finite = AllFinite([w.read_value() for w in weights])

    def _Undo():
      for v, value in zip(guarded, saved):
        v.assign(value)
      return self.CountSkipped(
          tf.constant(SKIP_REASONS.index(SKIP_NON_FINITE_WEIGHTS)))

    return tf.cond(finite, self.CountApplied, _Undo)

  def _Guarded(self, weights):
    """`weights` and the optimizer's variables, each once: what an undo
    puts back (not an accumulation's accumulators: the window empties)."""
    inner = self._inner
    guarded, seen = [], set()
    for v in list(weights) + list(inner.variables):
      if id(v) not in seen:
        seen.add(id(v))
        guarded.append(v)
    return guarded

  def AgreeAndApply(self, flags, grad_norm, tracker, losses_finite, update,
                    measured=None, held=None):
    """Under several replicas: one skip decision for all, then the update.

    Each replica's `pipeline.SkipFlags` are combined over the replicas in
    one collective (cross_replica.AnyReplica): if any replica would skip,
    every replica skips, for the reason of the combined flags, and counts
    the skip once on its own copy of the counters (all copies stay equal).
    With check_finite_weights the collective comes after a tentative
    update, so that the updated weights' verdict is in it too
    (`_AgreedCheckedApply`).

    Args:
      flags: this replica's `pipeline.SkipFlags`.
      grad_norm: float32 scalar, the all-reduced gradient's norm.
      tracker: None or the GradNormTracker (it records the agreed flags).
      losses_finite: None, or a bool scalar already agreed over replicas.
      update: (lr, var_grads, grads, scaling, applier), as `ApplyOrSkip`.
      measured, held: as `ApplyOrSkip`.

    Returns:
      ({name: value} of `ApplyOrSkip` plus has_nan_or_inf, the agreed
      one as float32 0/1; the agreed has_nan_or_inf, a bool scalar).
    """
    if self._check_finite_weights:
      out, agreed = self._AgreedCheckedApply(flags, grad_norm, tracker,
                                             losses_finite, update, held)
    else:
      agreed = cross_replica.AnyReplica(flags)
      skip = pipeline.AgreedSkip(agreed, grad_norm, tracker)
      out = self.ApplyOrSkip(
          skip, lambda: SkipReason(agreed[0], losses_finite), *update,
          measured=measured, held=held)
    out[pipeline.HAS_NAN_OR_INF] = tf.cast(agreed[0], tf.float32)
    return out, agreed[0]

  def _AgreedCheckedApply(self, flags, grad_norm, tracker, losses_finite,
                          update, held):
    """check_finite_weights under replicas: try, agree once, keep or undo.

    Each replica reads its weights and optimizer variables (as
    `_CheckedApply`), applies the update unless its own flags skip it, and
    checks its updated weights; the flags and that verdict then go through
    one collective. If any replica skipped or got a non-finite weight,
    every replica puts the read values back and counts one skip; else
    every replica counts the update.

    Returns:
      (`held` as the first cond outputs it, the agreed flags: the 3 of
      `SkipFlags` and 'updated weights not finite').
    """
    lr, var_grads, grads, scaling, applier = update
    weights = [vg.var for vg, g in zip(var_grads.Flatten(), grads)
               if g is not None]
    guarded = self._Guarded(weights)
    saved = [v.read_value() for v in guarded]
    names = sorted(held) if held else []
    held_in = (tf.stack([tf.cast(held[k], tf.float32) for k in names])
               if names else tf.zeros([0]))

    def _Try():
      apply_fn, _ = UpdateFn(lr, var_grads, grads, scaling, applier)
      apply_fn()
      return (AllFinite([w.read_value() for w in weights]),
              tf.identity(held_in))

    with tf.control_dependencies(saved):
      finite, packed = tf.cond(tf.reduce_any(tf.stack(flags)),
                               lambda: (tf.constant(True),
                                        tf.identity(held_in)), _Try)
    agreed = cross_replica.AnyReplica(list(flags) +
                                      [tf.logical_not(finite)])
    skip = pipeline.AgreedSkip(agreed[:3], grad_norm, tracker)

    def _Undo():
      for v, value in zip(guarded, saved):
        v.assign(value)
      return self.CountSkipped(tf.where(
          skip, SkipReason(agreed[0], losses_finite),
          SKIP_REASONS.index(SKIP_NON_FINITE_WEIGHTS)))

    tf.cond(tf.logical_or(skip, agreed[3]), _Undo, self.CountApplied)
    return dict(zip(names, tf.unstack(packed, num=len(names)))), agreed


def UpdateFn(lr, var_grads, grads, scaling, applier):
  """(apply_fn, applied): builds the scaled gradients and the update.

  Call it inside the branch that applies: the scaled gradients are built
  there. `applied` is the NestedMap of VarGrad the update gets (grads not
  None); `apply_fn(measure=None)` hands it to `applier` (with a
  kernels.WeightMeasure for var_norm/all), with the scale folded in
  (`ApplyScaled`) when `scaling.foldable`.
  """
  fold = scaling.foldable
  applied = var_grads.Pack([
      VarGrad(vg.var, g)
      for vg, g in zip(var_grads.Flatten(),
                       scaling.Gradients(grads, fold=fold))
  ]).Filter(lambda vg: vg.grad is not None)

  def _Apply(measure=None):
    kw = {} if measure is None else {'_measure': measure}
    if fold:
      applier.ApplyScaled(lr, applied, scaling.scale, **kw)
    else:
      applier.Apply(lr, applied, **kw)

  return _Apply, applied


def _Measure(p, variables, grads, prescale, defer, scattered):
  """pipeline.Norms, or the global norm from slices (`scattered`)."""
  if scattered is not None:
    return cross_replica.ScatteredNorms(grads, prescale)
  return pipeline.Norms(variables, grads, prescale,
                        p.var_norm_metrics and not defer,
                        p.per_variable_norm_metrics)


def _Clip(p, variables, grads, norms, has_nan_or_inf, prescale, metrics):
  """The clipping stages: ClipByNorm -> Scale -> [ClipAdaptive] ->
  ClipByValue; returns (grads, Scaling) and adds their metrics."""
  clip, m = pipeline.ClipByNorm(norms, has_nan_or_inf,
                                p.clip_gradient_norm_to_value,
                                p.clip_gradient_single_norm_to_value)
  metrics.update(m)
  scaling = pipeline.Scale(clip, prescale, p.clip_gradient_value)
  if p.adaptive_clip_ratio:
    grads, scaling, m = pipeline.ClipAdaptive(
        variables, grads, scaling, p.adaptive_clip_ratio, p.adaptive_clip_eps)
    metrics.update(m)
  metrics.update(pipeline.ClipByValue(grads, scaling))
  return grads, scaling


def SkipReason(has_nan_or_inf, losses_finite):
  """int32 scalar: the index in SKIP_REASONS of a skip of this step."""
  reason = tf.where(has_nan_or_inf,
                    SKIP_REASONS.index(SKIP_NON_FINITE_GRADIENT),
                    SKIP_REASONS.index(SKIP_OTHER))
  if losses_finite is not None:
    reason = tf.where(losses_finite, reason,
                      SKIP_REASONS.index(SKIP_NON_FINITE_LOSS))
  return reason


# ---- var_norm/all measured with the update ----------------------------------
# With the Learner's var_norm_metrics alone the weights' norm is taken where
# the update reads them anyway: inside a fused apply op (a
# kernels.WeightMeasure handed down the apply), else in one read before it.


def ScatterReason(p, optimizer, gradient_mask=None, gradient_adjuster=None):
  """None when the learner's gradients can be reduce-scattered, else why not.

  ZeRO-1's flat slices (learner/optimizers/sharded_state.py): a replica
  updates only its slice of each dtype's flat vector, so it needs only its
  slice of the weighted gradient sum (cross_replica.ScatteredMean: one
  reduce-scatter per dtype). Then `PipelineAndApply(scattered=...)` runs
  the pipeline on the slices, which is right only when every stage reads
  whole-gradient scalars (the global norm: one scalar all-reduce of the
  slices' squared norms, `cross_replica.ScatteredNorms`; the NaN/Inf check
  reads it, clipping scales by it). With the weights' all-gather after the
  update a replica sends what a ring all-reduce sends (ZeRO, Rajbhandari
  et al. SC 2020, section 7.2.1). With 2 replicas the slices are the
  all-reduce's bit for bit (a + b); the norm is summed in another order
  (slice by slice, then over replicas), so a clipped update may differ
  from the unsharded one in the last bit of the clip scale: only with
  `scatter_clipped_gradients` does a norm that clips or tracks allow it.

  Args:
    p: the Learner's params.
    optimizer: the learner's built, bound optimizer.
    gradient_mask, gradient_adjuster: as given to `Learner.Apply`.

  Returns:
    None, or a str naming the first thing that keeps the all-reduce.
  """
  state = sharded_state.StateOf(optimizer)
  checks = [
      (state is None or not state.sharded or
       not isinstance(state, sharded_state.ShardedState),
       'no flat-slice sharded state'),
      (sharded_state.Chain(optimizer)[1] is not optimizer,
       'a wrapper or accumulation around the rule'),
      ((p.clip_gradient_norm_to_value or p.grad_norm_to_clip_to_zero or
        p.grad_norm_tracker is not None) and not p.scatter_clipped_gradients,
       'the global norm clips or tracks (scatter_clipped_gradients=False)'),
      (p.l1_regularizer_weight is not None or
       p.l2_regularizer_weight is not None, 'an L1/L2 regularizer'),
      (p.per_variable_norm_metrics, 'per_variable_norm_metrics'),
      (p.clip_gradient_single_norm_to_value, 'single-norm clipping'),
      (p.adaptive_clip_ratio, 'adaptive clipping'),
      (gradient_mask is not None, 'a gradient mask'),
      (gradient_adjuster is not None, 'a gradient adjuster'),
      (kernels.InXla(), 'XLA'),
  ]
  for failed, why in checks:
    if failed:
      return why
  return None


def CoversAll(state, var_grads):
  """True when `var_grads` has a gradient for every variable `state` shards
  (a flat slice spans variables; without one, the all-reduce path raises
  the sharded state's own error)."""
  have = {id(vg.var) for vg in var_grads.Flatten() if vg.grad is not None}
  return all(id(v) in have for layout in state.layouts.values()
             for v in layout.variables)


def MeanOverReplicas(p, optimizer, var_grads, weight, losses_finite,
                     gradient_mask=None, gradient_adjuster=None,
                     replica_local=False):
  """The weighted mean gradient over the replicas: whole, or sliced.

  Args:
    p, optimizer: the learner's params and built, bound optimizer.
    var_grads: NestedMap of VarGrad, this replica's unweighted gradients.
    weight: float32 scalar, this replica's loss weight.
    losses_finite: None or a bool scalar: this replica's losses are finite.
    gradient_mask, gradient_adjuster: as given to `Learner.Apply`.
    replica_local: True when each replica trains its own copy (no mean).

  Returns:
    (var_grads, losses_finite, empty, scattered): the inputs, None, None
    with one replica or replica_local; else cross_replica.AllReduceMean's
    three and None; or, when `ScatterReason` allows it,
    cross_replica.ScatteredMean's three and the learner's variables
    (`PipelineAndApply`'s `scattered`).
  """
  if cross_replica.NumReplicas() <= 1 or replica_local:
    return var_grads, losses_finite, None, None
  state = sharded_state.StateOf(optimizer)
  if (ScatterReason(p, optimizer, gradient_mask, gradient_adjuster) is None
      and CoversAll(state, var_grads)):
    variables = [vg.var for vg in var_grads.Flatten()]
    return cross_replica.ScatteredMean(state, var_grads, weight,
                                       losses_finite) + (variables,)
  return cross_replica.AllReduceMean(var_grads, weight,
                                     losses_finite) + (None,)


def DefersVarNorm(p):
  """True when var_norm/all is measured with the update, not in `Norms`.

  With var_norm_metrics alone (not per variable, no check_finite_weights)
  the Learner measures the weights in `MeasuredApply` / `WeightsHalf`:
  inside a fused apply op the weights' norm costs no read pass of its own.
  Not under XLA, where no fused op runs and a read of a weight inside the
  update's cond makes XLA copy the weight (the Learner passes the metrics
  measured before the cond through it instead).
  """
  return bool(p.var_norm_metrics and not p.per_variable_norm_metrics and
              not p.check_finite_weights and not kernels.InXla())


def WeightsHalf(variables):
  """float32 scalar sum(w^2) / 2 over `variables`, read now (0 if none)."""
  if not variables:
    return tf.constant(0.0)
  return tf.add_n(pipeline.HalfSquaredNorms([v.read_value() for v in variables]))


def MeasuredApply(variables, applied, applier, apply_fn):
  """Runs `apply_fn` and returns sum(w^2) / 2 of `variables` before it.

  When `applier` updates all of `applied` in one fused op (its
  `FusedApplyReason` is None), the op measures the weights it updates as
  it reads them (a kernels.WeightMeasure passed down the apply, returned
  through it; no side channel); the variables without a gradient, which
  no op writes, are read afterwards. Otherwise every
  variable is read and measured first, and the update waits for that sum
  (so no read is alive when the update writes in place).

  Args:
    variables: every variable of the learner (var_norm/all's set).
    applied: list of VarGrad that `apply_fn` updates (grads not None).
    applier: the optimizer (or Window) `apply_fn` calls.
    apply_fn: callable(measure=None) that builds the update, passing
      `measure` (a kernels.WeightMeasure) to the applier's Apply.

  Returns:
    float32 scalar.

  Raises:
    AssertionError: if the fused ops did not update exactly `applied`
      (a bug: FusedApplyReason promised they would).
  """
  fused_reason = getattr(applier, 'FusedApplyReason', None)
  if not applied or fused_reason is None or fused_reason(applied):
    half = WeightsHalf(variables)
    with tf.control_dependencies([half]):
      apply_fn()
    return half
  measure = kernels.WeightMeasure()
  apply_fn(measure)
  expected = {id(vg.var) for vg in applied}
  if measure.variables != expected:
    raise AssertionError(
        'MeasuredApply: the fused ops updated %d variables, expected %d.' %
        (len(measure.variables), len(expected)))
  rest = [v for v in variables if id(v) not in expected]
  return measure.Total() + WeightsHalf(rest)
