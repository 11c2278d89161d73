"""Peer rows of `update_step` for the newer rules (issue 40, item 1).

Lion, Nadam, AMSGrad, schedule-free AdamW and Muon (on the weights of rank
>= 2, AdamW on the rest, the split of `Muon.TwoLearners`) in optax under
`jax.jit` (`optax_jit`; `optax_jit_loop`: 10 updates per jitted call in a
`jax.lax.fori_loop`, the trainer's form), Keras 3 (`keras`) and PyTorch
(`torch`), each with the global-norm clip 1.0 and the cosine rate of
peer_rows.UpdateConfig. Which library has which rule:

  rule      optax                        keras                 torch.optim
  lion      optax.lion                   Lion                  - (none)
  nadam     optax.nadam                  Nadam (Dozat's mu_t)  NAdam (mu_t)
  amsgrad   optax.amsgrad                Adam(amsgrad=True)    Adam(amsgrad,
                                                               fused)
  sf_adamw  contrib.schedule_free_adamw  ScheduleFreeAdamW     - (none)
  muon      contrib.muon                 Muon                  Muon + AdamW

Muon peers run the same Newton-Schulz iteration: 5 steps, coefficients
(3.4445, -4.7750, 2.0315) passed explicitly to each library (optax
`ns_coeffs`/`ns_steps`, Keras `muon_a/b/c`/`ns_steps`, torch
`ns_coefficients`/`ns_steps`), the same as our Muon's `ns_steps`/
`ns_coeffs` (its defaults, set explicitly by learner_row.MuonLearners).
Keras's and torch's Muon take 2-D variables only, so a conv kernel [kh, kw,
cin, cout] is given to them flattened to [kh*kw*cin, cout] (Keras) or its
transpose [cout, kh*kw*cin] (torch's [out, in] layout, for which its
'original' scale sqrt(max(1, out/in)) is ours), the matrix our Muon and
optax's `MuonDimensionNumbers(reduction_axis=(0, 1, 2), output_axis=3)`
orthogonalise. Each Muon peer is checked against our two learners in the
variant with its numbers (learner_row.MUON_VARIANTS: optax's bias-corrected
momentum and eps 1e-8; Keras's and torch's undamped momentum, eps 1e-7,
Keras's 0.2 sqrt(max(rows, cols)) scale; optax's AdamW part is Nesterov,
so that variant's second learner is our Nadam). torch's Muon runs
Newton-Schulz in bfloat16, so its row is checked to 3e-2, not 2e-3. Ours
clips each learner's gradients over its own variables (as TwoLearners
copies the learner), the peers over all, so Muon's UpdateConfig clips at
1e6, which never fires: the norms are computed on every side and the
numbers are the same.

`reference_form` of a row: the variant of our learner it is checked
against; `form_note`, when not None, says why the row's formula differs
from ours (then it is timed but not checked: Keras's and torch's Nadam use
Dozat's momentum schedule mu_t, Keras's AMSGrad TF's epsilon, Keras's
schedule-free AdamW the averaging weight 1/t).
"""

import math

import numpy as np
import tensorflow as tf

from benchmarks import peer_rows


# The rules with peer rows here.
PEERED_RULES = ('lion', 'nadam', 'amsgrad', 'sf_adamw', 'muon')
NS_STEPS = 5
NS_COEFFS = (3.4445, -4.7750, 2.0315)
LOOP_STEPS = 10
_DOZAT = ('Dozat\'s momentum schedule mu_t = beta1 (1 - 0.5 * 0.96^(0.004 '
          't)); ours and optax\'s use beta1')
_TF_EPS = ('epsilon added to sqrt(v) before the bias correction (TF\'s '
           'form); ours and optax\'s add it to sqrt(v_hat)')
_SF_WEIGHT = ('averaging weight 1/t; ours and optax\'s lr_t^2 / sum lr^2 '
              '(weight_lr_power 2), which differ under the cosine rate')


def _MuonDims(params):
  """optax MuonDimensionNumbers per array: all axes but the last reduced
  (None, i.e. AdamW, for a vector or a leaf optax has masked out)."""
  from optax import contrib  # pylint: disable=g-import-not-at-top
  return [contrib.MuonDimensionNumbers(
      reduction_axis=tuple(range(p.ndim - 1)), output_axis=p.ndim - 1)
          if getattr(p, 'ndim', 0) >= 2 else None for p in params]


