"""Row (a): our Learner, one `Learner.Apply` per step inside `tf.function`.

The learner takes symbolic gradients of its loss inside `tf.function`
(docs/DESIGN.md, "Gradients"). To hand it the same fixed gradients as the peer
rows without adding work they do not do, the loss is `FixedGradientsLoss`:
one scalar 0 whose custom gradient with respect to each variable is the
fixed gradient, read from a variable (so no 100 MB constant is baked into
the graph and nothing can be constant-folded). One term for all variables,
not one per variable: the per-variable form cost 4 graph nodes per variable
per step (a zero, its identity, an IdentityN, a ZerosLike) and an AddN,
work no trainer's backward pass does (benchmarks/README.md, "The small-set
step in the trainer's form").
"""

import functools

import numpy as np
import tensorflow as tf

from benchmarks import peer_rows
from params import NestedMap


def LearnerAvailable():
  """(True, '') if learner.learner and its optimizers import, else a note."""
  try:
    from learner import learner as _  # pylint: disable=g-import-not-at-top
    from learner import optimizers as _  # pylint: disable=g-import-not-at-top,reimported
  except ImportError as e:
    return False, ('Learner rows skipped: %s (learner/learner.py or '
                   'learner/optimizers/rules/ has not landed).' % e)
  return True, ''


def FixedGradientsLoss(variables, grad_vars):
  """A float32 scalar 0 whose gradient w.r.t. variables[i] is grad_vars[i].

  One custom gradient over all the variables: tf.gradients of it reads each
  gradient variable once and adds nothing per variable but that read.

  Args:
    variables: list of tf.Variables.
    grad_vars: list of tf.Variables aligned with `variables` (same shapes
      and dtypes), holding the gradients.

  Returns:
    A float32 scalar tensor (always 0). The upstream gradient is ignored: the
    benchmark's loss is this scalar (or a plain sum of them), whose upstream
    gradient is 1.

  Raises:
    ValueError: if the two lists differ in length.
  """
  if len(variables) != len(grad_vars):
    raise ValueError('FixedGradientsLoss: %d variables but %d gradient '
                     'variables; pass one gradient variable per variable.'
                     % (len(variables), len(grad_vars)))

  @tf.custom_gradient
  def Term(*xs):
    del xs

    def Grad(dy):
      del dy
      return [g.read_value() for g in grad_vars]
    return tf.zeros([], tf.float32), Grad

  return Term(*variables)


def FixedGradientTerm(var, grad_var):
  """`FixedGradientsLoss([var], [grad_var])`: a float32 scalar 0 whose
  gradient w.r.t. the tf.Variable `var` is `grad_var`'s value (a variable of
  the same shape and dtype); for a loss summed from terms."""
  return FixedGradientsLoss([var], [grad_var])


def CosineScheduleParams(total_steps, alpha):
  """Params of a cosine multiplier from 1 to `alpha` over `total_steps`.

  Uses schedules.CosineDecay (total_steps, alpha) when it exists, else
  Lingvo's schedules.CosineSchedule (initial_value, final_value,
  total_steps); both give alpha + (1-alpha)*0.5*(1+cos(pi*min(t,T)/T)).

  Raises:
    ImportError: if neither schedule exists yet.
  """
  import schedules  # pylint: disable=g-import-not-at-top
  if hasattr(schedules, 'CosineDecay'):
    return schedules.CosineDecay.Params().Set(total_steps=total_steps,
                                              alpha=alpha)
  if hasattr(schedules, 'CosineSchedule'):
    return schedules.CosineSchedule.Params().Set(
        initial_value=1.0, final_value=alpha, total_steps=total_steps)
  raise ImportError('schedules has neither CosineDecay nor CosineSchedule.')


# Muon's two learners (Muon.TwoLearners): Muon on the variables of rank >=
# 2 (every name ending in /w in both sets), AdamW on the rest.
MUON_MATRICES = r'/w$'
# The variants of our Muon learners each peer is checked against
# (benchmarks/rule_peers.py): (Muon params, AdamW params) overrides.
MUON_VARIANTS = {
    'optax': (dict(), None),  # optax's AdamW part is Nesterov: Nadam.
    'keras': (dict(momentum_form='reference', rate_scaling='moonlight',
                   rms_rate=0.2, epsilon=1e-7),
              dict(epsilon=1e-7, epsilon_form='tf')),
    'torch': (dict(momentum_form='reference', epsilon=1e-7),
              dict(epsilon=1e-8, epsilon_form='optax')),
}


