"""Independent numpy (float32) references of the optimizers, for the tests.

Each `Ref<Name>(p)` has `slots(w)` -> {slot name: initial array} (the same
slot names as the optimizer) and `step(t, lr, w, g, s)` -> new w, updating
the slot dict `s` in place; t counts updates from 1.
"""

import numpy as np

F = np.float32


def _f(x):
  return np.asarray(x, F)


class RefSGD:

  def __init__(self, p):
    self.p = p

  def slots(self, w):
    return {}

  def step(self, t, lr, w, g, s):
    return _f(w - F(lr) * g)


class RefMomentum(RefSGD):

  def slots(self, w):
    return {'momentum': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    a = F(self.p.alpha)
    s['momentum'] = _f(a * s['momentum'] + g)
    if self.p.use_nesterov:
      return _f(w - F(lr) * (g + a * s['momentum']))
    return _f(w - F(lr) * s['momentum'])


class RefAdam(RefSGD):

  def slots(self, w):
    return {'m': np.zeros_like(w), 'v': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    b1, b2, eps = F(self.p.beta1), F(self.p.beta2), F(self.p.epsilon)
    s['m'] = _f(b1 * s['m'] + (1 - b1) * g)
    s['v'] = _f(b2 * s['v'] + (1 - b2) * g * g)
    lr_t = F(lr) * np.sqrt(1 - b2**t) / (1 - b1**t)
    new = _f(w - lr_t * s['m'] / (np.sqrt(s['v']) + eps))
    if self.p.decoupled_weight_decay:
      new = _f(new - F(lr) * F(self.p.decoupled_weight_decay) * w)
    return new


class RefAdagrad(RefSGD):

  def slots(self, w):
    return {'accumulator': np.full_like(w, self.p.initial_accumulator_value)}

  def step(self, t, lr, w, g, s):
    s['accumulator'] = _f(s['accumulator'] + g * g)
    return _f(w - F(lr) * g / (np.sqrt(s['accumulator']) + F(self.p.epsilon)))


class RefRMSProp(RefSGD):

  def slots(self, w):
    # TF1's RMSPropOptimizer (Lingvo 0.14.2 optimizer.py RMSProp wraps it)
    # starts the mean square at ones; Keras (keras_semantics) at zeros.
    ms0 = 0.0 if self.p.keras_semantics else 1.0
    s = {'ms': np.full_like(w, ms0), 'mom': np.zeros_like(w)}
    if self.p.centered:
      s['mg'] = np.zeros_like(w)
    return s

  def step(self, t, lr, w, g, s):
    d = F(self.p.decay)
    s['ms'] = _f(d * s['ms'] + (1 - d) * g * g)
    denom = s['ms']
    if self.p.centered:
      s['mg'] = _f(d * s['mg'] + (1 - d) * g)
      denom = s['ms'] - s['mg'] * s['mg']
    s['mom'] = _f(F(self.p.momentum) * s['mom'] +
                  F(lr) * g / np.sqrt(denom + F(self.p.epsilon)))
    return _f(w - s['mom'])


class RefAdaDelta(RefSGD):

  def slots(self, w):
    return {'accum': np.zeros_like(w), 'accum_update': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    rho, eps = F(self.p.decay), F(self.p.epsilon)  # Lingvo's name for rho.
    s['accum'] = _f(rho * s['accum'] + (1 - rho) * g * g)
    u = np.sqrt(s['accum_update'] + eps) / np.sqrt(s['accum'] + eps) * g
    s['accum_update'] = _f(rho * s['accum_update'] + (1 - rho) * u * u)
    return _f(w - F(lr) * u)


def _rms(x):
  return np.sqrt(np.mean(np.square(x)))


class RefAdafactor(RefSGD):

  def factored(self, w):
    return (self.p.factored and w.ndim >= 2 and
            min(w.shape[-2:]) >= self.p.min_dim_size_to_factor)

  def slots(self, w):
    s = {}
    if self.factored(w):
      s['vr'] = np.zeros(w.shape[:-1], F)
      s['vc'] = np.zeros(w.shape[:-2] + w.shape[-1:], F)
    else:
      s['v'] = np.zeros_like(w)
    if self.p.beta1:
      s['m'] = np.zeros_like(w)
    return s

  def step(self, t, lr, w, g, s):
    p = self.p
    beta2 = F(1. - F(t)**F(-p.decay_rate))
    sq = g * g + F(p.epsilon1)
    if self.factored(w):
      s['vr'] = _f(beta2 * s['vr'] + (1 - beta2) * sq.mean(-1))
      s['vc'] = _f(beta2 * s['vc'] + (1 - beta2) * sq.mean(-2))
      r = s['vr'] / s['vr'].mean(-1, keepdims=True)
      u = g / np.sqrt(r[..., :, None] * s['vc'][..., None, :])
    else:
      s['v'] = _f(beta2 * s['v'] + (1 - beta2) * sq)
      u = g / np.sqrt(s['v'])
    if p.clipping_threshold:
      u = u / max(1., _rms(u) / p.clipping_threshold)
    step = F(lr)
    if p.multiply_by_parameter_scale:
      step = step * max(F(p.epsilon2), _rms(w))
    delta = step * u
    if p.beta1:
      s['m'] = _f(F(p.beta1) * s['m'] + (1 - F(p.beta1)) * delta)
      delta = s['m']
    return _f(w - delta)


class RefLAMB(RefSGD):

  def slots(self, w):
    return {'m': np.zeros_like(w), 'v': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    p = self.p
    b1, b2 = F(p.beta1), F(p.beta2)
    s['m'] = _f(b1 * s['m'] + (1 - b1) * g)
    s['v'] = _f(b2 * s['v'] + (1 - b2) * g * g)
    m_hat = s['m'] / (1 - b1**t)
    v_hat = s['v'] / (1 - b2**t)
    r = m_hat / (np.sqrt(v_hat) + F(p.epsilon)) + F(p.weight_decay) * w
    wn, rn = np.linalg.norm(w), np.linalg.norm(r)
    ratio = wn / rn if wn > 0 and rn > 0 else 1.
    return _f(w - F(lr) * ratio * r)


class RefLion(RefSGD):

  def slots(self, w):
    return {'m': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    p = self.p
    b1, b2 = F(p.beta1), F(p.beta2)
    c = b1 * s['m'] + (1 - b1) * g
    s['m'] = _f(b2 * s['m'] + (1 - b2) * g)
    new = w - F(lr) * np.sign(c)
    if p.decoupled_weight_decay:
      new = new - F(lr) * F(p.decoupled_weight_decay) * w
    return _f(new)


# ---- the Adam family (optax's form, issue 24): float64 math, float32 state --


def _Decayed(p, lr, w, new):
  """`new` with decoupled weight decay of the old weights `w` (float32)."""
  if p.decoupled_weight_decay:
    new = new - lr * p.decoupled_weight_decay * np.asarray(w, np.float64)
  return _f(new)


class RefNadam(RefSGD):
  """Nadam: u_t = b1 (constant) or b1 (1 - 0.5 0.96^t) (Keras's 'dozat')."""

  def slots(self, w):
    return {'m': np.zeros_like(w), 'v': np.zeros_like(w)}

  def _u(self, t):
    b1 = self.p.beta1
    if self.p.momentum_schedule == 'constant':
      return b1
    return b1 * (1 - 0.5 * 0.96**t)

  def step(self, t, lr, w, g, s):
    p = self.p
    s['m'] = _f(p.beta1 * s['m'] + (1 - p.beta1) * g)
    s['v'] = _f(p.beta2 * s['v'] + (1 - p.beta2) * g * g)
    prod_t = np.prod([self._u(i) for i in range(1, t + 1)])
    prod_next = prod_t * self._u(t + 1)
    m_hat = (self._u(t + 1) * s['m'] / (1 - prod_next) +
             (1 - self._u(t)) * g / (1 - prod_t))
    v_hat = s['v'] / (1 - p.beta2**t)
    return _Decayed(p, lr, w, w - lr * m_hat / (np.sqrt(v_hat) + p.epsilon))


class RefRAdam(RefSGD):

  def slots(self, w):
    return {'m': np.zeros_like(w), 'v': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    p = self.p
    b1, b2 = p.beta1, p.beta2
    s['m'] = _f(b1 * s['m'] + (1 - b1) * g)
    s['v'] = _f(b2 * s['v'] + (1 - b2) * g * g)
    if p.use_nesterov:
      m_hat = b1 * s['m'] / (1 - b1**(t + 1)) + (1 - b1) * g / (1 - b1**t)
    else:
      m_hat = s['m'] / (1 - b1**t)
    rho_inf = 2 / (1 - b2) - 1
    rho = rho_inf - 2 * t * b2**t / (1 - b2**t)
    if rho < p.threshold:
      return _Decayed(p, lr, w, w - lr * m_hat)
    r = np.sqrt((rho - 4) * (rho - 2) * rho_inf /
                ((rho_inf - 4) * (rho_inf - 2) * rho))
    v_hat = s['v'] / (1 - b2**t)
    return _Decayed(p, lr, w,
                    w - lr * r * m_hat / (np.sqrt(v_hat) + p.epsilon))


class RefAdamax(RefSGD):

  def slots(self, w):
    return {'m': np.zeros_like(w), 'u': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    p = self.p
    s['m'] = _f(p.beta1 * s['m'] + (1 - p.beta1) * g)
    m_hat = s['m'] / (1 - p.beta1**t)
    if p.epsilon_form == 'optax':
      s['u'] = _f(np.maximum(np.abs(g) + p.epsilon, p.beta2 * s['u']))
      return _Decayed(p, lr, w, w - lr * m_hat / s['u'])
    s['u'] = _f(np.maximum(p.beta2 * s['u'], np.abs(g)))
    return _Decayed(p, lr, w, w - lr * m_hat / (s['u'] + p.epsilon))


class RefAMSGrad(RefSGD):

  def slots(self, w):
    return {'m': np.zeros_like(w), 'v': np.zeros_like(w),
            'v_max': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    p = self.p
    s['m'] = _f(p.beta1 * s['m'] + (1 - p.beta1) * g)
    s['v'] = _f(p.beta2 * s['v'] + (1 - p.beta2) * g * g)
    m = s['m'] / (1 - p.beta1**t) if p.bias_correction_mu else s['m']
    v = s['v'] / (1 - p.beta2**t) if p.bias_correction_nu else s['v']
    s['v_max'] = _f(np.maximum(s['v_max'], v))
    return _Decayed(p, lr, w, w - lr * m / (np.sqrt(s['v_max']) + p.epsilon))


class RefADOPT(RefSGD):

  def slots(self, w):
    return {'m': np.zeros_like(w), 'v': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    p = self.p
    if t == 1:  # Only v is set.
      s['v'] = _f(g * g)
      return _Decayed(p, lr, w, np.asarray(w, np.float64))
    n = g / np.maximum(np.sqrt(s['v']), p.epsilon)
    if p.use_clipping:
      n = np.clip(n, -(t - 1)**p.clip_exponent, (t - 1)**p.clip_exponent)
    s['m'] = _f(p.beta1 * s['m'] + (1 - p.beta1) * n)
    s['v'] = _f(p.beta2 * s['v'] + (1 - p.beta2) * g * g)
    step = p.beta1 * s['m'] + (1 - p.beta1) * n if p.use_nesterov else s['m']
    return _Decayed(p, lr, w, w - lr * step)


class RefScheduleFree(RefSGD):
  """ScheduleFreeSGD / ScheduleFreeAdamW (AdamW when p has beta2).

  The paper's form (Defazio et al. 2024, Algorithm 1), z and x explicit; the
  average's scalars are shared by all variables, so they are kept per t.
  """

  def __init__(self, p):
    super().__init__(p)
    self._scalars = {0: (0.0, 0.0)}  # t -> (lr_max, weight_sum) after t.

  def slots(self, w):
    out = {'z': w.copy(), 'x': w.copy()}
    if 'beta2' in self.p:
      out['v'] = np.zeros_like(w)
    return out

  def _C(self, t, lr):
    p = self.p
    warm = lambda s: min(s, p.warmup_steps) / p.warmup_steps if (
        p.warmup_steps) else 1.0
    lr_avg = lr * warm(t)
    lr_z = lr * warm(t - 1) if p.warmup_form == 'optax' else lr_avg
    lr_max, total = self._scalars[t - 1]
    lr_max = max(lr_max, lr_avg)
    weight = t ** p.r * lr_max ** p.weight_lr_power
    self._scalars[t] = (lr_max, total + weight)
    return lr_z, weight / (total + weight) if total + weight else 0.

  def step(self, t, lr, w, g, s):
    p = self.p
    lr_z, c = self._C(t, float(F(lr)))
    g = g.astype(np.float64)
    if 'beta2' in p:
      b1 = p.beta1
      s['v'] = _f(p.beta2 * s['v'] + (1 - p.beta2) * g * g)
      g = g / (np.sqrt(s['v'] / (1 - p.beta2 ** t)) + p.epsilon)
    else:
      b1 = p.momentum
    u = g + p.decoupled_weight_decay * w
    s['z'] = _f(s['z'] - lr_z * u)
    s['x'] = _f((1 - c) * s['x'] + c * s['z'])
    return _f(b1 * s['x'] + (1 - b1) * s['z'])


class RefAdEMAMix(RefSGD):
  """Pagliardini et al., arXiv:2409.03137, Algorithm 1: m2 (beta3) is not
  bias corrected; eps outside the square root."""

  def slots(self, w):
    return {k: np.zeros_like(w) for k in ('m1', 'm2', 'nu')}

  def step(self, t, lr, w, g, s):
    p = self.p
    b1, b2, b3 = p.beta1, p.beta2, p.beta3
    s['m1'] = _f(b1 * s['m1'] + (1 - b1) * g)
    s['m2'] = _f(b3 * s['m2'] + (1 - b3) * g)
    s['nu'] = _f(b2 * s['nu'] + (1 - b2) * g * g)
    m1_hat = s['m1'] / (1 - b1**t)
    nu_hat = s['nu'] / (1 - b2**t)
    new = w - lr * (m1_hat + p.alpha * s['m2']) / (np.sqrt(nu_hat) +
                                                   p.epsilon)
    return _Decayed(p, lr, w, new)


class RefSimplifiedAdEMAMix(RefSGD):
  """Morwani et al., arXiv:2502.02431: m an undamped sum (no 1 - beta1, not
  bias corrected), nu bias corrected, eps outside the square root."""

  def slots(self, w):
    return {k: np.zeros_like(w) for k in ('m', 'nu')}

  def step(self, t, lr, w, g, s):
    p = self.p
    s['m'] = _f(p.beta1 * s['m'] + g)
    s['nu'] = _f(p.beta2 * s['nu'] + (1 - p.beta2) * g * g)
    nu_hat = s['nu'] / (1 - p.beta2**t)
    new = w - lr * (s['m'] + p.alpha * g) / (np.sqrt(nu_hat) + p.epsilon)
    return _Decayed(p, lr, w, new)


class RefCOCOB(RefSGD):
  """Orabona & Tommasi 2017, Algorithm 2 (COCOB-Backprop), on lr * g; x0
  the weights before the first step."""

  def slots(self, w):
    z = np.zeros_like(w)
    return {'x0': w.copy(), 'scale': np.full_like(w, self.p.epsilon),
            'subgradients': z.copy(), 'reward': z.copy(),
            'cumulative_gradients': z.copy()}

  def step(self, t, lr, w, g, s):
    g = _f(F(lr) * g)
    s['scale'] = np.maximum(s['scale'], np.abs(g))
    s['subgradients'] = _f(s['subgradients'] + np.abs(g))
    s['reward'] = _f(np.maximum(s['reward'] - g * (w - s['x0']), 0))
    s['cumulative_gradients'] = _f(s['cumulative_gradients'] - g)
    L, G = s['scale'], s['subgradients']
    bet = s['cumulative_gradients'] / (L * np.maximum(G + L,
                                                      F(self.p.alpha) * L))
    return _f(s['x0'] + bet * (L + s['reward']))


class RefMADGRAD(RefSGD):
  """Defazio & Jelassi 2022, Algorithm 1, with lr + eps (the reference
  PyTorch code's); x0 the weights before the first step."""

  def slots(self, w):
    return {'x0': w.copy(), 's': np.zeros_like(w),
            'grad_sum_sq': np.zeros_like(w)}

  def step(self, t, lr, w, g, s):
    p = self.p
    lam = (float(F(lr)) + p.epsilon) * np.sqrt(t)
    s['grad_sum_sq'] = _f(s['grad_sum_sq'] + lam * g * g)
    s['s'] = _f(s['s'] + lam * g)
    z = s['x0'] - s['s'] / (np.cbrt(s['grad_sum_sq']) + p.epsilon)
    new = _f((1 - p.momentum) * z + p.momentum * w)
    return _Decayed(p, lr, w, new)


class RefDistanceOverGradients:
  """DoG (Ivgi et al. 2023) and DoWG (Khaled et al. 2023) over a list of
  variables: their norms are global, so `step_all(t, lr, ws, gs)` takes
  every variable at once (float64 scalars, float32 weights) and returns
  the new weights; `x0` the weights before the first step."""

  def __init__(self, p, dowg=False):
    self.p, self.dowg = p, dowg
    self.x0 = None
    self.state = None

  def step_all(self, t, lr, ws, gs):
    p = self.p
    if self.x0 is None:
      self.x0 = [w.copy() for w in ws]
    sq = lambda xs: sum(float(np.sum(np.square(x, dtype=np.float64)))
                        for x in xs)
    sq_dist = sq([w - x for w, x in zip(ws, self.x0)])
    sq_grad = sq(gs)
    if self.dowg:
      init = p.epsilon if p.init_estim_sq_dist is None else (
          p.init_estim_sq_dist)
      estim, total = self.state or (init, 0.)
      estim = max(estim, sq_dist)
      total += estim * sq_grad
      self.state = (estim, total)
      eta = estim / (np.sqrt(total) + p.epsilon)
    else:
      r_eps = {'heuristic': p.init_step_value * (1 + np.sqrt(sq(self.x0))),
               'distance': p.init_step_value,
               'learning_rate': 0.}[p.init_step]
      max_dist, total = self.state or (r_eps, 0.)
      max_dist = max(max_dist, np.sqrt(sq_dist))
      total += sq_grad
      self.state = (max_dist, total)
      eta = max_dist / np.sqrt(total + p.epsilon)
      if p.init_step == 'learning_rate' and t == 1:
        eta = p.init_step_value
    return [_Decayed(p, lr, w, _f(w - F(float(F(lr)) * eta) * g))
            for w, g in zip(ws, gs)]
class RefDAdaptAdamW(RefSGD):
  """Defazio & Mishchenko, arXiv:2301.07733 (optax's dadapt_adamw): d from
  sums over ALL variables, so `step_all(t, lr, ws, gs, slots)` steps the
  whole list (d and r kept on the reference); float64."""

  def __init__(self, p):
    super().__init__(p)
    self.d, self.r = p.d0, 0.0

  def slots(self, w):
    return {k: np.zeros_like(w, np.float64) for k in ('m', 'v', 's')}

  def _Dlr(self, t, lr):
    p = self.p
    return self.d * lr * np.sqrt(1 - p.beta2**t) / (1 - p.beta1**t)

  def step_all(self, t, lr, ws, gs, slots):
    p, sb2 = self.p, np.sqrt(self.p.beta2)
    dlr = self._Dlr(t, lr)
    a = sum(np.sum(g * s['s'] / (np.sqrt(s['v']) + p.epsilon))
            for g, s in zip(gs, slots))
    out = []
    for w, g, s in zip(ws, gs, slots):
      s['m'] = p.beta1 * s['m'] + (1 - p.beta1) * dlr * g
      s['v'] = p.beta2 * s['v'] + (1 - p.beta2) * g * g
      s['s'] = sb2 * s['s'] + (1 - sb2) * dlr * g
      out.append(w - s['m'] / (np.sqrt(s['v']) + p.epsilon) -
                 p.decoupled_weight_decay * dlr * w)
    self.r = sb2 * self.r + (1 - sb2) * dlr * a
    l1 = sum(np.abs(s['s']).sum() for s in slots)
    self.d = max(self.d, self.r / ((1 - sb2) * l1))
    return out


class RefProdigy(RefDAdaptAdamW):
  """Mishchenko & Defazio, arXiv:2306.06101 (optax's prodigy): the step's
  eps is scaled by the NEW d; w0 the weights before the first step."""

  def slots(self, w):
    s = super().slots(w)
    s['w0'] = np.asarray(w, np.float64).copy()
    return s

  def step_all(self, t, lr, ws, gs, slots):
    p, d = self.p, self.d
    b3 = np.sqrt(p.beta2) if p.beta3 is None else p.beta3
    dlr = self._Dlr(t, lr)
    a = sum(np.sum(g * (s['w0'] - w)) for w, g, s in zip(ws, gs, slots))
    for g, s in zip(gs, slots):
      s['m'] = p.beta1 * s['m'] + (1 - p.beta1) * d * g
      s['v'] = p.beta2 * s['v'] + (1 - p.beta2) * d * d * g * g
      s['s'] = b3 * s['s'] + (d if p.safeguard_warmup else dlr) * d * g / p.d0
    self.r = b3 * self.r + d / p.d0 * dlr * a
    l1 = sum(np.abs(s['s']).sum() for s in slots)
    self.d = max(d, p.d_coef * self.r / l1)
    return [w - dlr * s['m'] / (np.sqrt(s['v']) + self.d * p.epsilon) -
            p.decoupled_weight_decay * dlr * w
            for w, s in zip(ws, slots)]
# ---- the base's masks (learner/optimizers/cautious.py) ----------------------


def Cautious(inner):
  """The reference of `inner` (a Ref class) with the base's `cautious` and
  `cautious_weight_decay` masks, written again here: u = w - inner's step
  without decay; cautious: u <- u [u g > 0] n / (nnz + 1); the decay
  lr wd w acts where u w >= 0 (cautious_weight_decay) or everywhere."""

  class RefCautious(RefSGD):

    def __init__(self, p):
      super().__init__(p)
      self.inner = inner(p.Copy(frozen=False).Set(decoupled_weight_decay=0.0))

    def slots(self, w):
      return self.inner.slots(w)

    def step(self, t, lr, w, g, s):
      p = self.p
      w64 = np.asarray(w, np.float64)
      u = w64 - self.inner.step(t, lr, w, g, s)
      if p.cautious:
        agree = (u * g > 0).astype(np.float64)
        u = u * agree * (u.size / (agree.sum() + 1))
      decay = lr * p.decoupled_weight_decay * w64
      if p.cautious_weight_decay:
        decay = decay * (u * w64 >= 0)
      return _f(w64 - u - decay)

  return RefCautious
def _CanonicalSigns(q):
  """q's columns negated where their largest-magnitude entry is negative."""
  lead = q[np.argmax(np.abs(q), axis=0), np.arange(q.shape[1])]
  return q * np.where(lead < 0, -1., 1.)


class RefSOAP(RefSGD):
  """Vyas et al., arXiv:2409.11321 (pytorch-optimizer's SOAP): the first
  update only starts L_i and takes Q_i = eigh; then Adam in the bases of
  the previous update, L_i, and a QR power iteration every
  precondition_frequency updates. No merge_dims; vectors are Adam unless
  precondition_1d. Written again with numpy (float64 math, float32 state).
  """

  def _Rotated(self, w):
    p = self.p
    if w.ndim == 1:
      return [p.precondition_1d and w.shape[0] <= p.max_precond_dim]
    return [d <= p.max_precond_dim for d in w.shape]

  def slots(self, w):
    s = {'m': np.zeros_like(w), 'v': np.zeros_like(w)}
    for i, r in enumerate(self._Rotated(w)):
      if r:
        s['gg%d' % i] = np.zeros((w.shape[i],) * 2, F)
        s['q%d' % i] = np.zeros((w.shape[i],) * 2, F)
    return s

  @staticmethod
  def _Project(x, qs, back=False):
    for q in qs:
      x = (np.moveaxis(x, 0, -1) if q is None else
           np.tensordot(x, q, axes=[[0], [1 if back else 0]]))
    return x

  def step(self, t, lr, w, g, s):
    p = self.p
    g = np.asarray(g, np.float64)
    rotated = self._Rotated(w)
    qs = [np.asarray(s['q%d' % i], np.float64) if r else None
          for i, r in enumerate(rotated)]
    new = w
    n = t - 1  # num_updates before this one
    if n > 0:
      m = p.beta1 * s['m'] + (1 - p.beta1) * g
      v = p.beta2 * s['v'] + (1 - p.beta2) * self._Project(g, qs)**2
      d = self._Project(self._Project(m, qs) / (np.sqrt(v) + p.epsilon), qs,
                        back=True)
      size = lr * np.sqrt(1 - p.beta2**n) / (1 - p.beta1**n)
      new = (w - size * d) * (1 - lr * p.decoupled_weight_decay)
      s['m'], s['v'] = _f(m), _f(v)
    sb = p.beta2 if p.shampoo_beta is None else p.shampoo_beta
    v = np.asarray(s['v'], np.float64)
    for i, r in enumerate(rotated):
      if not r:
        continue
      others = [j for j in range(g.ndim) if j != i]
      gg = sb * s['gg%d' % i] + (1 - sb) * np.tensordot(g, g, [others] * 2)
      s['gg%d' % i] = _f(gg)
      if n == 0:
        q = np.linalg.eigh(gg)[1][:, ::-1]
      elif n % p.precondition_frequency == 0:
        product = gg @ qs[i]
        order = np.argsort(-np.sum(qs[i] * product, axis=0), kind='stable')
        v = np.take(v, order, axis=i)
        q = np.linalg.qr(product[:, order])[0]
      else:
        continue
      s['q%d' % i] = _f(_CanonicalSigns(q))
    s['v'] = _f(v)
    return _f(new)


class RefDistributedShampoo(RefSGD):
  """Lingvo 0.14.2's DistributedShampoo (lingvo/core/distributed_shampoo.py)
  without blocks, written again with numpy: diagonal AdaGrad with momentum;
  for a matrix, H_i += G_(i) G_(i)^T, S = momentum of G x_i R_i grafted to
  AdaGrad's norm, blended in from start_preconditioning_steps; the roots
  R_i = (H_i + eps I)^(-1/(2 rank)) by eigh (Lingvo: SVD, the same for a
  positive definite H_i) after every preconditioning_compute_steps-th
  update.
  """

  def slots(self, w):
    p = self.p
    s = {'accumulator': np.full_like(w, p.initial_accumulator_value)}
    if p.momentum > 0:
      s['momentum'] = np.zeros_like(w)
    if w.ndim >= 2:
      if p.momentum > 0:
        s['precond_grad_momentum'] = np.zeros_like(w)
      for i, d in enumerate(w.shape):
        s['mat_statistics_%d' % i] = np.zeros((d, d), F)
        s['mat_preconditioner_%d' % i] = np.zeros((d, d), F)
    return s

  def step(self, t, lr, w, g, s):
    p, n, m = self.p, t - 1, self.p.momentum
    g = np.asarray(g, np.float64)
    s['accumulator'] = _f(s['accumulator'] + g * g)
    d = g / np.sqrt(np.asarray(s['accumulator'], np.float64) + 1e-30)
    if m > 0:
      d = m * s['momentum'] + (1 - m) * d
      s['momentum'] = _f(d)
    if w.ndim < 2:
      return _f(w - lr * d)
    direction = g
    for i in range(g.ndim):
      others = [j for j in range(g.ndim) if j != i]
      s['mat_statistics_%d' % i] = _f(
          s['mat_statistics_%d' % i] + np.tensordot(g, g, [others] * 2))
      direction = np.tensordot(direction, s['mat_preconditioner_%d' % i],
                               axes=([0], [0]))
    if m > 0:
      direction = m * s['precond_grad_momentum'] + (1 - m) * direction
      s['precond_grad_momentum'] = _f(direction)
    norm = np.linalg.norm(direction)
    if norm > 0:
      direction = direction * np.linalg.norm(d) / norm
    start = p.start_preconditioning_steps
    on = float(n >= start)
    u = min(1., max((n - start) / start, 0.))
    new = w - lr * (on * (u * direction + (1 - u) * d) + (1 - on) * d)
    if t % p.preconditioning_compute_steps == 0:
      for i in range(g.ndim):
        h = np.asarray(s['mat_statistics_%d' % i], np.float64)
        lam, v = np.linalg.eigh(h + p.matrix_epsilon * np.eye(len(h)))
        lam = np.maximum(lam, p.matrix_epsilon) ** (-1. / (2 * g.ndim))
        s['mat_preconditioner_%d' % i] = _f((v * lam) @ v.T)
    return _f(new)
