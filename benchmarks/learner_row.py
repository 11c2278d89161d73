"""Row (a): our Learner, one `Learner.Apply` per step inside `tf.function`.

The learner takes symbolic gradients of its loss inside `tf.function`
(docs/DESIGN.md, "Gradients"). To hand it the same fixed gradients as the peer
rows without adding work they do not do, the loss is a sum of one
`FixedGradientTerm` per variable: a scalar 0 whose custom gradient with
respect to the variable is the fixed gradient, read from a variable (so no
100 MB constant is baked into the graph and nothing can be constant-folded).
"""

import numpy as np
import tensorflow as tf

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


def FixedGradientTerm(var, grad_var):
  """A float32 scalar 0 whose gradient w.r.t. `var` is `grad_var`'s value.

  Args:
    var: a tf.Variable.
    grad_var: a tf.Variable of the same shape and dtype holding the gradient.

  Returns:
    A float32 scalar tensor (always 0). The upstream gradient is ignored: the
    benchmark's loss is a plain sum, whose upstream gradient is 1.
  """

  @tf.custom_gradient
  def Term(x):
    def Grad(dy):
      del dy
      return grad_var.read_value()
    return tf.zeros([], tf.float32), Grad

  return Term(var)


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


def OptimizerParams(cfg, accumulate_batches=0):
  """Our optimizer params for a peer_rows.UpdateConfig.

  Args:
    cfg: UpdateConfig ('momentum' -> Momentum(alpha), 'adam' -> Adam; the
      RULE_OPTIMIZERS -> Lion, Nadam, AMSGrad, ScheduleFreeSGD / AdamW with
      their defaults).
    accumulate_batches: if > 0, wraps it in GradientAccumulation with this
      num_batches.
  """
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  rules = {
      'lion': lambda: optimizers.Lion.Params(),
      'nadam': lambda: optimizers.Nadam.Params(),
      'amsgrad': lambda: optimizers.AMSGrad.Params(),
      'sf_sgd': lambda: optimizers.ScheduleFreeSGD.Params(),
      'sf_adamw': lambda: optimizers.ScheduleFreeAdamW.Params(),
  }
  if cfg.optimizer == 'momentum':
    p = optimizers.Momentum.Params().Set(alpha=cfg.momentum)
  elif cfg.optimizer in rules:
    p = rules[cfg.optimizer]()
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
               steps_per_call=1):
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
    inputs, the executor's start) is paid once per call."""
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
        optimizer=OptimizerParams(cfg, accumulate_batches),
        lr_schedule=CosineScheduleParams(cfg.total_steps, cfg.alpha))
    if check_finite_weights:
      p.check_finite_weights = True
    self.learner = p.Instantiate()
    self.learner.Bind(self.vmap)
    self._fetch_metrics = fetch_metrics or steps_per_call > 1
    self.steps_per_call = steps_per_call
    one_step = tf.function(self._Step, jit_compile=jit_compile)
    traced = one_step
    if steps_per_call > 1:
      traced = tf.function(lambda: _Loop(one_step, steps_per_call))

    def _Step():
      # The path is fixed when the step is traced (the fused one is the
      # default; trace under Active/Disabled so the row is what it says).
      with kernels.Active() if fused else kernels.Disabled():
        return traced()

    self.step = _Step

  def _Step(self):
    loss = tf.add_n([FixedGradientTerm(v, g)
                     for v, g in zip(self.vars, self.grads)])
    metrics = {'loss': (loss, tf.constant(1.0))}
    _, update_op, eval_metrics = self.learner.Apply(metrics, self.vmap)
    del update_op  # tf.function runs every stateful op it traced.
    if self._fetch_metrics:
      return {k: v for k, (v, _) in eval_metrics.items()}
    return None

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
