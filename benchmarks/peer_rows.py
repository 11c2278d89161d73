"""The baseline rows every update benchmark is measured against.

Each row owns its own copy of the variables (initialised from the same numpy
values), its own optimizer state and the fixed gradients, and exposes:
  * `name`: the row's label in the table;
  * `step()`: runs one synchronous update step (clip by global norm 1.0,
    cosine-scheduled rate, Momentum(0.9) or Adam);
  * `Weights()`: the current weights as a list of numpy arrays;
  * `reference_form`: which numpy reference form its semantics follow.

Rows:
  * `TfFusedRow` (b): a hand-written `tf.function` over the gradients held
    in variables: `tf.clip_by_global_norm`, then one fused
    `tf.raw_ops.ResourceApplyMomentum` / `ResourceApplyAdam` per variable;
    optionally `jit_compile=True`.
  * `KerasRow` (c): Keras 3 `SGD(momentum)` / `Adam` with `global_clipnorm`
    and `CosineDecay`, `apply_gradients` inside `tf.function`.
  * `OptaxRow` (d): optax `chain(clip_by_global_norm, sgd(momentum) | adam)`
    with `cosine_decay_schedule` under `jax.jit` with donated buffers.
    `OptaxAvailable()` says whether jax and optax import (the optional
    `bench` extra).
"""

import functools
import math

import numpy as np
import tensorflow as tf


# The rules with fused kernels in learner/optimizers/kernels/
# multi_tensor_rules.cc: only the learner rows run them (no peer rows).
RULE_OPTIMIZERS = ('lion', 'nadam', 'amsgrad', 'sf_sgd', 'sf_adamw')
# Issue 39's rules: learner rows only, timed with Adam's learner rows
# (issue 40's targets compare them). mechanic_adam is Mechanic around Adam.
NEW_RULES = ('soap', 'dog', 'dowg', 'cocob', 'madgrad', 'prodigy',
             'dadapt_adamw', 'mechanic_adam', 'ademamix',
             'simplified_ademamix', 'cautious_adamw', 'shampoo', 'normuon')
# Those of NEW_RULES with a fused kernel (issue 40, item 3; `learner` runs
# it, `learner_fallback` the pure-TF path); the others' `learner` row is
# the pure-TF path.
FUSED_NEW_RULES = ('ademamix', 'simplified_ademamix', 'cocob', 'madgrad')
# The rules run as Muon.TwoLearners (the rule on the matrices, AdamW on the
# rest: learner_row.MuonLearners), at Muon's rate and clip.
MUON_RULES = ('muon', 'normuon')
# Learning-rate free: the rate is a multiplier, 1.
RATE_FREE = ('dog', 'dowg', 'cocob', 'prodigy', 'dadapt_adamw')
# Every optimizer other than Momentum and Adam (learner rows, no numpy
# reference: checked against a fresh pure-TF learner).
OTHER_OPTIMIZERS = RULE_OPTIMIZERS + ('muon',) + NEW_RULES
# Every optimizer the rows take (update_step's --optimizers).
OPTIMIZERS = ('momentum', 'adam') + OTHER_OPTIMIZERS


