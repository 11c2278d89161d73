"""The memory table (issue 38): bytes per replica of each memory lever.

    python -m benchmarks.memory --table [--quick] [--sets=resnet50,char_large]
        [--replicas=1,2,4] [--levers=fp32,zero1,...] [--output=PATH]

One child process per cell (set x lever x N) splits its CPU into N logical
devices before TensorFlow starts, builds the set under a MirroredStrategy
over them (the default strategy for N = 1), takes a few train steps and
reports, for the device of replica 0:
  * `weights`: the model variables' bytes (bfloat16 weights: half);
  * `opt_state`: the optimizers' variables that are neither model weights
    nor accumulators (slots, quantization scales, fp32 master copies,
    counters);
  * `weight_shard`: ZeRO-1's copy of the replica's slice of the weights
    (the variable its rule updates; not optimizer state unsharded);
  * `accum`: GradientAccumulation's accumulators;
  * `step_peak`: the median over the steady train steps (after the first,
    tracing one) of each step's peak resident memory above the resident
    memory before it (activations, gradients and temporaries; the whole
    process, so every replica of the cell), measured as benchmarks/remat.py
    does (benchmarks/rss.py: freed heap handed back and VmHWM reset before
    each step; children run with TF_ENABLE_ONEDNN_OPTS=0 and
    MALLOC_MMAP_THRESHOLD_=1 MiB, without which the cells differed by 2x
    with the same tensors). Only for `char_large` (a real model); the
    `resnet50` set has fixed gradients and no forward pass;
  * `sent`: the bytes a replica sends per applied update in the step's
    collectives, counted from the traced graph: for each CollectiveReduceV2
    of P bytes a ring all-reduce sends 2 (N - 1) / N P, for each
    CollectiveGatherV2 of P bytes (the replica's part) (N - 1) P, for each
    CollectiveAllToAllV2 of P bytes (the reduce-scatter of
    cross_replica.ScatteredMean) (N - 1) / N P. Zero for N = 1. Under accumulation the applying micro-step's collectives count.
Each lever is a change of the learners' (or the model's) params
(`LEVERS`); `ideal` beside a sharded row is the fp32 row's state / N.

Sets: `resnet50` (benchmarks/variable_sets.py, ResNet-50's 25.6 M
parameters, Adam, fixed gradients), `small` (the same with its 1.03 M
parameter set: the test's) and `char_large` (lm.CharTransformerLarge:
Muon on the block matrices and Adam on the rest, its own batch and window).
"""

import json
import os
import statistics
import sys
import tempfile

from benchmarks import child_process
from benchmarks import rss
from benchmarks import timing

RESULT_PREFIX = 'MEMORY_TABLE_RESULT '
SETS = ('resnet50', 'char_large', 'small')
REPLICAS = (1, 2, 4)


def _SetShard(lp, model_p):
  """ZeRO-1 on a learner whose rule shards (flat slices for an ELEMENTWISE
  rule, home replicas for a WHOLE_TENSOR one); a note naming it
  otherwise."""
  del model_p
  rule = _Rule(lp).cls
  if not (rule.ELEMENTWISE or rule.WHOLE_TENSOR):  # Refused (exit 2).
    return '%s unsharded (%s: neither elementwise nor whole-tensor)' % (
        lp.name, rule.__name__)
  lp.shard_optimizer_state = True
  lp.scatter_clipped_gradients = True  # Reduce-scatter under the clip too.
  return None


def _SetBf16State(lp, model_p):
  del model_p
  _Rule(lp).slot_dtype = 'bfloat16'


def _SetInt8State(lp, model_p):
  """8-bit blockwise state (kernels/quantized_state.py) on an ELEMENTWISE
  rule; a note naming any other (its slot_dtype=int8 is refused: the
  blockwise codes need an elementwise step), whose state stays float32."""
  del model_p
  rule = _Rule(lp).cls
  if not rule.ELEMENTWISE:
    return '%s float32 state (%s: int8 needs an elementwise rule)' % (
        lp.name, rule.__name__)
  _Rule(lp).slot_dtype = 'int8'
  return None


