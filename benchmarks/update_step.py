"""Benchmark: one optimizer update step, ours against the best peers.

    python -m benchmarks.update_step [--quick] [--sets=small,resnet50]
        [--optimizers=momentum,adam,lion,nadam,amsgrad,sf_sgd,sf_adamw,
                      muon,issue39,issue40,...] [--rows=...]
        [--steps=N] [--warmup=N] [--output=PATH]

For each variable set (`small`: 20 variables, 1.0 M parameters; `resnet50`:
161 variables with ResNet-50's shapes, 25.6 M parameters) and each optimizer
(Momentum(0.9), Adam), every row applies the same fixed gradients with a
global-norm clip of 1.0 and a cosine-scheduled rate, in the same process and
the same run:
  (a) `learner`, `learner_jit`: our Learner inside tf.function, plain and
      jit_compile=True; `learner_checked`: plain, with
      check_finite_weights=True (an update that makes a weight non-finite
      is undone; costs a copy of the weights and slots per step);
      `learner` runs the fused multi-tensor kernels
      (learner/optimizers/kernels: one norm op, one apply op per step),
      `learner_fallback` the same Learner with them off (the pure-TF path,
      also what runs under jit_compile); `learner_jit_metrics`: learner_jit
      whose step returns its eval metrics, as the trainer's step does
      (the other learner rows let tf.function prune them); `learner_loop`:
      `learner` as the trainer runs it, LOOP_STEPS steps (metrics fetched)
      per tf.function call in a tf.while_loop (its times are per step;
      the per-call cost of a tf.function with many captured variables is
      paid once per call, as in the trainer's TrainLoop; not a peer of
      the per-call rows);
  (b) `tf_fused`, `tf_fused_jit`: a hand-written tf.function over TF's fused
      ResourceApplyMomentum/ResourceApplyAdam and tf.clip_by_global_norm;
      `tf_fused_folded` (Momentum only) is a design prototype, not a peer:
      the clip scale folded into the fused kernel's scalar inputs
      (peer_rows.TfFusedRow), so no scaled gradient is materialised;
  (c) `keras`: Keras 3 SGD(momentum)/Adam apply_gradients, global_clipnorm;
  (d) `optax_jit`: optax under jax.jit (skipped with a note without the
      optional `bench` extra); `optax_jit_loop`: LOOP_STEPS updates per
      jitted call in a jax.lax.fori_loop, the peer of `learner_loop`;
  (d') `torch`: PyTorch's clip_grad_norm_ + SGD(momentum, foreach) or
      Adam(fused) (benchmarks/torch_rows.py; skipped with a note without
      torch, which is not a dependency);
  (e) `limit`: bytes moved per step (benchmarks.bandwidth.BYTES_PER_PARAM)
      divided by the bandwidth numpy reaches on two threads, measured by a
      probe timed in the same rounds as the rows (so under the same load).

The other rules (peer_rows.OTHER_OPTIMIZERS) run learner rows and, timed
in the same rounds, Adam's (`adam_learner`, `adam_learner_jit`, for issue
40's targets; not for Muon): the fused-kernel rules (lion, nadam, amsgrad,
sf_sgd, sf_adamw) RULE_ROWS; issue 39's rules (soap: preconditioner
refreshed every 10 updates, dog, dowg, cocob, madgrad, prodigy,
dadapt_adamw, mechanic_adam: Mechanic around Adam, ademamix,
simplified_ademamix, cautious_adamw: AdamW with cautious=True, shampoo:
DistributedShampoo, normuon: NorMuon on the variables of rank >= 2 and
AdamW on the rest, as learner_row.MuonLearners splits them), which but
for ademamix, simplified_ademamix, cocob and madgrad (fused kernels since
issue 40, also `learner_fallback`) have no kernel (`learner` is the
pure-TF path), NEW_RULE_ROWS (and SOAP's
`learner_loop`, whose 10 steps per call hold one refresh: its per-step
cost; the per-call median misses the refresh); Muon (learner_row.
MuonLearners: Muon.TwoLearners, Muon on the variables of rank >= 2, AdamW
on the rest) MUON_ROWS. Lion, Nadam, AMSGrad, schedule-free AdamW and Muon
also get optax, Keras and torch peers (benchmarks/rule_peers.py: which
library has which, how the Muon peers run the same Newton-Schulz
iteration). These rows are checked against a fresh pure-TF learner
(for Muon's peers, in the variant with the peer's numbers); a peer whose
formula differs is timed and shown as `form` with the reason.

Each row first runs 3 steps from the initial values and checks its weights
against a numpy reference (benchmarks.numpy_reference; column `err`, the max
relative error of the weight change; a row over 2e-3 is flagged FAIL), the
first of these calls timed separately (`first_ms`: tracing and compilation);
then `--warmup` untimed steps; then `--steps` timed steps, interleaved over
the rows in rounds. The table gives the median and p10-p90 in ms and the
median as a ratio to the limit and to the best peer row (b-d) of the same
call form (`x_best_peer`: a per-call row's against the per-call peers, a
looping row's against the looping ones). The `targets:` lines are judged
(met / MISSED) from MIN_JUDGED_STEPS (100) timed steps on; a shorter run
(--quick) prints them `not judged`, as benchmarks.trainer does. A JSON file
with everything goes to --output (default benchmarks/results/, gitignored).
Each (set, optimizer) of the resnet50 set runs in a child process of its
own (ISOLATED_SETS), so a run over many rules holds one rule's memory at a
time; a child that dies (say, killed for memory) leaves a note naming it.
Timings on a shared machine are noisy; the ratios within one run are what
to compare.
"""

