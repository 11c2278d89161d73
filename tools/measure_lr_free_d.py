"""Measures Prodigy, DAdaptAdamW and Mechanic at their defaults (issue 39
item 3; tools/measure_lr_free.py measures DoG, DoWG, COCOB, MADGRAD).

For each experiment (digits.MlpMomentum, mnist1d.ConvNet) and each
optimizer, trains through the Trainer (mode train_and_eval, seed 1, the
experiment's data, steps, schedule shape and clipping) and prints the final
held-out metrics:

  tuned     the config as it is (its tuned optimizer and rate)
  prodigy   Prodigy() at its defaults, learning_rate 1 (the config's
            lr_schedule still multiplies it: its warmup/decay shape)
  dadapt    DAdaptAdamW() likewise
  mechanic  Mechanic(the config's optimizer) at mechanize's defaults, the
            config's rate unchanged

No rate search: the issue's target is within 5 % of `tuned`.

Usage, from the repository root:

    PYTHONPATH=. python tools/measure_lr_free_d.py digits.MlpMomentum /tmp/lrfree [names]
    PYTHONPATH=. python tools/measure_lr_free_d.py mnist1d.ConvNet /tmp/lrfree [names]
"""

import os
import sys
import time

from learner import optimizers
from learner.training.jobs import trainer as trainer_lib
from params import registry
import configs.digits  # pylint: disable=unused-import
import configs.mnist1d  # pylint: disable=unused-import

NAMES = ('tuned', 'prodigy', 'dadapt', 'mechanic')


def Params(key, name):
  """The experiment's params with optimizer `name` (see the docstring)."""
  p = registry.GetParams(key)
  lp = p.task.train.learner
  if name == 'prodigy':
    lp.Set(optimizer=optimizers.Prodigy.Params(), learning_rate=1.0)
  elif name == 'dadapt':
    lp.Set(optimizer=optimizers.DAdaptAdamW.Params(), learning_rate=1.0)
  elif name == 'mechanic':
    lp.optimizer = optimizers.Mechanic.Params().Set(optimizer=lp.optimizer)
  return p


def main(key, logdir, names):
  for name in names:
    start = time.time()
    metrics = trainer_lib.Trainer(
        Params(key, name), os.path.join(logdir, key, name),
        mode='train_and_eval', seed=1, stream=open(os.devnull, 'w')).Run()
    print('%s %s: %s (%.0f s)' % (key, name, metrics, time.time() - start),
          flush=True)


if __name__ == '__main__':
  main(sys.argv[1], sys.argv[2], sys.argv[3:] or NAMES)
