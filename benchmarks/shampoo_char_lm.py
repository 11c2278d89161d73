"""Benchmark: lm.CharTransformer's train step with DistributedShampoo against Adam.

    python -m benchmarks.shampoo_char_lm [--steps=N] [--warmup=W]
        [--compute_steps=K] [--repeats=R]

Trains the registered lm.CharTransformer (410,087 parameters, two learners)
through our Trainer, as benchmarks/trainer.py's side `ours`, once with its
Adam and once with DistributedShampoo in both learners (Lingvo's defaults
but start_preconditioning_steps 5, so the timed steps are fully
preconditioned, and the roots every `--compute_steps` updates, default
10), alternating `--repeats` times in this process. Prints the steady
steps/s of each (steps after the first W: tracing, compiling) and
Shampoo's step time as a ratio to Adam's (issue 39's target: <= 1.5 with
roots every 10 steps). Timings on a shared machine are noisy; compare the
ratio of one run.
"""

import argparse
import statistics
import sys

from benchmarks import trainer as trainer_bench


def _UseShampoo(params, compute_steps):
  """Gives each learner of `params` DistributedShampoo."""
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  for lp in params.task.train.learner:
    lp.optimizer = optimizers.DistributedShampoo.Params().Set(
        start_preconditioning_steps=5,
        preconditioning_compute_steps=compute_steps)


def RunOne(shampoo, steps, warmup, compute_steps):
  """Steady steps/s and final loss of one run (Adam, or Shampoo)."""
  original = trainer_bench._ExperimentParams  # pylint: disable=protected-access

  def Params(model, n):
    p = original(model, n)
    if shampoo:
      _UseShampoo(p, compute_steps)
    return p

  trainer_bench._ExperimentParams = Params  # pylint: disable=protected-access
  try:
    result = trainer_bench.RunOurs('lm.CharTransformer', steps, warmup)
  finally:
    trainer_bench._ExperimentParams = original  # pylint: disable=protected-access
  return result['steady_steps_per_s'], result['final_loss']


def main(argv=None):
  """Runs Adam and Shampoo alternately; prints their steps/s and ratio."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--steps', type=int, default=60)
  parser.add_argument('--warmup', type=int, default=20)
  parser.add_argument('--compute_steps', type=int, default=10)
  parser.add_argument('--repeats', type=int, default=2)
  args = parser.parse_args(argv)
  rates = {'adam': [], 'shampoo': []}
  for _ in range(args.repeats):
    for name in ('adam', 'shampoo'):
      rate, loss = RunOne(name == 'shampoo', args.steps, args.warmup,
                          args.compute_steps)
      rates[name].append(rate)
      print('%s: %.2f steady steps/s, final loss %s' % (name, rate, loss))
      sys.stdout.flush()
  adam, shampoo = (statistics.median(rates[k]) for k in ('adam', 'shampoo'))
  print('median steady steps/s: adam %.2f, shampoo %.2f; Shampoo step time '
        '/ Adam = %.2f (target <= 1.5)' % (adam, shampoo, adam / shampoo))


if __name__ == '__main__':
  main()
