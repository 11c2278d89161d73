"""Python entry points of the multi-tensor kernels, with their conditions.

Each function either runs one fused op over a list of tensors or returns
None, and the caller then runs its pure-TF path (the same updates; the
norm to float32 rounding: see
multi_tensor_ops.cc). The fused path runs when

  * it is not switched off ($TF_LEARNER_FUSED_KERNELS=0 or
    `loader.Disabled()`; on by default, see loader.py) and the library is
    built and loaded;
  * the step is not compiled by XLA (`jit_compile=True`): XLA fuses the
    pure-TF update itself and cannot compile a custom op;
  * no distribution strategy is active (its variables and replica contexts
    stay on the pure-TF path) and no GPU is visible (the ops are CPU-only);
  * every tensor is a dense float32 tensor (variables: float32 resource
    variables), each variable at most once.

The path taken is logged once per (what, path) pair with absl logging.
"""

import functools

from absl import logging
import tensorflow as tf

from learner.optimizers.kernels import loader
from learner.optimizers.kernels import shared_ops


def Unsupported(variables=(), tensors=()):
  """None if the fused ops may run on these, else the reason (str).

  Args:
    variables: variables to be updated in place (float32 resource variables,
      each once).
    tensors: dense tensors to be read (float32 tf.Tensor; None entries are
      allowed and skipped by the callers).
  """
  if not loader.Enabled():
    return ('$%s=0 (the fused path is switched off)' % loader.ENV_SWITCH)
  # The cheap reasons first: under XLA, a strategy or a GPU the library is
  # never built (its first-use compile costs ~20 s on a cluster's nodes).
  if shared_ops.InXla():
    return 'the step is compiled by XLA (jit_compile=True)'
  if tf.distribute.has_strategy():
    return 'a tf.distribute strategy is active'
  if _HasGpu():
    return 'a GPU is visible (the ops are CPU-only)'
  reason = loader.Unavailable()
  if reason:
    return reason
  seen = set()
  for v in variables:
    if isinstance(v, tf.distribute.DistributedValues):
      # Its `handle` is one replica's: the others would be left out.
      return 'variable %s is distributed (%s)' % (v.name, type(v).__name__)
    if v.dtype != tf.float32 or not hasattr(v, 'handle'):
      return 'variable %s is %s, not a float32 resource variable' % (
          v.name, v.dtype.name)
    if id(v) in seen:
      return 'variable %s appears twice' % v.name
    seen.add(id(v))
  for t in tensors:
    if t is None:
      continue
    if isinstance(t, tf.IndexedSlices) or t.dtype != tf.float32:
      return 'a gradient is %s %s, not a dense float32 tensor' % (
          type(t).__name__, t.dtype.name)
  return None


def LogPath(what, reason):
  """Logs once per process which path `what` takes (reason None: fused)."""
  _LogOnce(what, reason)


@functools.lru_cache(maxsize=None)
def _LogOnce(what, reason):
  if reason is None:
    logging.info('tf_learner kernels: %s runs the fused multi-tensor op.',
                 what)
  else:
    logging.info('tf_learner kernels: %s runs the pure-TF path (%s).', what,
                 reason)


def HalfSumSquares(tensors, what='gradient norms'):
  """sum(t^2) / 2 of each tensor, their total and a finite flag, in one op.

  Args:
    tensors: list of float32 Tensors, tf.IndexedSlices (their values) or
      None (counts 0).
    what: name for the log line.

  Returns:
    None when the fused op cannot run; else (half, total, finite): a list
    like `tensors` of float32 scalars (sums accumulated in float64, then
    rounded), the float32 total and a bool scalar, True if the float32
    total is finite (False for any NaN or Inf, or an overflowing sum, as
    is_finite(add_n(l2_loss)) decides).
  """
  values = [t.values if isinstance(t, tf.IndexedSlices) else t
            for t in tensors]
  present = [t for t in values if t is not None]
  reason = Unsupported(tensors=present) if present else 'no tensor'
  LogPath(what, reason)
  if reason:
    return None
  vec, total, finite = loader.Library().tf_learner_multi_sum_squares(present)
  parts = iter(tf.unstack(vec, num=len(present)))
  half = [tf.constant(0.0) if t is None else next(parts) for t in values]
  return half, total, finite


