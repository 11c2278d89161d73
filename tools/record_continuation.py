"""Records checkpoints of every rule and wrapper and their continuations.

For each case of `Cases()` (every registered update rule, every wrapper
around a simple inner rule, and a few learner features: a clip scale folded
into the update, a scheduled beta1, bfloat16 slots, decoupled weight decay,
lazy sparse rows), with the fused kernels on and off, this builds a small
deterministic Learner, runs `SAVE_AFTER` steps of `Learner.Apply` on fixed
seeded batches, saves `tf.train.Checkpoint(learner=..., <variables>,
global_step=...)`, then runs `CONTINUE` more steps and records the
trainable variables after each of them and, at the end, every value the
checkpoint holds (weights, slots, counters, averages, accumulators), read
back from a checkpoint saved then.

It imports `learner` from whatever is installed or on the path, so the same
file records with an old checkout and replays with the current one. Run it
once with oneDNN on and once off (Muon's matmuls round differently under
the two; TensorFlow turns oneDNN on by default on some CPUs only):

    cd /work/wt-old   # the old checkout, with its own venv
    for onednn in 1 0; do
      TF_ENABLE_ONEDNN_OPTS=$onednn .venv/bin/python \
          /work/wt-ckpt/tools/record_continuation.py \
          --out /work/wt-ckpt/tests/data/continuation_eb19daa
    done

Each run adds `<out>/<id>/ckpt-1.*` (the checkpoint after step 3) and, in
`<out>/continuations.npz`, the keys `<id>|step<k>|<variable>` (k = 4..6)
and `<id>|final|<checkpoint key>`, where id is `<case>-<fused|tf>-onednn<0|1>`
(bfloat16 values stored as float32, exactly). An id whose checkpoint and
continuation equal another's of the same case is stored once: the npz's
`aliases` array holds `id=stored id`.
`tests/test_optimizers/test_checkpoint_continuation.py` imports this module
to build the same learners and replays the continuation.
"""

import argparse
import collections
import os
import shutil
import sys
import tempfile

import numpy as np

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
from tensorflow.python.framework import test_util  # pylint: disable=g-import-not-at-top,wrong-import-position,g-direct-tensorflow-import

import learner as learner_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from learner import optimizers  # pylint: disable=g-import-not-at-top,wrong-import-position
from learner.optimizers import keras_optimizer  # pylint: disable=g-import-not-at-top,wrong-import-position
from learner.optimizers.wrappers import accumulation  # pylint: disable=g-import-not-at-top,wrong-import-position
from learner.optimizers.wrappers import composite  # pylint: disable=g-import-not-at-top,wrong-import-position
from params import NestedMap  # pylint: disable=g-import-not-at-top,wrong-import-position
from schedules import ConstantOne  # pylint: disable=g-import-not-at-top,wrong-import-position
from schedules import LinearSchedule  # pylint: disable=g-import-not-at-top,wrong-import-position

SAVE_AFTER = 3  # Steps before the checkpoint.
CONTINUE = 3  # Steps after it, each recorded.
LEARNING_RATE = 0.05
# Variables and their initial values' shapes: a [3, 4] weight, a [4]-wide
# bias (of the 3 outputs: [3]) and a [5, 4] embedding whose gradient is
# sparse (tf.gather rows).
SHAPES = collections.OrderedDict([('w', (3, 4)), ('b', (3,)), ('emb', (5, 4))])
BATCH = 6
FUSED = ('fused', 'tf')  # $TF_LEARNER_FUSED_KERNELS unset / '0'.

# One case: the optimizer params (a function, so each build gets fresh
# params), the learner's extra params, and the variables it trains.
Case = collections.namedtuple('Case', ['optimizer', 'learner_kw', 'names'])


def _C(optimizer, names=tuple(SHAPES), **learner_kw):
  return Case(optimizer, learner_kw, tuple(names))


# The rules registered at eb19daa (learner.optimizers.rules.RULES), in its
# order. Fixed here, not read from RULES: a rule added later has no eb19daa
# checkpoint to restore.
RULE_NAMES = ('SGD', 'Momentum', 'Adam', 'AdamW', 'Adagrad', 'RMSProp',
              'AdaDelta', 'Adafactor', 'XLAShardingAdafactor', 'LAMB', 'Lion',
              'Nadam', 'RAdam', 'Adamax', 'AMSGrad', 'ADOPT',
              'ScheduleFreeSGD', 'ScheduleFreeAdamW', 'Muon')