import argparse
import gc
import json
import os
import sys

from benchmarks import bandwidth
from benchmarks import child_process
from benchmarks import learner_row
from benchmarks import numpy_reference
from benchmarks import peer_rows
from benchmarks import rule_peers
from benchmarks import timing
from benchmarks import torch_rows
from benchmarks import variable_sets

CHECK_STEPS = 3
# Steps per call of the row `learner_loop` (the trainer's TrainLoop runs up
# to p.train.steps_per_loop steps per call, ending at each log interval).
LOOP_STEPS = 10
CHECK_TOLERANCE = 2e-3
PEERS = ('tf_fused', 'tf_fused_jit', 'keras', 'optax_jit', 'optax_jit_loop',
         'torch')
# Targets are judged from this many timed steps per row on (the default
# --steps; --quick times 20): timing.MIN_JUDGED_STEPS, as benchmarks.trainer.
MIN_JUDGED_STEPS = timing.MIN_JUDGED_STEPS
PROBE = '_bandwidth_probe'
# The rows run for the peer_rows.RULE_OPTIMIZERS, plus the trainer's form
# and, for those in rule_peers.PEERED_RULES, the peers there.
RULE_ROWS = ('learner', 'learner_fallback', 'learner_jit', 'learner_loop')
# The rows of peer_rows.NEW_RULES (`learner` is the pure-TF path but for
# peer_rows.FUSED_NEW_RULES, which also run `learner_fallback`; SOAP also
# in the trainer's form, whose 10 steps per call hold one preconditioner
# refresh) and of Muon (two learners; peers in rule_peers).
NEW_RULE_ROWS = ('learner', 'learner_jit')
MUON_ROWS = ('learner', 'learner_jit', 'learner_loop')
# Adam's learner rows, timed in the same rounds as a rule's (issue 40's
# targets compare the newer rules with Adam's step).
ADAM_ROWS = ('adam_learner', 'adam_learner_jit')
# The variable sets whose (set, optimizer) pairs each run in a child process
# of their own: in one process the memory of a rule's rows is not returned
# when they are dropped (on resnet50 2.6-2.9 GB kept per rule with four
# learner rows, measured with gc.collect() after each; nine rules with six
# rows reached 22.5 GB and were OOM-killed on a 24 GB machine). A child
# peaked at 3.7 GB for two rows.
ISOLATED_SETS = ('resnet50',)
CHILD_RESULT_PREFIX = 'UPDATE_STEP_CHILD_RESULT '
# --optimizers shorthands.
GROUPS = {'issue39': peer_rows.NEW_RULES,
          'issue40': ('lion', 'nadam', 'amsgrad', 'sf_adamw', 'muon')}


