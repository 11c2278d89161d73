"""Benchmark: steps and time to a held-out target per update rule (AlgoPerf).

    python -m benchmarks.steps_to_target [--quick] [--workloads=a,b]
        [--rules=adam,muon,...] [--trials=N] [--seeds=N] [--steps=N]
        [--eval_every=K] [--output=DIR]

Ranks update rules by how fast they reach a fixed held-out target, as
MLCommons AlgoPerf's external-tuning track does (Dahl et al. 2023,
"Benchmarking Neural Network Training Algorithms", arXiv:2306.07179):

  * search space: one seeded quasi-random draw (Halton, bases 2, 3, 5; the
    first `trials` points of the sequence, index 1 on) of points u in [0, 1]^d,
    drawn ONCE and shared by every rule; a rule's row (`RULES`) maps
    coordinate i of u to its i-th hyperparameter's log range. A rule with no
    range (a learning-rate-free rule) runs one trial of its defaults.
  * every trial trains the workload's model (the registered experiment's
    task, data and seed, its learners' variable split and clipping) with
    the rule for at most the workload's budget of steps, evaluating the
    held-out metric every `eval_every` steps (on `Workload.eval_samples`
    examples; 0: the whole eval split);
  * target: from the baseline, Adam (cosine): its best trial (best final
    metric) is rerun with `seeds` seeds (3 in full), and the target is the median of
    those runs' final held-out metric (AlgoPerf sets targets from a tuned
    baseline's result). Adam's runs therefore go to the budget; every
    other run stops at its first evaluation that meets the target;
  * per rule and workload: the trial that reaches the target in the fewest
    steps (ties: the better metric) is rerun with `seeds` seeds (the trial
    itself is seed 1); steps to target = the median over seeds (infinite
    when it is not reached), time = the median of the training time to the
    target (the train steps and their tracing, without evaluations);
  * performance profile (Dahl et al. 2023, sec. 4.3): per workload w the
    ratio r_w = t_rule,w / min over rules of t_rule,w (infinite when not
    reached); rho(tau) = fraction of workloads with r_w <= tau, tau in
    [1, R_MAX = 4]; score = integral of rho over [1, R_MAX] / (R_MAX - 1).
    Scored on time (AlgoPerf's) and, less noisy on a shared machine, on
    steps.

Every rule shares one schedule: a linear warmup over WARMUP_FRACTION of the
budget, then cosine decay to 0 at the budget (`Warmup` + `CosineDecay`),
except rows marked `constant` (schedule-free: a constant rate, the rule's
own warmup over the same steps). Muon's row trains two learners
(`optimizers.Muon.TwoLearners`, lm.CharTransformerMuon's split): Muon on the
workload's hidden matrices (`Workload.matrices`), AdamW on the rest.

Output: a table (rule x workload: median steps to target, time, final
metric of the best trial's seeds, trials reaching the target), the
profile scores, a `targets:` block (the issue's figures, met / MISSED),
JSON and a PNG of the performance profiles in --output (matplotlib; skipped
with a message when it is not importable).
"""

import argparse
import collections
import json
import math
import os
import sys
import time

import numpy as np

R_MAX = 4.0
WARMUP_FRACTION = 0.1
BASELINE = 'adam'

# One workload: a registered experiment, its held-out metric and budget.
# steps/eval_every/trials/seeds: (full, quick). matrices: regex of the
# hidden matrices Muon trains. eval_samples: held-out examples per eval.
Workload = collections.namedtuple('Workload', [
    'key', 'metric', 'mode', 'steps', 'eval_every', 'trials', 'seeds',
    'matrices', 'eval_samples'])
WORKLOADS = (
    Workload('digits.MlpMomentum', 'accuracy', 'max', (300, 150), (15, 15),
             (5, 1), (3, 1), r'/layer_0/w$', 0),
    Workload('mnist1d.ConvNet', 'accuracy', 'max', (400, 150), (20, 25),
             (5, 1), (3, 1), r'/conv_\d+/kernel$', 0),
    Workload('lm.CharTransformer', 'bits_per_char', 'min', (160, 40),
             (16, 20), (3, 1), (3, 1), r'/stack/.*/w\w*$', 256),
)