def _RuleCases():
  """Every rule of RULE_NAMES, by class name."""
  o = optimizers
  # Non-default settings where a rule has a branch the default skips (the
  # same choices as tests/test_optimizers/test_optimizer_restore.py).
  special = {
      'Momentum': lambda: o.Momentum.Params().Set(use_nesterov=True),
      'RMSProp': lambda: o.RMSProp.Params().Set(centered=True, momentum=0.5),
      'Adafactor': lambda: o.Adafactor.Params().Set(
          beta1=0.9, min_dim_size_to_factor=2),
      'XLAShardingAdafactor': lambda: o.XLAShardingAdafactor.Params().Set(
          clipping_threshold=1.0, min_dim_size_to_factor=2),
      'Nadam': lambda: o.Nadam.Params().Set(momentum_schedule='dozat'),
      'RAdam': lambda: o.RAdam.Params().Set(beta2=0.9, threshold=4.0),
      'ADOPT': lambda: o.ADOPT.Params().Set(use_nesterov=True),
      'ScheduleFreeSGD': lambda: o.ScheduleFreeSGD.Params().Set(
          warmup_steps=4),
      'ScheduleFreeAdamW': lambda: o.ScheduleFreeAdamW.Params().Set(
          warmup_steps=4, decoupled_weight_decay=0.1),
  }
  cases = collections.OrderedDict()
  for name in RULE_NAMES:
    make = special.get(name, getattr(o, name).Params)
    # Muon refuses vectors: it trains the two matrices only.
    names = ('w', 'emb') if name == 'Muon' else tuple(SHAPES)
    cases[name] = _C(make, names)
  return cases


def _Momentum():
  return optimizers.Momentum.Params()


def _Adam():
  return optimizers.Adam.Params()


def _WrapperCases():
  """Every wrapper (factory._WRAPPERS, wrappers/, the Keras adapter)."""
  o = optimizers
  return collections.OrderedDict([
      ('Lars', _C(lambda: o.Lars.Params().Set(
          optimizer=_Adam(), eta=0.01, weight_decay=0.01))),
      ('Ema', _C(lambda: o.Ema.Params().Set(optimizer=_Momentum(),
                                             decay=0.5))),
      # k = 4: a synchronization after the restore.
      ('Lookahead', _C(lambda: o.Lookahead.Params().Set(
          optimizer=_Adam(), k=4, alpha=0.5))),
      # Samples at updates 1, 3, 5: before and after the restore.
      ('SWA', _C(lambda: o.SWA.Params().Set(
          optimizer=_Momentum(), swa_start=1, swa_freq=2))),
      ('Sam', _C(lambda: o.Sam.Params().Set(optimizer=_Momentum(),
                                             rho=0.1))),
      ('Composite', _C(lambda: composite.Composite.Params().Set(
          optimizer_map={'emb': (_Adam(), 2.0),
                         'default_optimizer': (_Momentum(), 0.5)}))),
      # Two micro-batches per update: the save falls inside a window.
      ('GradientAccumulation', _C(
          lambda: accumulation.GradientAccumulation.Params().Set(
              optimizer=_Momentum(), num_batches=2))),
      ('KerasOptimizer', _C(lambda: keras_optimizer.KerasOptimizerParams(
          _KerasAdam))),
      # One replica (no strategy): the algorithms with N = 1; tau = 4, a
      # synchronization after the restore.
      ('Easgd', _C(lambda: o.Easgd.Params().Set(
          optimizer=_Momentum(), tau=4, alpha=0.3))),
      ('LocalSgd', _C(lambda: o.LocalSgd.Params().Set(
          optimizer=_Adam(), tau=4))),
  ])


def _KerasAdam():
  return tf.keras.optimizers.Adam(0.01)


def _FeatureCases():
  """What the learner or the base optimizer adds around a rule."""
  o = optimizers
  beta1 = LinearSchedule.Params().Set(start=(0, 0.95), limit=(6, 0.8))
  return collections.OrderedDict([
      # A clip scale the learner folds into the update (the grad norm of
      # these batches is ~3, well above 0.5).
      ('Momentum_clip', _C(_Momentum, clip_gradient_norm_to_value=0.5)),
      ('SGD_clip', _C(o.SGD.Params, clip_gradient_norm_to_value=0.5)),
      # Adam's fused kernel takes the scale too (the others' multiply it in).
      ('Adam_clip', _C(_Adam, clip_gradient_norm_to_value=0.5)),
      ('Adam_beta1_scheduled', _C(lambda: _Adam().Set(
          hyper_schedules={'beta1': beta1}))),
      ('Adam_bf16_slots', _C(lambda: _Adam().Set(slot_dtype=tf.bfloat16))),
      ('Adam_decoupled_wd', _C(lambda: _Adam().Set(
          decoupled_weight_decay=0.1))),
      ('Momentum_decoupled_wd', _C(lambda: _Momentum().Set(
          decoupled_weight_decay=0.1))),
      ('Momentum_lazy_sparse', _C(lambda: _Momentum().Set(
          lazy_sparse_updates=True))),
      ('Adam_lazy_sparse', _C(lambda: _Adam().Set(lazy_sparse_updates=True))),
      ('SGD_lazy_sparse', _C(lambda: o.SGD.Params().Set(
          lazy_sparse_updates=True))),
      ('Adagrad_lazy_sparse', _C(lambda: o.Adagrad.Params().Set(
          lazy_sparse_updates=True))),
      ('RMSProp_lazy_sparse', _C(lambda: o.RMSProp.Params().Set(
          lazy_sparse_updates=True))),
      ('AdaDelta_lazy_sparse', _C(lambda: o.AdaDelta.Params().Set(
          lazy_sparse_updates=True))),
  ])


