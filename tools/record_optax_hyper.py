"""Records optax's `inject_hyperparams` with scheduled hyperparameters.

Writes tests/data/optax_hyper.json, read by
tests/test_optimizers/test_hyper_schedules.py. Each rule below is an optax
optimizer built by `optax.inject_hyperparams` with one or two of its
hyperparameters given as `optax.linear_schedule(init, end, steps)`; our
counterpart is the same rule with `hyper_schedules` of
`schedules.LinearSchedule` (start=(0, init), limit=(steps, end)). A case's
`kwargs` holds the constants and, for each scheduled name, `<name>` =
[init, end, steps].

    /work/optax_venv/bin/python tools/record_optax_hyper.py

(see tools/optax_reference.py for the venv). `eps` is 1e-10 for the Adam
rules, so optax's epsilon (added after the bias correction) and ours (TF's
epsilon hat, added before) differ by far less than the tolerance.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optax  # pylint: disable=g-import-not-at-top

import optax_reference as ref  # pylint: disable=g-import-not-at-top

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), 'tests', 'data', 'optax_hyper.json')


def _Injected(factory, kwargs, lr):
  """inject_hyperparams(factory) with list-valued kwargs as schedules."""
  args = {}
  for k, v in kwargs.items():
    if isinstance(v, list):
      args[k] = optax.linear_schedule(v[0], v[1], v[2])
    else:
      args[k] = v
  return optax.inject_hyperparams(factory)(learning_rate=lr, **args)


# (rule, optax factory, kwargs, lr): the optax names of the hyperparameters.
RULES = (
    ('sgd_momentum', optax.sgd, dict(momentum=[0.5, 0.95, 8]), 0.05),
    ('adam_b1', optax.adam,
     dict(b1=[0.95, 0.8, 8], b2=0.999, eps=1e-10), 0.01),
    ('adamw_b2_wd', optax.adamw,
     dict(b1=0.9, b2=[0.99, 0.999, 6], eps=1e-10,
          weight_decay=[0.0, 0.2, 8]), 0.01),
    ('lion_b1', optax.lion,
     dict(b1=[0.95, 0.8, 8], b2=0.99, weight_decay=0.0), 0.01),
    ('rmsprop_decay_momentum', optax.rmsprop,
     dict(decay=[0.8, 0.95, 8], eps=0.1, initial_scale=1.0,
          momentum=[0.5, 0.9, 5]), 0.01),
    ('lamb_b1', optax.lamb,
     dict(b1=[0.95, 0.8, 8], b2=0.999, eps=1e-6, weight_decay=0.0), 0.01),
)


def main():
  cases = []
  for seed, (rule, factory, kwargs, lr) in enumerate(RULES):
    make = (lambda f: lambda lr_, **kw: _Injected(f, kw, lr_))(factory)
    cases += ref.Cases(rule, make, kwargs, lr, seed=10 * seed)
  ref.Write(OUT, cases, command='/work/optax_venv/bin/python '
            'tools/record_optax_hyper.py')


if __name__ == '__main__':
  main()
