"""Accelerators: faster kernels for a rule's step, one table entry per rule.

A rule's formula is its `_Step` (learner/optimizers/base.py) and nowhere
else. An accelerator runs the same step with a kernel instead of the
rule's TF ops: TF's raw `ResourceApply*` ops (kept for Lingvo's exact
numbers and their speed) and this project's fused multi-tensor ops
(multi_tensor.py). An entry holds no formula: it hands the scalars the
rule's `_Scalars` computed (a NestedMap, field names as the rule's) and the
slots to the kernel.

A rule names its entry with its class attribute `ACCELERATOR`; the base
uses an entry only for the class that named it (a subclass that changes
`_Step` or `_Scalars` loses it, so it never gets its parent's numbers).

  dense(var, grad, slots, s, grad_scale) -> op: one variable, dense grad;
      grad_scale None or a float32 scalar multiplying grad (an entry that
      cannot fold it uses `Scaled`).
  sparse(var, grad, slots, s) -> op: a lazy update of the rows of a merged
      tf.IndexedSlices (grad already scaled).
  multi(variables, grads, slots, s, grad_factor, wd_rate, decay, measure)
      -> op: every variable in one fused op (the arguments of
      multi_tensor.ApplySGD & co; slots a list of {name: variable}); for a
      whole-tensor rule whose step has a middle no elementwise kernel can
      run (Muon's Newton-Schulz), a `Staged` pair of fused ops that the
      rule's `_FusedApply` chains around its middle.
  exact: True when the entry gives `_Step`'s numbers bit for bit
      (tests/test_optimizers/test_accelerators.py checks every entry, bit
      for bit or to float32 rounding).
"""

import collections

import tensorflow as tf

from learner.optimizers.kernels import multi_tensor
from learner.optimizers.kernels import shared_ops

Accelerator = collections.namedtuple(
    'Accelerator', ['dense', 'sparse', 'multi', 'exact'])
# before: the elementwise part before the rule's middle (its inputs the
# gradients); after: the one after it, which writes the weights.
Staged = collections.namedtuple('Staged', ['before', 'after'])


def Scaled(grad, grad_scale):
  """`grad` times `grad_scale` (None: unchanged), for kernels that cannot
  fold the scale."""
  if grad_scale is None:
    return grad
  return shared_ops.ScaleGradient(grad, grad_scale)


def _Eager(op):
  return None if tf.executing_eagerly() else op


def _Factor(grad_factor, s):
  return None if grad_factor is None else tf.cast(grad_factor, s.lr.dtype)


# ---- SGD: s = {lr} ---------------------------------------------------------

def _SgdDense(var, grad, slots, s, grad_scale):
  del slots  # The scale folds into alpha: w <- w - (lr * c) g.
  alpha = tf.cast(s.lr if grad_scale is None else s.lr * grad_scale,
                  var.dtype)
  return tf.raw_ops.ResourceApplyGradientDescent(
      var=var.handle, alpha=alpha, delta=grad, use_locking=False)


def _SgdMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
              measure):
  del slots
  alpha = s.lr if grad_factor is None else s.lr * _Factor(grad_factor, s)
  return multi_tensor.ApplySGD(variables, grads, alpha, wd_rate, decay,
                               measure)


# ---- Momentum: s = {lr, momentum, use_nesterov} ----------------------------

def _MomentumDense(var, grad, slots, s, grad_scale):
  return tf.raw_ops.ResourceApplyMomentum(
      var=var.handle, accum=slots['momentum'].handle, lr=s.lr,
      grad=Scaled(grad, grad_scale), momentum=s.momentum, use_locking=False,
      use_nesterov=s.use_nesterov)


def _MomentumSparse(var, grad, slots, s):
  return tf.raw_ops.ResourceSparseApplyMomentum(
      var=var.handle, accum=slots['momentum'].handle, lr=s.lr,
      grad=grad.values, indices=grad.indices, momentum=s.momentum,
      use_locking=False, use_nesterov=s.use_nesterov)


def _MomentumMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
                   measure):
  return multi_tensor.ApplyMomentum(
      variables, [x['momentum'] for x in slots], grads, s.lr, s.momentum,
      _Factor(grad_factor, s), wd_rate, decay, s.use_nesterov, measure)


# ---- Adam: s = {lr, beta1, beta2, beta1_power, beta2_power, epsilon} -------

