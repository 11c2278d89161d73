"""Benchmark: lm.CharTransformer's train step with SOAP against Adam.

    python -m benchmarks.soap_char_lm [--steps=N] [--warmup=W]
        [--frequency=F] [--repeats=R]

Trains the registered lm.CharTransformer (410,087 parameters, two learners)
through our Trainer, as benchmarks/trainer.py's side `ours`, once with its
Adam (beta1 0.9, beta2 0.98, epsilon 1e-9) and once with SOAP in both
learners (the same betas and epsilon, no weight decay, eigenbases refreshed
every `--frequency` updates, default 10), alternating `--repeats` times in
this process. Prints the steady steps/s and CPU ms per step of each
(steps after the first W: tracing, compiling) and SOAP's step time and
CPU time as ratios to Adam's (issue 39's target: <= 1.5). Timings on a
shared machine are noisy; compare the ratios of one run (the CPU time's
moves less with the load).
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
  """Steady steps/s, steady CPU seconds per step (all threads) and final
  loss of one run: Adam, or with `use_rule` (callable(experiment params),
  in place) applied to the experiment."""
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
  return (result['steady_steps_per_s'], result['steady_cpu_s_per_step'],
          result['final_loss'])


def CompareWithAdam(name, use_rule, args):
  """Runs Adam and `name` (Adam's learners changed by `use_rule`)
  alternately `args.repeats` times; prints each run's steps/s and CPU ms
  per step, the medians' step-time ratio against issue 39's target (<=
  1.5) and the medians' CPU-time ratio (steadier on a shared machine)."""
  rates = {'adam': [], name: []}
  cpus = {'adam': [], name: []}
  for _ in range(args.repeats):
    for key, hook in (('adam', None), (name, use_rule)):
      rate, cpu, loss = RunOne(hook, args.steps, args.warmup)
      rates[key].append(rate)
      cpus[key].append(cpu)
      print('%s: %.2f steady steps/s, %.0f CPU ms per step, final loss %s'
            % (key, rate, 1e3 * cpu, loss))
      sys.stdout.flush()
  adam, other = (statistics.median(rates[k]) for k in ('adam', name))
  adam_cpu, other_cpu = (statistics.median(cpus[k]) for k in ('adam', name))
  print('median steady steps/s: adam %.2f, %s %.2f; %s step time / '
        'Adam = %.2f (target <= 1.5); CPU time per step / Adam\'s = %.2f'
        % (adam, name, other, name, adam / other, other_cpu / adam_cpu))


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
