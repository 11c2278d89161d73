"""Records cautious updates and cautious weight decay from PyTorch packages
for tests/test_optimizers/test_cautious.py.

Run from the repository root, in the torch venv (never a dependency here):

    /work/venv-torch/bin/python tools/record_torch_cautious.py

(torch 2.13 CPU, pytorch-optimizer 4.1.0, heavyball 3.2.1:
`pip install torch pytorch-optimizer heavyball`). Writes
tests/data/torch_cautious.json in the case format of
tools/optax_reference.py (its problems: seeded vector (5,), matrix (4, 3)
and conv kernel (3, 3, 2, 4), 20 steps, float32 and float64, global-norm
clipping to 1.0 off and on, applied here as optax.clip_by_global_norm
does: g * 1.0 / ||g|| when ||g|| >= 1.0):

  lion_cautious      pytorch_optimizer.Lion(betas=(0.9, 0.99),
                     cautious=True): apply_cautious, mask [u g > 0],
                     u * mask * n / (sum(mask) + 1) (Liang et al. 2024).
  lion_cautious_wd   the same with weight_decay=0.1 (decoupled, lr-scaled).
  adamw_cwd          heavyball.AdamW(betas=(0.9, 0.99), eps=1e-8,
                     weight_decay=0.1, cautious_weight_decay=True): the
                     decay only where sign(u) == sign(w) (Chen et al. 2025);
                     heavyball's Adam clamps sqrt(v_hat) at eps where ours
                     adds eps (epsilon_form='optax'): ~1e-8 relative.
  adamw_wd           heavyball.AdamW as above without the mask (control).

The rate 0.0078125 (2^-7) is exact in float32.
"""

from importlib import metadata
import json
import os
import sys

import numpy as np
import torch

import heavyball
import pytorch_optimizer

LR = 0.0078125
STEPS = 20
CLIP = 1.0
SHAPES = {'matrix': (4, 3), 'vector': (5,), 'conv': (3, 3, 2, 4)}
DTYPES = ('float32', 'float64')
OUT = 'tests/data/torch_cautious.json'


def _Lion(params, **kw):
  return pytorch_optimizer.Lion(params, lr=LR, betas=(0.9, 0.99), **kw)


def _AdamW(params, **kw):
  return heavyball.AdamW(params, lr=LR, betas=(0.9, 0.99), eps=1e-8, **kw)


# (rule, make(params) -> torch optimizer, the kwargs as recorded).
RULES = (
    ('lion_cautious', lambda ps: _Lion(ps, cautious=True),
     dict(beta1=0.9, beta2=0.99, cautious=True)),
    ('lion_cautious_wd', lambda ps: _Lion(ps, cautious=True,
                                          weight_decay=0.1),
     dict(beta1=0.9, beta2=0.99, cautious=True, weight_decay=0.1)),
    ('adamw_cwd', lambda ps: _AdamW(ps, weight_decay=0.1,
                                    cautious_weight_decay=True),
     dict(beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1,
          cautious_weight_decay=True)),
    ('adamw_wd', lambda ps: _AdamW(ps, weight_decay=0.1),
     dict(beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1)),
)


def Problem(shape, seed):
  """(init, grads) as tools/optax_reference.py's Problem with STEPS."""
  rng = np.random.RandomState(seed)
  init = rng.normal(0., 1., size=shape)
  grads = rng.normal(0., 1., size=(STEPS,) + tuple(shape))
  return init, grads


def Run(make, init, grads, dtype, clip):
  """The weights after each step (float64 arrays)."""
  tdtype = getattr(torch, dtype)
  w = torch.nn.Parameter(torch.tensor(init, dtype=tdtype))
  opt = make([w])
  out = []
  for g in grads:
    g = torch.tensor(g, dtype=tdtype)
    if clip is not None:
      norm = torch.sqrt(torch.sum(g * g))
      if norm >= clip:
        g = g / norm * clip
    w.grad = g
    opt.step()
    opt.zero_grad()
    out.append(w.detach().numpy().astype(np.float64).copy())
  return out


def main():
  torch.manual_seed(0)
  cases = []
  for rule, make, kwargs in RULES:
    for i, (shape_name, shape) in enumerate(sorted(SHAPES.items())):
      init, grads = Problem(shape, i)
      for dtype in DTYPES:
        for clip in (None, CLIP):
          params = Run(make, init, grads, dtype, clip)
          cases.append(dict(
              rule=rule, kwargs=kwargs, lr=LR, shape_name=shape_name,
              shape=list(shape), dtype=dtype, clip=clip,
              init=init.ravel().tolist(),
              grads=[g.ravel().tolist() for g in grads],
              params=[p.ravel().tolist() for p in params]))
  data = dict(
      command='/work/venv-torch/bin/python tools/record_torch_cautious.py',
      versions=dict(torch=torch.__version__,
                    pytorch_optimizer=metadata.version('pytorch-optimizer'),
                    heavyball=metadata.version('heavyball'),
                    numpy=np.__version__, python=sys.version.split()[0]),
      cases=cases)
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  with open(OUT, 'w') as f:
    json.dump(data, f, sort_keys=True)
    f.write('\n')
  print('wrote %d cases to %s' % (len(cases), OUT))


if __name__ == '__main__':
  main()
