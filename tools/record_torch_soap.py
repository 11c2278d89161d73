"""Records pytorch-optimizer's SOAP for tests/test_optimizers/test_soap.py.

Run from the repository root, in the torch venv (never a dependency here):

    /work/venv-torch/bin/python tools/record_torch_soap.py

Writes tests/data/torch_soap.json in tools/optax_reference.py's case format
(init, grads and the weights after each of 20 steps, flat lists; the
versions under "versions"): `pytorch_optimizer.SOAP` (4.1.0,
pytorch_optimizer/optimizer/soap.py, a port of the authors'
github.com/nikhilvyas/SOAP) on

  vector [6]       (precondition_1d False: Adam after the skipped step)
  vector2 [2]      precondition_1d True
  matrix [4, 5]    (one side's first statistics have rank 4 < 5)
  conv [3, 3, 2, 4]  (HWIO, given to torch as it is: channels_first, so no
                     permutation before merging)

with precondition_frequency 1 and 5, merge_dims off and on (max
precondition dim 16: the conv merges to [9, 8]), a max precondition
dim of 4 (the matrix's dim 5 is not rotated), normalize_gradient and the
reference's defaults otherwise (betas 0.95, 0.95, weight_decay 0.01, eps
1e-8), with and without clip-by-global-norm 1.0 before the step (as the
optax recorders: torch.nn.utils.clip_grad_norm_ on the gradient), in
float32 (float64 too for the defaults and frequency 1). The inputs are
seeded (numpy RandomState) and stored.

Shapes are chosen so every statistic's null space has dimension <= 1 at
the first eigendecomposition (its eigenvectors are then unique up to
sign, which SOAP's step does not see); a larger null space (a vector of 3
with precondition_1d, a [4, 8] matrix) has eigenvectors that depend on the
LAPACK routine, and so do the steps after it.
"""

import importlib.metadata
import json
import os

import numpy as np
import pytorch_optimizer
import torch

STEPS = 20
LR = 0.0078125  # 2^-7, exact in float32.
CLIP = 1.0
OUT = 'tests/data/torch_soap.json'
SHAPES = {'vector': (6,), 'vector2': (2,), 'matrix': (4, 5),
          'conv': (3, 3, 2, 4)}

DTYPES = {'soap': ('float32', 'float64'), 'soap_f1': ('float32', 'float64')}

# (rule name, pytorch-optimizer keywords, shape names).
RULES = (
    ('soap', {}, ('vector', 'matrix', 'conv')),
    ('soap_f1', dict(precondition_frequency=1), ('matrix', 'conv')),
    ('soap_f5', dict(precondition_frequency=5), ('vector', 'matrix', 'conv')),
    ('soap_merge', dict(precondition_frequency=5, merge_dims=True,
                        max_precondition_dim=16), ('conv',)),
    ('soap_max4', dict(precondition_frequency=5, max_precondition_dim=4),
     ('matrix',)),
    ('soap_1d', dict(precondition_frequency=5, precondition_1d=True),
     ('vector2',)),
    ('soap_alt', dict(precondition_frequency=5, betas=(0.9, 0.99),
                      shampoo_beta=0.8, weight_decay=0.1, eps=1e-6,
                      normalize_gradient=True), ('matrix', 'conv')),
)


def Problem(shape, seed):
  """(init, grads): float64 arrays, init (shape), grads (STEPS, *shape)."""
  rng = np.random.RandomState(seed)
  return (rng.normal(0., 1., size=shape),
          rng.normal(0., 1., size=(STEPS,) + tuple(shape)))


def Run(kwargs, init, grads, dtype, clip):
  """The weights after each step (float64 arrays)."""
  tdtype = getattr(torch, dtype)
  w = torch.nn.Parameter(torch.tensor(init, dtype=tdtype))
  opt = pytorch_optimizer.SOAP([w], lr=LR, **kwargs)
  out = []
  for g in grads:
    w.grad = torch.tensor(g, dtype=tdtype)
    if clip is not None:
      torch.nn.utils.clip_grad_norm_([w], clip)
    opt.step()
    out.append(w.detach().numpy().astype(np.float64))
  return out


def main():
  torch.set_num_threads(1)
  cases = []
  for rule, kwargs, shape_names in RULES:
    for shape_name in shape_names:
      shape = SHAPES[shape_name]
      init, grads = Problem(shape, sorted(SHAPES).index(shape_name))
      for dtype in DTYPES.get(rule, ('float32',)):
        for clip in (None, CLIP):
          params = Run(kwargs, init, grads, dtype, clip)
          cases.append(dict(
              rule=rule, kwargs={k: list(v) if isinstance(v, tuple) else v
                                 for k, v in kwargs.items()},
              lr=LR, shape_name=shape_name, shape=list(shape), dtype=dtype,
              clip=clip, init=init.ravel().tolist(),
              grads=[g.ravel().tolist() for g in grads],
              params=[p.ravel().tolist() for p in params]))
  data = dict(command='/work/venv-torch/bin/python tools/record_torch_soap.py',
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