def _AdamDense(var, grad, slots, s, grad_scale):
  return tf.raw_ops.ResourceApplyAdam(
      var=var.handle, m=slots['m'].handle, v=slots['v'].handle,
      beta1_power=s.beta1_power, beta2_power=s.beta2_power, lr=s.lr,
      beta1=s.beta1, beta2=s.beta2, epsilon=s.epsilon,
      grad=Scaled(grad, grad_scale), use_locking=False)


def _AdamMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
               measure):
  scalars = (s.beta1_power, s.beta2_power, s.lr, s.beta1, s.beta2,
             s.epsilon)
  return multi_tensor.ApplyAdam(
      variables, [x['m'] for x in slots], [x['v'] for x in slots], grads,
      scalars, _Factor(grad_factor, s), wd_rate, decay, measure)


# ---- Adagrad: s = {lr, epsilon} --------------------------------------------

def _AdagradDense(var, grad, slots, s, grad_scale):
  return tf.raw_ops.ResourceApplyAdagradV2(
      var=var.handle, accum=slots['accumulator'].handle, lr=s.lr,
      epsilon=s.epsilon, grad=Scaled(grad, grad_scale), use_locking=False,
      update_slots=True)


def _AdagradSparse(var, grad, slots, s):
  return tf.raw_ops.ResourceSparseApplyAdagradV2(
      var=var.handle, accum=slots['accumulator'].handle, lr=s.lr,
      epsilon=s.epsilon, grad=grad.values, indices=grad.indices,
      use_locking=False, update_slots=True)


# ---- RMSProp: s = {lr, decay, momentum, epsilon, centered} ------------------

def _RmsArgs(var, slots, s):
  args = dict(var=var.handle, ms=slots['ms'].handle,
              mom=slots['mom'].handle, lr=s.lr, rho=s.decay,
              momentum=s.momentum, epsilon=s.epsilon, use_locking=False)
  if s.centered:
    args['mg'] = slots['mg'].handle
  return args


def _RmsDense(var, grad, slots, s, grad_scale):
  args = _RmsArgs(var, slots, s)
  grad = Scaled(grad, grad_scale)
  if s.centered:
    return tf.raw_ops.ResourceApplyCenteredRMSProp(grad=grad, **args)
  return tf.raw_ops.ResourceApplyRMSProp(grad=grad, **args)


def _RmsSparse(var, grad, slots, s):
  args = _RmsArgs(var, slots, s)
  if s.centered:
    return tf.raw_ops.ResourceSparseApplyCenteredRMSProp(
        grad=grad.values, indices=grad.indices, **args)
  return tf.raw_ops.ResourceSparseApplyRMSProp(
      grad=grad.values, indices=grad.indices, **args)


# ---- AdaDelta: s = {lr, decay, epsilon} --------------------------------------

def _AdaDeltaArgs(var, slots, s):
  return dict(var=var.handle, accum=slots['accum'].handle,
              accum_update=slots['accum_update'].handle, lr=s.lr,
              rho=s.decay, epsilon=s.epsilon, use_locking=False)


def _AdaDeltaDense(var, grad, slots, s, grad_scale):
  return tf.raw_ops.ResourceApplyAdadelta(
      grad=Scaled(grad, grad_scale), **_AdaDeltaArgs(var, slots, s))


def _AdaDeltaSparse(var, grad, slots, s):
  return tf.raw_ops.ResourceSparseApplyAdadelta(
      grad=grad.values, indices=grad.indices, **_AdaDeltaArgs(var, slots, s))


# ---- Lion: s = {lr, beta1, one_minus_beta1, beta2, one_minus_beta2} ---------

def _LionMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
               measure):
  scalars = (s.lr, s.beta1, s.one_minus_beta1, s.beta2, s.one_minus_beta2)
  return multi_tensor.ApplyLion(variables, [x['m'] for x in slots], grads,
                                scalars, _Factor(grad_factor, s), wd_rate,
                                decay, measure)


# ---- Schedule-free SGD / AdamW: s = {lr_z, c, one_minus_c, b1, one_minus_b1,
# wd, decay_on, first} (+ b2, one_minus_b2, correction, epsilon for AdamW) --

def _ScheduleFreeMulti(variables, grads, slots, s, grad_factor, wd_rate,
                       decay, measure):
  del wd_rate  # The rule's weight decay acts inside u: s.wd, not lr * wd.
  scalars = [s.lr_z, s.c, s.one_minus_c, s.b1, s.one_minus_b1, s.wd]
  vs = None
  if 'b2' in s:
    scalars += [s.b2, s.one_minus_b2, s.correction, s.epsilon]
    vs = [x['v'] for x in slots]
  factor = None if grad_factor is None else tf.cast(grad_factor,
                                                    s.lr_z.dtype)
  zs = [x['z'] for x in slots]
  xs = [x['x'] for x in slots]  # The eval weights (schedule_free.EVAL_SLOT).
  return multi_tensor.ApplyScheduleFree(
      variables, zs, xs, vs, grads, s.first, scalars, factor,
      [s.decay_on and d for d in decay], measure)


