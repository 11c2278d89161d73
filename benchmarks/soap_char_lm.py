"""Benchmark: lm.CharTransformer's train step with SOAP against Adam.

    python -m benchmarks.soap_char_lm [--steps=N] [--warmup=W]
        [--frequency=F] [--repeats=R]

Trains the registered lm.CharTransformer (410,087 parameters, two learners)
through our Trainer, as benchmarks/trainer.py's side `ours`, once with its
Adam (beta1 0.9, beta2 0.98, epsilon 1e-9) and once with SOAP in both
learners (the same betas and epsilon, no weight decay, eigenbases refreshed
every `--frequency` updates, default 10), alternating `--repeats` times in
this process. Prints the steady steps/s of each (steps after the first W:
tracing, compiling) and SOAP's step time as a ratio to Adam's (issue 39's
target: <= 1.5). Timings on a shared machine are noisy; compare the ratio
of one run.
"""

import argparse
import statistics
import sys

from benchmarks import trainer as trainer_bench


def _UseSoap(params, frequency):
  """Gives each learner of `params` SOAP with its Adam's betas and eps."""
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  for lp in params.task.train.learner:
    adam = lp.optimizer
    lp.optimizer = optimizers.SOAP.Params().Set(
        beta1=adam.beta1, beta2=adam.beta2, epsilon=adam.epsilon,
        decoupled_weight_decay=0.0, precondition_frequency=frequency)


def RunOne(use_rule, steps, warmup):
  """Steady steps/s and final loss of one run: Adam, or with `use_rule`
  (callable(experiment params), in place) applied to the experiment."""
  original = trainer_bench._ExperimentParams  # pylint: disable=protected-access

  def Params(model, n):
    p = original(model, n)
    if use_rule:
      use_rule(p)
    return p

  trainer_bench._ExperimentParams = Params  # pylint: disable=protected-access
  try:
    result = trainer_bench.RunOurs('lm.CharTransformer', steps, warmup)
  finally:
    trainer_bench._ExperimentParams = original  # pylint: disable=protected-access
  return result['steady_steps_per_s'], result['final_loss']


def CompareWithAdam(name, use_rule, args):
  """Runs Adam and `name` (Adam's learners changed by `use_rule`)
  alternately `args.repeats` times; prints each run's steps/s and the
  medians' step-time ratio against issue 39's target (<= 1.5)."""
  rates = {'adam': [], name: []}
  for _ in range(args.repeats):
    for key, hook in (('adam', None), (name, use_rule)):
      rate, loss = RunOne(hook, args.steps, args.warmup)
      rates[key].append(rate)
      print('%s: %.2f steady steps/s, final loss %s' % (key, rate, loss))
      sys.stdout.flush()
  adam, other = (statistics.median(rates[k]) for k in ('adam', name))
  print('median steady steps/s: adam %.2f, %s %.2f; %s step time / '
        'Adam = %.2f (target <= 1.5)' % (adam, name, other, name,
                                         adam / other))


def main(argv=None):
  """Runs Adam and SOAP alternately; prints their steps/s and the ratio."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--steps', type=int, default=60)
  parser.add_argument('--warmup', type=int, default=20)
  parser.add_argument('--frequency', type=int, default=10)
  parser.add_argument('--repeats', type=int, default=2)
  args = parser.parse_args(argv)
  CompareWithAdam('soap', lambda p: _UseSoap(p, args.frequency), args)


if __name__ == '__main__':
  main()