class WeightMeasure(object):
  """What the apply ops given it (`measure=`) measured of their old weights.

  The sum of squares of each chunk of weights is taken just before the op
  updates that chunk (still in cache), so the weights' norm before the
  update costs no read pass of its own (the Learner's var_norm/all). The
  caller makes one, passes it down the apply (`BaseOptimizer.Apply`'s
  `_measure`) and reads it after; variables updated by the pure-TF path
  are not in it (callers compare `variables` with what they expected).

  Attributes:
    halves: list of float32 scalars, each sum(w_old^2) / 2 over one apply
      op's variables (before that op's update).
    variables: ids of the variables those ops updated (and measured).
  """

  def __init__(self):
    self.halves = []
    self.variables = set()

  def Total(self):
    """float32 scalar: the sum of `halves` (0.0 if nothing was measured)."""
    return tf.add_n(self.halves + [tf.constant(0.0)])


def _Run(op_fn, variables, *args, measure=None, **attrs):
  """Runs one apply op; with a WeightMeasure, the op also measures into it."""
  out = op_fn(*args, measure_weights=measure is not None, **attrs)
  if measure is not None:
    measure.halves.append(out)
    measure.variables.update(id(v) for v in variables)
  return None if tf.executing_eagerly() else out.op


def ApplySGD(variables, grads, alpha, wd_rate, decay, measure=None):
  """SGD's step for every pair in one op (TfLearnerMultiApplySGD); decay below.

  The step is SGD's (learner/optimizers/base.py), in the order of TF's
  ResourceApplyGradientDescent.

  Args:
    variables, grads: aligned lists (float32; dense grads).
    alpha: float32 scalar step (lr, times the folded gradient scale).
    wd_rate: float32 scalar lr * wd; `decay` (list of bool, one per
      variable) says which variables subtract wd_rate * w_old after.

    measure: None, or a WeightMeasure the op adds sum(w_old^2) / 2 of
      `variables` to (as every apply below).

  Returns:
    The op (None eagerly).
  """
  return _Run(loader.Library().tf_learner_multi_apply_sgd, variables,
              [v.handle for v in variables], grads, alpha, wd_rate,
              measure=measure, decay=decay)


def ApplyMomentum(variables, accums, grads, lr, momentum, grad_factor,
                  wd_rate, decay, use_nesterov, measure=None):
  """TF's ResourceApplyMomentum over lists, g * grad_factor folded in.

  Momentum's step (learner/optimizers/rules/momentum.py) on g * f, in TF's
  order; grad_factor None means f = 1 (not multiplied). Other args and the
  result as `ApplySGD`; `accums` aligned with `variables`.
  """
  scale = grad_factor is not None
  factor = grad_factor if scale else tf.constant(1.0)
  return _Run(loader.Library().tf_learner_multi_apply_momentum, variables,
              [v.handle for v in variables], [a.handle for a in accums],
              grads, lr, momentum, factor, wd_rate, measure=measure,
              decay=decay, use_nesterov=use_nesterov, scale_grad=scale)


def ApplyAdam(variables, ms, vs, grads, scalars, grad_factor, wd_rate,
              decay, measure=None):
  """TF's ResourceApplyAdam over lists, g * grad_factor folded in.

  Args:
    variables, ms, vs, grads: aligned lists.
    scalars: (beta1_power, beta2_power, lr, beta1, beta2, epsilon), float32
      scalars as ResourceApplyAdam takes them.
    grad_factor: None (f = 1) or a float32 scalar multiplying each g.
    wd_rate, decay, measure: as `ApplySGD`.

  Returns:
    As `ApplySGD`.
  """
  scale = grad_factor is not None
  factor = grad_factor if scale else tf.constant(1.0)
  return _Run(loader.Library().tf_learner_multi_apply_adam, variables,
              [v.handle for v in variables], [m.handle for m in ms],
              [v.handle for v in vs], grads, *scalars, factor, wd_rate,
              measure=measure, decay=decay, scale_grad=scale)


def _Factor(grad_factor):
  """(scale_grad attr, factor input): grad_factor None means f = 1, unused."""
  scale = grad_factor is not None
  return scale, grad_factor if scale else tf.constant(1.0)


