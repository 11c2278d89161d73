"""Benchmark: gradient accumulation, micro-step and applying step.

    python -m benchmarks.accumulation [--quick] [--sets=small,resnet50]
        [--num_batches=4] [--steps=N] [--warmup=N] [--output=PATH]

A non-applying micro-step of accumulation has to read the gradient and read
and write the accumulator: 12 bytes per parameter, its limit. The applying
step (the window's last micro-step) reads the accumulator, the weights and
the velocity and writes the weights, the velocity and the zeroed accumulator:
24 bytes per parameter (Momentum). Rows, in the same process and run, each
with fixed gradients of weight 1 and Momentum(0.9) + global-norm clip 1.0 +
a cosine rate over num_batches micro-batches per update:
  * `learner`: our Learner with GradientAccumulation(Momentum), the fused
    multi-tensor kernels on (learner/optimizers/kernels: one checked
    accumulate op per micro-step); `learner_fallback`: the same with them
    off (the pure-TF path);
  * `tf_accumulate`: a bare `acc += g` (AssignAddVariableOp) per variable,
    the issue's "bare accumulate" (micro-steps only);
  * `tf_accumulate_fused`: `acc += weight * g` in one fused kernel per
    variable (ResourceApplyGradientDescent with alpha = -weight) plus the
    scalar weight sum: what a weighted accumulate can cost (micro only);
  * `tf_accumulate_checked`: a design prototype (micro only): one L2Loss
    pass decides whether the micro-batch is finite, then the fused weighted
    add inside tf.cond: the Learner's drop semantics at 16 B/param;
  * `keras`: Keras 3 SGD(momentum, gradient_accumulation_steps=N);
  * `optax_jit`: optax.MultiSteps(chain(clip, sgd(momentum))) under jax.jit.
Steps are classified by their position in the window (every row starts at a
window boundary). Each row is checked after one full window against a numpy
reference (one Momentum update with the window's mean gradient; the bare
accumulators against N * weight * g).
"""

import argparse
import gc
import sys

import numpy as np
import tensorflow as tf

from benchmarks import bandwidth
from benchmarks import learner_row
from benchmarks import numpy_reference
from benchmarks import peer_rows
from benchmarks import timing
from benchmarks import variable_sets

CHECK_TOLERANCE = 2e-3
PROBE = '_bandwidth_probe'


class TfAccumulateRow(object):
  """Accumulation baselines and a design prototype (micro-steps only).

  Modes:
    'bare': acc += g (AssignAddVariableOp): 12 B/param.
    'fused': acc += weight * g in one kernel (ResourceApplyGradientDescent
      with alpha = -weight) plus the weight sum: 12 B/param, no weighted
      copy materialised.
    'fused_checked': the prototype of a micro-step with the Learner's drop
      semantics: one L2Loss pass over g decides finiteness (4 B), then the
      fused weighted add inside tf.cond (12 B), or a drop count: 16 B/param.
  """

  reference_form = 'accumulator'
  MODES = ('bare', 'fused', 'fused_checked')

  def __init__(self, grads, mode, weight=2.0):
    if mode not in self.MODES:
      raise ValueError('TfAccumulateRow: mode=%r; expected one of %s.' %
                       (mode, list(self.MODES)))
    self.name = {'bare': 'tf_accumulate', 'fused': 'tf_accumulate_fused',
                 'fused_checked': 'tf_accumulate_checked'}[mode]
    self.weight = 1.0 if mode == 'bare' else weight
    self.grads = [tf.Variable(g, trainable=False) for g in grads]
    self.accs = [tf.Variable(tf.zeros_like(g), trainable=False)
                 for g in grads]
    self._weight_sum = tf.Variable(0.0, trainable=False)
    self._dropped = tf.Variable(0, dtype=tf.int64, trainable=False)
    self._mode = mode
    self.step = peer_rows.RowFunction(self._Step)

  def _Step(self):
    w = tf.constant(self.weight, tf.float32)
    grads = [g.read_value() for g in self.grads]
    if self._mode == 'bare':
      for acc, g in zip(self.accs, grads):
        acc.assign_add(g)
      return

    def _Add():
      for acc, g in zip(self.accs, grads):
        tf.raw_ops.ResourceApplyGradientDescent(var=acc.handle, alpha=-w,
                                                delta=g)
      self._weight_sum.assign_add(w)
      return tf.constant(True)

    if self._mode == 'fused':
      _Add()
      return
    finite = tf.math.is_finite(
        tf.add_n([tf.nn.l2_loss(g) for g in grads]))

    def _Drop():
      self._dropped.assign_add(1)
      return tf.constant(False)

    tf.cond(finite, _Add, _Drop)

  def Weights(self):
    return [a.numpy() for a in self.accs]