# One rule: `name` (table row), `factory` (get_optimizer_fn's name),
# `space` ((hyperparameter, low, high), ...: log-uniform ranges, coordinate
# i of the shared draw to the i-th; () for a rate-free rule),
# `kwargs` (fixed factory keywords), `schedule` ('cosine' or 'constant').
# A factory 'wrapper:inner' is get_optimizer_wrapper_fn's wrapper around
# get_optimizer_fn's inner rule (the keywords go to the wrapper).
# Hyperparameters: 'learning_rate', 'weight_decay' (the factory keyword),
# and for the two-learner muon row 'muon_learning_rate' (Muon's learner;
# 'learning_rate' is then AdamW's).
Rule = collections.namedtuple('Rule', ['name', 'factory', 'space', 'kwargs',
                                       'schedule'])
_LR = ('learning_rate', 1e-3, 3e-2)
RULES = (
    Rule('adam', 'adam', (_LR,), {}, 'cosine'),
    Rule('adamw', 'adamw', (_LR, ('weight_decay', 1e-4, 1e-1)), {}, 'cosine'),
    Rule('momentum', 'momentum', (('learning_rate', 1e-2, 1.0),),
         {'momentum': 0.9}, 'cosine'),
    Rule('muon', 'muon', (('muon_learning_rate', 5e-3, 8e-2), _LR), {},
         'cosine'),
    Rule('sf_adamw', 'schedule_free_adamw', (('learning_rate', 2e-3, 5e-2),),
         {}, 'constant'),
    Rule('lion', 'lion', (('learning_rate', 3e-4, 1e-2),
                          ('weight_decay', 1e-2, 1.0)), {}, 'cosine'),
    Rule('ademamix', 'ademamix', (_LR,), {}, 'cosine'),
    # m is an undamped sum (about 1 / (1 - beta1) = 100 gradients): Adam's
    # range divided by 30 (its early steps, before m fills, are short).
    Rule('simplified_ademamix', 'simplified_ademamix',
         (('learning_rate', 3e-5, 1e-3),), {}, 'cosine'),
    Rule('normuon', 'normuon', (('muon_learning_rate', 5e-3, 8e-2), _LR), {},
         'cosine'),
    Rule('soap', 'soap', (_LR,), {}, 'cosine'),
    # Lingvo's DistributedShampoo grafted on AdaGrad (AdaGrad's rates),
    # preconditioning from step 10 with roots every 10 updates (Lingvo's
    # defaults, 1000 and 1000, are past these budgets).
    Rule('shampoo', 'distributed_shampoo', (('learning_rate', 1e-2, 1.0),),
         {'start_preconditioning_steps': 10,
          'preconditioning_compute_steps': 10}, 'cosine'),
    Rule('cautious_adamw', 'adamw', (_LR, ('weight_decay', 1e-4, 1e-1)),
         {'cautious': True}, 'cosine'),
    Rule('madgrad', 'madgrad', (('learning_rate', 1e-3, 1e-1),), {},
         'cosine'),
    # Learning-rate free: no search, the rate a multiplier of 1.
    Rule('dog', 'dog', (), {}, 'constant'),
    Rule('dowg', 'dowg', (), {}, 'cosine'),  # At chance with a constant rate.
    Rule('cocob', 'cocob', (), {}, 'constant'),
    Rule('mechanic', 'mechanic:adam', (), {}, 'cosine'),
    Rule('prodigy', 'prodigy', (), {}, 'cosine'),
    Rule('dadapt_adamw', 'dadapt_adamw', (), {}, 'cosine'),
)

# Run of one trial: steps at each evaluation, the training seconds up to it,
# the held-out metric there.
Curve = collections.namedtuple('Curve', ['steps', 'times', 'values'])


# ---- the score, the target, the search space -------------------------------

def Ratios(times):
  """Per rule and workload, the time over the best rule's time on it.

  Args:
    times: {rule: {workload: time}}, time > 0 or math.inf (not reached);
      every rule has the same workloads.

  Returns:
    {rule: {workload: ratio >= 1 or inf}}; on a workload no rule reaches,
    every ratio is inf.
  """
  workloads = next(iter(times.values())).keys() if times else ()
  best = {w: min(t[w] for t in times.values()) for w in workloads}
  return {rule: {w: (t[w] / best[w] if math.isfinite(best[w]) else math.inf)
                 for w in workloads} for rule, t in times.items()}


