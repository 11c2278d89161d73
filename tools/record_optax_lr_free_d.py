"""Records optax.contrib.prodigy, dadapt_adamw and mechanize for
tests/test_optimizers/test_d_adaptation.py and test_mechanic.py.

Run from the repository root, in the optax venv (never a dependency here):

    /work/venv-ref/bin/python tools/record_optax_lr_free_d.py

Writes tests/data/optax_lr_free_d.json. `cases` (the format of
tools/optax_reference.py): `prodigy` (optax's defaults: betas (0.9,
0.999), beta3 None, eps 1e-8, estim_lr0 1e-6, estim_lr_coef 1, weight
decay 0, no safeguard), `prodigy_alt` (betas (0.8, 0.99), beta3 0.9,
eps 1e-3, estim_lr0 1e-4, estim_lr_coef 0.5, weight_decay 0.1,
safeguard_warmup), `dadapt_adamw` (defaults: betas (0.9, 0.999), eps
1e-8, estim_lr0 1e-6, weight decay 0), `dadapt_adamw_alt` (betas (0.8,
0.99), eps 1e-3, estim_lr0 1e-4, weight_decay 0.1), each at lr 1 (the
rate multiplies d: optax's default), and `mechanic_momentum`
(mechanize(sgd(2^-7, momentum 0.9)), mechanize's defaults: weight_decay
1e-2, eps 1e-8, s_init 1e-6, num_betas 6: the weights move by ~1e-7 in
20 steps, so float64 checks it) and `mechanic_sgd_alt` (mechanize(sgd(
0.125)), weight_decay 0.1, s_init 0.05, num_betas 3: they move by ~0.1);
on the
three problems (vector, matrix, conv kernel), 20 steps, float32 and
float64, clip_by_global_norm(1.0) off and on. `tree_cases`: the same
rules on a tree of two leaves (a (4, 3) matrix and a (5,) vector, no
clip; gradients a fixed direction plus noise, so d grows), whose d (and
Mechanic's s) read sums over both: `init`, `grads`
(per step) and `params` (per step) hold one flat list per leaf.
"""

import jax.numpy as jnp
import numpy as np
import optax

import optax_reference as ref

STEPS = 20
OUT = 'tests/data/optax_lr_free_d.json'
LR_MECHANIC = 0.0078125

_ALT = dict(betas=(0.8, 0.99), eps=1e-3, estim_lr0=1e-4, weight_decay=0.1)
RULES = (
    ('prodigy', optax.contrib.prodigy, {}, 1.0),
    ('prodigy_alt', optax.contrib.prodigy,
     dict(_ALT, beta3=0.9, estim_lr_coef=0.5, safeguard_warmup=True), 1.0),
    ('dadapt_adamw', optax.contrib.dadapt_adamw, {}, 1.0),
    ('dadapt_adamw_alt', optax.contrib.dadapt_adamw, dict(_ALT), 1.0),
    ('mechanic_momentum',
     lambda lr: optax.contrib.mechanize(optax.sgd(lr, momentum=0.9)), {},
     LR_MECHANIC),
    ('mechanic_sgd_alt',
     lambda lr, **kw: optax.contrib.mechanize(optax.sgd(lr), **kw),
     dict(weight_decay=0.1, s_init=0.05, num_betas=3), 0.125),
)


def _Json(kwargs):
  return {k: list(v) if isinstance(v, tuple) else v
          for k, v in kwargs.items()}


def TreeCases(rule, make_tx, kwargs, lr, seed=10):
  """The rule on a tree {'a': (4, 3), 'b': (5,)}, float32 and float64."""
  rng = np.random.RandomState(seed)
  shapes = [(4, 3), (5,)]
  init = [rng.normal(size=s) for s in shapes]
  # A steady direction plus noise, so d (and Mechanic's s) grow.
  mean = [rng.normal(size=s) for s in shapes]
  grads = [[m + 0.5 * rng.normal(size=m.shape) for m in mean]
           for _ in range(STEPS)]
  cases = []
  for dtype in ref.DTYPES:
    tx = make_tx(lr, **kwargs)
    w = [jnp.asarray(x, dtype) for x in init]
    state = tx.init(w)
    out = []
    for g in grads:
      updates, state = tx.update([jnp.asarray(x, dtype) for x in g], state,
                                 w)
      w = optax.apply_updates(w, updates)
      out.append([np.asarray(x, np.float64).ravel().tolist() for x in w])
    cases.append(dict(rule=rule, kwargs=_Json(kwargs), lr=lr, dtype=dtype,
                      shapes=[list(s) for s in shapes],
                      init=[x.ravel().tolist() for x in init],
                      grads=[[x.ravel().tolist() for x in g] for g in grads],
                      params=out))
  return cases


def main():
  ref.STEPS = STEPS  # Problem() reads the module's STEPS.
  cases, tree = [], []
  for rule, make_tx, kwargs, lr in RULES:
    for case in ref.Cases(rule, make_tx, kwargs, lr):
      case['kwargs'] = _Json(kwargs)
      cases.append(case)
    tree += TreeCases(rule, make_tx, kwargs, lr)
  ref.Write(OUT, cases, command='/work/venv-ref/bin/python '
            'tools/record_optax_lr_free_d.py')
  # The tree cases go in the same file, under their own key.
  import json  # pylint: disable=g-import-not-at-top
  with open(OUT) as f:
    data = json.load(f)
  data['tree_cases'] = tree
  with open(OUT, 'w') as f:
    json.dump(data, f, sort_keys=True)
    f.write('\n')
  print('added %d tree cases' % len(tree))


if __name__ == '__main__':
  main()