def ParseArgs(argv):
  """Parses command-line flags (argv without the program name)."""
  parser = argparse.ArgumentParser(
      prog='python -m benchmarks.accumulation', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--quick', action='store_true',
                      help='Few steps (24 timed, 4 warm-up).')
  parser.add_argument('--sets', default='small,resnet50')
  parser.add_argument('--rows', default='',
                      help='Comma-separated row names to run (default all).')
  parser.add_argument('--num_batches', type=int, default=4,
                      help='Micro-batches per applied update (>= 2).')
  parser.add_argument('--steps', type=int, default=None,
                      help='Timed micro-steps per row (default 200).')
  parser.add_argument('--warmup', type=int, default=None,
                      help='Untimed micro-steps per row (default 8).')
  parser.add_argument('--output', default=None)
  args = parser.parse_args(argv)
  if args.num_batches < 2:
    parser.error('--num_batches=%d: need >= 2 for a micro-step that does '
                 'not apply.' % args.num_batches)
  if args.steps is None:
    args.steps = 24 if args.quick else 200
  if args.warmup is None:
    args.warmup = 4 if args.quick else 8
  if args.steps < args.num_batches:
    parser.error('--steps=%d must be >= --num_batches=%d so an applying step '
                 'is timed.' % (args.steps, args.num_batches))
  return args