def MuonLearners(learner_params, cfg, variant=None):
  """[Muon learner params, AdamW learner params] of Muon.TwoLearners.

  For cfg 'normuon': NorMuon (its defaults: pytorch-optimizer's; the same
  Newton-Schulz steps and coefficients set explicitly) on the matrices and
  AdamW (no weight decay) on the rest; `variant` must be None. Else:

  Muon with 5 Newton-Schulz steps and coefficients (3.4445, -4.7750,
  2.0315) set explicitly (rule_peers.NS_STEPS / NS_COEFFS, the peers'),
  beta 0.95, rate cfg.lr; AdamW (no weight decay) at cfg.adamw_lr, which
  in the 'optax' variant is Nadam (optax's form, eps 1e-8): the AdamW of
  optax.contrib.muon is `adamw(nesterov=nesterov)`, Nesterov by default.

  Args:
    learner_params: Learner params to copy (clip, schedule, ...).
    cfg: peer_rows.UpdateConfig('muon') or ('normuon').
    variant: a key of MUON_VARIANTS (None: 'optax', the timed default).
  """
  from benchmarks import rule_peers  # pylint: disable=g-import-not-at-top
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  if cfg.optimizer == 'normuon':
    return optimizers.NorMuon.TwoLearners(
        learner_params, MUON_MATRICES, muon=optimizers.NorMuon.Params().Set(
            ns_steps=rule_peers.NS_STEPS, ns_coeffs=list(rule_peers.NS_COEFFS)),
        adamw=optimizers.AdamW.Params().Set(decoupled_weight_decay=0.0),
        muon_learning_rate=cfg.lr, adamw_learning_rate=cfg.adamw_lr)
  muon_kw, adamw_kw = MUON_VARIANTS[variant or 'optax']
  muon = optimizers.Muon.Params().Set(
      beta=0.95, ns_steps=rule_peers.NS_STEPS,
      ns_coeffs=list(rule_peers.NS_COEFFS), **muon_kw)
  if adamw_kw is None:
    adamw = optimizers.Nadam.Params().Set(epsilon=1e-8)
  else:
    adamw = optimizers.AdamW.Params().Set(decoupled_weight_decay=0.0,
                                          **adamw_kw)
  return optimizers.Muon.TwoLearners(
      learner_params, MUON_MATRICES, muon=muon, adamw=adamw,
      muon_learning_rate=cfg.lr, adamw_learning_rate=cfg.adamw_lr)


def _RuleParams(name):
  """Params of a rule other than Momentum/Adam/Muon, or None."""
  from learner import optimizers as o  # pylint: disable=g-import-not-at-top
  rules = {
      'lion': o.Lion.Params, 'nadam': o.Nadam.Params,
      'amsgrad': o.AMSGrad.Params, 'sf_sgd': o.ScheduleFreeSGD.Params,
      'sf_adamw': o.ScheduleFreeAdamW.Params,
      'soap': lambda: o.SOAP.Params().Set(precondition_frequency=10),
      'dog': o.DoG.Params, 'dowg': o.DoWG.Params, 'cocob': o.COCOB.Params,
      'madgrad': o.MADGRAD.Params, 'prodigy': o.Prodigy.Params,
      'dadapt_adamw': o.DAdaptAdamW.Params,
      'mechanic_adam': lambda: o.Mechanic.Params().Set(
          optimizer=o.Adam.Params()),
      'ademamix': o.AdEMAMix.Params,
      'simplified_ademamix': o.SimplifiedAdEMAMix.Params,
      'cautious_adamw': lambda: o.AdamW.Params().Set(cautious=True),
      'shampoo': lambda: o.DistributedShampoo.Params().Set(
          preconditioning_compute_steps=10),
  }
  return rules[name]() if name in rules else None


def OptimizerParams(cfg, accumulate_batches=0):
  """Our optimizer params for a peer_rows.UpdateConfig.

  Args:
    cfg: UpdateConfig ('momentum' -> Momentum(alpha), 'adam' -> Adam; the
      RULE_OPTIMIZERS -> Lion, Nadam, AMSGrad, ScheduleFreeSGD / AdamW with
      their defaults; the NEW_RULES -> SOAP (preconditioner refreshed every
      10 updates), DoG, DoWG, COCOB, MADGRAD, Prodigy, DAdaptAdamW,
      Mechanic around Adam, AdEMAMix, SimplifiedAdEMAMix, AdamW with
      cautious=True, DistributedShampoo (roots every 10 updates), with
      their defaults; Muon: see MuonLearners).
    accumulate_batches: if > 0, wraps it in GradientAccumulation with this
      num_batches.
  """
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  rule = _RuleParams(cfg.optimizer)
  if cfg.optimizer == 'momentum':
    p = optimizers.Momentum.Params().Set(alpha=cfg.momentum)
  elif rule is not None:
    p = rule
  else:
    p = optimizers.Adam.Params().Set(beta1=cfg.beta1, beta2=cfg.beta2,
                                     epsilon=cfg.epsilon)
  if accumulate_batches:
    from learner.optimizers.wrappers import accumulation as gradient_accumulation  # pylint: disable=g-import-not-at-top
    p = gradient_accumulation.GradientAccumulation.Params().Set(
        optimizer=p, num_batches=accumulate_batches)
  return p


