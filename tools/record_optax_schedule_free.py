"""Records optax's schedule-free SGD and AdamW for the tests (issue 24).

Writes tests/data/optax_schedule_free.json: per case, the weights y after
each step ('params') and the eval weights x
(optax.contrib.schedule_free_eval_params, 'extra'). Rules:
  schedule_free_sgd, schedule_free_sgd_warmup_wd,
  schedule_free_adamw, schedule_free_adamw_warmup_wd
(the *_warmup_wd ones with warmup_steps=4 < 10 steps and weight decay, so
the warmup's t - 1 / t reading and the decay on y are both in the record).
The rates are powers of two, exact in float32: the learner hands our rules
a float32 rate, optax keeps a float64 one in the float64 cases.

Run from the repository root, in the optax venv (tools/optax_reference.py):

    /work/optax_venv/bin/python tools/record_optax_schedule_free.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optax  # pylint: disable=g-import-not-at-top,wrong-import-position
import optax_reference  # pylint: disable=g-import-not-at-top,wrong-import-position

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   'tests', 'data', 'optax_schedule_free.json')


def _EvalParams(params, state):
  """x: the eval weights of the schedule-free state (after clipping's)."""
  if isinstance(state, tuple) and not hasattr(state, 'z'):
    state = state[-1]  # chain(clip_by_global_norm, schedule_free)
  return optax.contrib.schedule_free_eval_params(state, params)


def _Sgd(lr, **kw):
  return optax.contrib.schedule_free_sgd(lr, **kw)


def _AdamW(lr, **kw):
  return optax.contrib.schedule_free_adamw(lr, **kw)


def main():
  cases = []
  for rule, make, kwargs, lr in (
      ('schedule_free_sgd', _Sgd, dict(b1=0.9), 0.25),
      ('schedule_free_sgd_warmup_wd', _Sgd,
       dict(b1=0.8, warmup_steps=4, weight_decay=0.125, weight_lr_power=1.0),
       0.5),
      ('schedule_free_adamw', _AdamW, dict(b1=0.9, b2=0.999, eps=1e-8),
       0.0625),
      ('schedule_free_adamw_warmup_wd', _AdamW,
       dict(b1=0.95, b2=0.99, eps=1e-6, warmup_steps=4, weight_decay=0.25),
       0.125)):
    cases += optax_reference.Cases(rule, make, kwargs, lr,
                                   extra_fn=_EvalParams)
  optax_reference.Write(OUT, cases,
                        'python tools/record_optax_schedule_free.py')


if __name__ == '__main__':
  main()
