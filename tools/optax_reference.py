"""Shared helpers of the optax recorders (tools/record_optax_*.py).

Runs only in a separate venv that has jax and optax (never a dependency of
this project); the tests read only the JSON files the recorders write
(tests/data/optax_*.json, described in tests/data/README.md):

    python3 -m venv /work/optax_venv
    /work/optax_venv/bin/pip install jax jaxlib optax numpy
    /work/optax_venv/bin/python tools/record_optax_<topic>.py

A recorded case is one update rule (an optax GradientTransformation) run for
`STEPS` steps on one of the `SHAPES`, from seeded initial weights with
seeded gradients (both stored in the file, so the tests need no generator),
with and without `optax.clip_by_global_norm(CLIP)` chained before it, in
float32 (jax's default) and float64 (jax_enable_x64). A case's JSON is

  {"rule": str, "kwargs": {...}, "lr": float, "shape_name": str,
   "shape": [..], "dtype": "float32"|"float64", "clip": float|null,
   "init": flat list, "grads": [STEPS flat lists],
   "params": [STEPS flat lists: the weights after each step],
   "extra": {...} (optional, e.g. eval weights after each step)}
"""

import json
import os
import sys

import jax

jax.config.update('jax_enable_x64', True)

import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import optax  # pylint: disable=g-import-not-at-top

STEPS = 10
CLIP = 1.0
SHAPES = {'matrix': (4, 3), 'vector': (5,), 'conv': (3, 3, 2, 4)}
DTYPES = ('float32', 'float64')


def Problem(shape, seed):
  """(init, grads): float64 arrays, init (shape), grads (STEPS, *shape)."""
  rng = np.random.RandomState(seed)
  init = rng.normal(0., 1., size=shape)
  grads = rng.normal(0., 1., size=(STEPS,) + tuple(shape))
  return init, grads


def Run(tx, init, grads, dtype, clip=None, extra_fn=None):
  """Runs `tx` (optionally after global-norm clipping) over `grads`.

  Args:
    tx: an optax GradientTransformation.
    init: float64 array, the initial weights.
    grads: float64 array (STEPS, *shape).
    dtype: 'float32' or 'float64': the weights, gradients and state.
    clip: None, or the max global norm (optax.clip_by_global_norm).
    extra_fn: optional fn(params, state) -> array recorded after each step.

  Returns:
    (params after each step: list of arrays, extras: list or None).
  """
  if clip is not None:
    tx = optax.chain(optax.clip_by_global_norm(clip), tx)
  w = jnp.asarray(init, dtype)
  state = tx.init(w)
  out, extras = [], []
  for g in grads:
    g = jnp.asarray(g, dtype)
    updates, state = tx.update(g, state, w)
    w = optax.apply_updates(w, updates)
    out.append(np.asarray(w, np.float64))
    if extra_fn is not None:
      extras.append(np.asarray(extra_fn(w, state), np.float64))
  return out, (extras if extra_fn is not None else None)


def Cases(rule, make_tx, kwargs, lr, seed=0, extra_fn=None):
  """Every (shape, dtype, clip) case of one rule (a list of dicts).

  Args:
    rule: the name the tests look the cases up by (str).
    make_tx: fn(lr, **kwargs) -> optax GradientTransformation.
    kwargs: the rule's hyperparameters (JSON-serializable dict).
    lr: the constant learning rate (float).
    seed: the problems' seed; shape i uses seed + i.
    extra_fn: see `Run`.
  """
  cases = []
  for i, (shape_name, shape) in enumerate(sorted(SHAPES.items())):
    init, grads = Problem(shape, seed + i)
    for dtype in DTYPES:
      for clip in (None, CLIP):
        params, extras = Run(make_tx(lr, **kwargs), init, grads, dtype,
                             clip, extra_fn)
        case = dict(rule=rule, kwargs=kwargs, lr=lr, shape_name=shape_name,
                    shape=list(shape), dtype=dtype, clip=clip,
                    init=init.ravel().tolist(),
                    grads=[g.ravel().tolist() for g in grads],
                    params=[p.ravel().tolist() for p in params])
        if extras is not None:
          case['extra'] = [e.ravel().tolist() for e in extras]
        cases.append(case)
  return cases


def Write(path, cases, command=None):
  """Writes {"command", "versions", "cases"} to `path` (JSON, sorted keys)."""
  data = dict(
      command=command or ' '.join(['python'] + sys.argv),
      versions=dict(jax=jax.__version__, optax=optax.__version__,
                    numpy=np.__version__),
      cases=cases)
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with open(path, 'w') as f:
    json.dump(data, f, sort_keys=True)
    f.write('\n')
  print('wrote %d cases to %s' % (len(cases), path))