class UpdateConfig(object):
  """What every row of one update benchmark does.

  Attributes:
    optimizer: 'momentum', 'adam' or one of OTHER_OPTIMIZERS.
    lr: base learning rate (float): 0.1 for SGD-type rules, 1 for the
      RATE_FREE rules, 0.02 for the MUON_RULES (Muon, NorMuon), else 1e-3.
    adamw_lr: the MUON_RULES' AdamW part's base rate, 1e-3.
    total_steps: cosine schedule length in applied updates. The default 4
      makes the rate differ at each of the 3 checked steps (so the numpy check
      sees a wrong schedule or a wrong Momentum form); later steps run the
      same ops on the clamped rate.
    alpha: cosine floor, a fraction of lr.
    clip: global-norm clip value (> 0); for the MUON_RULES 1e6 (never
      fires) unless given otherwise.
    momentum: Momentum's velocity decay.
    beta1, beta2, epsilon: Adam's knobs (epsilon in TF's form).
  """

  def __init__(self, optimizer, lr=None, total_steps=4, alpha=0.1,
               clip=1.0):
    if optimizer not in OPTIMIZERS:
      raise ValueError("UpdateConfig: optimizer=%r; expected one of %s "
                       "(e.g. --optimizers=momentum,adam)." %
                       (optimizer, list(OPTIMIZERS)))
    self.optimizer = optimizer
    # SGD-type rules take SGD's rate (schedule-free SGD at 1e-3 moves the
    # weights by less than XLA's float32 reassociation changes them).
    default = (0.1 if optimizer in ('momentum', 'sf_sgd') else
               1.0 if optimizer in RATE_FREE else
               0.02 if optimizer in MUON_RULES else 1e-3)
    self.lr = lr if lr is not None else default
    self.adamw_lr = 1e-3
    # Muon: our two learners clip each over its own variables, the peers
    # over all; a clip that never fires (the resnet50 set's norm is ~5e3)
    # keeps the norm's work and makes both give the same numbers.
    if optimizer in MUON_RULES and clip == 1.0:
      clip = 1e6
    self.total_steps = total_steps
    self.alpha = alpha
    self.clip = clip
    self.momentum = 0.9
    self.beta1 = 0.9
    self.beta2 = 0.999
    self.epsilon = 1e-7


def TfCosineRate(cfg, step):
  """cfg.lr * cosine multiplier at int64 tensor `step`; float32 scalar."""
  t = tf.cast(tf.minimum(step, cfg.total_steps), tf.float32)
  mult = cfg.alpha + (1.0 - cfg.alpha) * 0.5 * (
      1.0 + tf.cos(math.pi * t / float(cfg.total_steps)))
  return cfg.lr * mult


def RowFunction(step, **kwargs):
  """tf.function(step, **kwargs) whose retracing is counted on its own.

  Each row builds a tf.function of its class's `_Step` and traces it once.
  TF's "N out of the last M calls to ... triggered tf.function retracing"
  warning counts the traces of every tf.function of one Python code object
  together, so five rows of one class (update_step's learner rows) read as
  one function retracing (500 characters a warning, several per
  `update_step --quick`). A functools.partial has no code object: TF counts
  the row's function alone, and still warns if that row does retrace.
  """
  return tf.function(functools.partial(step), **kwargs)