def ApplyLion(variables, ms, grads, scalars, grad_factor, wd_rate, decay,
              measure=None):
  """Lion over lists (TfLearnerMultiApplyLion, multi_tensor_rules.cc).

  Lion's step (learner/optimizers/rules/lion.py), with g * grad_factor
  folded in.

  Args:
    variables, ms, grads: aligned lists (float32; dense grads).
    scalars: (lr, beta1, 1 - beta1, beta2, 1 - beta2), float32 scalars as
      the pure-TF path computes them.
    grad_factor, wd_rate, decay, measure: as `ApplyAdam`.

  Returns:
    As `ApplySGD`.
  """
  scale, factor = _Factor(grad_factor)
  return _Run(loader.Library().tf_learner_multi_apply_lion, variables,
              [v.handle for v in variables], [m.handle for m in ms], grads,
              *scalars, factor, wd_rate, measure=measure, decay=decay,
              scale_grad=scale)


def ApplyNadam(variables, ms, vs, grads, scalars, grad_factor, wd_rate,
               decay, measure=None):
  """Nadam over lists (TfLearnerMultiApplyNadam, multi_tensor_rules.cc).

  Nadam's step (learner/optimizers/rules/adam_family.py, Nadam), with
  g * grad_factor folded in.

  Args:
    variables, ms, vs, grads: aligned lists.
    scalars: (lr, b1, 1 - b1, b2, 1 - b2, u', 1 - P', 1 - u, 1 - P,
      1 - b2^t, eps): float32 scalars as the pure-TF path computes them
      (rules/adam_family.py, Nadam).
    grad_factor, wd_rate, decay, measure: as `ApplyAdam`.

  Returns:
    As `ApplySGD`.
  """
  scale, factor = _Factor(grad_factor)
  return _Run(loader.Library().tf_learner_multi_apply_nadam, variables,
              [v.handle for v in variables], [m.handle for m in ms],
              [v.handle for v in vs], grads, *scalars, factor, wd_rate,
              measure=measure, decay=decay, scale_grad=scale)


def ApplyAMSGrad(variables, ms, vs, v_maxs, grads, scalars, grad_factor,
                 wd_rate, decay, measure=None):
  """AMSGrad over lists (TfLearnerMultiApplyAMSGrad, multi_tensor_rules.cc).

  AMSGrad's step (learner/optimizers/rules/adam_family.py, AMSGrad), with
  g * grad_factor folded in.

  Args:
    variables, ms, vs, v_maxs, grads: aligned lists.
    scalars: (lr, b1, 1 - b1, b2, 1 - b2, k1, k2, eps): float32 scalars;
      k1, k2 the bias corrections 1 - b^t, or 1.0 for none (exact).
    grad_factor, wd_rate, decay, measure: as `ApplyAdam`.

  Returns:
    As `ApplySGD`.
  """
  scale, factor = _Factor(grad_factor)
  return _Run(loader.Library().tf_learner_multi_apply_ams_grad, variables,
              [v.handle for v in variables], [m.handle for m in ms],
              [v.handle for v in vs], [v.handle for v in v_maxs], grads,
              *scalars, factor, wd_rate, measure=measure, decay=decay,
              scale_grad=scale)


def ApplyScheduleFree(variables, zs, xs, vs, grads, first, scalars,
                      grad_factor, decay, measure=None):
  """Schedule-free SGD (vs None) or AdamW over lists, in one op.

  TfLearnerMultiApplyScheduleFreeSGD / ...AdamW (multi_tensor_rules.cc):
  the schedule-free step (learner/optimizers/rules/schedule_free.py,
  `_ScheduleFree._UpdateOne`) on y = the variable, with g * grad_factor
  folded in; the weight decay wd y is applied where `decay` is true.

  Args:
    variables (y), zs, xs, vs (None for SGD), grads: aligned lists.
    first: bool scalar, True at the first update (z and x start from y).
    scalars: (lr_z, c, 1 - c, b1, 1 - b1, wd) float32 scalars, then for
      AdamW (b2, 1 - b2, 1 - b2^t, eps).
    grad_factor, decay, measure: as `ApplyAdam` (wd here is the rule's
      decoupled_weight_decay, applied inside u).

  Returns:
    As `ApplySGD`.
  """
  scale, factor = _Factor(grad_factor)
  handles = [[t.handle for t in group] for group in (variables, zs, xs)]
  if vs is None:
    op_fn = loader.Library().tf_learner_multi_apply_schedule_free_sgd
  else:
    op_fn = loader.Library().tf_learner_multi_apply_schedule_free_adam_w
    handles.append([v.handle for v in vs])
  return _Run(op_fn, variables, *handles, grads, first, *scalars, factor,
              measure=measure, decay=decay, scale_grad=scale)


