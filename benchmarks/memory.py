"""Benchmark: peak memory (RSS) a learner adds over the variables it updates.

    python -m benchmarks.memory [--quick] [--set=resnet50] [--steps=8]
        [--num_batches=4] [--sharded [--muon]] [--output=PATH]
    python -m benchmarks.memory --table [--quick] [...]   (the memory
        table of the levers: benchmarks/memory_table.py)

Each measurement runs in its own subprocess, which reports its peak resident
set size (getrusage ru_maxrss):
  * `baseline`: holds the variables and the fixed gradients (in variables,
    as the other benchmarks do) and runs a tf.function that reads all of
    them `--steps` times (so TF's runtime and thread pools are up);
  * `learner_accum`: the same, plus our Learner with
    GradientAccumulation(Momentum(0.9)) and a cosine schedule, no clipping,
    run for `--steps` micro-steps (applying steps included);
  * `learner_accum_clip`: the same with clip_gradient_norm_to_value=1.0;
  * `tf_fused_clip`: the hand-written fused Momentum + tf.clip_by_global_norm
    step (no accumulation) for comparison;
  * `learner_lion`, `learner_nadam`, `learner_amsgrad`, `learner_sf_sgd`,
    `learner_sf_adamw`: our Learner with that rule (its fused kernel,
    multi_tensor_rules.cc) and clip_gradient_norm_to_value=1.0.
The growth of each over `baseline` is compared with its allowance:
(slots + accumulators) x 4 bytes x parameters, + 10 % (issue 8): 2 x 4 B
for the accumulating learners, 1 x 4 B for the fused step, the rule's
slots (RULE_SLOTS) for the rule modes. Growth above the allowance
means hidden copies of variables or gradients (e.g. a materialised scaled
gradient). `--sharded` adds the rows of benchmarks/sharded_memory.py
instead (ZeRO-1: optimizer-state bytes per replica and step time, sharded
vs not, Adam, 2 replicas; its step-time targets are judged on resnet50
only). On the `small` set (--quick) the allowance is below the noise of
TF's own allocations, so only `resnet50` results mean something.
"""

import argparse
import gc
import json
import resource
import sys

import tensorflow as tf

from benchmarks import child_process
from benchmarks import learner_row
from benchmarks import memory_table
from benchmarks import peer_rows
from benchmarks import sharded_memory
from benchmarks import timing
from benchmarks import variable_sets

# The rules of the fused kernels of multi_tensor_rules.cc, by their slots
# (each mode 'learner_<rule>': our Learner with clip 1.0, no accumulation).
RULE_SLOTS = {'lion': 1, 'nadam': 2, 'amsgrad': 3, 'sf_sgd': 2,
              'sf_adamw': 3}
MODES = ('baseline', 'learner_accum', 'learner_accum_clip',
         'tf_fused_clip') + tuple('learner_' + r for r in RULE_SLOTS)
# Slot-sized buffers (4 B per parameter each) a mode is allowed to add.
ALLOWED_COPIES = dict({'learner_accum': 2, 'learner_accum_clip': 2,
                       'tf_fused_clip': 1},
                      **{'learner_' + r: k for r, k in RULE_SLOTS.items()})
_RESULT_PREFIX = 'MEMORY_RESULT '


