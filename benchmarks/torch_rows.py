"""The optional PyTorch peer row of `update_step` (issue 16, item 5).

PyTorch's CPU optimizers on the same shapes, gradients and schedule:
`torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)` then
`torch.optim.SGD(momentum=0.9, foreach=True)` (TF1's momentum form: v = a v
+ g, w -= lr v) or `torch.optim.Adam(fused=True)` (one multi-tensor kernel;
epsilon added to the bias-corrected sqrt(v_hat), optax's form, so the row
is checked against the 'optax' reference: TF's form differs by up to 66 %
of the update where v is small), with the cosine rate set per step. `torch.set_num_threads(2)`, as the other rows use two cores.
Skipped with a note when torch is not installed (`pip install
torch==2.13.0` installs the CPU build on these machines; it is not a
dependency of this project).
"""

import math

import numpy as np


def TorchAvailable():
  """(True, '') if torch imports, else (False, a note saying why)."""
  try:
    import torch  # pylint: disable=g-import-not-at-top,unused-import
    return True, ''
  except ImportError as e:
    return False, 'torch row skipped: %s; it is optional (%s).' % (
        e, 'pip install torch==2.13.0 for the CPU build')


class TorchRow(object):
  """(e) PyTorch: clip_grad_norm_ + SGD(momentum, foreach) | Adam(fused)."""

  reference_form = 'tf'

  def __init__(self, cfg, weights, grads):
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(2)
    self.name = 'torch'
    # Momentum is the same in every form; Adam's epsilon is optax's.
    self.reference_form = 'optax' if cfg.optimizer == 'adam' else 'tf'
    self._torch = torch
    self._cfg = cfg
    self._params = [torch.nn.Parameter(torch.from_numpy(w.copy()))
                    for w in weights]
    self._grads = [torch.from_numpy(g.copy()) for g in grads]
    if cfg.optimizer == 'momentum':
      self._opt = torch.optim.SGD(self._params, lr=cfg.lr,
                                  momentum=cfg.momentum, foreach=True)
    else:
      self._opt = torch.optim.Adam(self._params, lr=cfg.lr,
                                   betas=(cfg.beta1, cfg.beta2),
                                   eps=cfg.epsilon, fused=True)
    self._t = 0

  def _Rate(self):
    cfg = self._cfg
    frac = min(self._t, cfg.total_steps) / cfg.total_steps
    return cfg.lr * (cfg.alpha + (1 - cfg.alpha) * 0.5 *
                     (1 + math.cos(math.pi * frac)))

  def step(self):
    for p, g in zip(self._params, self._grads):
      p.grad = g.clone() if p.grad is None else p.grad.copy_(g)
    self._torch.nn.utils.clip_grad_norm_(self._params, self._cfg.clip,
                                         foreach=True)
    for group in self._opt.param_groups:
      group['lr'] = self._Rate()
    self._opt.step()
    self._t += 1

  def Weights(self):
    return [np.array(p.detach().numpy()) for p in self._params]
