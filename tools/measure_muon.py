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

  parts    (issue 40 item 2) one process builds a Muon step per variable
           (batch_shapes=False, the default) on the pure-TF path and on the
           fused one (two fused ops around Newton-Schulz), and batched by
           shape (True) fused, each in three variants (full; Newton-Schulz
           replaced by the division by the norm; also no momentum
           arithmetic: fused, no momentum op), plus the step with Muon's
           update left out; times them alternately (rounds of `steps`
           steps, medians) and prints each part's share of each form:
           Newton-Schulz, momentum, scaling/apply, the rest (AdamW
           learner, clip norms; forward/backward for lm), and each form /
           per variable pure-TF over paired rounds. Target 'lm' (lm.CharTransformerMuon's
           train step) or 'resnet50' (update_step's Muon two-learner row).

  update   the Muon learner's update alone (its optimizer's ApplyScaled in
           a tf.function on lm.CharTransformerMuon's matrices, fixed
           gradients, a clip factor): per variable on the pure-TF path
           ('before') and fused ('after'), each with and without NS,
           batched fused, pure-TF under XLA, and an Apply with no variable
           (the call's floor); paired rounds, medians and p10-p90; the
           shares of NS and of the rest (momentum, scaling, slot and weight
           assignments) in each.

Usage, from the repository root:

    python tools/measure_muon.py curves lm.CharTransformer /tmp/base 400
    python tools/measure_muon.py curves lm.CharTransformerMuon /tmp/muon 300
    python tools/measure_muon.py ns_cost
    python tools/measure_muon.py parts [rounds] [steps] [lm|resnet50]
    python tools/measure_muon.py update [rounds] [key]
"""

import contextlib
import re
import sys
import time

import numpy as np
import tensorflow as tf

from learner.optimizers.var_grad import VarGrad
from learner.optimizers.var_grad import VarName
from params import NestedMap
from params import registry
from learner.optimizers.kernels import accelerators
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
              xla=False, fused=True):
  """A tf.function applying Muon (lr 0.02, the gradients scaled by a clip
  factor 0.5 held in a variable, as the trainer's) to `variables` (or to
  none), jit_compile=xla; fused=False keeps Muon on its pure-TF path."""
  original = muon_lib.NewtonSchulz, muon_lib.Muon.FusedApplyReason
  if not with_ns:
    muon_lib.NewtonSchulz = lambda x, steps, coeffs, eps, safety=0.0: x / (
        tf.norm(x, axis=[-2, -1], keepdims=True) + eps)
  if not fused:
    muon_lib.Muon.FusedApplyReason = lambda self, vgs: 'measure_muon: pure-TF'
  try:
    opt = muon_lib.Muon.Params().Set(
        name='muon', batch_shapes=batch_shapes).Instantiate()
    opt.Bind(variables)
    scale = tf.Variable(0.5)
    vgs = {'v%d' % i: VarGrad(v, g) for i, (v, g) in enumerate(
        zip(variables, grads))} if present else {}
    fn = tf.function(lambda: opt.ApplyScaled(
        tf.constant(0.02), NestedMap(vgs), scale.read_value()) and None,
                     jit_compile=xla)
    fn()  # Traced now, with the NewtonSchulz and path chosen above.
  finally:
    muon_lib.NewtonSchulz, muon_lib.Muon.FusedApplyReason = original
  return fn


def UpdateParts(rounds=40, key='lm.CharTransformerMuon', steps=10):
  """Prints the Muon update's time: per variable on the pure-TF path
  ('before', main's before issue 40 item 2's fusion) and fused ('after'),
  batched by shape and fused ('batched'), each per variable with and
  without Newton-Schulz; pure-TF under XLA; an Apply with no variable."""
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
  fns = {'before': _UpdateFn(variables, grads, False, True, fused=False),
         'before-ns': _UpdateFn(variables, grads, False, False, fused=False),
         'after': _UpdateFn(variables, grads, False, True),
         'after-ns': _UpdateFn(variables, grads, False, False),
         'batched': _UpdateFn(variables, grads, True, True),
         'before-xla': _UpdateFn(variables, grads, False, True, xla=True),
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
  for name, base in (('after', 'before'), ('after-ns', 'before-ns'),
                     ('batched', 'before'), ('before-xla', 'before')):
    ratios = [a / b for a, b in zip(times[name], times[base])]
    print('%s / %s, paired rounds: median %.3f (p10-p90 %.3f-%.3f)' % (
        name, base, np.median(ratios), np.percentile(ratios, 10),
        np.percentile(ratios, 90)))


@contextlib.contextmanager
def _Variant(name, fused=True):
  """Muon traced as variant `name` of VARIANTS (patches undone after);
  fused=False keeps Muon on its pure-TF path (the other learners keep
  theirs)."""
  original = (muon_lib.NewtonSchulz, muon_lib.Muon._Momentum,  # pylint: disable=protected-access
              muon_lib.Muon.__dict__.get('_ApplyAll'))
  reason = muon_lib.Muon.FusedApplyReason
  entry = accelerators.ACCELERATORS['muon']
  if not fused:
    muon_lib.Muon.FusedApplyReason = lambda self, vgs: 'measure_muon: pure-TF'
  if name in ('-ns', '-ns-mom'):
    muon_lib.NewtonSchulz = lambda x, steps, coeffs, eps, safety=0.0: x / (
        tf.norm(x, axis=[-2, -1], keepdims=True) + eps)
  if name == '-ns-mom':  # u = g, m <- g: no momentum arithmetic.
    muon_lib.Muon._Momentum = lambda self, s, g, slots: (g, {'m': g})  # pylint: disable=protected-access
    # Fused: no momentum op (u = g, m not written).
    accelerators.ACCELERATORS['muon'] = entry._replace(
        multi=entry.multi._replace(before=lambda grads, *_: list(grads)))
  if name == 'no_muon':
    muon_lib.Muon._ApplyAll = lambda self, update, present, measure: []  # pylint: disable=protected-access
  try:
    yield
  finally:
    muon_lib.NewtonSchulz, muon_lib.Muon._Momentum = original[:2]  # pylint: disable=protected-access
    muon_lib.Muon.FusedApplyReason = reason
    accelerators.ACCELERATORS['muon'] = entry
    if original[2] is None:
      if '_ApplyAll' in muon_lib.Muon.__dict__:
        del muon_lib.Muon._ApplyAll  # pylint: disable=protected-access
    else:
      muon_lib.Muon._ApplyAll = original[2]  # pylint: disable=protected-access


# full: the step; -ns: Newton-Schulz replaced by the division by the norm;
# -ns-mom: also no momentum arithmetic (u = g); no_muon: Muon's update left
# out (the rest: the AdamW learner, the clip's norms, forward/backward).
VARIANTS = ('full', '-ns', '-ns-mom', 'no_muon')


# The forms `parts` times: (batch_shapes, the fused path).
FORMS = ((False, False), (False, True), (True, True))


def _FormName(form):
  return '%s %s' % ('batched' if form[0] else 'per-var',
                    'fused' if form[1] else 'pure-TF')


def _PartSteps(target):
  """{(form, variant): traced step} of `target`: 'lm'
  (lm.CharTransformerMuon's train step on one batch) or 'resnet50'
  (benchmarks.update_step's Muon two-learner `learner` row on the resnet50
  set); each form of FORMS; no_muon once (form None)."""
  keys = [(f, v) for f in FORMS for v in VARIANTS[:3]] + [(None, 'no_muon')]
  fns = {}
  if target == 'resnet50':
    from benchmarks import learner_row  # pylint: disable=g-import-not-at-top
    from benchmarks import peer_rows  # pylint: disable=g-import-not-at-top
    from benchmarks import variable_sets  # pylint: disable=g-import-not-at-top
    specs = variable_sets.Specs('resnet50')
    weights, grads = variable_sets.MakeValues(specs)
    original = learner_row.MuonLearners
    for form, name in keys:
      batch = form and form[0]
      learner_row.MuonLearners = lambda *a, b=batch, **k: [
          lp.Set(optimizer=lp.optimizer.Set(batch_shapes=b))
          if lp.optimizer.cls is muon_lib.Muon and b is not None else lp
          for lp in original(*a, **k)]
      try:
        row = learner_row.LearnerRow(peer_rows.UpdateConfig('muon'), specs,
                                     weights, grads)
        with _Variant(name, form is None or form[1]):
          row.step()  # Traced now.
      finally:
        learner_row.MuonLearners = original
      fns[form, name] = row.step
    return fns
  for form, name in keys:
    with _Variant(name, form is None or form[1]):
      fns[form, name] = _Step('lm.CharTransformerMuon', True,
                              batch_shapes=form and form[0])
  return fns


def Parts(rounds=30, steps=5, target='lm'):
  """Prints each part's share of the Muon step in each form of FORMS
  (per variable or batched, pure-TF or fused), every variant alternating
  in rounds: Newton-Schulz = full - (-ns); momentum = (-ns) - (-ns-mom);
  scaling and apply (slot and weight assignments, the division by the
  norm) = (-ns-mom) - no_muon; the rest = no_muon (the AdamW learner, the
  clip's norms; for 'lm' also forward and backward)."""
  fns = _PartSteps(target)
  times = {key: [] for key in fns}
  for _ in range(rounds):
    for key, fn in fns.items():
      fn()
      start = time.perf_counter()
      for _ in range(steps):
        fn()
      times[key].append((time.perf_counter() - start) / steps)
  med = {k: float(np.median(v)) for k, v in times.items()}
  for (form, name), t in times.items():
    print('%-17s %-8s median %.2f ms  p10-p90 %.2f-%.2f ms' % (
        _FormName(form) if form else '-', name, 1e3 * med[form, name],
        1e3 * np.percentile(t, 10), 1e3 * np.percentile(t, 90)))
  rest = med[None, 'no_muon']
  for form in FORMS:
    full = med[form, 'full']
    parts = (('Newton-Schulz', full - med[form, '-ns']),
             ('momentum', med[form, '-ns'] - med[form, '-ns-mom']),
             ('scaling/apply', med[form, '-ns-mom'] - rest),
             ('rest (AdamW learner%s)' % (', fwd/bwd' if target == 'lm'
                                         else ''), rest))
    print('%s %s: step %.2f ms; ' % (target, _FormName(form), 1e3 * full)
          + ', '.join('%s %.1f %% (%.2f ms)' % (k, 100 * v / full, 1e3 * v)
                      for k, v in parts))
  base = FORMS[0]
  for form in FORMS[1:]:
    ratios = [a / b for a, b in zip(times[form, 'full'],
                                    times[base, 'full'])]
    print('%s / %s, full step, paired rounds: median %.3f (p10-p90 '
          '%.3f-%.3f)' % (_FormName(form), _FormName(base), np.median(ratios),
                          np.percentile(ratios, 10),
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
    Parts(*([int(a) for a in sys.argv[2:4]] + sys.argv[4:5]))
  else:
    NsCost()