def PeakRssBytes():
  """Peak resident set size of this process in bytes (Linux ru_maxrss KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def RunChild(mode, set_name, steps, num_batches):
  """Builds `mode`'s state, runs `steps` steps; returns a result dict.

  Raises:
    ValueError: for an unknown mode (the message lists MODES).
  """
  if mode not in MODES:
    raise ValueError('memory: --child=%r; expected one of %s.' %
                     (mode, list(MODES)))
  specs = variable_sets.Specs(set_name)
  weights, grads = variable_sets.MakeValues(specs)
  cfg = peer_rows.UpdateConfig('momentum', total_steps=1000)
  if mode == 'baseline':
    vars_ = [tf.Variable(w, name=s.name) for s, w in zip(specs, weights)]
    gvars = [tf.Variable(g, trainable=False) for g in grads]

    @tf.function
    def Step():
      return tf.add_n([tf.reduce_sum(v.read_value()) + tf.reduce_sum(
          g.read_value()) for v, g in zip(vars_, gvars)])

    step = Step
  elif mode == 'tf_fused_clip':
    row = peer_rows.TfFusedRow(cfg, weights, grads)
    step = row.step
  elif mode[len('learner_'):] in RULE_SLOTS:
    row = learner_row.LearnerRow(
        peer_rows.UpdateConfig(mode[len('learner_'):], total_steps=1000),
        specs, weights, grads)
    step = row.step
  else:
    row = learner_row.LearnerRow(
        cfg, specs, weights, grads, accumulate_batches=num_batches,
        clip=(mode == 'learner_accum_clip'))
    step = row.step
  del weights, grads
  gc.collect()
  after_build = PeakRssBytes()
  for _ in range(steps):
    step()
  return dict(mode=mode, set=set_name, steps=steps,
              num_params=variable_sets.NumParams(specs),
              peak_rss_after_build=after_build, peak_rss=PeakRssBytes())


def _Spawn(mode, args):
  return child_process.SpawnChild(
      'benchmarks.memory',
      ['--child=%s' % mode, '--set=%s' % args.set, '--steps=%d' % args.steps,
       '--num_batches=%d' % args.num_batches],
      mode, _RESULT_PREFIX)


def ParseArgs(argv):
  """Parses command-line flags (argv without the program name)."""
  parser = argparse.ArgumentParser(
      prog='python -m benchmarks.memory', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--quick', action='store_true',
                      help='The small set (numbers not meaningful).')
  parser.add_argument('--set', default=None,
                      help='Variable set (default resnet50; quick small).')
  parser.add_argument('--steps', type=int, default=8,
                      help='Micro-steps each child runs (>= num_batches).')
  parser.add_argument('--num_batches', type=int, default=4)
  parser.add_argument('--modes', default=','.join(MODES[1:]),
                      help='Comma-separated modes besides the baseline.')
  parser.add_argument('--sharded', action='store_true',
                      help='Only the ZeRO-1 rows (benchmarks/sharded_memory).')
  parser.add_argument('--muon', action='store_true',
                      help='With --sharded: Muon\'s two learners too.')
  parser.add_argument('--table', action='store_true',
                      help='The memory table of the levers instead '
                      '(benchmarks/memory_table.py), with its own flags: '
                      '--quick, --sets=resnet50,char_large,small, '
                      '--replicas=1,2,4, --levers=fp32,zero1,..., '
                      '--output=PATH.')
  parser.add_argument('--child', default=None, help=argparse.SUPPRESS)
  parser.add_argument('--output', default=None)
  args = parser.parse_args(argv)
  if args.set is None:
    args.set = 'small' if args.quick else 'resnet50'
  if args.set not in variable_sets.SET_NAMES:
    parser.error('--set=%s: unknown set; choose from %s.' % (
        args.set, ', '.join(variable_sets.SET_NAMES)))
  if args.muon and not args.sharded:
    parser.error('--muon: only with --sharded (Muon\'s two learners beside '
                 'Adam\'s ZeRO-1 rows); add --sharded or drop --muon.')
  if args.steps < args.num_batches:
    parser.error('--steps=%d must be >= --num_batches=%d so an applying step '
                 'runs.' % (args.steps, args.num_batches))
  return args


def main(argv=None):
  """Runs the children; prints the table; returns the JSON payload."""
  argv = sys.argv[1:] if argv is None else argv
  if '--table' in argv and not {'-h', '--help'} & set(argv):
    # The memory table: benchmarks/memory_table.py.
    return memory_table.main([a for a in argv if a != '--table'])
  args = ParseArgs(argv)
  if args.child:
    result = RunChild(args.child, args.set, args.steps, args.num_batches)
    print(_RESULT_PREFIX + json.dumps(result))
    sys.stdout.flush()
    return result
  if args.sharded:
    return _Sharded(args)
  modes = [m for m in args.modes.split(',') if m]
  for m in modes:
    if m not in MODES[1:]:
      raise ValueError('memory: --modes has %r; expected some of %s.' %
                       (m, list(MODES[1:])))
  notes = []
  base, err = _Spawn('baseline', args)
  if base is None:
    raise RuntimeError('memory: the baseline child failed: %s' % err)
  n = base['num_params']
  rows, table = {}, []
  for m in modes:
    res, err = _Spawn(m, args)
    if res is None:
      notes.append(err)
      continue
    growth = res['peak_rss'] - base['peak_rss']
    allowance = ALLOWED_COPIES[m] * 4 * n * 1.1
    res.update(growth_bytes=growth, allowance_bytes=allowance,
               growth_per_param_bytes=growth / n,
               within_allowance=bool(growth <= allowance))
    rows[m] = res
    table.append([m, res['peak_rss'] / 2**20, growth / 2**20,
                  allowance / 2**20, growth / n,
                  'ok' if growth <= allowance else 'OVER'])
  print('%s (%.2f M params); baseline peak RSS %.1f MiB (variables + '
        'gradients = %.1f MiB)' % (args.set, n / 1e6, base['peak_rss'] / 2**20,
                                   8 * n / 2**20))
  print(timing.FormatTable(['mode', 'peak_MiB', 'growth_MiB', 'allowed_MiB',
                            'growth_B/param', 'check'], table))
  for note in notes:
    print('note: ' + note)
  payload = dict(benchmark='memory', set=args.set, baseline=base, rows=rows,
                 notes=notes)
  path = timing.WriteJson(args.output or timing.DefaultOutputPath('memory'),
                          payload)
  print('wrote ' + path)
  return payload


def _Sharded(args):
  """The --sharded rows: one child (2 logical CPUs), its table, the JSON."""
  res, err = child_process.SpawnChild(
      'benchmarks.sharded_memory',
      ['--set=%s' % args.set, '--steps=%d' % args.steps,
       '--muon=%d' % int(args.muon)], 'sharded',
      sharded_memory.RESULT_PREFIX)
  if res is None:
    raise RuntimeError('memory --sharded: the child failed: %s' % err)
  lines, check = sharded_memory.Report(res)
  print('\n'.join(lines))
  payload = dict(benchmark='memory_sharded', set=args.set, result=res,
                 check=check, lines=lines)
  path = timing.WriteJson(
      args.output or timing.DefaultOutputPath('memory_sharded'), payload)
  print('wrote ' + path)
  return payload


if __name__ == '__main__':
  try:
    main()
  except ValueError as e:  # A bad flag: one line, exit 2, nothing written.
    sys.stderr.write('ERROR: %s\n' % e)
    sys.exit(2)