def Profile(ratios, tau):
  """rho(tau): the fraction of a rule's workloads with ratio <= tau.

  Args:
    ratios: {workload: ratio} of one rule.
    tau: float >= 1.
  """
  return sum(r <= tau for r in ratios.values()) / len(ratios)


def ProfileScore(ratios, r_max=R_MAX):
  """AlgoPerf's score: integral of rho over [1, r_max] / (r_max - 1).

  Exact: a workload of ratio r adds max(0, r_max - r) / (r_max - 1) to the
  integral of its step of rho, so the score is their mean (1 when the rule
  is the fastest everywhere, 0 when it is r_max times slower or misses
  the target everywhere). Source: Dahl et al. 2023, arXiv:2306.07179,
  sec. 4.3 (eq. of the performance profile and its normalised integral).

  Args:
    ratios: {workload: ratio >= 1 or inf} of one rule.
    r_max: the largest ratio that counts (AlgoPerf: 4).
  """
  return float(np.mean([max(0.0, r_max - r) / (r_max - 1.0)
                        for r in ratios.values()]))


def Halton(n, dims):
  """The first n points (index 1 on) of the Halton sequence in [0, 1)^dims.

  Bases 2, 3, 5, 7 (dims <= 4). Returns a list of n tuples. Raises
  ValueError for dims > 4.
  """
  bases = (2, 3, 5, 7)
  if dims > len(bases):
    raise ValueError('Halton: dims=%d; at most %d search dimensions. Give '
                     'the rule fewer hyperparameters.' % (dims, len(bases)))
  points = []
  for i in range(1, n + 1):
    point = []
    for b in bases[:dims]:
      f, x, k = 1.0, 0.0, i
      while k:
        f /= b
        x += f * (k % b)
        k //= b
      point.append(x)
    points.append(tuple(point))
  return points


def TrialHparams(rule, trials):
  """The rule's hyperparameters of each trial: [{name: value}].

  Coordinate i of the shared Halton point maps to the rule's i-th range,
  log-uniformly: low * (high / low) ** u. A rule with an empty space runs
  one trial, {}.
  """
  if not rule.space:
    return [{}]
  points = Halton(trials, 3)
  return [{name: lo * (hi / lo) ** u[i]
           for i, (name, lo, hi) in enumerate(rule.space)} for u in points]


def Better(a, b, mode):
  """Whether metric a meets b (a >= b for mode 'max', a <= b for 'min')."""
  return a >= b if mode == 'max' else a <= b


def StepsToTarget(curve, target, mode):
  """(steps, seconds) at the first evaluation meeting target, or (inf, inf).

  Args:
    curve: a Curve (evaluations in step order).
    target: the held-out metric to meet.
    mode: 'max' (accuracy) or 'min' (bits/char).
  """
  for step, seconds, value in zip(*curve):
    if Better(value, target, mode):
      return step, seconds
  return math.inf, math.inf


def Target(finals, mode):
  """The median of the baseline's final metrics (its seeds' runs).

  With 3 seeds at least 2 of them meet it (the median and the better).
  `mode` is unused for the median but names the direction in the report.
  """
  del mode
  return float(np.median(finals))


# ---- training ----------------------------------------------------------------

def _Schedule(rule, budget):
  """Warmup + cosine to 0 at `budget` steps, or constant (rule 'constant')."""
  from schedules.base_schedule import ConstantOne  # pylint: disable=g-import-not-at-top
  from schedules.cosine import CosineDecay  # pylint: disable=g-import-not-at-top
  from schedules.warmup import Warmup  # pylint: disable=g-import-not-at-top
  if rule.schedule == 'constant':
    return ConstantOne.Params()
  warmup = max(1, int(WARMUP_FRACTION * budget))
  return Warmup.Params().Set(
      warmup_steps=warmup, schedule=CosineDecay.Params().Set(
          total_steps=budget - warmup, alpha=0.0))