def ParseArgs(argv):
  """Parses command-line flags (argv without the program name)."""
  parser = argparse.ArgumentParser(
      prog='python -m benchmarks.update_step', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--quick', action='store_true',
                      help='Few steps (20 timed, 2 warm-up; targets not '
                      'judged); Momentum on both sets, Adam on the small set '
                      'only: 2-3 min.')
  parser.add_argument('--sets', default='small,resnet50',
                      help='Comma-separated variable sets: small, resnet50.')
  parser.add_argument('--optimizers', default=None,
                      help='Comma-separated: momentum, adam (default both; '
                      'with --quick, Adam runs on the small set only), '
                      'the rules with fused kernels: lion, nadam, amsgrad, '
                      'sf_sgd, sf_adamw, issue 39\'s rules: %s, or muon '
                      '(learner rows, Adam\'s learner rows and, for lion, '
                      'nadam, amsgrad, sf_adamw and muon, optax/Keras/torch '
                      'peers); shorthands: issue39 (its rules), issue40 '
                      '(lion,nadam,amsgrad,sf_adamw,muon).' %
                      ', '.join(peer_rows.NEW_RULES))
  parser.add_argument('--rows', default='',
                      help='Comma-separated row names to run (default all).')
  parser.add_argument('--steps', type=int, default=None,
                      help='Timed steps per row (default 100; quick 20).')
  parser.add_argument('--warmup', type=int, default=None,
                      help='Untimed steps per row (default 10; quick 2).')
  parser.add_argument('--output', default=None,
                      help='JSON path (default benchmarks/results/...).')
  parser.add_argument('--child', default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.optimizers is None:
    args.optimizers = 'momentum,adam'
    args.adam_sets = 'small' if args.quick else None
  else:
    args.adam_sets = None
  args.optimizers = ','.join(
      ','.join(GROUPS.get(o, (o,))) for o in args.optimizers.split(',') if o)
  if args.steps is None:
    args.steps = 20 if args.quick else 100
  if args.warmup is None:
    args.warmup = 2 if args.quick else 10
  if args.steps < 1:
    parser.error('--steps=%d must be >= 1.' % args.steps)
  if args.warmup < 0:
    parser.error('--warmup=%d must be >= 0.' % args.warmup)
  for flag, given, known in (
      ('--sets', args.sets, variable_sets.SET_NAMES),
      ('--optimizers', args.optimizers, peer_rows.OPTIMIZERS),
      ('--rows', args.rows, ROW_NAMES)):
    names = [x for x in given.split(',') if x]
    unknown = [x for x in names if x not in known]
    if unknown or (flag != '--rows' and not names):
      parser.error('%s=%s: %s; choose from %s.' % (
          flag, given, 'unknown %s' % ', '.join(unknown) if unknown else
          'none given', ', '.join(known)))
  return args


def _Builders(cfg, specs, weights, grads):
  """[(row name, builder)] of the rows of Momentum and Adam; a builder is
  called only to build its row, so the names can be read with None args."""
  return [
      ('learner', lambda: learner_row.LearnerRow(cfg, specs, weights, grads)),
      ('learner_fallback', lambda: learner_row.LearnerRow(
          cfg, specs, weights, grads, fused=False)),
      ('learner_jit', lambda: learner_row.LearnerRow(
          cfg, specs, weights, grads, jit_compile=True)),
      ('learner_jit_metrics', lambda: learner_row.LearnerRow(
          cfg, specs, weights, grads, jit_compile=True, fetch_metrics=True,
          name='learner_jit_metrics')),
      ('learner_loop', lambda: learner_row.LearnerRow(
          cfg, specs, weights, grads, steps_per_call=LOOP_STEPS,
          name='learner_loop')),
      ('learner_checked', lambda: learner_row.LearnerRow(
          cfg, specs, weights, grads, check_finite_weights=True,
          name='learner_checked')),
      ('tf_fused', lambda: peer_rows.TfFusedRow(cfg, weights, grads)),
      ('tf_fused_jit', lambda: peer_rows.TfFusedRow(
          cfg, weights, grads, jit_compile=True)),
      ('tf_fused_folded', lambda: peer_rows.TfFusedRow(
          cfg, weights, grads, fold_clip=True)),
      ('keras', lambda: peer_rows.KerasRow(cfg, weights, grads)),
      ('optax_jit', lambda: peer_rows.OptaxRow(cfg, weights, grads)),
      ('optax_jit_loop', lambda: peer_rows.OptaxRow(
          cfg, weights, grads, steps_per_call=LOOP_STEPS)),
      ('torch', lambda: torch_rows.TorchRow(cfg, weights, grads)),
  ]


# Every row name --rows takes: Momentum's and Adam's, and Adam's learner
# rows beside another rule's.
ROW_NAMES = tuple(n for n, _ in _Builders(None, None, None, None)) + (
    ADAM_ROWS)


def BuildRows(cfg, specs, weights, grads, wanted, notes):
  """Builds the rows for one (set, optimizer); appends skip notes to notes."""
  builders = _Builders(cfg, specs, weights, grads)
  if cfg.optimizer in peer_rows.OTHER_OPTIMIZERS:
    builders = _OtherBuilders(cfg, specs, weights, grads, builders)
  have_learner, note = learner_row.LearnerAvailable()
  if not have_learner and note not in notes:
    notes.append(note)
  have_optax, note = peer_rows.OptaxAvailable()
  if not have_optax and note not in notes:
    notes.append(note)
  have_torch, note = torch_rows.TorchAvailable()
  if not have_torch and note not in notes:
    notes.append(note)
  rows = []
  for name, build in builders:
    if wanted and name not in wanted:
      continue
    if name.startswith(('learner', 'adam_learner')) and not have_learner:
      continue
    if name.startswith('optax') and not have_optax:
      continue
    if name == 'torch' and not have_torch:
      continue
    if name == 'tf_fused_folded' and cfg.optimizer != 'momentum':
      continue
    try:
      rows.append(build())
    except Exception as e:  # pylint: disable=broad-except
      notes.append('%s: build failed: %s: %s' % (name, type(e).__name__, e))
  return rows


def _OtherBuilders(cfg, specs, weights, grads, builders):
  """The builders of a rule other than Momentum/Adam: its learner rows
  (RULE_ROWS, NEW_RULE_ROWS or MUON_ROWS), Adam's learner rows (ADAM_ROWS)
  and the peers of rule_peers; `builders` gives the learner rows'."""
  name = cfg.optimizer
  if name == 'muon':
    keep = MUON_ROWS
  elif name in peer_rows.RULE_OPTIMIZERS:
    keep = RULE_ROWS
  else:
    keep = NEW_RULE_ROWS + (('learner_loop',) if name == 'soap' else ())
    if name in peer_rows.FUSED_NEW_RULES:
      keep += ('learner_fallback',)
  out = [(n, b) for n, b in builders if n in keep]
  if name == 'mechanic_adam':
    out = [(n, _Unjudged(b, _MECHANIC_NOTE) if n == 'learner_jit' else b)
           for n, b in out]
  if name != 'muon':
    adam = peer_rows.UpdateConfig('adam')
    out += [('adam_learner', lambda: _Baseline(learner_row.LearnerRow(
        adam, specs, weights, grads, name='adam_learner'), adam)),
            ('adam_learner_jit', lambda: _Baseline(learner_row.LearnerRow(
                adam, specs, weights, grads, jit_compile=True,
                name='adam_learner_jit'), adam))]
  if name in rule_peers.PEERED_RULES:
    out += rule_peers.Builders(cfg, weights, grads)
  return out


_MECHANIC_NOTE = (
    'Mechanic\'s scale starts at s_init 1e-6: the checked steps move the '
    'weights by ~1e-9, below float32\'s resolution of them (~4e-9 at '
    '0.05); tests/test_optimizers/test_mechanic.py checks XLA')


def _Unjudged(build, note):
  """`build` whose row is timed, not checked, for the reason `note`."""
  def Build():
    row = build()
    row.form_note = note
    return row
  return Build


def _Baseline(row, cfg):
  """Marks `row` as checked against `cfg`'s reference (not the run's)."""
  row.reference_cfg = cfg
  return row


def Reference(cfg, specs, weights, grads, form, steps=CHECK_STEPS):
  """The reference weights after `steps` steps in `form`: numpy's for
  Momentum and Adam; for the other rules (peer_rows.OTHER_OPTIMIZERS) a
  fresh `learner_fallback` (the pure-TF path, which the fused kernels equal
  bit for bit; for Muon in the variant `form` names,
  learner_row.MUON_VARIANTS)."""
  if cfg.optimizer in peer_rows.OTHER_OPTIMIZERS:
    variant = form if form in learner_row.MUON_VARIANTS else None
    row = learner_row.LearnerRow(cfg, specs, weights, grads, fused=False,
                                 variant=variant)
    for _ in range(steps):
      row.step()
    return [w.astype('float64') for w in row.Weights()]
  kw = dict(steps=steps, lr=cfg.lr, total_steps=cfg.total_steps,
            alpha=cfg.alpha, clip=cfg.clip, form=form)
  if cfg.optimizer == 'momentum':
    return numpy_reference.Momentum(weights, grads, momentum=cfg.momentum,
                                    **kw)
  return numpy_reference.Adam(weights, grads, beta1=cfg.beta1,
                              beta2=cfg.beta2, epsilon=cfg.epsilon, **kw)


def RunOne(set_name, opt_name, args, gbps, notes):
  """Measures every row for one (set, optimizer); returns a result dict."""
  specs = variable_sets.Specs(set_name)
  n = variable_sets.NumParams(specs)
  weights, grads = variable_sets.MakeValues(specs)
  cfg = peer_rows.UpdateConfig(opt_name)
  wanted = [r for r in args.rows.split(',') if r]
  rows = BuildRows(cfg, specs, weights, grads, wanted, notes)
  refs = {}
  checked = {}
  active = {}
  for row in rows:
    try:
      first_s, _ = timing.TimeFirstCall(row.step)
      for _ in range(CHECK_STEPS - 1):
        row.step()
    except Exception as e:  # pylint: disable=broad-except
      notes.append('%s/%s/%s: step failed: %s: %s' %
                   (set_name, opt_name, row.name, type(e).__name__,
                    str(e).splitlines()[0][:300]))
      continue
    # A row running several steps per call ran CHECK_STEPS calls.
    per_call = getattr(row, 'steps_per_call', 1)
    rcfg = getattr(row, 'reference_cfg', cfg)
    form = row.reference_form
    if rcfg.optimizer == 'muon':
      # Our rows run the 'optax' variant (learner_row.MuonLearners).
      form = form if form in learner_row.MUON_VARIANTS else 'optax'
    elif rcfg.optimizer in peer_rows.OTHER_OPTIMIZERS:
      form = 'learner'  # One reference (a fresh pure-TF learner) for all.
    key = (rcfg.optimizer, form, CHECK_STEPS * per_call)
    if key not in refs:
      refs[key] = Reference(rcfg, specs, weights, grads, *key[1:])
    err = numpy_reference.MaxRelativeError(weights, row.Weights(), refs[key])
    # A peer whose formula differs from ours is timed, not checked.
    note = getattr(row, 'form_note', None)
    tol = getattr(row, 'check_tolerance', None) or CHECK_TOLERANCE
    checked[row.name] = dict(first_call_s=first_s, max_rel_err=err,
                             check_ok=(bool(err <= tol)
                                       if note is None else None),
                             check_tolerance=tol,
                             form_note=note, steps_per_call=per_call)
    active[row.name] = row.step
  probe = bandwidth.BandwidthProbe(threads=2)
  active[PROBE] = probe
  stats = timing.TimeRows(active, args.steps, args.warmup)
  del active[PROBE]
  probe_stats = stats.pop(PROBE)
  # The limit uses the bandwidth measured interleaved with the rows, under
  # the load they saw; `gbps` (measured before the run) is kept for reference.
  run_gbps = probe.Gbps(probe_stats.median)
  # No traffic model (Muon, issue 39's rules): no limit.
  bytes_per_param = bandwidth.BYTES_PER_PARAM.get(opt_name)
  limit_s = (bandwidth.LimitSeconds(n, bytes_per_param, run_gbps)
             if bytes_per_param else None)
  result = dict(set=set_name, optimizer=opt_name, num_params=n,
                num_variables=len(specs), bytes_per_param=bytes_per_param,
                bandwidth_gbps=run_gbps,
                bandwidth_gbps_p10_p90=[probe.Gbps(probe_stats['p90_s']),
                                        probe.Gbps(probe_stats['p10_s'])],
                limit_s=limit_s, rows={})
  for name in active:
    r = dict(stats[name])
    r.update(checked[name])
    # Times per step: a call of a looping row ran steps_per_call steps.
    for k in ('median_s', 'p10_s', 'p90_s'):
      r[k] /= r['steps_per_call']
    r['ratio_to_limit'] = r['median_s'] / limit_s if limit_s else None
    result['rows'][name] = r
  AddPeerRatios(result)
  del rows, active
  gc.collect()
  return result


def _Looping(row):
  """Whether a result row runs several steps per call (`*_loop`)."""
  return row['steps_per_call'] > 1


def BestPeer(rows, looping):
  """The fastest per-step median of the PEERS among result `rows` of one
  call form: per-call peers (looping False) or looping ones (True), or None.

  A per-call row's `x_best_peer` divides by the per-call peers only and a
  looping row's (`learner_loop`) by the looping ones (`optax_jit_loop`):
  a loop pays a tf.function's or jitted call's cost once per LOOP_STEPS
  steps, so the forms are not peers of each other (benchmarks/README.md).
  """
  medians = [rows[p]['median_s'] for p in PEERS
             if p in rows and _Looping(rows[p]) == looping]
  return min(medians) if medians else None


def AddPeerRatios(result):
  """Sets `result`'s best_peer_s (per-call peers) and best_loop_peer_s
  (looping peers) and each row's ratio_to_best_peer (`x_best_peer`) against
  the one of its own call form (BestPeer); rows hold per-step medians."""
  result['best_peer_s'] = BestPeer(result['rows'], looping=False)
  result['best_loop_peer_s'] = BestPeer(result['rows'], looping=True)
  for r in result['rows'].values():
    best = result['best_loop_peer_s' if _Looping(r) else 'best_peer_s']
    r['ratio_to_best_peer'] = r['median_s'] / best if best else None


def FormatResult(result):
  """The text table of one (set, optimizer) result."""
  header = ['row', 'median_ms', 'p10_ms', 'p90_ms', 'x_limit', 'x_best_peer',
            'first_ms', 'err', 'check (tol %s)' % _Tol(CHECK_TOLERANCE)]
  lines = []
  for name, r in result['rows'].items():
    lines.append([name, timing.Ms(r['median_s']), timing.Ms(r['p10_s']),
                  timing.Ms(r['p90_s']), r['ratio_to_limit'],
                  r['ratio_to_best_peer'], timing.Ms(r['first_call_s']),
                  '%.1e' % r['max_rel_err'], _Check(r)])
  if result['limit_s']:
    lines.append(['limit', timing.Ms(result['limit_s']), None, None, 1.0,
                  None, None, None, None])
  if result['bytes_per_param']:
    limit = 'limit = %s B/param at' % result['bytes_per_param']
  else:  # No traffic model (Muon, issue 39's rules): no limit row.
    limit = 'limit: none (no bytes model for this rule); bandwidth'
  title = ('%s (%d vars, %.2f M params), %s + clip %.1f + cosine; %s %.1f '
           'GB/s (numpy probe timed with the rows)' %
           (result['set'], result['num_variables'], result['num_params'] / 1e6,
            result['optimizer'], 1.0, limit, result['bandwidth_gbps']))
  notes = ['%s: %s (timed, not checked)' % (name, r['form_note'])
           for name, r in result['rows'].items() if r.get('form_note')]
  return '\n'.join([title, timing.FormatTable(header, lines)] + notes)


def _Check(r):
  """The check column: ok, FAIL, or 'form' (a different formula); a row
  checked to another tolerance than the header's names it (torch's Muon:
  Newton-Schulz in bfloat16, 3e-2)."""
  if r['check_ok'] is None:
    return 'form'
  verdict = 'ok' if r['check_ok'] else 'FAIL'
  if r['check_tolerance'] != CHECK_TOLERANCE:
    verdict += ' (tol %s)' % _Tol(r['check_tolerance'])
  return verdict


def _Tol(x):
  """A tolerance as README writes it: 2e-3, 3e-2."""
  return ('%.0e' % x).replace('e-0', 'e-')


def Targets(results):
  """Issue 40's targets, then issues 8 and 16's on resnet50: list of
  (target, value, met). The small-set per-call targets of issues 8 and 16
  (learner / tf_fused <= 1.0 Momentum, <= 1.1 Adam; learner / optax_jit <=
  1.0 Momentum; learner / limit <= 1.2 Adam) are retired: the trainer's form
  (`learner_loop`, issue 40) superseded them; their rows stay."""
  out = Issue40Targets(results)
  for res in results:
    out.extend(FusedTargets(res))
    rows = res['rows']
    for ours in ('learner', 'learner_jit'):
      if ours not in rows:
        continue
      m = rows[ours]['median_s']
      if res['optimizer'] == 'momentum' and res['set'] == 'resnet50':
        if 'optax_jit' in rows:
          ratio = m / rows['optax_jit']['median_s']
          out.append(('resnet50 momentum %s / optax <= 1.1 (issue 8)' %
                      ours, ratio, ratio <= 1.1))
        ratio = m / res['limit_s']
        out.append(('resnet50 momentum %s / limit <= 1.7 (issue 8)' % ours,
                    ratio, ratio <= 1.7))
      if (res['optimizer'] == 'adam' and res['set'] == 'resnet50' and
          'tf_fused' in rows):
        ratio = m / rows['tf_fused']['median_s']
        out.append(('%s adam %s / tf_fused <= 1.1 (issue 8)' %
                    (res['set'], ours), ratio, ratio <= 1.1))
  return out


# Issue 16's targets on the fused row `learner`: (set, optimizer) ->
# [(denominator row or 'limit', bound)].
FUSED_TARGETS = {
    ('resnet50', 'momentum'): [('limit', 1.3), ('optax_jit', 0.85)],
    ('resnet50', 'adam'): [('limit', 1.6)],
}

# Issue 40's "newer elementwise rules" (ELEMENTWISE = True, newer than
# Momentum and Adam).
NEWER_ELEMENTWISE = ('lion', 'nadam', 'amsgrad', 'sf_sgd', 'sf_adamw',
                     'ademamix', 'simplified_ademamix', 'cocob', 'madgrad')
# Issue 40's targets: (set, optimizer or NEWER_ELEMENTWISE, numerator row,
# denominator row, bound, label).
ISSUE40_TARGETS = (
    ('resnet50', ('muon',), 'learner_loop', 'optax_jit_loop', 1.0,
     'muon two-learner step, trainer\'s form / optax muon+adamw (jit, loop)'),
    ('resnet50', NEWER_ELEMENTWISE, 'learner', 'adam_learner', 1.3,
     '%s step / Adam\'s (fused path)'),
    ('resnet50', NEWER_ELEMENTWISE, 'learner_jit', 'adam_learner_jit', 1.2,
     '%s step / Adam\'s, both under XLA'),
    ('small', ('momentum',), 'learner_loop', 'optax_jit_loop', 1.0,
     'momentum, trainer\'s form / optax (jit, loop)'),
)


def Issue40Targets(results):
  """Issue 40's targets found in `results`: [(target, value, met)].

  A target is judged only when both its rows ran (in the same rounds).
  """
  out = []
  for set_name, opts, num, den, bound, label in ISSUE40_TARGETS:
    for res in results:
      rows = res['rows']
      if (res['set'] != set_name or res['optimizer'] not in opts or
          num not in rows or den not in rows):
        continue
      value = rows[num]['median_s'] / rows[den]['median_s']
      text = label % res['optimizer'] if '%s' in label else label
      out.append(('%s %s <= %.1f (issue 40)' % (set_name, text, bound), value,
                  value <= bound))
  return out


def ElsewhereTargets(results):
  """Issue 40's resnet50 targets of the rules this run timed on another set
  only: [(target, why it is not judged here)], so a run on the small set
  says where its rule's target is judged instead of printing nothing (the
  small set's step says nothing about resnet50's; resnet50 Momentum, whose
  issue 40 target is the small set's, has issue 8 and 16's lines)."""
  ran = {(res['set'], res['optimizer']) for res in results}
  out = []
  for set_name, opts, _, _, bound, label in ISSUE40_TARGETS:
    if set_name != 'resnet50':
      continue
    for res in results:
      opt = res['optimizer']
      if opt not in opts or (set_name, opt) in ran:
        continue
      text = label % opt if '%s' in label else label
      line = ('%s %s <= %.1f (issue 40)' % (set_name, text, bound),
              'judged on resnet50 only; this run: %s' % res['set'])
      if line not in out:
        out.append(line)
  return out


def FusedTargets(res):
  """Issue 16's targets of one result, and learner / learner_fallback."""
  rows = res['rows']
  if 'learner' not in rows:
    return []
  m = rows['learner']['median_s']
  out = []
  for denom, bound in FUSED_TARGETS.get((res['set'], res['optimizer']), []):
    if denom == 'limit':
      value = m / res['limit_s']
    elif denom in rows:
      value = m / rows[denom]['median_s']
    else:
      continue
    out.append(('%s %s learner / %s <= %.2f (issue 16)' %
                (res['set'], res['optimizer'], denom, bound), value,
                value <= bound))
  if 'learner_fallback' in rows:
    value = m / rows['learner_fallback']['median_s']
    out.append(('%s %s learner / learner_fallback < 1' %
                (res['set'], res['optimizer']), value, value < 1.0))
  return out


def JudgedTargets(results, steps):
  """The `targets:` block of a run of `steps` timed steps per row:
  [{target, value, met, not_judged}], Targets' lines, then
  ElsewhereTargets' (value None). Below MIN_JUDGED_STEPS timed steps the
  ratios are given but not judged: met None, not_judged the reason."""
  too_few = timing.TooFewSteps(steps, 'timed steps', MIN_JUDGED_STEPS)
  return [dict(target=t, value=v, met=None if too_few else ok,
               not_judged=too_few) for t, v, ok in Targets(results)] + [
                   dict(target=t, value=None, met=None, not_judged=why)
                   for t, why in ElsewhereTargets(results)]


def TargetLine(t):
  """One printed line of the `targets:` block (JudgedTargets' dict)."""
  value = '-' if t['value'] is None else '%.2f' % t['value']
  return '  %-78s %6s  %s' % (t['target'], value,
                              timing.Verdict(t['met'], t['not_judged']))


def _JsonValue(o):
  """json.dumps' default: numpy scalars as numbers, anything else as str."""
  return o.item() if hasattr(o, 'item') else str(o)


def _RunInChild(set_name, opt_name, args, notes):
  """RunOne(set_name, opt_name) in a child process (ISOLATED_SETS); its
  notes are added to `notes`. Returns the result dict, or None (with a note
  naming the pair, the child's exit code and its stderr's tail) when the
  child printed no result, e.g. killed for memory."""
  flags = ['--child=%s:%s' % (set_name, opt_name), '--sets=' + set_name,
           '--optimizers=' + opt_name, '--steps=%d' % args.steps,
           '--warmup=%d' % args.warmup]
  if args.rows:
    flags.append('--rows=' + args.rows)
  out, err = child_process.SpawnChild(
      'benchmarks.update_step', flags, '%s/%s' % (set_name, opt_name),
      CHILD_RESULT_PREFIX, timeout_s=None)
  if out is None:
    notes.append(err)
    return None
  for note in out['notes']:
    if note not in notes:
      notes.append(note)
  return out['result']


def _Child(args):
  """--child=SET:OPT: RunOne for that pair; prints the result line."""
  set_name, opt_name = args.child.split(':')
  notes = []
  res = RunOne(set_name, opt_name, args, None, notes)
  print(CHILD_RESULT_PREFIX + json.dumps(dict(result=res, notes=notes),
                                         default=_JsonValue))
  sys.stdout.flush()
  return res


def main(argv=None):
  """Runs the benchmark; prints the tables; returns the JSON payload.

  The pairs of a set in ISOLATED_SETS run each in a child process
  (`--child`); a child that fails leaves a note and the run goes on.
  """
  args = ParseArgs(sys.argv[1:] if argv is None else argv)
  if args.child:
    return _Child(args)
  notes = []
  out_path = args.output or timing.DefaultOutputPath('update_step')
  gbps = bandwidth.MeasureBandwidth(threads=2)
  print('memory bandwidth before the run (numpy, 2 threads, a += b): '
        '%.1f GB/s' % gbps)
  results = []
  for set_name in [s for s in args.sets.split(',') if s]:
    for opt_name in [o for o in args.optimizers.split(',') if o]:
      if (opt_name == 'adam' and args.adam_sets and
          set_name not in args.adam_sets.split(',')):
        continue
      if set_name in ISOLATED_SETS:
        res = _RunInChild(set_name, opt_name, args, notes)
        if res is None:
          continue
      else:
        res = RunOne(set_name, opt_name, args, gbps, notes)
      results.append(res)
      # Partial results survive an interrupted run.
      timing.WriteJson(out_path, dict(benchmark='update_step', partial=True,
                                      results=results, notes=notes))
      print()
      print(FormatResult(res))
      sys.stdout.flush()
  gbps_end = bandwidth.MeasureBandwidth(threads=2)
  targets = JudgedTargets(results, args.steps)
  if targets:
    print('\ntargets:')
    for t in targets:
      print(TargetLine(t))
  for note in notes:
    print('note: ' + note)
  payload = dict(benchmark='update_step', bandwidth_gbps=gbps,
                 bandwidth_gbps_at_end=gbps_end, steps=args.steps,
                 warmup=args.warmup, results=results, notes=notes,
                 targets=targets,
                 cpu_count=os.cpu_count())
  path = timing.WriteJson(out_path, payload)
  print('wrote ' + path)
  return payload


if __name__ == '__main__':
  try:
    main()
  except ValueError as e:  # A bad name: one line, exit 2.
    sys.stderr.write('ERROR: %s\n' % e)
    sys.exit(2)
