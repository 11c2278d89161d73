"""Measures lm.CharTransformerMuon against lm.CharTransformer (issue 24.9).

Two measurements, printed:

  curves   trains an experiment through the Trainer (mode train_and_eval,
           seed 1, the experiment's data order) with an evaluation every 50
           steps; the trainer prints held-out bits/char at each, and the
           steps/s.
  ns_cost  one process builds lm.CharTransformerMuon's train step twice:
           with Muon's Newton-Schulz and with it replaced by the division by
           the Frobenius norm alone (traced that way), then times both
           alternately (30 rounds of 5 steps on one batch); prints the
           median and minimum step time of each and NS's share of a step,
           (with - without) / with, and the median share over the rounds
           (a round with NS and the next without share the machine's load).

Usage, from the repository root:

    python tools/measure_muon.py curves lm.CharTransformer /tmp/base 400
    python tools/measure_muon.py curves lm.CharTransformerMuon /tmp/muon 300
    python tools/measure_muon.py ns_cost
"""

import sys
import time

import numpy as np
import tensorflow as tf

from params import registry
from learner.optimizers.rules import muon as muon_lib
from learner.training.jobs import trainer as trainer_lib
import configs.lm  # pylint: disable=unused-import


def Curves(key, logdir, steps):
  """Trains `key` for `steps` with an evaluation every 50; prints the wall."""
  p = registry.GetParams(key)
  p.task.train.max_steps = steps
  p.task.eval.interval_steps = 50
  p.task.train.save_interval_steps = 10**6
  start = time.time()
  metrics = trainer_lib.Trainer(p, logdir, mode='train_and_eval', seed=1,
                                stream=sys.stdout).Run()
  print('wall %.1f s for %d steps: %s' % (time.time() - start, steps,
                                          metrics))


def _Step(key, with_ns):
  """A traced train step of `key` on one batch, NS on or off."""
  original = muon_lib.NewtonSchulz
  if not with_ns:
    muon_lib.NewtonSchulz = lambda x, steps, coeffs, eps, safety=0.0: x / (
        tf.norm(x, axis=[-2, -1], keepdims=True) + eps)
  try:
    p = registry.GetParams(key)
    task = p.task.Instantiate()
    task.CreateLearners()
    batch = next(iter(p.train_input.Instantiate().GetDataset()))
    step = tf.function(lambda: task.TrainStep(batch))
    step()  # Traced now, with the NewtonSchulz chosen above.
  finally:
    muon_lib.NewtonSchulz = original
  return step


def NsCost(key='lm.CharTransformerMuon', rounds=30, steps=5):
  """Prints step times with and without Newton-Schulz and NS's share."""
  fns = {True: _Step(key, True), False: _Step(key, False)}
  times = {True: [], False: []}
  for _ in range(rounds):
    for ns, fn in fns.items():
      for _ in range(3):
        fn()
      start = time.perf_counter()
      for _ in range(steps):
        fn()
      times[ns].append((time.perf_counter() - start) / steps)
  for name, agg in (('median', np.median), ('min', np.min)):
    w, wo = agg(times[True]), agg(times[False])
    print('%s: step with NS %.1f ms, without %.1f ms, NS share %.1f %%' %
          (name, w * 1e3, wo * 1e3, 100 * (w - wo) / w))
  # Adjacent rounds share the machine's load: the median of their shares.
  shares = [(w - wo) / w for w, wo in zip(times[True], times[False])]
  print('paired rounds: NS share median %.1f %% (quartiles %.1f, %.1f)' % (
      100 * np.median(shares), 100 * np.percentile(shares, 25),
      100 * np.percentile(shares, 75)))


if __name__ == '__main__':
  if sys.argv[1] == 'curves':
    Curves(sys.argv[2], sys.argv[3], int(sys.argv[4]))
  else:
    NsCost()