def RunOne(set_name, args, gbps, notes):
  """Measures every row on one variable set; returns a result dict."""
  nb = args.num_batches
  specs = variable_sets.Specs(set_name)
  n = variable_sets.NumParams(specs)
  weights, grads = variable_sets.MakeValues(specs)
  cfg = peer_rows.UpdateConfig('momentum', total_steps=1000)
  wanted = [r for r in args.rows.split(',') if r]
  have_learner, note = learner_row.LearnerAvailable()
  if not have_learner and note not in notes:
    notes.append(note)
  have_optax, note = peer_rows.OptaxAvailable()
  if not have_optax and note not in notes:
    notes.append(note)
  builders = [
      ('learner', have_learner, lambda: learner_row.LearnerRow(
          cfg, specs, weights, grads, accumulate_batches=nb)),
      ('learner_fallback', have_learner, lambda: learner_row.LearnerRow(
          cfg, specs, weights, grads, accumulate_batches=nb, fused=False)),
      ('tf_accumulate', True, lambda: TfAccumulateRow(grads, 'bare')),
      ('tf_accumulate_fused', True, lambda: TfAccumulateRow(grads, 'fused')),
      ('tf_accumulate_checked', True, lambda: TfAccumulateRow(
          grads, 'fused_checked')),
      ('keras', True, lambda: peer_rows.KerasRow(
          cfg, weights, grads, accumulate_steps=nb)),
      ('optax_jit', have_optax, lambda: peer_rows.OptaxRow(
          cfg, weights, grads, accumulate_steps=nb)),
  ]
  rows = []
  for name, ok, build in builders:
    if ok and (not wanted or name in wanted):
      try:
        rows.append(build())
      except Exception as e:  # pylint: disable=broad-except
        notes.append('%s/%s: build failed: %s: %s' %
                     (set_name, name, type(e).__name__, e))
  ref = numpy_reference.Momentum(weights, grads, steps=1, lr=cfg.lr,
                                 total_steps=cfg.total_steps, alpha=cfg.alpha,
                                 momentum=cfg.momentum, clip=cfg.clip)
  zeros = [np.zeros_like(g) for g in grads]
  active, checked = {}, {}
  for row in rows:
    try:
      first_s, _ = timing.TimeFirstCall(row.step)
      for _ in range(nb - 1):
        row.step()
    except Exception as e:  # pylint: disable=broad-except
      notes.append('%s/%s: step failed: %s: %s' %
                   (set_name, row.name, type(e).__name__,
                    str(e).splitlines()[0][:300]))
      continue
    if row.reference_form == 'accumulator':
      expect = [nb * row.weight * g.astype(np.float64) for g in grads]
      err = numpy_reference.MaxRelativeError(zeros, row.Weights(), expect)
    else:
      err = numpy_reference.MaxRelativeError(weights, row.Weights(), ref)
    checked[row.name] = dict(first_call_s=first_s, max_rel_err=err,
                             check_ok=bool(err <= CHECK_TOLERANCE))
    active[row.name] = row.step
  probe = bandwidth.BandwidthProbe(threads=2)
  active[PROBE] = probe
  raw = timing.TimeRowsRaw(active, args.steps, args.warmup,
                           rounds=max(1, min(5, args.steps // nb)))
  del active[PROBE]
  # The limit uses the bandwidth measured interleaved with the rows.
  run_gbps = probe.Gbps(timing.Summarize(raw.pop(PROBE)).median)
  micro_limit = bandwidth.LimitSeconds(
      n, bandwidth.BYTES_PER_PARAM['accumulate'], run_gbps)
  apply_limit = bandwidth.LimitSeconds(
      n, bandwidth.BYTES_PER_PARAM['accumulate_apply_momentum'], run_gbps)
  result = dict(set=set_name, num_params=n, num_variables=len(specs),
                num_batches=nb, micro_limit_s=micro_limit,
                bandwidth_gbps=run_gbps, bandwidth_gbps_before_run=gbps,
                apply_limit_s=apply_limit, rows={})
  for name, times in raw.items():
    first_index = nb + args.warmup
    micro, applying = [], []
    for i, t in enumerate(times):
      is_apply = (first_index + i) % nb == nb - 1
      if is_apply and not name.startswith('tf_accumulate'):
        applying.append(t)
      else:
        micro.append(t)
    r = dict(checked[name])
    r['micro'] = timing.Summarize(micro)
    r['micro_ratio_to_limit'] = r['micro']['median_s'] / micro_limit
    if applying:
      r['apply'] = timing.Summarize(applying)
      r['apply_ratio_to_limit'] = r['apply']['median_s'] / apply_limit
    result['rows'][name] = r
  del rows, active
  gc.collect()
  return result


def FormatResult(result):
  """The text table of one set's result."""
  header = ['row', 'micro_ms', 'p10-p90', 'x_limit12', 'apply_ms', 'p10-p90',
            'x_limit24', 'first_ms', 'err', 'check']
  lines = []
  for name, r in result['rows'].items():
    m = r['micro']
    a = r.get('apply')
    lines.append([
        name, timing.Ms(m['median_s']),
        '%.2f-%.2f' % (timing.Ms(m['p10_s']), timing.Ms(m['p90_s'])),
        r['micro_ratio_to_limit'], timing.Ms(a['median_s']) if a else None,
        ('%.2f-%.2f' % (timing.Ms(a['p10_s']), timing.Ms(a['p90_s'])))
        if a else None, r.get('apply_ratio_to_limit'),
        timing.Ms(r['first_call_s']), '%.1e' % r['max_rel_err'],
        'ok' if r['check_ok'] else 'FAIL'])
  lines.append(['limit', timing.Ms(result['micro_limit_s']), None, 1.0,
                timing.Ms(result['apply_limit_s']), None, 1.0, None, None,
                None])
  title = ('%s (%d vars, %.2f M params), %d micro-batches per update, '
           'Momentum + clip + cosine; limits at %.1f GB/s (numpy probe timed '
           'with the rows)' %
           (result['set'], result['num_variables'], result['num_params'] / 1e6,
            result['num_batches'], result['bandwidth_gbps']))
  return title + '\n' + timing.FormatTable(header, lines)


def main(argv=None):
  """Runs the benchmark; prints the tables; returns the JSON payload."""
  args = ParseArgs(sys.argv[1:] if argv is None else argv)
  notes = []
  gbps = bandwidth.MeasureBandwidth(threads=2)
  print('memory bandwidth before the run (numpy, 2 threads, a += b): '
        '%.1f GB/s' % gbps)
  results = []
  for set_name in [s for s in args.sets.split(',') if s]:
    res = RunOne(set_name, args, gbps, notes)
    results.append(res)
    print()
    print(FormatResult(res))
    sys.stdout.flush()
  targets = []
  for res in results:
    if 'learner' in res['rows']:
      v = res['rows']['learner']['micro_ratio_to_limit']
      targets.append(dict(target='%s learner micro-step / limit <= 1.2' %
                          res['set'], value=v, met=v <= 1.2))
      targets.append(dict(
          target='%s learner micro-step / limit <= 1.3 (issue 16)' %
          res['set'], value=v, met=v <= 1.3))
    if 'learner_fallback' in res['rows'] and 'learner' in res['rows']:
      v = (res['rows']['learner']['micro']['median_s'] /
           res['rows']['learner_fallback']['micro']['median_s'])
      targets.append(dict(target='%s micro-step learner / learner_fallback '
                          '< 1' % res['set'], value=v, met=v < 1.0))
  for t in targets:
    print('target: %-55s %6.2f  %s' % (t['target'], t['value'],
                                       'met' if t['met'] else 'MISSED'))
  for note in notes:
    print('note: ' + note)
  payload = dict(benchmark='accumulation', bandwidth_gbps=gbps,
                 steps=args.steps, warmup=args.warmup, results=results,
                 targets=targets, notes=notes)
  path = timing.WriteJson(args.output or
                          timing.DefaultOutputPath('accumulation'), payload)
  print('wrote ' + path)
  return payload


if __name__ == '__main__':
  main()
