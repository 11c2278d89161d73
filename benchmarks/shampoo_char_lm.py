"""Benchmark: lm.CharTransformer's train step with DistributedShampoo against Adam.

    python -m benchmarks.shampoo_char_lm [--steps=N] [--warmup=W]
        [--compute_steps=K] [--repeats=R]

Trains the registered lm.CharTransformer (410,087 parameters, two learners)
through our Trainer, as benchmarks/trainer.py's side `ours`, once with its
Adam and once with DistributedShampoo in both learners (Lingvo's defaults
but start_preconditioning_steps 5, so the timed steps are fully
preconditioned, and the roots every `--compute_steps` updates, default
10), alternating `--repeats` times in this process. Prints the steady
steps/s and CPU ms per step of each (steps after the first W: tracing,
compiling) and Shampoo's step time and CPU time as ratios to Adam's
(issue 39's target: <= 1.5 with roots every 10 steps). Timings on a
shared machine are noisy; compare the ratios of one run (the CPU time's
moves less with the load).
"""

import argparse

from benchmarks import soap_char_lm


def _UseShampoo(params, compute_steps):
  """Gives each learner of `params` DistributedShampoo."""
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  for lp in params.task.train.learner:
    lp.optimizer = optimizers.DistributedShampoo.Params().Set(
        start_preconditioning_steps=5,
        preconditioning_compute_steps=compute_steps)


def main(argv=None):
  """Runs Adam and Shampoo alternately; prints their steps/s and ratio."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--steps', type=int, default=60)
  parser.add_argument('--warmup', type=int, default=20)
  parser.add_argument('--compute_steps', type=int, default=10)
  parser.add_argument('--repeats', type=int, default=2)
  args = parser.parse_args(argv)
  soap_char_lm.CompareWithAdam(
      'shampoo', lambda p: _UseShampoo(p, args.compute_steps), args)


if __name__ == '__main__':
  main()