def OptaxTransform(cfg):
  """optax chain(clip_by_global_norm, rule) for cfg.optimizer in
  PEERED_RULES, on cosine_decay_schedule(cfg.lr) (Muon's AdamW part on
  cfg.adamw_lr). Raises ValueError for another rule."""
  import optax  # pylint: disable=g-import-not-at-top
  sched = lambda lr: optax.cosine_decay_schedule(lr, cfg.total_steps,
                                                 alpha=cfg.alpha)
  name = cfg.optimizer
  if name == 'lion':
    rule = optax.lion(sched(cfg.lr), b1=0.9, b2=0.99, weight_decay=0.0)
  elif name == 'nadam':
    rule = optax.nadam(sched(cfg.lr), b1=0.9, b2=0.999, eps=1e-8)
  elif name == 'amsgrad':
    rule = optax.amsgrad(sched(cfg.lr), b1=0.9, b2=0.999, eps=1e-8)
  elif name == 'sf_adamw':
    rule = optax.contrib.schedule_free_adamw(sched(cfg.lr), b1=0.9,
                                             b2=0.999, eps=1e-8)
  elif name == 'muon':
    rule = optax.contrib.muon(
        sched(cfg.lr), ns_coeffs=NS_COEFFS, ns_steps=NS_STEPS, beta=0.95,
        eps=1e-8, adam_b1=0.9, adam_b2=0.999,
        adam_learning_rate=sched(cfg.adamw_lr),
        muon_weight_dimension_numbers=_MuonDims)
  else:
    raise ValueError('OptaxTransform: optimizer=%r has no optax peer here; '
                     'expected one of %s.' % (name, list(PEERED_RULES)))
  return optax.chain(optax.clip_by_global_norm(cfg.clip), rule)


class OptaxRuleRow(peer_rows.OptaxJitRow):
  """optax's rule under jax.jit with donated buffers; `steps_per_call` > 1
  runs that many updates per jitted call (jax.lax.fori_loop)."""

  def __init__(self, cfg, weights, grads, steps_per_call=1):
    self.name = 'optax_jit' + ('_loop' if steps_per_call > 1 else '')
    self.reference_form = 'optax'
    self.form_note = None
    self.steps_per_call = steps_per_call
    self._Jit(OptaxTransform(cfg), weights, grads, steps_per_call)


def KerasOptimizer(cfg, variables):
  """The Keras 3 optimizer of cfg.optimizer with global_clipnorm and
  CosineDecay; (optimizer, form_note). Raises ValueError for a rule Keras
  has no peer of here."""
  import keras  # pylint: disable=g-import-not-at-top
  sched = keras.optimizers.schedules.CosineDecay(cfg.lr, cfg.total_steps,
                                                 alpha=cfg.alpha)
  kw = dict(learning_rate=sched, global_clipnorm=cfg.clip)
  name = cfg.optimizer
  note = None
  if name == 'lion':
    opt = keras.optimizers.Lion(beta_1=0.9, beta_2=0.99, **kw)
  elif name == 'nadam':
    opt = keras.optimizers.Nadam(beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                                 **kw)
    note = _DOZAT
  elif name == 'amsgrad':
    opt = keras.optimizers.Adam(beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                                amsgrad=True, **kw)
    note = _TF_EPS
  elif name == 'sf_adamw':
    opt = keras.optimizers.ScheduleFreeAdamW(beta_1=0.9, beta_2=0.999,
                                             epsilon=1e-8, weight_decay=0.0,
                                             **kw)
    note = _SF_WEIGHT
  elif name == 'muon':
    opt = keras.optimizers.Muon(
        adam_beta_1=0.9, adam_beta_2=0.999, epsilon=1e-7,
        adam_weight_decay=0.0, weight_decay=0.0, muon_a=NS_COEFFS[0],
        muon_b=NS_COEFFS[1], muon_c=NS_COEFFS[2], ns_steps=NS_STEPS,
        momentum=0.95, nesterov=True, rms_rate=0.2,
        adam_lr_ratio=cfg.adamw_lr / cfg.lr, exclude_embeddings=False, **kw)
  else:
    raise ValueError('KerasOptimizer: optimizer=%r has no Keras peer here; '
                     'expected one of %s.' % (name, list(PEERED_RULES)))
  opt.build(variables)
  return opt, note


def _Flat(w):
  """w as Muon's [fan_in, fan_out] matrix (rank >= 2), else w."""
  return w.reshape(-1, w.shape[-1]) if w.ndim > 2 else w


class KerasRuleRow(object):
  """Keras 3's rule, apply_gradients inside tf.function. For Muon, conv
  kernels are held flattened to [kh*kw*cin, cout] (Keras's Muon gives
  non-2-D variables to AdamW)."""

  def __init__(self, cfg, weights, grads):
    import keras  # pylint: disable=g-import-not-at-top
    self.name = 'keras'
    self.reference_form = 'keras'
    self.steps_per_call = 1
    muon = cfg.optimizer == 'muon'
    self._shapes = [w.shape for w in weights]
    self.vars = [keras.Variable(_Flat(w) if muon else w) for w in weights]
    self.grads = [tf.Variable(_Flat(g) if muon else g, trainable=False)
                  for g in grads]
    self._opt, self.form_note = KerasOptimizer(cfg, self.vars)
    self.step = peer_rows.RowFunction(self._Step)

  def _Step(self):
    self._opt.apply_gradients(
        zip([g.read_value() for g in self.grads], self.vars))

  def Weights(self):
    return [np.array(v.numpy()).reshape(s)
            for v, s in zip(self.vars, self._shapes)]