def _ApplyRule(op_fn, variables, slot_groups, grads, head, scalars,
               grad_factor, wd_rate, decay, measure):
  """One op of multi_tensor_rules.cc: variables, each slot group, grads,
  the `head` inputs (e.g. `first`), scalars, factor, wd_rate."""
  scale, factor = _Factor(grad_factor)
  handles = [[t.handle for t in group] for group in [variables] + slot_groups]
  return _Run(op_fn, variables, *handles, grads, *head, *scalars, factor,
              wd_rate, measure=measure, decay=decay, scale_grad=scale)


def ApplyAdEMAMix(variables, m1s, m2s, nus, grads, scalars, grad_factor,
                  wd_rate, decay, measure=None):
  """AdEMAMix over lists (TfLearnerMultiApplyAdEMAMix, multi_tensor_rules.cc).

  AdEMAMix's step (learner/optimizers/rules/ademamix.py), with
  g * grad_factor folded in.

  Args:
    variables, m1s, m2s, nus, grads: aligned lists (float32; dense grads).
    scalars: (lr, b1, 1 - b1, b2, 1 - b2, b3, 1 - b3, 1 - b1^t, 1 - b2^t,
      alpha, eps): float32 scalars as the pure-TF path computes them.
    grad_factor, wd_rate, decay, measure: as `ApplyAdam`.

  Returns:
    As `ApplySGD`.
  """
  return _ApplyRule(loader.Library().tf_learner_multi_apply_ad_ema_mix,
                    variables, [m1s, m2s, nus], grads, (), scalars,
                    grad_factor, wd_rate, decay, measure)


def ApplySimplifiedAdEMAMix(variables, ms, nus, grads, scalars, grad_factor,
                            wd_rate, decay, measure=None):
  """Simplified AdEMAMix over lists (TfLearnerMultiApplySimplifiedAdEMAMix).

  The step of learner/optimizers/rules/simplified_ademamix.py, with
  g * grad_factor folded in.

  Args:
    variables, ms, nus, grads: aligned lists.
    scalars: (lr, b1, b2, 1 - b2, 1 - b2^t, alpha, eps): float32 scalars.
    grad_factor, wd_rate, decay, measure: as `ApplyAdam`.

  Returns:
    As `ApplySGD`.
  """
  lib = loader.Library()
  return _ApplyRule(lib.tf_learner_multi_apply_simplified_ad_ema_mix,
                    variables, [ms, nus], grads, (), scalars, grad_factor,
                    wd_rate, decay, measure)


def ApplyCOCOB(variables, slot_groups, grads, first, scalars, grad_factor,
               wd_rate, decay, measure=None):
  """COCOB-Backprop over lists (TfLearnerMultiApplyCOCOB).

  The step of learner/optimizers/rules/cocob.py on g * grad_factor.

  Args:
    variables, grads: aligned lists; slot_groups: five aligned lists, the
      slots x0, scale (L), subgradients (G), reward (R),
      cumulative_gradients (C).
    first: bool scalar, True at the first update (x0 is taken from w).
    scalars: (lr, alpha): float32 scalars.
    grad_factor, wd_rate, decay, measure: as `ApplyAdam`.

  Returns:
    As `ApplySGD`.
  """
  return _ApplyRule(loader.Library().tf_learner_multi_apply_cocob,
                    variables, slot_groups, grads, (first,), scalars,
                    grad_factor, wd_rate, decay, measure)


