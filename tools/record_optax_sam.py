"""Records optax.contrib.sam on quadratic problems: tests/data/optax_sam.json.

    /work/optax_venv/bin/python tools/record_optax_sam.py

SAM on the constant gradients of tools/optax_reference.py would be the inner
optimizer alone (the gradient at w + e is the gradient at w), so each case
here is a quadratic loss whose gradient depends on the weights:

  L(w) = 0.5 * sum(d * w^2) + 0.5 * (u . w)^2 + b . w
         (w flattened; the Hessian diag(d) + u u^T is positive definite:
          d ~ U[0.5, 2], u ~ N(0, 0.5^2), b ~ N(0, 1), all seeded)

with d, u, b stored in the case ('quad_d', 'quad_u', 'quad_b', each n
floats) and the gradient taken by jax.grad of that expression. The rule is
optax's drop-in SAM, sam(outer, chain(normalize(), sgd(rho)), sync_period=2),
in its transparent form, where the calls alternate an adversarial step
(w + rho * g / ||g||) and an outer step (the outer optimizer's update of w
with the gradient at w + e); 'params' holds the weights after each outer step
(STEPS of them, 2 * STEPS calls). The opaque form (grad_fn) is checked to
give the same weights. With clipping, the outer optimizer is
chain(clip_by_global_norm(CLIP), inner), as our learner clips the second
gradient; the perturbation's direction does not depend on it.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax import contrib

import optax_reference as ref  # tools/ is the script's directory.

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), 'tests', 'data', 'optax_sam.json')

# rule -> (make inner optimizer from lr, kwargs, lr).
RULES = {
    'sam_sgd': (lambda lr, momentum: optax.sgd(lr), dict(rho=0.05,
                                                           momentum=0.0),
                0.1),
    'sam_momentum': (lambda lr, momentum: optax.sgd(lr, momentum=momentum),
                     dict(rho=0.1, momentum=0.9), 0.05),
}


def Quadratic(n, seed):
  """(d, u, b): float64 arrays of n entries (see the module docstring)."""
  rng = np.random.RandomState(1000 + seed)
  return (rng.uniform(0.5, 2.0, size=n), rng.normal(0., 0.5, size=n),
          rng.normal(size=n))


def _Tx(make_inner, kwargs, lr, clip, opaque):
  outer = make_inner(lr, kwargs['momentum'])
  if clip is not None:
    outer = optax.chain(optax.clip_by_global_norm(clip), outer)
  adv = optax.chain(contrib.normalize(), optax.sgd(kwargs['rho']))
  return contrib.sam(outer, adv, sync_period=2, opaque_mode=opaque)


def Loss(w, d, u, b):
  """L(w) of the module docstring (w any shape; d, u, b flat)."""
  w = w.ravel()
  return (0.5 * jnp.sum(d * w * w) + 0.5 * jnp.dot(u, w) ** 2 +
          jnp.dot(b, w))


def Run(make_inner, kwargs, lr, init, quad, dtype, clip, opaque):
  """The weights after each of ref.STEPS outer steps (float64 arrays)."""
  d, u, b = [jnp.asarray(x, dtype) for x in quad]
  shape = init.shape
  grad = jax.grad(lambda w: Loss(w, d, u, b))
  tx = _Tx(make_inner, kwargs, lr, clip, opaque)
  w = jnp.asarray(init, dtype)
  state = tx.init(w)
  out = []
  for _ in range(ref.STEPS):
    if opaque:
      updates, state = tx.update(grad(w), state, w,
                                 grad_fn=lambda p, _: grad(p))
      w = optax.apply_updates(w, updates)
    else:
      for _ in range(2):  # adversarial call, then the outer call
        updates, state = tx.update(grad(w), state, w)
        w = optax.apply_updates(w, updates)
    out.append(np.asarray(w, np.float64).reshape(shape))
  return out


def Cases():
  cases = []
  for rule, (make_inner, kwargs, lr) in sorted(RULES.items()):
    for i, (shape_name, shape) in enumerate(sorted(ref.SHAPES.items())):
      init, _ = ref.Problem(shape, i)
      quad = Quadratic(init.size, i)
      for dtype in ref.DTYPES:
        for clip in (None, ref.CLIP):
          params = Run(make_inner, kwargs, lr, init, quad, dtype, clip,
                       opaque=False)
          opaque = Run(make_inner, kwargs, lr, init, quad, dtype, clip,
                       opaque=True)
          np.testing.assert_allclose(opaque, params, rtol=1e-5, atol=1e-6)
          cases.append(dict(
              rule=rule, kwargs=kwargs, lr=lr, shape_name=shape_name,
              shape=list(shape), dtype=dtype, clip=clip,
              init=init.ravel().tolist(), grads=[],
              quad_d=quad[0].tolist(), quad_u=quad[1].tolist(),
              quad_b=quad[2].tolist(),
              params=[p.ravel().tolist() for p in params]))
  return cases


if __name__ == '__main__':
  ref.Write(OUT, Cases(),
            command='/work/optax_venv/bin/python tools/record_optax_sam.py')
