"""Records pytorch-optimizer's NorMuon for tests/test_optimizers/test_normuon.py.

Run from the repository root, in the torch venv (never a dependency here):

    /work/venv-torch/bin/python tools/record_torch_normuon.py

Writes tests/data/torch_normuon.json in tools/optax_reference.py's case
format (init, grads and the weights after each of 20 steps, flat lists, in
OUR layout; the versions under "versions"): `pytorch_optimizer.NorMuon`
(4.1.0, pytorch_optimizer/optimizer/muon/normuon.py; Li et al. 2025,
arXiv:2510.05491), one param group with use_muon=True, foreach=False, lr
0.02, on

  matrix [4, 3]       ours [fan_in, fan_out]; torch's [out, in] is its
                      transpose [3, 4]
  wide [3, 5]         (width factor sqrt(5 / 3) != 1); torch [5, 3]
  conv [3, 3, 2, 4]   ours HWIO; torch's OIHW [4, 2, 3, 3] (a permutation
                      of the fan-in axis, which NS and the per-neuron mean
                      do not see)

for the rules

  normuon          the defaults (Nesterov, momentum 0.95, beta2 0.95,
                   eps 1e-10, preserve_norm, use_adjusted_lr False)
  normuon_plain    nesterov=False, weight_decay=0.1 (decoupled)
  normuon_rms      update_scale='match_rms' (RMS 0.2, no shape factor)
  normuon_moon     use_adjusted_lr=True (0.2 sqrt(max(out, in)))
  normuon_pe       ns_coeffs = modded-nanogpt's 5-row Polar Express table
                   (learner/optimizers/rules/muon.py POLAR_EXPRESS)

with and without clip-by-global-norm 1.0 before the step (done here as
optax.clip_by_global_norm: g * 1.0 / ||g|| when ||g|| > 1, which is our
learner's clipping; torch's clip_grad_norm_ adds 1e-6 to the norm), in
float32 and float64. The reference runs Newton-Schulz in bfloat16 by
default: here `zero_power_via_newton_schulz_5` is given the parameter's
dtype instead (float32 / float64), so the record is the formula, not
bfloat16's rounding. Inputs are seeded (numpy RandomState) and stored.
"""

import functools
import importlib.metadata
import json
import os

import numpy as np
import pytorch_optimizer
from pytorch_optimizer.optimizer.muon import normuon as normuon_module
import torch

STEPS = 20
LR = 0.02
CLIP = 1.0
OUT = 'tests/data/torch_normuon.json'
SHAPES = {'matrix': (4, 3), 'wide': (3, 5), 'conv': (3, 3, 2, 4)}
POLAR_EXPRESS = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]
RULES = (
    ('normuon', {}),
    ('normuon_plain', dict(nesterov=False, weight_decay=0.1)),
    ('normuon_rms', dict(update_scale='match_rms')),
    ('normuon_moon', dict(use_adjusted_lr=True)),
    ('normuon_pe', dict(ns_coeffs=POLAR_EXPRESS)),
)
_NS = normuon_module.zero_power_via_newton_schulz_5


def ToTorch(x):
  """Our layout [.., cin, cout] -> torch's [cout, cin, ..]."""
  if x.ndim == 2:
    return x.T
  return np.transpose(x, (3, 2, 0, 1))


def FromTorch(x):
  """torch's [cout, cin, ..] -> our layout (the inverse of ToTorch)."""
  if x.ndim == 2:
    return x.T
  return np.transpose(x, (2, 3, 1, 0))


def Problem(shape, seed):
  """(init, grads): float64 arrays, init (shape), grads (STEPS, *shape)."""
  rng = np.random.RandomState(seed)
  return (rng.normal(0., 1., size=shape),
          rng.normal(0., 1., size=(STEPS,) + tuple(shape)))


def Run(kwargs, init, grads, dtype, clip):
  """The weights after each step, in our layout (float64 arrays)."""
  tdtype = getattr(torch, dtype)
  normuon_module.zero_power_via_newton_schulz_5 = functools.partial(
      _NS, dtype=tdtype)
  w = torch.nn.Parameter(torch.tensor(ToTorch(init), dtype=tdtype))
  opt = pytorch_optimizer.NorMuon(
      [dict(params=[w], use_muon=True)], lr=LR, foreach=False, **kwargs)
  out = []
  for g in grads:
    g = torch.tensor(ToTorch(g), dtype=tdtype)
    if clip is not None:
      norm = torch.linalg.vector_norm(g)
      if norm > clip:
        g = g * (clip / norm)
    w.grad = g
    opt.step()
    out.append(FromTorch(w.detach().numpy().astype(np.float64)))
  return out


def main():
  torch.set_num_threads(1)
  cases = []
  for rule, kwargs in RULES:
    for seed, (shape_name, shape) in enumerate(sorted(SHAPES.items())):
      init, grads = Problem(shape, seed)
      for dtype in ('float32', 'float64'):
        for clip in (None, CLIP):
          params = Run(kwargs, init, grads, dtype, clip)
          cases.append(dict(
              rule=rule, kwargs={k: [list(r) for r in v] if k == 'ns_coeffs'
                                 else v for k, v in kwargs.items()},
              lr=LR, shape_name=shape_name, shape=list(shape), dtype=dtype,
              clip=clip, init=init.ravel().tolist(),
              grads=[g.ravel().tolist() for g in grads],
              params=[p.ravel().tolist() for p in params]))
  data = dict(
      command='/work/venv-torch/bin/python tools/record_torch_normuon.py',
      versions=dict(torch=torch.__version__,
                    pytorch_optimizer=importlib.metadata.version(
                        'pytorch_optimizer'),
                    numpy=np.__version__),
      cases=cases)
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  with open(OUT, 'w') as f:
    json.dump(data, f, sort_keys=True)
    f.write('\n')
  print('wrote %d cases to %s' % (len(cases), OUT))


if __name__ == '__main__':
  main()