def _SetMaster(lp, model_p):
  """bfloat16 weights (math in float32) and the rule's float32 master."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if model_p is not None:
    model_p.dtype = tf.bfloat16
    model_p.fprop_dtype = tf.float32
  _Rule(lp).master_weights = True  # Sharded too: flat slices or homes.
  return None


def _SetRemat(lp, model_p):
  """Rematerialized Transformer blocks (params/remat.py); only the
  char_large set has a forward pass to recompute."""
  if model_p is None:
    return 'remat: no forward pass on this set (nothing to recompute)'
  del lp
  model_p.remat_blocks = True
  return None


def _SetAccum(sync):
  def Apply(lp, model_p):
    del model_p
    from learner import optimizers  # pylint: disable=g-import-not-at-top
    lp.optimizer = optimizers.GradientAccumulation.Params().Set(
        optimizer=lp.optimizer, num_batches=4, sync_on_apply=sync)
  return Apply


def _Rule(lp):
  """The update rule's params inside a learner's optimizer params."""
  p = lp.optimizer
  while 'optimizer' in p and p.optimizer is not None:
    p = p.optimizer
  return p


# name -> list of edits (learner params, model params) -> None, applied to
# every learner of the set. Order: each lever alone, then combined.
LEVERS = {
    'fp32': [],
    'zero1': [_SetShard],
    'bf16_state': [_SetBf16State],
    'accum4': [_SetAccum(True)],
    'accum4_nosync': [_SetAccum(False)],
    'zero1+accum4_nosync': [_SetShard, _SetAccum(False)],
    'int8_state': [_SetInt8State],
    'bf16_master': [_SetMaster],
    'zero1+bf16_state': [_SetShard, _SetBf16State],
    'zero1+int8_state': [_SetShard, _SetInt8State],
    'zero1+bf16_master': [_SetShard, _SetMaster],
    'remat': [_SetRemat],
    'zero1+int8_state+bf16_master': [_SetShard, _SetInt8State, _SetMaster],
    'all': [_SetShard, _SetInt8State, _SetMaster, _SetRemat],
}
QUICK_LEVERS = ('fp32', 'zero1')


def _SplitCpu(n):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  cpu = tf.config.list_physical_devices('CPU')[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * n)


def _Strategy(n):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if n == 1:
    return tf.distribute.get_strategy()
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  return distribution.CreateStrategy('mirrored')


def _Replica0Bytes(variables, skip=frozenset()):
  """Bytes of the replica-0 (first) copy of each variable not in `skip`."""
  total = 0
  for v in variables:
    if id(v) in skip:
      continue
    copies = getattr(v, 'values', None) or [v]
    c = copies[0]
    total += int(c.shape.num_elements()) * c.dtype.size
  return total


def _Categories(model_vars, optimizers_):
  """{weights, opt_state, weight_shard, accum} bytes on replica 0."""
  from learner.optimizers import sharded_state  # pylint: disable=g-import-not-at-top
  model_ids = {id(v) for v in model_vars}
  accum, shard_copies = [], []
  for opt in optimizers_:
    if type(opt).IS_ACCUMULATION:
      accum += opt.Accumulators()
    st = sharded_state.StateOf(opt)
    if st is not None and st.sharded:
      shard_copies += st.shard_variables
  other = {id(a) for a in accum + shard_copies} | model_ids
  state = []
  for opt in optimizers_:
    for v in opt.variables:
      if id(v) not in other:
        other.add(id(v))
        state.append(v)
  # The task's variables also list its learners' own (accumulators,
  # counters: not trainable); the weights are the trainable ones.
  weights = list({id(v): v for v in model_vars if v.trainable}.values())
  return dict(weights=_Replica0Bytes(weights),
              opt_state=_Replica0Bytes(state),
              weight_shard=_Replica0Bytes(shard_copies),
              accum=_Replica0Bytes(accum))


# Bytes a replica sends per input byte of each collective, for N replicas.
_SENT_PER_BYTE = {
    'CollectiveReduceV2': lambda n: 2.0 * (n - 1) / n,
    'CollectiveGatherV2': lambda n: float(n - 1),
    'CollectiveAllToAllV2': lambda n: (n - 1) / n,
}


def SentBytes(concrete_fn, num_replicas):
  """Bytes replica 0 sends per call of `concrete_fn` in its collectives.

  Walks the function's graph and every function it calls; counts each
  CollectiveReduceV2 input of P bytes as a ring all-reduce (2 (N-1)/N P),
  each CollectiveGatherV2 input as (N-1) P and each CollectiveAllToAllV2
  input as (N-1)/N P (it keeps its own 1/N). Only replica 0's ops are
  counted (the ops on the first device, or with no device).
  """
  from tensorflow.python.framework import function_def_to_graph  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  graph_def = concrete_fn.graph.as_graph_def()
  library = {f.signature.name: f for f in graph_def.library.function}
  n = num_replicas
  if n <= 1:
    return 0
  graphs = [concrete_fn.graph]
  for fdef in library.values():
    kinds = {nd.op for nd in fdef.node_def}
    if kinds & set(_SENT_PER_BYTE):
      graphs.append(function_def_to_graph.function_def_to_graph(fdef))
  total = 0.0
  for g in graphs:
    for op in g.get_operations():
      if op.type not in _SENT_PER_BYTE:
        continue
      if op.device and not op.device.endswith(':0'):
        continue
      t = op.inputs[0]
      size = t.shape.num_elements()
      if size is None:  # Not countable: say so rather than undercount.
        return None
      p = size * t.dtype.size
      total += _SENT_PER_BYTE[op.type](n) * p
  return int(total)


def _FixedGradientCell(set_name, n, lever, steps):
  """One cell on a set of benchmarks/variable_sets.py (fixed gradients, no
  forward pass)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from benchmarks import learner_row  # pylint: disable=g-import-not-at-top
  from benchmarks import variable_sets  # pylint: disable=g-import-not-at-top
  from learner import gradient_tape  # pylint: disable=g-import-not-at-top
  from learner import learner as learner_lib  # pylint: disable=g-import-not-at-top
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  from learner.optimizers import var_grad  # pylint: disable=g-import-not-at-top
  from params import NestedMap  # pylint: disable=g-import-not-at-top
  strategy = _Strategy(n)
  specs = variable_sets.Specs(set_name)
  weights, grads = variable_sets.MakeValues(specs)
  lp = learner_lib.Learner.Params().Set(
      name='bench', loss_name='loss', learning_rate=1e-3,
      clip_gradient_norm_to_value=1.0, optimizer=optimizers.Adam.Params())
  notes = [edit(lp, None) for edit in LEVERS[lever]]
  with strategy.scope():
    # bf16_master: the weights (and their gradients) in bfloat16.
    dtype = tf.bfloat16 if 'master' in lever else tf.float32
    vs = [tf.Variable(tf.cast(w, dtype), name=s.name)
          for s, w in zip(specs, weights)]
    gs = [tf.Variable(tf.cast(g, dtype), trainable=False, name=s.name + '_grad')
          for s, g in zip(specs, grads)]
    vmap = NestedMap({var_grad.SanitizedName(s.name): v
                      for s, v in zip(specs, vs)})
    lrn = lp.Instantiate()
    lrn.Bind(vmap)

  def _Replica():
    with gradient_tape.GradientTape():
      loss = tf.add_n([learner_row.FixedGradientTerm(v, g)
                       for v, g in zip(vs, gs)])
    lrn.Apply({'loss': (loss, tf.constant(1.0))}, vmap)

  step = tf.function(lambda: strategy.run(_Replica))
  concrete = step.get_concrete_function()
  for _ in range(steps):
    step()
  out = _Categories(vs, [lrn.optimizer])
  out.update(sent=SentBytes(concrete, n), step_peak=None,
             note='; '.join(x for x in notes if x))
  return out


