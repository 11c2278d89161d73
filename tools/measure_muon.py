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

  parts    (issue 40 item 2) one process builds lm.CharTransformerMuon's
           step in five variants: Muon per variable (batch_shapes=False,
           'before') and batched by shape ('after'), each also with NS
           replaced by the division by the norm ('-ns'), and with Muon's
           update left out entirely ('no_muon'); plus lm.CharTransformer
           (Adam) for scale. Times them alternately (rounds of 5 steps,
           median and p10-p90 over the rounds) and prints each part's
           share of the full step: NS = full - (-ns); Muon's momentum,
           scaling and assignments = (-ns) - no_muon; the rest (forward,
           backward, AdamW learner) = no_muon.

  update   the Muon learner's update alone (its optimizer's Apply in a
           tf.function on lm.CharTransformerMuon's matrices, fixed
           gradients): per variable and batched, each with and without NS,
           and an Apply with no variable (the call's floor); paired rounds,
           medians and p10-p90; the shares of NS and of the rest (momentum,
           scaling, slot and weight assignments) in each.

Usage, from the repository root:

    python tools/measure_muon.py curves lm.CharTransformer /tmp/base 400
    python tools/measure_muon.py curves lm.CharTransformerMuon /tmp/muon 300
    python tools/measure_muon.py ns_cost
    python tools/measure_muon.py parts [rounds]
    python tools/measure_muon.py update [rounds] [key]
"""

import re
import sys
import time

import numpy as np
import tensorflow as tf

from learner.optimizers.var_grad import VarGrad
from learner.optimizers.var_grad import VarName
from params import NestedMap
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


def _Step(key, with_ns, batch_shapes=None, muon_update=True):
  """A traced train step of `key` on one batch, NS on or off (and, for
  `parts`, Muon's batch_shapes set, or its update left out)."""
  original = muon_lib.NewtonSchulz
  original_apply = muon_lib.Muon._ApplyAll  # pylint: disable=protected-access
  if not with_ns:
    muon_lib.NewtonSchulz = lambda x, steps, coeffs, eps, safety=0.0: x / (
        tf.norm(x, axis=[-2, -1], keepdims=True) + eps)
  if not muon_update:
    muon_lib.Muon._ApplyAll = lambda self, update, present, measure: []  # pylint: disable=protected-access
  try:
    p = registry.GetParams(key)
    if batch_shapes is not None:
      for lp in p.task.train.learner:
        if lp.optimizer.cls is muon_lib.Muon:
          lp.optimizer.batch_shapes = batch_shapes
    task = p.task.Instantiate()
    task.CreateLearners()
    batch = next(iter(p.train_input.Instantiate().GetDataset()))
    step = tf.function(lambda: task.TrainStep(batch))
    step()  # Traced now, with the NewtonSchulz chosen above.
  finally:
    muon_lib.NewtonSchulz = original
    muon_lib.Muon._ApplyAll = original_apply  # pylint: disable=protected-access
  return step


def _UpdateFn(variables, grads, batch_shapes, with_ns, present=True,
              xla=False):
  """A tf.function applying Muon (lr 0.02) to `variables` (or to none),
  jit_compile=xla."""
  original = muon_lib.NewtonSchulz
  if not with_ns:
    muon_lib.NewtonSchulz = lambda x, steps, coeffs, eps, safety=0.0: x / (
        tf.norm(x, axis=[-2, -1], keepdims=True) + eps)
  try:
    opt = muon_lib.Muon.Params().Set(
        name='muon', batch_shapes=batch_shapes).Instantiate()
    opt.Bind(variables)
    vgs = {'v%d' % i: VarGrad(v, g) for i, (v, g) in enumerate(
        zip(variables, grads))} if present else {}
    fn = tf.function(lambda: opt.Apply(0.02, NestedMap(vgs)) and None,
                     jit_compile=xla)
    fn()  # Traced now, with the NewtonSchulz chosen above.
  finally:
    muon_lib.NewtonSchulz = original
  return fn


def UpdateParts(rounds=40, key='lm.CharTransformerMuon', steps=10):
  """Prints the Muon update's time, per variable against batched."""
  p = registry.GetParams(key)
  task = p.task.Instantiate()
  lp = [l for l in p.task.train.learner if l.optimizer.cls is muon_lib.Muon]
  pattern = re.compile(lp[0].bprop_variable_filter)
  shapes = [v.shape.as_list() for name, v in sorted(task.vars.FlattenItems())
            if pattern.search(VarName(v))]
  rng = np.random.RandomState(0)
  variables = [tf.Variable(rng.randn(*s).astype(np.float32) * 0.02,
                           name='m%d' % i) for i, s in enumerate(shapes)]
  grads = [tf.constant(rng.randn(*s).astype(np.float32)) for s in shapes]
  print('%s: %d matrices %s' % (key, len(shapes), shapes))
  fns = {'before': _UpdateFn(variables, grads, False, True),
         'before-ns': _UpdateFn(variables, grads, False, False),
         'after': _UpdateFn(variables, grads, True, True),
         'after-ns': _UpdateFn(variables, grads, True, False),
         'before-xla': _UpdateFn(variables, grads, False, True, xla=True),
         'after-xla': _UpdateFn(variables, grads, True, True, xla=True),
         'empty': _UpdateFn(variables, grads, True, True, present=False)}
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      fn()
      start = time.perf_counter()
      for _ in range(steps):
        fn()
      times[name].append((time.perf_counter() - start) / steps)
  med = {k: float(np.median(v)) for k, v in times.items()}
  for name, t in times.items():
    print('%-10s median %.3f ms  p10-p90 %.3f-%.3f ms' % (
        name, 1e3 * med[name], 1e3 * np.percentile(t, 10),
        1e3 * np.percentile(t, 90)))
  for when in ('before', 'after'):
    full, no_ns, floor = med[when], med[when + '-ns'], med['empty']
    print('%s: %.3f ms; NS %.1f %%, momentum/scaling/assign %.1f %%, the '
          'call %.1f %%' % (when, 1e3 * full, 100 * (full - no_ns) / full,
                           100 * (no_ns - floor) / full, 100 * floor / full))
  for name in ('after', 'after-ns', 'after-xla', 'before-xla'):
    base = 'before' if name == 'before-xla' else name.replace('after',
                                                             'before')
    ratios = [a / b for a, b in zip(times[name], times[base])]
    print('%s / %s, paired rounds: median %.3f (p10-p90 %.3f-%.3f)' % (
        name, base, np.median(ratios), np.percentile(ratios, 10),
        np.percentile(ratios, 90)))


def Parts(rounds=30, steps=5):
  """Prints the shares of NS, Muon's elementwise part and the rest, before
  (per variable) and after (batched by shape)."""
  key = 'lm.CharTransformerMuon'
  fns = {
      'before': _Step(key, True, batch_shapes=False),
      'before-ns': _Step(key, False, batch_shapes=False),
      'after': _Step(key, True, batch_shapes=True),
      'after-ns': _Step(key, False, batch_shapes=True),
      'no_muon': _Step(key, True, muon_update=False),
      'adam': _Step('lm.CharTransformer', True),
  }
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      fn()
      start = time.perf_counter()
      for _ in range(steps):
        fn()
      times[name].append((time.perf_counter() - start) / steps)
  med = {k: float(np.median(v)) for k, v in times.items()}
  for name, t in times.items():
    print('%-10s median %.2f ms  p10-p90 %.2f-%.2f ms  x adam %.3f' % (
        name, 1e3 * med[name], 1e3 * np.percentile(t, 10),
        1e3 * np.percentile(t, 90), med[name] / med['adam']))
  for when in ('before', 'after'):
    full, no_ns = med[when], med[when + '-ns']
    print('%s: NS %.1f %%, Muon momentum/scaling/assign %.1f %%, rest %.1f '
          '%% of %.2f ms' % (when, 100 * (full - no_ns) / full,
                             100 * (no_ns - med['no_muon']) / full,
                             100 * med['no_muon'] / full, 1e3 * full))
  # Paired per round (same load): after / before.
  ratios = [a / b for a, b in zip(times['after'], times['before'])]
  print('after / before, paired rounds: median %.3f (p10-p90 %.3f-%.3f)' % (
      np.median(ratios), np.percentile(ratios, 10),
      np.percentile(ratios, 90)))


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
  elif sys.argv[1] == 'update':
    UpdateParts(*([int(a) for a in sys.argv[2:3]] + sys.argv[3:4]))
  elif sys.argv[1] == 'parts':
    Parts(*[int(a) for a in sys.argv[2:3]])
  else:
    NsCost()