def Cases():
  """{case name: Case}: rules, then wrappers, then features."""
  cases = _RuleCases()
  cases.update(_WrapperCases())
  cases.update(_FeatureCases())
  return cases


def CaseIds():
  """Every '<case>-<fused|tf>' id, in order."""
  return ['%s-%s' % (name, path) for name in Cases() for path in FUSED]


def SetPath(path):
  """Sets $TF_LEARNER_FUSED_KERNELS for 'fused' (unset) or 'tf' ('0')."""
  if path == 'tf':
    os.environ['TF_LEARNER_FUSED_KERNELS'] = '0'
  else:
    os.environ.pop('TF_LEARNER_FUSED_KERNELS', None)


def Batch(step):
  """The fixed batch of global step `step`: (x [B, 4], ids [B], y [B, 3])."""
  rng = np.random.RandomState(100 + step)
  x = rng.randn(BATCH, 4).astype(np.float32)
  ids = rng.randint(0, SHAPES['emb'][0], size=BATCH).astype(np.int32)
  y = rng.randn(BATCH, 3).astype(np.float32)
  return x, ids, y


class Run:
  """One case's learner, variables and global step, built fresh."""

  def __init__(self, case, function=False):
    """Builds the case's variables, learner (bound) and checkpoint.

    Args:
      case: a Case of `Cases()`.
      function: True runs each step in one tf.function (traced once, the
        batch passed as tensors), as a trainer does; False eagerly (what is
        recorded).
    """
    rng = np.random.RandomState(7)
    self.names = case.names
    self.vars = NestedMap()
    for name, shape in SHAPES.items():
      value = (0.5 * rng.randn(*shape)).astype(np.float32)
      if name in case.names:
        self.vars[name] = tf.Variable(value, name=name)
    self.global_step = tf.Variable(0, dtype=tf.int64, name='global_step')
    p = learner_lib.Learner.Params().Set(
        name='loss', learning_rate=LEARNING_RATE,
        lr_schedule=ConstantOne.Params(), optimizer=case.optimizer())
    p.Set(**case.learner_kw)
    self.learner = p.Instantiate()
    self.learner.Bind(self.vars, global_step=self.global_step)
    self.checkpoint = tf.train.Checkpoint(
        learner=self.learner, global_step=self.global_step, **self.vars)
    self._apply = tf.function(self._Apply) if function else self._Apply

  def _Loss(self, x, ids, y):
    """Mean squared error of (x + emb[ids]) w^T + b against y (a scalar)."""
    v = self.vars
    h = x
    if 'emb' in v:
      h += tf.gather(v.emb, ids)
    # No matmul: with oneDNN on (TF's default on some CPUs) a MatMul's
    # gradient may round differently; products and sums do not.
    out = tf.reduce_sum(h[:, None, :] * v.w[None, :, :], axis=-1)
    if 'b' in v:
      out += v.b
    return tf.reduce_mean(tf.square(out - y))

  def _Apply(self, x, ids, y):
    def FProp():
      return {'loss': (self._Loss(x, ids, y), 1.0)}

    with learner_lib.GradientTape():
      metrics = FProp()
    self.learner.Apply(metrics, self.vars, fprop_fn=FProp)

  def Step(self):
    """One Learner.Apply on the batch of the current global step."""
    x, ids, y = Batch(int(self.global_step.numpy()))
    self._apply(tf.constant(x), tf.constant(ids), tf.constant(y))
    self.global_step.assign_add(1)

  def Weights(self):
    """{name: float32 array} of the trained variables."""
    return {k: v.numpy() for k, v in self.vars.items()}

  def Saved(self):
    """{checkpoint key: array} of everything a checkpoint now holds."""
    tmp = tempfile.mkdtemp()
    try:
      path = self.checkpoint.write(os.path.join(tmp, 'ckpt'))
      reader = tf.train.load_checkpoint(path)
      out = {}
      for key in sorted(reader.get_variable_to_shape_map()):
        if key == '_CHECKPOINTABLE_OBJECT_GRAPH':
          continue
        value = np.asarray(reader.get_tensor(key))
        if value.dtype.name == 'bfloat16':
          value = value.astype(np.float32)
        out[key] = value
      return out
    finally:
      shutil.rmtree(tmp)


