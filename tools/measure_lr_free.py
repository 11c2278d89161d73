"""Measures the learning-rate-free rules on two experiments (issue 39).

Trains `digits.MlpMomentum` or `mnist1d.ConvNet` through the Trainer (mode
train_and_eval, seed 1, the experiment's data, steps and clipping) with
its learner's optimizer replaced by one rule at its default (optax's),
the rate constant (ConstantOne) at `learning_rate` 1.0 for DoG, DoWG and
COCOB (optax's default; for them the rate is a multiplier, not a step)
and 1e-2 for MADGRAD (the reference implementation's default; optax has
none); 'tuned' keeps the experiment's own tuned optimizer and schedule.
Prints the final held-out metrics. No learning-rate search. Not a test.

Usage, from the repository root:

    PYTHONPATH=. python tools/measure_lr_free.py digits.MlpMomentum dog /tmp/d
    PYTHONPATH=. python tools/measure_lr_free.py mnist1d.ConvNet tuned /tmp/c

(rules: tuned, dog, dowg, cocob, madgrad, dowg_small; an optional 4th argument sets
max_steps).
"""

import sys
import time

from learner import optimizers
from learner.training.jobs import trainer as trainer_lib
from params import registry
from schedules import ConstantOne
import configs.digits  # pylint: disable=unused-import
import configs.mnist1d  # pylint: disable=unused-import

RULES = {
    'dog': (optimizers.DoG.Params, 1.0),
    'dowg': (optimizers.DoWG.Params, 1.0),
    'cocob': (optimizers.COCOB.Params, 1.0),
    'madgrad': (optimizers.MADGRAD.Params, 1e-2),
    # Not a default: DoWG with a smaller first squared-distance estimate.
    'dowg_small': (lambda: optimizers.DoWG.Params().Set(
        init_estim_sq_dist=1e-8), 1.0),
}


def Measure(key, rule, logdir, max_steps=None):
  """Trains `key` with `rule` (or 'tuned'); returns the final metrics."""
  p = registry.GetParams(key)
  if max_steps:
    p.task.train.max_steps = max_steps
  if rule != 'tuned':
    make, lr = RULES[rule]
    p.task.train.learner.Set(optimizer=make(), learning_rate=lr,
                             lr_schedule=ConstantOne.Params())
  start = time.time()
  metrics = trainer_lib.Trainer(p, logdir, mode='train_and_eval', seed=1,
                                stream=sys.stdout).Run()
  print('RESULT %s %s: %s (wall %.0f s)' % (key, rule, metrics,
                                            time.time() - start))
  return metrics


if __name__ == '__main__':
  Measure(sys.argv[1], sys.argv[2], sys.argv[3],
          int(sys.argv[4]) if len(sys.argv) > 4 else None)