def _Optimizer(factory, kwargs, budget):
  """Optimizer params from the factory name (schedule-free: its warmup).

  `factory` 'wrapper:inner' wraps the inner rule (its defaults) in the
  wrapper, which takes `kwargs`.
  """
  from learner.optimizers import factory as factory_lib  # pylint: disable=g-import-not-at-top
  if ':' in factory:
    wrapper, inner = factory.split(':')
    fn = factory_lib.get_optimizer_wrapper_fn(
        wrapper, factory_lib.get_optimizer_fn(inner), **kwargs)
  else:
    fn = factory_lib.get_optimizer_fn(factory, **kwargs)
  params, _ = factory_lib.OptimizerParamsFromFn(fn)
  if 'warmup_steps' in params:
    params.warmup_steps = max(1, int(WARMUP_FRACTION * budget))
  return params


def RuleLearners(templates, rule, hparams, budget, matrices):
  """The learners' params of a trial: the workload's split, the rule.

  Args:
    templates: the experiment's learner params (a list: their variable
      filters and clipping are kept).
    rule: a Rule.
    hparams: {name: value} of the trial (TrialHparams).
    budget: steps of the schedule.
    matrices: the workload's regex of hidden matrices (muon row only).

  Returns:
    A list of learner params.
  """
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  kwargs = dict(rule.kwargs)
  if 'weight_decay' in hparams:
    kwargs['weight_decay'] = hparams['weight_decay']
  rate = hparams.get('learning_rate', 1.0)
  out = []
  for lp in templates:
    lp = lp.Copy().Set(learning_rate=rate, lr_schedule=_Schedule(rule, budget),
                       optimizer=_Optimizer(rule.factory, kwargs, budget),
                       optimizer_fn=None)
    out.append(lp)
  if 'muon_learning_rate' not in hparams:
    return out
  base = out[0].Set(bprop_variable_filter=None, bprop_variable_exclusion=None)
  adamw = _Optimizer('adamw', {'weight_decay': 0.0}, budget)
  return optimizers.Muon.TwoLearners(
      base, matrices, muon=out[0].optimizer, adamw=adamw,
      muon_learning_rate=hparams['muon_learning_rate'],
      adamw_learning_rate=rate)


def _TrialParams(workload, rule, hparams, seed, budget):
  """The experiment's params with the rule's learners, seeded by `seed`."""
  from learner.training.jobs import cli as cli_lib  # pylint: disable=g-import-not-at-top
  params = cli_lib.LoadExperimentParams(workload.key, max_steps=budget)
  tp = params.task
  learners = tp.train.learner
  templates = list(learners) if isinstance(learners, list) else [learners]
  tp.train.learner = RuleLearners(templates, rule, hparams, budget,
                                  workload.matrices)
  tp.random_seed = (tp.random_seed or 0) + seed - 1
  params.train_input.seed = (params.train_input.seed or 0) + seed - 1
  if workload.eval_samples:
    tp.eval.samples = workload.eval_samples
  return params


# Each workload's held-out batches, read once (evaluations reuse them).
_EVAL_BATCHES = {}


def RunTrial(workload, rule, hparams, seed, budget, eval_every, target=None):
  """Trains one trial; returns its Curve (stops early once `target` is met).

  Builds the task, then runs `eval_every` steps per `TrainLoop` call (one
  trace) and evaluates the held-out metric after each (on the eval weights
  of an averaging rule, as the trainer does). Times count the train calls
  (with their tracing), not the evaluations. A non-finite metric ends the
  run (the rest of the budget counts as not reached). The held-out batches
  are read once per workload and kept (`_EVAL_BATCHES`).
  """
  from learner.training.jobs import evaler as evaler_lib  # pylint: disable=g-import-not-at-top
  params = _TrialParams(workload, rule, hparams, seed, budget)
  if workload.key not in _EVAL_BATCHES:  # The same for every trial.
    _EVAL_BATCHES[workload.key] = evaler_lib.EvalBatches(params)
  task = params.task.Instantiate()
  task.CreateLearners()
  swaps = [a for lr in task.learners for a in lr.optimizer.EvalAverages()]
  iterator = iter(params.train_input.Instantiate().GetDataset())
  steps, times, values = [], [], []
  train_s, step = 0.0, 0
  while step < budget:
    n = min(eval_every, budget - step)
    start = time.perf_counter()
    out = task.TrainLoop(iterator, n)
    float(out['metrics']['loss'][0])  # Waits for the steps.
    train_s += time.perf_counter() - start
    step += n
    value = evaler_lib.EvalMetrics(params, task, swaps,
                                   _EVAL_BATCHES[workload.key])[
                                       workload.metric]
    steps.append(step)
    times.append(train_s)
    values.append(value)
    if not math.isfinite(value):
      break
    if target is not None and Better(value, target, workload.mode):
      break
  return Curve(steps, times, values)