def ApplyMADGRAD(variables, x0s, ss, nus, grads, first, scalars, grad_factor,
                 wd_rate, decay, measure=None):
  """MADGRAD over lists (TfLearnerMultiApplyMADGRAD, multi_tensor_rules.cc).

  The step of learner/optimizers/rules/madgrad.py on g * grad_factor, bit
  for bit (its cube root is the rule's `CubeRoot` formula, op for op).

  Args:
    variables, x0s, ss, nus (grad_sum_sq), grads: aligned lists.
    first: bool scalar, True at the first update (x0 is taken from w).
    scalars: (lambda_k, eps, momentum, 1 - momentum): float32 scalars.
    grad_factor, wd_rate, decay, measure: as `ApplyAdam`.

  Returns:
    As `ApplySGD`.
  """
  return _ApplyRule(loader.Library().tf_learner_multi_apply_madgrad,
                    variables, [x0s, ss, nus], grads, (first,), scalars,
                    grad_factor, wd_rate, decay, measure)


def MuonMomentum(ms, grads, scalars, grad_factor, nesterov,
                 bias_correction):
  """Muon's momentum and directions over lists (TfLearnerMultiMuonMomentum).

  m <- beta m + (1 - beta) g in place and u, the direction Newton-Schulz
  orthogonalises (learner/optimizers/rules/muon.py, `Muon._Momentum`), in
  one op, g * grad_factor folded in.

  Args:
    ms: float32 slot variables; grads: aligned dense float32 tensors.
    scalars: (beta, 1 - beta rounded from float64, 1 - beta computed in
      float32, 1 - beta^t, 1 - beta^(t+1)): float32 scalars as the pure-TF
      path computes them (the corrections unused when not bias_correction).
    grad_factor: None (f = 1) or a float32 scalar multiplying each g.
    nesterov, bias_correction: Python bools (Muon's nesterov, and its
      momentum_form 'optax').

  Returns:
    A list of float32 tensors u, each its gradient's shape.
  """
  scale, factor = _Factor(grad_factor)
  return loader.Library().tf_learner_multi_muon_momentum(
      [m.handle for m in ms], grads, *scalars, factor, nesterov=nesterov,
      bias_correction=bias_correction, scale_grad=scale)


def ApplyMuon(variables, directions, rates, wd_rate, decay, merged_decay,
              measure=None):
  """w <- w - rate * o for every pair, in one op (TfLearnerMultiApplyMuon).

  Muon's last step (rules/muon.py, `Muon._Finish`): o the orthogonalised
  direction, shaped as its variable.

  Args:
    variables, directions: aligned lists (float32).
    rates: float32 vector, one rate lr * s per variable.
    wd_rate, decay, measure: as `ApplySGD`.
    merged_decay: Python bool: subtract the decay in the same delta, w -
      (rate o + wd_rate w_old) (Muon's batched path), instead of after it.

  Returns:
    As `ApplySGD`.
  """
  return _Run(loader.Library().tf_learner_multi_apply_muon, variables,
              [v.handle for v in variables], directions, rates, wd_rate,
              measure=measure, decay=decay, merged_decay=merged_decay)


def Accumulate(accumulators, grads, weight):
  """acc += weight * g for every pair if every g is finite, in one op.

  Args:
    accumulators: float32 variables; grads: aligned dense float32 tensors.
    weight: float32 scalar.

  Returns:
    None when the fused op cannot run (checked here, logged once); else a
    bool scalar: True if the gradients were finite and added, False if they
    were left out (no accumulator changed). The finite test is the pure-TF
    path's: the float32 sum of squares is finite.
  """
  reason = Unsupported(accumulators, grads)
  LogPath('gradient accumulation', reason)
  if reason:
    return None
  return loader.Library().tf_learner_multi_accumulate(
      [a.handle for a in accumulators], grads, weight)


def Zero(variables):
  """Sets every variable to 0 in place, in one op (TfLearnerMultiZero).

  Args:
    variables: float32 resource variables (each once), e.g. accumulators.

  Returns:
    None when the fused op cannot run (checked here, logged once; the
    caller then assigns zeros); else the op in a graph, or True eagerly.
  """
  reason = Unsupported(variables)
  LogPath('accumulator zeroing', reason)
  if reason:
    return None
  op = loader.Library().tf_learner_multi_zero([v.handle for v in variables])
  return True if op is None else op


@functools.lru_cache(maxsize=None)
def _HasGpu():
  return bool(tf.config.list_logical_devices('GPU'))