# ---- Nadam: s = {lr, beta1, one_minus_beta1, beta2, one_minus_beta2, u_next,
#      one_minus_p_next, one_minus_u_t, one_minus_p_t, v_correction, epsilon}

def _NadamMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
                measure):
  scalars = (s.lr, s.beta1, s.one_minus_beta1, s.beta2, s.one_minus_beta2,
             s.u_next, s.one_minus_p_next, s.one_minus_u_t, s.one_minus_p_t,
             s.v_correction, s.epsilon)
  return multi_tensor.ApplyNadam(
      variables, [x['m'] for x in slots], [x['v'] for x in slots], grads,
      scalars, _Factor(grad_factor, s), wd_rate, decay, measure)


# ---- AMSGrad: s = {lr, beta1, one_minus_beta1, beta2, one_minus_beta2,
#      m_correction, v_correction (None: no correction), epsilon} ----------

def _AMSGradMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
                  measure):
  # The kernel always divides: a correction that is off is 1.0 (x / 1 = x
  # exactly, the rule's numbers without the division).
  one = tf.constant(1.0, s.lr.dtype)
  k1 = one if s.m_correction is None else s.m_correction
  k2 = one if s.v_correction is None else s.v_correction
  scalars = (s.lr, s.beta1, s.one_minus_beta1, s.beta2, s.one_minus_beta2,
             k1, k2, s.epsilon)
  return multi_tensor.ApplyAMSGrad(
      variables, [x['m'] for x in slots], [x['v'] for x in slots],
      [x['v_max'] for x in slots], grads, scalars, _Factor(grad_factor, s),
      wd_rate, decay, measure)


# ---- AdEMAMix: s = {lr, beta1, one_minus_beta1, beta2, one_minus_beta2,
#      beta3, one_minus_beta3, correction1, correction2, alpha, epsilon} ---

def _AdEMAMixMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
                   measure):
  scalars = (s.lr, s.beta1, s.one_minus_beta1, s.beta2, s.one_minus_beta2,
             s.beta3, s.one_minus_beta3, s.correction1, s.correction2,
             s.alpha, s.epsilon)
  return multi_tensor.ApplyAdEMAMix(
      variables, *[[x[k] for x in slots] for k in ('m1', 'm2', 'nu')], grads,
      scalars, _Factor(grad_factor, s), wd_rate, decay, measure)


# ---- Simplified AdEMAMix: s = {lr, beta1, beta2, one_minus_beta2,
#      correction2, alpha, epsilon} ----------------------------------------

def _SimplifiedAdEMAMixMulti(variables, grads, slots, s, grad_factor,
                             wd_rate, decay, measure):
  scalars = (s.lr, s.beta1, s.beta2, s.one_minus_beta2, s.correction2,
             s.alpha, s.epsilon)
  return multi_tensor.ApplySimplifiedAdEMAMix(
      variables, [x['m'] for x in slots], [x['nu'] for x in slots], grads,
      scalars, _Factor(grad_factor, s), wd_rate, decay, measure)


# ---- COCOB: s = {lr, alpha, first} ------------------------------------------

_COCOB_SLOTS = ('x0', 'scale', 'subgradients', 'reward',
                'cumulative_gradients')


def _CocobMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
                measure):
  # The step's lr (g f) runs as g (f lr) in a traced step (grappler's
  # arithmetic optimizer joins the two scalars, MinimizeBroadcasts), so
  # with a clip scale the kernel takes f lr as its factor and a rate of 1
  # (exact): the traced pure-TF numbers bit for bit (eagerly, or with
  # grappler's arithmetic optimizer off, to float32 rounding).
  lr, factor = s.lr, _Factor(grad_factor, s)
  if factor is not None:
    lr, factor = tf.constant(1.0, s.lr.dtype), factor * s.lr
  return multi_tensor.ApplyCOCOB(
      variables, [[x[k] for x in slots] for k in _COCOB_SLOTS], grads,
      s.first, (lr, s.alpha), factor, wd_rate, decay, measure)


# ---- MADGRAD: s = {lr, lamb, epsilon, momentum, one_minus_momentum, first} -

