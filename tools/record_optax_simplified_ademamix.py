"""Records optax.contrib.simplified_ademamix for
tests/test_optimizers/test_simplified_ademamix.py.

Run from the repository root, in the optax venv (never a dependency here):

    /work/venv-ref/bin/python tools/record_optax_simplified_ademamix.py

Writes tests/data/optax_simplified_ademamix.json: `simplified_ademamix`
(optax's defaults: b1 0.99, b2 0.95, alpha 0, eps 1e-8, eps_root 0, no
weight decay) and `simplified_ademamix_alt` (b1 0.9, b2 0.99, alpha 2,
eps 1e-3, weight_decay 0.1), each on the three problems of
tools/optax_reference.py (vector, matrix, conv kernel) for 20 steps,
float32 and float64, clip_by_global_norm(1.0) off and on. The rate
0.0078125 (2^-7) is exact in float32; the defaults' undamped momentum
makes a step up to 1 / (1 - b1) = 100 times Adam's.
"""

import optax

import optax_reference as ref

LR = 0.0078125
STEPS = 20
OUT = 'tests/data/optax_simplified_ademamix.json'

RULES = (
    ('simplified_ademamix', {}),
    ('simplified_ademamix_alt', dict(b1=0.9, b2=0.99, alpha=2.0, eps=1e-3,
                                     weight_decay=0.1)),
)


def main():
  ref.STEPS = STEPS  # Problem() reads the module's STEPS.
  cases = []
  for rule, kwargs in RULES:
    cases += ref.Cases(rule, optax.contrib.simplified_ademamix, kwargs, LR)
  ref.Write(OUT, cases,
            command='/work/venv-ref/bin/python '
            'tools/record_optax_simplified_ademamix.py')


if __name__ == '__main__':
  main()