# ---- one workload, every rule -------------------------------------------------

def _Finals(curves):
  return [c.values[-1] for c in curves]


def _BestTrial(curves, target, mode):
  """Index of the trial reaching `target` in fewest steps (ties: metric).

  With no target (the baseline's own trials) or none reaching it: the
  trial with the best final metric.
  """
  sign = -1.0 if mode == 'max' else 1.0
  def _Key(i):
    steps = (StepsToTarget(curves[i], target, mode)[0]
             if target is not None else math.inf)
    return (steps, sign * curves[i].values[-1])
  return min(range(len(curves)), key=_Key)


def _RunRule(workload, rule, setting, target, log):
  """Trials, then seeds of the best; returns (hparams, trial curves, seeds).

  `setting`: dict(budget, eval_every, trials, seeds). Runs stop at
  `target` (None: they run to the budget).
  """
  budget, every = setting['budget'], setting['eval_every']
  trials = TrialHparams(rule, setting['trials'])
  curves = []
  for i, hp in enumerate(trials):
    curves.append(RunTrial(workload, rule, hp, 1, budget, every, target))
    log('  %s trial %d %s: %s %.4g at step %d (%.1f s)' % (
        rule.name, i + 1, _Fmt(hp), workload.metric, curves[-1].values[-1],
        curves[-1].steps[-1], curves[-1].times[-1]))
  best = _BestTrial(curves, target, workload.mode)
  seeds = [curves[best]]
  for seed in range(2, setting['seeds'] + 1):
    seeds.append(RunTrial(workload, rule, trials[best], seed, budget, every,
                          target))
    log('  %s seed %d: %s %.4g at step %d' % (
        rule.name, seed, workload.metric, seeds[-1].values[-1],
        seeds[-1].steps[-1]))
  return trials[best], curves, seeds


def _Fmt(hparams):
  return ' '.join('%s=%.3g' % kv for kv in sorted(hparams.items())) or 'defaults'


def _Summary(rule, hparams, curves, seeds, target, mode):
  """One table cell's numbers (JSON-ready; inf as None)."""
  reach = [StepsToTarget(c, target, mode) for c in seeds]
  steps = float(np.median([s for s, _ in reach]))
  seconds = float(np.median([t for _, t in reach]))
  trials_hit = sum(math.isfinite(StepsToTarget(c, target, mode)[0])
                   for c in curves)
  return dict(rule=rule.name, hparams=hparams,
              steps=steps, seconds=seconds,
              seed_steps=[s for s, _ in reach],
              metric=float(np.median(_Finals(seeds))),
              trials_reaching='%d/%d' % (trials_hit, len(curves)),
              curves=[c._asdict() for c in curves],
              seed_curves=[c._asdict() for c in seeds])


def RunWorkload(workload, rules, setting, log):
  """The baseline first (its runs set the target), then the other rules.

  Args:
    workload: a Workload.
    rules: the Rules to rank (the baseline's row is run in any case).
    setting: dict(budget, eval_every, trials, seeds).
    log: a function printing one line.

  Returns:
    (target, {rule name: summary}), the baseline's row included.
  """
  base = {r.name: r for r in RULES}[BASELINE]
  runs = {BASELINE: _RunRule(workload, base, setting, None, log)}
  target = Target(_Finals(runs[BASELINE][2]), workload.mode)
  log('  target: %s %s %.4g (median of the baseline\'s seeds: %s)' % (
      workload.metric, '>=' if workload.mode == 'max' else '<=', target,
      ', '.join('%.4g' % v for v in _Finals(runs[BASELINE][2]))))
  for rule in rules:
    if rule.name not in runs:
      runs[rule.name] = _RunRule(workload, rule, setting, target, log)
  ordered = [base] + [r for r in rules if r.name != BASELINE]
  return target, {r.name: _Summary(r, *runs[r.name], target, workload.mode)
                  for r in ordered}