def _CharCell(n, lever, steps):
  """One cell on lm.CharTransformerLarge (real model and data)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  from learner.training.jobs import cli as cli_lib  # pylint: disable=g-import-not-at-top
  strategy = _Strategy(n)
  params = cli_lib.LoadExperimentParams('lm.CharTransformerLarge',
                                        max_steps=steps + 1)
  tp = params.task.train
  lps = tp.learner if isinstance(tp.learner, (list, tuple)) else [tp.learner]
  notes = [edit(lp, params.task) for lp in lps for edit in LEVERS[lever]]
  with strategy.scope():
    task = params.task.Instantiate()
    task.CreateLearners()
  input_gen = params.train_input.Instantiate()
  it = iter(distribution.DistributeBatches(
      strategy, lambda ctx: input_gen.GetDataset(0, ctx),
      input_gen.params.batch_size))
  task.TrainStep(next(it))  # Builds slots and traces.
  peaks = []
  for _ in range(steps):
    before = rss.ResetPeak()
    task.TrainStep(next(it))
    peaks.append(rss.Status('VmHWM') - before)
  fn = tf.function(task.TrainStep)
  concrete = fn.get_concrete_function(next(it))
  out = _Categories(task.vars.Flatten(),
                    [lrn.optimizer for lrn in task.learners])
  out.update(sent=SentBytes(concrete, n), step_peak=max(0, int(statistics.median(peaks))),
             note='; '.join(x for x in notes if x))
  return out


def RunChild(set_name, lever, n, steps):
  """Result dict of one cell (runs in the child; splits the CPU first)."""
  _SplitCpu(n)
  if set_name == 'char_large':
    out = _CharCell(n, lever, steps)
  else:
    out = _FixedGradientCell(set_name, n, lever, steps)
  out.update(set=set_name, lever=lever, replicas=n)
  return out


def Cells(sets, levers, replicas):
  """[(set, lever, N)] in table order."""
  return [(s, lv, n) for s in sets for lv in levers for n in replicas]


def _MiB(b):
  return '—' if b is None else '%.2f' % (b / 2**20)


def Table(results):
  """Table lines from the cells' results (a list of dicts)."""
  fp32 = {(r['set'], r['replicas']): r for r in results
          if r['lever'] == 'fp32'}
  rows = []
  for r in results:
    base = fp32.get((r['set'], 1))
    ideal = (base['opt_state'] / r['replicas'] if base and
             'zero1' in r['lever'] else None)
    rows.append([r['set'], r['lever'], r['replicas'], _MiB(r['weights']),
                 _MiB(r['opt_state']), _MiB(ideal),
                 _MiB(r['weight_shard']), _MiB(r['accum']),
                 _MiB(r['step_peak']), _MiB(r['sent'])])
  lines = [timing.FormatTable(
      ['set', 'lever', 'N', 'weights_MiB', 'opt_state_MiB', 'ideal_MiB',
       'weight_shard_MiB', 'accum_MiB', 'step_peak_MiB', 'sent_MiB/update'],
      rows)]
  notes = sorted({(r['set'], r['lever'], r['note']) for r in results
                  if r.get('note')})
  lines += ['note: %s/%s: %s' % n for n in notes]
  return lines


