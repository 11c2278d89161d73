"""Records optax's lookahead (fast and slow weights) -> tests/data/optax_lookahead.json.

Run in the optax venv (see tools/optax_reference.py), from the repository
root:

    /work/optax_venv/bin/python tools/record_optax_lookahead.py

Cases: `optax.lookahead(fast, sync_period, slow_step_size)` around
optax.sgd and optax.adam, on the shared problems of
tools/optax_reference.py (three shapes, float32 and float64,
optax.clip_by_global_norm(1.0) chained before it or not). optax's params
are a `LookaheadParams(fast, slow)` pair started in sync; the gradients are
those recorded for the fast weights. Per step, 'params' holds the fast
weights (our variables) and 'extra' the slow ones (what we evaluate).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import optax  # pylint: disable=g-import-not-at-top

import optax_reference as ref  # pylint: disable=g-import-not-at-top

_OUT = os.path.join('tests', 'data', 'optax_lookahead.json')

# rule -> (fast optimizer fn(lr), lookahead kwargs, lr). sync_period 3 and
# 4 synchronize inside the 10 steps and leave fast != slow at the end.
# Adam's eps is tiny: optax adds it to sqrt(v_hat), our Adam (TF's form) to
# sqrt(v), so only a negligible eps gives both the same numbers.
_RULES = {
    'lookahead_sgd': (optax.sgd, dict(sync_period=3, slow_step_size=0.5),
                      0.1),
    'lookahead_adam': (lambda lr: optax.adam(lr, b1=0.9, b2=0.999,
                                             eps=1e-12),
                       dict(sync_period=4, slow_step_size=0.7), 0.05),
}


def _RunLookahead(tx, init, grads, dtype, clip):
  """(fast weights after each step, slow weights after each step)."""
  if clip is not None:
    tx = optax.chain(optax.clip_by_global_norm(clip), tx)
  params = optax.LookaheadParams.init_synced(jnp.asarray(init, dtype))
  state = tx.init(params)
  fast, slow = [], []
  for g in grads:
    updates, state = tx.update(jnp.asarray(g, dtype), state, params)
    params = optax.apply_updates(params, updates)
    fast.append(np.asarray(params.fast, np.float64))
    slow.append(np.asarray(params.slow, np.float64))
  return fast, slow


def Cases():
  """Every (rule, shape, dtype, clip) case, in the shared case format."""
  cases = []
  for rule, (make_fast, kwargs, lr) in sorted(_RULES.items()):
    for i, (shape_name, shape) in enumerate(sorted(ref.SHAPES.items())):
      init, grads = ref.Problem(shape, i)
      for dtype in ref.DTYPES:
        for clip in (None, ref.CLIP):
          tx = optax.lookahead(make_fast(lr), **kwargs)
          fast, slow = _RunLookahead(tx, init, grads, dtype, clip)
          cases.append(dict(
              rule=rule, kwargs=kwargs, lr=lr, shape_name=shape_name,
              shape=list(shape), dtype=dtype, clip=clip,
              init=init.ravel().tolist(),
              grads=[g.ravel().tolist() for g in grads],
              params=[p.ravel().tolist() for p in fast],
              extra=[s.ravel().tolist() for s in slow]))
  return cases


if __name__ == '__main__':
  ref.Write(_OUT, Cases(),
            command='/work/optax_venv/bin/python '
            'tools/record_optax_lookahead.py')