class TfFusedRow(object):
  """(b) hand-written tf.function with TF's fused ResourceApply* kernels.

  With `fold_clip=True` (Momentum only; row `tf_fused_folded`) it is a
  design prototype rather than a peer: the clip scale c_t is folded into
  the fused kernel's scalar inputs instead of materialising c_t * g. The
  slot holds u = v / c_t, so with momentum' = alpha * c_{t-1} / c_t and
  lr' = lr * c_t, ResourceApplyMomentum computes u_t = momentum' * u_{t-1}
  + g and w -= lr' * u_t, i.e. exactly v_t = alpha * v_{t-1} + c_t * g and
  w -= lr * v_t (the TF1/Lingvo form). Traffic: the norm pass (4 B) plus
  the update (20 B), no read and write of a scaled copy (8 B).
  """

  reference_form = 'tf'

  def __init__(self, cfg, weights, grads, jit_compile=False, fold_clip=False):
    if fold_clip and cfg.optimizer != 'momentum':
      raise ValueError('TfFusedRow: fold_clip=True needs optimizer '
                       "'momentum', got %r." % cfg.optimizer)
    self.name = ('tf_fused' + ('_folded' if fold_clip else '') +
                 ('_jit' if jit_compile else ''))
    self._fold = fold_clip
    self._c_prev = tf.Variable(1.0, trainable=False)
    self._cfg = cfg
    self.vars = [tf.Variable(w) for w in weights]
    self.grads = [tf.Variable(g, trainable=False) for g in grads]
    self._slots = [[tf.Variable(tf.zeros_like(w))
                    for _ in range(1 if cfg.optimizer == 'momentum' else 2)]
                   for w in weights]
    self._t = tf.Variable(0, dtype=tf.int64, trainable=False)
    self.step = RowFunction(self._Step, jit_compile=jit_compile)

  def _Step(self):
    cfg = self._cfg
    grads = [g.read_value() for g in self.grads]
    lr = TfCosineRate(cfg, self._t)
    if self._fold:
      return self._FoldedStep(grads, lr)
    clipped, _ = tf.clip_by_global_norm(grads, cfg.clip)
    ops = []
    if cfg.optimizer == 'momentum':
      for v, (s,), g in zip(self.vars, self._slots, clipped):
        ops.append(tf.raw_ops.ResourceApplyMomentum(
            var=v.handle, accum=s.handle, lr=lr, grad=g,
            momentum=tf.constant(cfg.momentum, tf.float32)))
    else:
      t1 = tf.cast(self._t + 1, tf.float32)
      b1p = tf.pow(tf.constant(cfg.beta1, tf.float32), t1)
      b2p = tf.pow(tf.constant(cfg.beta2, tf.float32), t1)
      for v, (m, s), g in zip(self.vars, self._slots, clipped):
        ops.append(tf.raw_ops.ResourceApplyAdam(
            var=v.handle, m=m.handle, v=s.handle, beta1_power=b1p,
            beta2_power=b2p, lr=lr, beta1=tf.constant(cfg.beta1),
            beta2=tf.constant(cfg.beta2), epsilon=tf.constant(cfg.epsilon),
            grad=g))
    with tf.control_dependencies(ops):
      self._t.assign_add(1)

  def _FoldedStep(self, grads, lr):
    cfg = self._cfg
    norm = tf.sqrt(tf.add_n([2.0 * tf.nn.l2_loss(g) for g in grads]))
    c = cfg.clip / tf.maximum(norm, cfg.clip)
    momentum = cfg.momentum * self._c_prev / c
    ops = []
    for v, (s,), g in zip(self.vars, self._slots, grads):
      ops.append(tf.raw_ops.ResourceApplyMomentum(
          var=v.handle, accum=s.handle, lr=lr * c, grad=g, momentum=momentum))
    with tf.control_dependencies(ops):
      self._c_prev.assign(c)
      self._t.assign_add(1)

  def Weights(self):
    return [v.numpy() for v in self.vars]


class KerasRow(object):
  """(c) Keras 3 SGD(momentum) / Adam with global_clipnorm and CosineDecay."""

  def __init__(self, cfg, weights, grads, accumulate_steps=0):
    """Args: cfg, weights, grads as the other rows; accumulate_steps > 0
    uses Keras's gradient_accumulation_steps (mean of the micro-batch
    gradients, then clip and update; the schedule counts micro-steps)."""
    import keras  # pylint: disable=g-import-not-at-top
    self.name = 'keras'
    extra = ({'gradient_accumulation_steps': accumulate_steps}
             if accumulate_steps else {})
    self.reference_form = 'keras' if cfg.optimizer == 'momentum' else 'tf'
    self.vars = [keras.Variable(w) for w in weights]
    self.grads = [tf.Variable(g, trainable=False) for g in grads]
    schedule = keras.optimizers.schedules.CosineDecay(
        cfg.lr, cfg.total_steps, alpha=cfg.alpha)
    if cfg.optimizer == 'momentum':
      self._opt = keras.optimizers.SGD(
          learning_rate=schedule, momentum=cfg.momentum,
          global_clipnorm=cfg.clip, **extra)
    else:
      self._opt = keras.optimizers.Adam(
          learning_rate=schedule, beta_1=cfg.beta1, beta_2=cfg.beta2,
          epsilon=cfg.epsilon, global_clipnorm=cfg.clip, **extra)
    self._opt.build(self.vars)
    self.step = RowFunction(self._Step)

  def _Step(self):
    self._opt.apply_gradients(
        zip([g.read_value() for g in self.grads], self.vars))

  def Weights(self):
    return [np.array(v.numpy()) for v in self.vars]


