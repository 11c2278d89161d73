"""Records the authors' torch Prodigy and D-Adaptation Adam for
tests/test_optimizers/test_d_adaptation.py.

Run from the repository root, in the torch venv (never a dependency here):

    /work/venv-torch/bin/python tools/record_torch_lr_free.py

Writes tests/data/torch_lr_free.json: {"command", "versions", "cases"},
each case in the format of tools/optax_reference.py (no clip) plus
`ours`, the params of our class that give the same rule. Rules:
`prodigyopt_defaults` (prodigyopt.Prodigy(lr=1): use_bias_correction
False, decouple True, d0 1e-6, d_coef 1, growth_rate inf),
`prodigyopt_bc_wd` (use_bias_correction=True, weight_decay 0.1,
betas (0.8, 0.99), beta3 0.9, safeguard_warmup, d0 1e-4, d_coef 0.5, eps
1e-3: optax's `prodigy_alt`), `dadapt_adam_defaults`
(dadaptation.DAdaptAdam(lr=1): no bias correction, weight decay 0) and
`dadapt_adam_bc_wd` (use_bias_correction=True, decouple=True,
weight_decay 0.1, betas (0.8, 0.99), eps 1e-3, d0 1e-4: optax's
`dadapt_adamw_alt`); the problems of tools/optax_reference.py (same
seeds), 20 steps, float32 and float64.
"""

import json
import os

import dadaptation
import numpy as np
import prodigyopt
import torch

STEPS = 20
OUT = 'tests/data/torch_lr_free.json'
SHAPES = {'matrix': (4, 3), 'vector': (5,), 'conv': (3, 3, 2, 4)}
_ALT = dict(betas=(0.8, 0.99), eps=1e-3, d0=1e-4, weight_decay=0.1)

# name -> (constructor, kwargs, our class name, our params).
RULES = {
    'prodigyopt_defaults': (prodigyopt.Prodigy, {}, 'Prodigy',
                            dict(bias_correction=False)),
    'prodigyopt_bc_wd': (
        prodigyopt.Prodigy,
        dict(_ALT, beta3=0.9, d_coef=0.5, safeguard_warmup=True,
             use_bias_correction=True), 'Prodigy',
        dict(beta1=0.8, beta2=0.99, beta3=0.9, epsilon=1e-3, d0=1e-4,
             d_coef=0.5, safeguard_warmup=True, decoupled_weight_decay=0.1)),
    'dadapt_adam_defaults': (dadaptation.DAdaptAdam, {}, 'DAdaptAdamW',
                             dict(bias_correction=False)),
    'dadapt_adam_bc_wd': (
        dadaptation.DAdaptAdam,
        dict(_ALT, use_bias_correction=True, decouple=True), 'DAdaptAdamW',
        dict(beta1=0.8, beta2=0.99, epsilon=1e-3, d0=1e-4,
             decoupled_weight_decay=0.1)),
}


def Problem(shape, seed):
  """tools/optax_reference.py's Problem: (init, grads), float64."""
  rng = np.random.RandomState(seed)
  init = rng.normal(0., 1., size=shape)
  grads = rng.normal(0., 1., size=(STEPS,) + tuple(shape))
  return init, grads


def Run(make, kwargs, init, grads, dtype):
  w = torch.nn.Parameter(torch.tensor(init, dtype=dtype))
  opt = make([w], lr=1.0, **kwargs)
  out = []
  for g in grads:
    w.grad = torch.tensor(g, dtype=dtype)
    opt.step()
    out.append(w.detach().double().numpy().ravel().tolist())
  return out


def main():
  cases = []
  for rule, (make, kwargs, cls, ours) in RULES.items():
    for i, (shape_name, shape) in enumerate(sorted(SHAPES.items())):
      init, grads = Problem(shape, i)
      for dtype in ('float32', 'float64'):
        cases.append(dict(
            rule=rule, cls=cls, ours=ours, lr=1.0, shape_name=shape_name,
            shape=list(shape), dtype=dtype, clip=None,
            kwargs={k: list(v) if isinstance(v, tuple) else v
                    for k, v in kwargs.items()},
            init=init.ravel().tolist(),
            grads=[g.ravel().tolist() for g in grads],
            params=Run(make, kwargs, init, grads, getattr(torch, dtype))))
  data = dict(command='/work/venv-torch/bin/python '
              'tools/record_torch_lr_free.py',
              versions=dict(torch=torch.__version__,
                            prodigyopt=_Version('prodigyopt'),
                            dadaptation=_Version('dadaptation'),
                            numpy=np.__version__),
              cases=cases)
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  with open(OUT, 'w') as f:
    json.dump(data, f, sort_keys=True)
    f.write('\n')
  print('wrote %d cases to %s' % (len(cases), OUT))


def _Version(name):
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  return metadata.version(name)


if __name__ == '__main__':
  main()