def _MadgradMulti(variables, grads, slots, s, grad_factor, wd_rate, decay,
                  measure):
  scalars = (s.lamb, s.epsilon, s.momentum, s.one_minus_momentum)
  return multi_tensor.ApplyMADGRAD(
      variables, *[[x[k] for x in slots] for k in ('x0', 's', 'grad_sum_sq')],
      grads, s.first, scalars, _Factor(grad_factor, s), wd_rate, decay,
      measure)


# ---- Muon: s = {lr, beta, one_minus_beta, one_minus_beta_f32, nesterov,
#      and for momentum_form 'optax' correction, next_correction} --------
# Staged: the momentum op gives the directions u, the rule orthogonalises
# them (Newton-Schulz, in TF) and computes each variable's rate lr * s, the
# apply op writes w - rate * O (and the decay).

def _GrapplerJoinsScalars():
  """True when the op is traced into a graph that grappler's arithmetic
  optimizer rewrites (a tf.function with TF's default optimizer options)."""
  if tf.executing_eagerly():
    return False
  options = tf.config.optimizer.get_experimental_options()
  return not (options.get('disable_meta_optimizer') or
              options.get('arithmetic_optimization') is False)


def _MuonBefore(grads, slots, s, grad_factor):
  correct = 'correction' in s  # momentum_form 'optax'.
  one = tf.constant(1.0, s.beta.dtype)  # Unused by the op without it.
  c1, factor = s.one_minus_beta, _Factor(grad_factor, s)
  if factor is not None and not s.nesterov and _GrapplerJoinsScalars():
    # Without Nesterov the scaled g = g f has one consumer, (1 - beta) g,
    # so in a traced step grappler's arithmetic optimizer joins the two
    # scalars (MinimizeBroadcasts): the pure-TF step computes ((1 - beta)
    # f) g there, and c1 (g f) eagerly. The op takes the same scalars:
    # bit for bit both ways (tests/test_optimizers/test_muon_fused.py).
    c1, factor = c1 * factor, None
  scalars = (s.beta, c1, s.one_minus_beta_f32,
             s.correction if correct else one,
             s.next_correction if correct else one)
  return multi_tensor.MuonMomentum([x['m'] for x in slots], grads, scalars,
                                   factor, s.nesterov, correct)


def _MuonAfter(variables, directions, rates, wd_rate, decay, merged_decay,
               measure):
  return multi_tensor.ApplyMuon(variables, directions, tf.stack(rates),
                                wd_rate, decay, merged_decay, measure)


# The table. Keys are the rules' ACCELERATOR names.
ACCELERATORS = {
    'sgd': Accelerator(_SgdDense, None, _SgdMulti, exact=True),
    'momentum': Accelerator(_MomentumDense, _MomentumSparse, _MomentumMulti,
                            exact=False),
    'adam': Accelerator(_AdamDense, None, _AdamMulti, exact=False),
    'adagrad': Accelerator(_AdagradDense, _AdagradSparse, None, exact=False),
    'rmsprop': Accelerator(_RmsDense, _RmsSparse, None, exact=False),
    'adadelta': Accelerator(_AdaDeltaDense, _AdaDeltaSparse, None,
                            exact=False),
    'lion': Accelerator(None, None, _LionMulti, exact=True),
    'schedule_free': Accelerator(None, None, _ScheduleFreeMulti, exact=True),
    'nadam': Accelerator(None, None, _NadamMulti, exact=True),
    'amsgrad': Accelerator(None, None, _AMSGradMulti, exact=True),
    'ademamix': Accelerator(None, None, _AdEMAMixMulti, exact=True),
    'simplified_ademamix': Accelerator(None, None, _SimplifiedAdEMAMixMulti,
                                       exact=True),
    'cocob': Accelerator(None, None, _CocobMulti, exact=True),
    # Bit for bit: the kernel's cube root repeats MADGRAD's CubeRoot
    # formula (multi_tensor_rules.cc), not TF's Pow.
    'madgrad': Accelerator(None, None, _MadgradMulti, exact=True),
    'muon': Accelerator(None, None, Staged(_MuonBefore, _MuonAfter),
                        exact=True),
}


def Register(name, accelerator):
  """Adds `accelerator` (an Accelerator) under `name` to the table.

  For rules outside this package (or the ones added later in it): the rule
  sets `ACCELERATOR = name`.

  Raises:
    ValueError: `name` is taken.
  """
  if name in ACCELERATORS:
    raise ValueError('accelerator %r is registered already; pick another '
                     'name.' % name)
  ACCELERATORS[name] = accelerator