class LearnerRow(object):
  """(a) our Learner: Momentum/Adam + global-norm clip + cosine schedule.

  Attributes:
    name: 'learner' or 'learner_jit'.
    learner: the built Learner.
    vars: the model variables it updates.
    eval_metrics: the eval_metrics of the last traced Apply (symbolic).
    steps_per_call: the steps one `step()` runs (1, or the loop's length).
  """

  reference_form = 'tf'

  def __init__(self, cfg, specs, weights, grads, jit_compile=False,
               accumulate_batches=0, name=None, clip=True,
               check_finite_weights=False, fused=True, fetch_metrics=False,
               steps_per_call=1, variant=None):
    """`fused=False` traces the step with the multi-tensor kernels off
    (learner/optimizers/kernels: the pure-TF path, row `learner_fallback`).
    `fetch_metrics=True` makes the step return the eval metrics' values, as
    the trainer's step does (row `learner_jit_metrics`); otherwise they are
    pruned from the traced step (var_norm/all then costs nothing).
    `steps_per_call` > 1 makes one `step()` run that many steps in one
    tf.function call, as the trainer's `TrainLoop` runs a loop's steps
    (row `learner_loop`): the traced step is called once, then in a
    tf.while_loop (parallel_iterations 1), with its metrics fetched; the
    per-call cost of a tf.function (binding, its captured variables'
    inputs, the executor's start) is paid once per call. For cfg 'muon'
    the step runs Muon.TwoLearners' two learners (MuonLearners; `variant`
    picks the numbers a peer is checked against; 'normuon': NorMuon's)."""
    if steps_per_call < 1:
      raise ValueError('LearnerRow: steps_per_call=%r; expected an int >= 1.'
                       % (steps_per_call,))
    from learner import learner as learner_lib  # pylint: disable=g-import-not-at-top
    from learner.optimizers import kernels  # pylint: disable=g-import-not-at-top
    from learner.optimizers import var_grad  # pylint: disable=g-import-not-at-top
    self.name = name or ('learner' + ('_jit' if jit_compile else '') +
                         ('' if fused else '_fallback'))
    self.vars = [tf.Variable(w, name=s.name) for s, w in zip(specs, weights)]
    self.grads = [tf.Variable(g, trainable=False, name=s.name + '_grad')
                  for s, g in zip(specs, grads)]
    self.vmap = NestedMap(
        {var_grad.SanitizedName(s.name): v for s, v in zip(specs, self.vars)})
    p = learner_lib.Learner.Params().Set(
        name='bench', loss_name='loss', learning_rate=cfg.lr,
        clip_gradient_norm_to_value=cfg.clip if clip else 0.0,
        lr_schedule=CosineScheduleParams(cfg.total_steps, cfg.alpha))
    if cfg.optimizer in ('muon', 'normuon'):  # peer_rows.MUON_RULES
      lps = MuonLearners(p, cfg, variant)
    else:
      lps = [p.Set(optimizer=OptimizerParams(cfg, accumulate_batches))]
    if check_finite_weights:
      for lp in lps:
        lp.check_finite_weights = True
    self.learners = [lp.Instantiate() for lp in lps]
    for learner in self.learners:
      learner.Bind(self.vmap)
    self.learner = self.learners[0]
    self._fetch_metrics = fetch_metrics or steps_per_call > 1
    self.steps_per_call = steps_per_call
    one_step = peer_rows.RowFunction(self._Step, jit_compile=jit_compile)
    traced = one_step
    if steps_per_call > 1:
      traced = peer_rows.RowFunction(
          functools.partial(_Loop, one_step, steps_per_call))
    # Each traces once (a test checks it).
    self.functions = [one_step] + ([traced] if steps_per_call > 1 else [])

    def _Step():
      # The path is fixed when the step is traced (the fused one is the
      # default; trace under Active/Disabled so the row is what it says).
      with kernels.Active() if fused else kernels.Disabled():
        return traced()

    self.step = _Step

  def _Step(self):
    loss = FixedGradientsLoss(self.vars, self.grads)
    metrics = {'loss': (loss, tf.constant(1.0))}
    fetched = {}
    for i, learner in enumerate(self.learners):
      _, update_op, eval_metrics = learner.Apply(metrics, self.vmap)
      del update_op  # tf.function runs every stateful op it traced.
      prefix = '' if i == 0 else learner.params.name + '/'
      fetched.update({prefix + k: v for k, (v, _) in eval_metrics.items()})
    return fetched if self._fetch_metrics else None

  def Weights(self):
    return [np.array(v.numpy()) for v in self.vars]


def _Loop(step_fn, num_steps):
  """`num_steps` calls of the traced `step_fn` in one graph, as
  `BaseTask._TrainLoop` runs them: the first outside a tf.while_loop (it
  fixes the carried outputs' structure), the rest inside it."""
  out = step_fn()
  _, out = tf.while_loop(lambda i, unused_out: i < num_steps,
                         lambda i, unused_out: (i + 1, step_fn()),
                         (tf.constant(1), out), parallel_iterations=1)
  return out
