"""Records optax.contrib.ademamix for tests/test_optimizers/test_ademamix.py.

Run from the repository root, in the optax venv (never a dependency here):

    /work/venv-ref/bin/python tools/record_optax_ademamix.py

Writes tests/data/optax_ademamix.json: `ademamix` (optax's defaults: b1 0.9,
b2 0.999, b3 0.9999, alpha 5, eps 1e-8, no weight decay), `ademamix_alt`
(b1 0.8, b2 0.99, b3 0.999, alpha 8, eps 1e-3, weight_decay 0.1) and
`ademamix_warmup` (alpha = linear_schedule(0, 5, 10), b3 =
linear_schedule(0.9, 0.999, 10); a case's kwargs hold [init, end, steps]
for a scheduled name), each on the three problems of
tools/optax_reference.py, float32 and float64, clip_by_global_norm(1.0)
off and on. The rate 0.0625 is exact in float32.
"""

import optax

import optax_reference as ref

LR = 0.0625
OUT = 'tests/data/optax_ademamix.json'


def _Ademamix(lr, **kwargs):
  """optax.contrib.ademamix; a [init, end, steps] kwarg is a linear schedule."""
  kw = {k: optax.linear_schedule(*v) if isinstance(v, list) else v
        for k, v in kwargs.items()}
  return optax.contrib.ademamix(lr, **kw)


RULES = (
    ('ademamix', {}),
    ('ademamix_alt', dict(b1=0.8, b2=0.99, b3=0.999, alpha=8.0, eps=1e-3,
                          weight_decay=0.1)),
    ('ademamix_warmup', dict(alpha=[0.0, 5.0, 10], b3=[0.9, 0.999, 10])),
)


def main():
  cases = []
  for rule, kwargs in RULES:
    cases += ref.Cases(rule, _Ademamix, kwargs, LR)
  ref.Write(OUT, cases,
            command='/work/venv-ref/bin/python '
            'tools/record_optax_ademamix.py')


if __name__ == '__main__':
  main()