def Continue(run):
  """Runs CONTINUE steps; returns {'step<k>|<var>': ..., 'final|<key>': ...}."""
  out = {}
  for _ in range(CONTINUE):
    run.Step()
    k = int(run.global_step.numpy())
    for name, value in run.Weights().items():
      out['step%d|%s' % (k, name)] = value
  for key, value in run.Saved().items():
    out['final|%s' % key] = value
  return out


def OneDnnTag():
  """'onednn1' when TensorFlow's oneDNN kernels are on in this process, else
  'onednn0' (TF_ENABLE_ONEDNN_OPTS, or TF's default for this CPU). Muon's
  matmuls round differently under the two, so each is recorded."""
  return 'onednn%d' % int(bool(test_util.IsMklEnabled()))


def StoredId(case_id, aliases):
  """Where `case_id`'s record for this process's oneDNN state is stored."""
  stored = '%s-%s' % (case_id, OneDnnTag())
  return aliases.get(stored, stored)


def Record(stored_id, out_dir):
  """Builds, trains SAVE_AFTER steps, saves, continues; returns records."""
  name, path, _ = stored_id.rsplit('-', 2)
  SetPath(path)
  run = Run(Cases()[name])
  for _ in range(SAVE_AFTER):
    run.Step()
  run.checkpoint.save(os.path.join(out_dir, stored_id, 'ckpt'))
  return {'%s|%s' % (stored_id, k): v for k, v in Continue(run).items()}


def _CheckpointValues(path):
  reader = tf.train.load_checkpoint(path)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k != '_CHECKPOINTABLE_OBJECT_GRAPH'}


def _Same(a, b):
  return sorted(a) == sorted(b) and all(
      a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def Load(out_dir):
  """(records {key: array}, aliases {stored id: stored id}) in `out_dir`."""
  path = os.path.join(out_dir, 'continuations.npz')
  if not os.path.exists(path):
    return {}, {}
  with np.load(path) as data:
    records = {k: data[k] for k in data.files if k != 'aliases'}
    aliases = dict(a.split('=') for a in data['aliases'])
  return records, aliases


def Dedupe(out_dir, records, aliases):
  """Stores each distinct recording once: an id whose checkpoint values and
  continuation equal an earlier id's of the same case (fused and TF paths,
  oneDNN on and off) becomes an alias of it. Changes the arguments."""
  by_id = collections.defaultdict(dict)
  for key, value in records.items():
    stored, rest = key.split('|', 1)
    by_id[stored][rest] = value
  kept = collections.defaultdict(list)
  for stored in sorted(by_id, key=lambda i: (i.rsplit('-', 2)[0],
                                             i.endswith('onednn0'),
                                             i.split('-')[-2] == 'tf')):
    case = stored.rsplit('-', 2)[0]
    ckpt = _CheckpointValues(os.path.join(out_dir, stored, 'ckpt-1'))
    for other, other_ckpt in kept[case]:
      if _Same(by_id[stored], by_id[other]) and _Same(ckpt, other_ckpt):
        aliases[stored] = other
        shutil.rmtree(os.path.join(out_dir, stored))
        for rest in by_id[stored]:
          del records['%s|%s' % (stored, rest)]
        break
    else:
      kept[case].append((stored, ckpt))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', required=True,
                      help='Directory to add this oneDNN state\'s records to.')
  args = parser.parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  records, aliases = Load(args.out)
  for case_id in CaseIds():
    stored = '%s-%s' % (case_id, OneDnnTag())
    if os.path.exists(os.path.join(args.out, stored)) or stored in aliases:
      raise SystemExit('%s: %s is already recorded; give an empty --out.' %
                       (args.out, stored))
    records.update(Record(stored, args.out))
    print('recorded', stored, flush=True)
  Dedupe(args.out, records, aliases)
  np.savez_compressed(
      os.path.join(args.out, 'continuations.npz'),
      aliases=np.array(sorted('%s=%s' % kv for kv in aliases.items())),
      **records)
  print('learner from', learner_lib.__file__, '; %d recordings stored, %d '
        'aliases' % (len({k.split('|')[0] for k in records}), len(aliases)))
  return 0


if __name__ == '__main__':
  sys.exit(main())
