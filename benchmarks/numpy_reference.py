"""numpy references that every benchmark row's result is checked against.

Each reference runs the same steps on the same fixed gradients in float64
and returns the final weights; a row passes when the change of its weights
matches the reference change (see `MaxRelativeError`).

Formulas (step t = 0, 1, ... counts applied updates):
  * cosine multiplier (Loshchilov & Hutter, "SGDR", ICLR 2017, eq. 5 without
    restarts): alpha + (1 - alpha) * 0.5 * (1 + cos(pi * min(t, T) / T)).
  * global-norm clip (Pascanu et al. 2013; tf.clip_by_global_norm):
    g * c / max(||g||, c) with ||g|| over all variables.
  * Momentum, TF1/Lingvo form ('tf', also optax's sgd): v = a*v + g;
    w -= lr_t * v.  Keras form ('keras'): m = a*m - lr_t*g; w += m.
  * Adam (Kingma & Ba 2015) with TF's epsilon ('tf', also Keras):
    w -= lr_t * sqrt(1-b2^(t+1)) / (1-b1^(t+1)) * m / (sqrt(v) + eps);
    optax's epsilon ('optax'): w -= lr_t * m_hat / (sqrt(v_hat) + eps).
"""

import math

import numpy as np


def CosineMultiplier(step, total_steps, alpha):
  """The cosine multiplier (float) at integer `step`; see module docstring."""
  t = min(step, total_steps)
  return alpha + (1.0 - alpha) * 0.5 * (1.0 + math.cos(math.pi * t /
                                                         total_steps))


def _Clip(grads, clip):
  if not clip:
    return grads
  norm = math.sqrt(sum(float(np.sum(np.square(g))) for g in grads))
  scale = clip / max(norm, clip)
  return [g * scale for g in grads]


def Momentum(weights, grads, steps, lr, total_steps, alpha, momentum=0.9,
             clip=1.0, form='tf'):
  """Final weights (list of float64 arrays) after `steps` Momentum steps.

  Args:
    weights, grads: lists of float32 arrays (the fixed gradient every step).
    steps: number of updates.
    lr: base rate; the scheduled rate is lr * CosineMultiplier(t, ...).
    total_steps, alpha: cosine schedule knobs.
    momentum: the decay of the velocity.
    clip: global-norm clip value; 0 disables clipping.
    form: 'tf' (TF1/Lingvo/optax) or 'keras'; see module docstring.

  Raises:
    ValueError: for an unknown form.
  """
  if form not in ('tf', 'keras'):
    raise ValueError("Momentum: form=%r; expected 'tf' or 'keras'." % form)
  w = [x.astype(np.float64) for x in weights]
  g = _Clip([x.astype(np.float64) for x in grads], clip)
  v = [np.zeros_like(x) for x in w]
  for t in range(steps):
    lr_t = lr * CosineMultiplier(t, total_steps, alpha)
    for i in range(len(w)):
      if form == 'tf':
        v[i] = momentum * v[i] + g[i]
        w[i] -= lr_t * v[i]
      else:
        v[i] = momentum * v[i] - lr_t * g[i]
        w[i] += v[i]
  return w


def Adam(weights, grads, steps, lr, total_steps, alpha, beta1=0.9,
         beta2=0.999, epsilon=1e-7, clip=1.0, form='tf'):
  """Final weights (list of float64 arrays) after `steps` Adam steps.

  Args: as `Momentum`, plus beta1, beta2, epsilon; form 'tf' (TF and Keras:
    epsilon added to sqrt(v)) or 'optax' (epsilon added to sqrt(v_hat)).

  Raises:
    ValueError: for an unknown form.
  """
  if form not in ('tf', 'optax'):
    raise ValueError("Adam: form=%r; expected 'tf' or 'optax'." % form)
  w = [x.astype(np.float64) for x in weights]
  g = _Clip([x.astype(np.float64) for x in grads], clip)
  m = [np.zeros_like(x) for x in w]
  v = [np.zeros_like(x) for x in w]
  for t in range(steps):
    lr_t = lr * CosineMultiplier(t, total_steps, alpha)
    c1 = 1.0 - beta1**(t + 1)
    c2 = 1.0 - beta2**(t + 1)
    for i in range(len(w)):
      m[i] = beta1 * m[i] + (1.0 - beta1) * g[i]
      v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i]
      if form == 'tf':
        w[i] -= lr_t * math.sqrt(c2) / c1 * m[i] / (np.sqrt(v[i]) + epsilon)
      else:
        w[i] -= lr_t * (m[i] / c1) / (np.sqrt(v[i] / c2) + epsilon)
  return w


def MaxRelativeError(initial, final, reference):
  """max |(final - initial) - (reference - initial)| / max |reference - initial|.

  Compares weight changes, not weights, so float32 rounding of the weights
  themselves does not hide a wrong update. Arguments are lists of arrays.
  """
  num, den = 0.0, 0.0
  for w0, w, r in zip(initial, final, reference):
    d_ref = r - w0.astype(np.float64)
    d = np.asarray(w, np.float64) - w0.astype(np.float64)
    num = max(num, float(np.max(np.abs(d - d_ref))))
    den = max(den, float(np.max(np.abs(d_ref))))
  return num / den if den else num