# ---- the report ------------------------------------------------------------------

def _Num(x, fmt):
  return fmt % x if math.isfinite(x) else 'inf'


def Table(results):
  """Lines of the rule x workload table.

  results: {workload key: (target, {rule: summary})}. A cell: median steps
  to target / median seconds to target / median metric at the end of the
  seeds' runs / trials reaching the target.
  """
  keys = list(results)
  rules = list(next(iter(results.values()))[1]) if results else []
  lines = ['rule                | ' + ' | '.join(
      '%s: steps, s, metric, trials' % k for k in keys)]
  for rule in rules:
    cells = []
    for k in keys:
      s = results[k][1][rule]
      cells.append('%s, %s, %.4g, %s' % (
          _Num(s['steps'], '%d'), _Num(s['seconds'], '%.1f'), s['metric'],
          s['trials_reaching']))
    lines.append('%-19s | %s' % (rule, ' | '.join(cells)))
  return lines


def Scores(results, field):
  """{rule: AlgoPerf score} on `field` ('seconds' or 'steps')."""
  rules = list(next(iter(results.values()))[1])
  values = {r: {k: results[k][1][r][field] for k in results} for r in rules}
  return {r: ProfileScore(ratio) for r, ratio in Ratios(values).items()}, \
      Ratios(values)


def TargetLines(results):
  """The issue's figures, each with met / MISSED (or n/a when not run)."""
  lines = ['targets:']
  lm = results.get('lm.CharTransformer')
  if lm and 'muon' in lm[1] and math.isfinite(lm[1][BASELINE]['steps']):
    ratio = lm[1]['muon']['steps'] / lm[1][BASELINE]['steps']
    met = 0.5 <= ratio <= 0.75
    lines.append('  Muon/Adam steps to target on lm.CharTransformer: %.3f '
                 '(want 0.5 to 0.75): %s' % (ratio, 'met' if met else 'MISSED'))
  else:
    lines.append('  Muon/Adam steps to target on lm.CharTransformer: n/a '
                 '(not run)')
  for key, (_, rows) in results.items():
    if 'sf_adamw' in rows and 'adamw' in rows:
      sf, aw = rows['sf_adamw']['steps'], rows['adamw']['steps']
      lines.append('  schedule-free AdamW <= cosine AdamW steps on %s: %s vs '
                   '%s: %s' % (key, _Num(sf, '%d'), _Num(aw, '%d'),
                               'met' if sf <= aw else 'MISSED'))
  for key, (_, rows) in results.items():
    for name, label in (('soap', 'SOAP'), ('shampoo', 'Shampoo')):
      if name in rows and math.isfinite(rows[BASELINE]['steps']):
        ratio = rows[name]['steps'] / rows[BASELINE]['steps']
        lines.append('  %s/Adam steps to target on %s: %s (want <= 0.8 for '
                     'Shampoo or SOAP): %s' % (
                         label, key, _Num(ratio, '%.3f'),
                         'met' if ratio <= 0.8 else 'MISSED'))
  return lines + _RateFreeLines(results)


def _RateFreeLines(results):
  """Each rate-free rule's final metric within 5 % of tuned Adam's.

  The gap is relative to Adam's metric (the baseline row's median final
  metric), signed so that positive is worse: (adam - rule) / adam for an
  accuracy, (rule - adam) / adam for bits/char.
  """
  free = [r.name for r in RULES if not r.space]
  modes = {w.key: w.mode for w in WORKLOADS}
  lines = []
  for key, (_, rows) in results.items():
    adam = rows[BASELINE]['metric']
    for name in (n for n in free if n in rows):
      gap = (rows[name]['metric'] - adam) / abs(adam)
      gap = -gap if modes[key] == 'max' else gap
      lines.append('  %s within 5 %% of tuned Adam\'s metric on %s: %.4g vs '
                   '%.4g (%+.1f %%): %s' % (
                       name, key, rows[name]['metric'], adam, 100 * gap,
                       'met' if gap <= 0.05 else 'MISSED'))
  return lines