def ParseList(text, allowed, key):
  """Comma list `text` checked against `allowed`; ValueError naming `key`."""
  items = [t for t in text.split(',') if t]
  bad = [t for t in items if t not in allowed]
  if bad or not items:
    raise ValueError('--%s=%s: unknown %s; choose from %s.' % (
        key, text, bad or 'empty list', ','.join(str(a) for a in allowed)))
  return items


def main(argv):
  """`--table` entry (from benchmarks.memory) or `--child=` entry."""
  args = dict((a.lstrip('-').split('=', 1) + [''])[:2] for a in argv)
  if 'child' in args:
    s, lever, n, steps = args['child'].split(':')
    res = RunChild(s, lever, int(n), int(steps))
    print(RESULT_PREFIX + json.dumps(res))
    sys.stdout.flush()
    return res
  quick = 'quick' in args
  sets = ParseList(args.get('sets') or ('resnet50' if quick else
                                        'resnet50,char_large'), SETS, 'sets')
  levers = ParseList(args.get('levers') or ','.join(
      QUICK_LEVERS if quick else LEVERS), LEVERS, 'levers')
  replicas = [int(x) for x in ParseList(
      args.get('replicas') or ('1,2' if quick else '1,2,4'),
      [str(r) for r in REPLICAS], 'replicas')]
  path = args.get('output') or timing.DefaultOutputPath('memory_table')
  if os.path.isdir(path):  # Checked before anything is measured.
    raise ValueError('--output=%s is a directory; give a file path (the '
                     'table\'s JSON), e.g. %s/memory_table.json.' % (path, path))
  steps = 2 if quick else 3
  # The children's environment for step peaks (benchmarks/rss.py).
  os.environ.update(rss.PEAK_ENV)
  results, errors = [], []
  for s, lever, n in Cells(sets, levers, replicas):
    res, err = child_process.SpawnChild(
        'benchmarks.memory_table',
        ['--child=%s:%s:%d:%d' % (s, lever, n, steps)],
        '%s/%s/N=%d' % (s, lever, n), RESULT_PREFIX)
    if err:
      errors.append(err)
      print(err)
    else:
      results.append(res)
      print(json.dumps(res))
    sys.stdout.flush()
  lines = Table(results)
  print('\n'.join(lines))
  timing.WriteJson(path, dict(results=results, errors=errors))
  print('wrote %s' % path)
  return dict(results=results, errors=errors)


if __name__ == '__main__':
  main(sys.argv[1:])
