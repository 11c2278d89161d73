"""Records optax.contrib's learning-rate-free rules (dog, dowg, cocob,
madgrad) for tests/test_optimizers/test_dog.py, test_cocob.py and
test_madgrad.py.

Run from the repository root, in the optax venv (never a dependency here):

    /work/venv-ref/bin/python tools/record_optax_lr_free.py

Writes tests/data/optax_lr_free.json, each rule on the three problems of
tools/optax_reference.py (vector, matrix, conv kernel) for 20 steps,
float32 and float64, clip_by_global_norm(1.0) off and on:
  dog          optax's defaults (learning_rate 1, init_step ('heuristic',
               1e-6), eps 1e-8)
  dog_distance init_step ('distance', 0.1)
  dog_lr       init_step ('learning_rate', 0.05)
  dowg         optax's defaults (learning_rate 1, eps 1e-4)
  dowg_init    init_estim_sq_dist 0.01, eps 1e-6
  cocob        optax's defaults (learning_rate 1, alpha 100, eps 1e-8)
  cocob_alt    learning_rate 0.5, alpha 10, eps 1e-6
  madgrad      learning_rate 0.01 (the reference implementation's; optax
               has no default), momentum 0.9, eps 1e-6
  madgrad_alt  learning_rate 0.0625, momentum 0.5, eps 1e-4
No weight decay (optax's is an L2 term in the gradient). The rates are
exact in float32 except madgrad's 0.01.
"""

import optax

import optax_reference as ref

STEPS = 20
OUT = 'tests/data/optax_lr_free.json'
C = optax.contrib


def _Dog(lr, init_step, init_value, **kw):
  return C.dog(lr, init_step=(init_step, init_value), **kw)


RULES = (
    ('dog', _Dog, dict(init_step='heuristic', init_value=1e-6), 1.0),
    ('dog_distance', _Dog, dict(init_step='distance', init_value=0.1), 1.0),
    ('dog_lr', _Dog, dict(init_step='learning_rate', init_value=0.05), 1.0),
    ('dowg', C.dowg, {}, 1.0),
    ('dowg_init', C.dowg, dict(init_estim_sq_dist=0.01, eps=1e-6), 1.0),
    ('cocob', C.cocob, {}, 1.0),
    ('cocob_alt', C.cocob, dict(alpha=10.0, eps=1e-6), 0.5),
    ('madgrad', C.madgrad, {}, 0.01),
    ('madgrad_alt', C.madgrad, dict(momentum=0.5, eps=1e-4), 0.0625),
)


def main():
  ref.STEPS = STEPS  # Problem() reads the module's STEPS.
  cases = []
  for rule, make_tx, kwargs, lr in RULES:
    cases += ref.Cases(rule, make_tx, kwargs, lr)
  ref.Write(OUT, cases,
            command='/work/venv-ref/bin/python tools/record_optax_lr_free.py')


if __name__ == '__main__':
  main()