def TorchHas(optimizer):
  """(True, '') if torch.optim has a peer of `optimizer`, else a note."""
  if optimizer in ('lion', 'sf_adamw'):
    return False, ('torch row skipped for %s: torch.optim has no %s.' %
                   (optimizer, {'lion': 'Lion',
                                'sf_adamw': 'schedule-free AdamW'}[optimizer]))
  return True, ''


class TorchRuleRow(object):
  """PyTorch: clip_grad_norm_(foreach) + NAdam(foreach) | Adam(amsgrad,
  fused) | Muon on the [out, in] matrices + AdamW(fused) on the rest, the
  cosine rate set per step; torch.set_num_threads(2)."""

  def __init__(self, cfg, weights, grads):
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(2)
    self.name = 'torch'
    self.reference_form = 'torch'
    self.form_note = _DOZAT if cfg.optimizer == 'nadam' else None
    # torch's Muon runs Newton-Schulz in bfloat16 (_zeropower_via_newton
    # schulz casts to it): 8-bit mantissas, ~1e-2 of the update.
    self.check_tolerance = 3e-2 if cfg.optimizer == 'muon' else None
    self.steps_per_call = 1
    self._torch = torch
    self._cfg = cfg
    self._shapes = [w.shape for w in weights]
    muon = cfg.optimizer == 'muon'
    # Muon's matrices in torch's [out, in] layout (transposed).
    self._muon = [muon and w.ndim >= 2 for w in weights]
    prep = lambda x, m: _Flat(x).T.copy() if m else x.copy()
    self._params = [torch.nn.Parameter(torch.from_numpy(prep(w, m)))
                    for w, m in zip(weights, self._muon)]
    self._grads = [torch.from_numpy(prep(g, m))
                   for g, m in zip(grads, self._muon)]
    self._opts = self._Optimizers(cfg)
    self._t = 0

  def _Optimizers(self, cfg):
    """[(torch optimizer, base rate)]."""
    optim = self._torch.optim
    if cfg.optimizer == 'nadam':
      return [(optim.NAdam(self._params, lr=cfg.lr, eps=1e-8,
                           foreach=True), cfg.lr)]
    if cfg.optimizer == 'amsgrad':
      return [(optim.Adam(self._params, lr=cfg.lr, eps=1e-8, amsgrad=True,
                          fused=True), cfg.lr)]
    if cfg.optimizer != 'muon':
      raise ValueError('TorchRuleRow: optimizer=%r has no torch peer here; '
                       'expected nadam, amsgrad or muon.' % cfg.optimizer)
    mats = [p for p, m in zip(self._params, self._muon) if m]
    rest = [p for p, m in zip(self._params, self._muon) if not m]
    return [(optim.Muon(mats, lr=cfg.lr, weight_decay=0.0, momentum=0.95,
                        nesterov=True, ns_coefficients=NS_COEFFS, eps=1e-7,
                        ns_steps=NS_STEPS), cfg.lr),
            (optim.AdamW(rest, lr=cfg.adamw_lr, eps=1e-8, weight_decay=0.0,
                         fused=True), cfg.adamw_lr)]

  def step(self):
    for p, g in zip(self._params, self._grads):
      p.grad = g.clone() if p.grad is None else p.grad.copy_(g)
    self._torch.nn.utils.clip_grad_norm_(self._params, self._cfg.clip,
                                         foreach=True)
    cfg = self._cfg
    mult = cfg.alpha + (1 - cfg.alpha) * 0.5 * (1 + math.cos(
        math.pi * min(self._t, cfg.total_steps) / cfg.total_steps))
    for opt, lr in self._opts:
      for group in opt.param_groups:
        group['lr'] = lr * mult
      opt.step()
    self._t += 1

  def Weights(self):
    out = []
    for p, m, s in zip(self._params, self._muon, self._shapes):
      w = np.array(p.detach().numpy())
      out.append(w.T.reshape(s) if m else w)
    return out


def Builders(cfg, weights, grads):
  """[(row name, build callable)] of the peers of cfg.optimizer here."""
  out = [('optax_jit', lambda: OptaxRuleRow(cfg, weights, grads)),
         ('optax_jit_loop', lambda: OptaxRuleRow(
             cfg, weights, grads, steps_per_call=LOOP_STEPS)),
         ('keras', lambda: KerasRuleRow(cfg, weights, grads))]
  if TorchHas(cfg.optimizer)[0]:
    out.append(('torch', lambda: TorchRuleRow(cfg, weights, grads)))
  return out