def OptaxAvailable():
  """(True, '') if jax and optax import, else (False, a note saying why)."""
  try:
    import jax  # pylint: disable=g-import-not-at-top,unused-import
    import optax  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    return False, ('optax rows skipped: %s; install the bench extra: '
                   "pip install -e '.[bench]'" % e)
  return True, ''


class OptaxJitRow(object):
  """An optax transformation under jax.jit with donated buffers: the shared
  part of the optax rows (`OptaxRow`, rule_peers.OptaxRuleRow).
  `steps_per_call` > 1 runs that many updates per jitted call in a
  jax.lax.fori_loop (the trainer's form)."""

  def _Jit(self, opt, weights, grads, steps_per_call):
    """Builds the jitted update of `opt` on float32 `weights` and fixed
    `grads` (lists of arrays of the same shapes)."""
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    import optax  # pylint: disable=g-import-not-at-top
    self._jax = jax
    self._params = [jnp.asarray(w) for w in weights]
    self._grads = [jnp.asarray(g) for g in grads]
    self._state = opt.init(self._params)

    def Update(params, state, grads):
      def Body(i, carry):
        p, s = carry
        # g * (1 + 0 i) is g bit for bit, but depends on the step, so XLA
        # cannot hoist the clip's global norm of the fixed gradients out of
        # the fori_loop (it did: the loop then skipped the norm that the
        # trainer's form takes every step); it fuses into the consumers.
        one = 1.0 + 0.0 * jnp.asarray(i, jnp.float32)
        updates, s = opt.update([g * one for g in grads], s, p)
        return optax.apply_updates(p, updates), s
      if steps_per_call == 1:
        return Body(0, (params, state))
      return jax.lax.fori_loop(0, steps_per_call, Body, (params, state))

    self._update = jax.jit(Update, donate_argnums=(0, 1))

  def step(self):
    self._params, self._state = self._update(self._params, self._state,
                                             self._grads)
    self._jax.block_until_ready(self._params)

  def Weights(self):
    return [np.asarray(p) for p in self._params]


class OptaxRow(OptaxJitRow):
  """(d) optax chain(clip_by_global_norm, sgd(momentum) | adam) under jax.jit."""

  def __init__(self, cfg, weights, grads, accumulate_steps=0,
               steps_per_call=1):
    """Args: cfg, weights, grads as the other rows; accumulate_steps > 0
    wraps the chain in optax.MultiSteps(every_k_schedule=accumulate_steps)
    (mean of the micro-batch gradients, then the chain); steps_per_call > 1
    runs that many updates per jitted call in a jax.lax.fori_loop (row
    `optax_jit_loop`, the trainer's form)."""
    import optax  # pylint: disable=g-import-not-at-top
    self.name = 'optax_jit' + ('_loop' if steps_per_call > 1 else '')
    self.steps_per_call = steps_per_call
    self.reference_form = 'tf' if cfg.optimizer == 'momentum' else 'optax'
    schedule = optax.cosine_decay_schedule(cfg.lr, cfg.total_steps,
                                           alpha=cfg.alpha)
    if cfg.optimizer == 'momentum':
      inner = optax.sgd(schedule, momentum=cfg.momentum)
    else:
      inner = optax.adam(schedule, b1=cfg.beta1, b2=cfg.beta2,
                         eps=cfg.epsilon)
    opt = optax.chain(optax.clip_by_global_norm(cfg.clip), inner)
    if accumulate_steps:
      opt = optax.MultiSteps(opt, every_k_schedule=accumulate_steps)
    self._Jit(opt, weights, grads, steps_per_call)