def Plot(ratios_by_field, path):
  """A PNG of rho(tau), tau in [1, R_MAX], one panel per field.

  Returns a line saying where it went, or why it was skipped.
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    return ('plot skipped: matplotlib is not importable (%s); install the '
            "plot extra (pip install -e '.[plot]') for the PNG" % e)
  taus = np.linspace(1.0, R_MAX, 301)
  fig, axes = plt.subplots(1, len(ratios_by_field), figsize=(10, 4))
  for ax, (field, ratios) in zip(np.atleast_1d(axes), ratios_by_field.items()):
    for rule, r in ratios.items():
      ax.step(taus, [Profile(r, t) for t in taus], where='post', label=rule)
    ax.set_xlabel('tau (ratio to the best rule\'s %s)' % field)
    ax.set_ylabel('rho(tau): fraction of workloads')
    ax.set_ylim(-0.02, 1.02)
    ax.set_title('performance profile on %s' % field)
  np.atleast_1d(axes)[0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)
  return 'plot: %s' % path


def _Settings(args):
  """{workload key: setting} from the table and the command line."""
  quick = 1 if args.quick else 0
  out = {}
  for w in WORKLOADS:
    if args.workloads and w.key not in args.workloads.split(','):
      continue
    out[w.key] = dict(budget=args.steps or w.steps[quick],
                      eval_every=args.eval_every or w.eval_every[quick],
                      trials=args.trials or w.trials[quick],
                      seeds=args.seeds or w.seeds[quick])
  return out


def _ParseArgs(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='Short budgets, fewer trials, one seed.')
  parser.add_argument('--workloads', default='',
                      help='Comma-separated experiment keys (default all).')
  parser.add_argument('--rules', default='',
                      help='Comma-separated rule names (default all).')
  for name in ('trials', 'seeds', 'steps', 'eval_every'):
    parser.add_argument('--' + name, type=int, default=0,
                        help='Overrides every workload\'s %s.' % name)
  parser.add_argument('--output', default='benchmarks/results',
                      help='Directory of the JSON and the PNG.')
  args = parser.parse_args(argv)
  known = [r.name for r in RULES]
  names = args.rules.split(',') if args.rules else known
  for name in names:
    if name not in known:
      parser.error('--rules: unknown rule %r; known: %s.' % (name, known))
  args.rule_list = [r for r in RULES if r.name in names]
  keys = [w.key for w in WORKLOADS]
  for key in filter(None, args.workloads.split(',')):
    if key not in keys:
      parser.error('--workloads: unknown workload %r; known: %s.' % (key,
                                                                    keys))
  return args


def main(argv=None):
  """Runs the benchmark; prints the table, scores, targets; returns 0."""
  args = _ParseArgs(sys.argv[1:] if argv is None else argv)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')  # Each trial's new task retraces.
  log = lambda line: print(line, flush=True)
  start = time.perf_counter()
  results = {}
  for w in WORKLOADS:
    setting = _Settings(args).get(w.key)
    if setting is None:
      continue
    log('%s: %s' % (w.key, setting))
    results[w.key] = RunWorkload(w, args.rule_list, setting, log)
  wall = time.perf_counter() - start
  lines = ['', 'steps to target (median over seeds), seconds to it, final '
           'metric, trials reaching it:'] + Table(results)
  ratios = {}
  for field in ('seconds', 'steps'):
    scores, ratios[field] = Scores(results, field)
    lines.append('score on %s (r_max %g): %s' % (field, R_MAX, ', '.join(
        '%s %.3f' % kv for kv in sorted(scores.items(), key=lambda kv: -kv[1]))))
  lines += TargetLines(results)
  os.makedirs(args.output, exist_ok=True)
  lines.append(Plot(ratios, os.path.join(args.output, 'steps_to_target.png')))
  lines.append('wall %.1f s' % wall)
  log('\n'.join(lines))
  with open(os.path.join(args.output, 'steps_to_target.json'), 'w') as f:
    json.dump(dict(results={k: dict(target=t, rows=r)
                            for k, (t, r) in results.items()},
                   wall_s=wall, argv=argv or sys.argv[1:]), f, default=str)
  return 0


if __name__ == '__main__':
  sys.exit(main())
