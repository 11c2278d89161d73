"""Records reference values from Lingvo 0.14.2 itself, for issue 23.

Runs only in a Lingvo venv (Lingvo imported, TF 2.21 graph mode); the tests
read only the JSON it writes. Recorded:
  task_params    every key of BaseTask.Params().train and .eval, default.
  legacy         what learner.ExtractLearnerFromLegacyParams does to the
                 default p.train: the keys it moves into the learner (and
                 sets to None on p.train), the keys it leaves, the learner's
                 name and params; and `via_base_task`: the learners a
                 BaseTask builds in __init__ from legacy keys, and p.train
                 after (legacy keys None, `learner` set).
  configs        for each entry of tools/lingvo_task_configs.py: the
                 verbatim training block (read from a Lingvo checkout at
                 --commit), p.train after the block runs on
                 BaseTask.Params(), the extracted learner's params, the
                 learning rate at 20 steps over the horizon (p.train.max_steps
                 after the block) and the weights after each of 5 steps of
                 the learner on a linear regression (_Problem), from global
                 step 0 and from the sampled step with the highest rate.
  adafactor      XLAShardingAdafactor (wiki_bert.py's settings) for 5 steps
                 on a small regression from global step 10,000 (and from 0).

Lingvo's x_ops.so needs glibc 2.38; see tools/lingvo_glibc_shim.py. Command
(from the repository root; the checkout is the search tool's `fetch` of
tensorflow/lingvo, a bare git directory):

  python3 -m venv /work/lingvo_venv
  /work/lingvo_venv/bin/pip install lingvo==0.14.2
  /work/lingvo_venv/bin/python tools/lingvo_glibc_shim.py patch
  /work/lingvo_venv/bin/python tools/record_lingvo_task.py \
      --lingvo-git /work/.mirror/tensorflow+lingvo/repo \
      --commit e0be5dc4ce9b89d91c0be343f54c5d7a5b1bcb59 \
      -o tests/data/lingvo_0_14_2_task.json
"""

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lingvo_glibc_shim  # pylint: disable=g-import-not-at-top

lingvo_glibc_shim.Preload()

import numpy as np  # pylint: disable=g-import-not-at-top,g-bad-import-order
import lingvo.compat as tf  # pylint: disable=g-import-not-at-top
from lingvo.core import base_model  # pylint: disable=g-import-not-at-top
from lingvo.core import cluster_factory
from lingvo.core import hyperparams
from lingvo.core import layers
from lingvo.core import learner as learner_lib
from lingvo.core import optimizer
from lingvo.core import py_utils
from lingvo.core import schedule
from lingvo.tasks.car import lr_util

import lingvo_task_configs  # pylint: disable=g-import-not-at-top

NUM_STEPS = 5
NUM_LR_STEPS = 20


def _Json(v):
  """A JSON value for a param value: Params -> {'cls', 'params'}."""
  if isinstance(v, hyperparams.Params):
    out = {}
    if isinstance(v, hyperparams.InstantiableParams):
      out['cls'] = '%s.%s' % (v.cls.__module__, v.cls.__name__)
    out['params'] = {k: _Json(x) for k, x in v.IterParams()
                     if k != 'cls'}
    return out
  if isinstance(v, (list, tuple)):
    return [_Json(x) for x in v]
  if isinstance(v, dict):
    return {str(k): _Json(x) for k, x in v.items()}
  if isinstance(v, (bool, int, float, str)) or v is None:
    return v
  if isinstance(v, (np.integer, np.floating)):
    return v.item()
  if isinstance(v, tf.DType):
    return {'dtype': v.name}
  if isinstance(v, type):
    return {'type': '%s.%s' % (v.__module__, v.__name__)}
  return {'repr': repr(v)}


def _TaskParams():
  p = base_model.BaseTask.Params()
  return {'train': _Json(p.train)['params'], 'eval': _Json(p.eval)['params']}


def _Legacy():
  tp = base_model.BaseTask.Params().train
  before = dict(tp.IterParams())
  lp = learner_lib.ExtractLearnerFromLegacyParams(tp)
  moved = [k for k in before if k in learner_lib._LEGACY_LEARNER_PARAMS]  # pylint: disable=protected-access
  return {
      'legacy_learner_params': list(learner_lib._LEGACY_LEARNER_PARAMS),  # pylint: disable=protected-access
      'moved': moved,
      'kept': [k for k in before if k not in moved],
      'train_after': {k: _Json(v) for k, v in tp.IterParams() if k in moved},
      'learner_name': lp.name,
      'learner_cls': '%s.%s' % (lp.cls.__module__, lp.cls.__name__),
      'learner': _Json(lp)['params'],
      'via_base_task': _ViaBaseTask(),
  }


class _TinyTask(base_model.BaseTask):
  """A task with one constant loss: only its params path is recorded."""

  def ComputePredictions(self, theta, input_batch):
    return None

  def ComputeLoss(self, theta, predictions, input_batch):
    one = tf.constant(1.0)
    return {'loss': (one, one)}, {}


def _ViaBaseTask():
  """What BaseTask.__init__ builds from legacy keys (learning_rate=0.5,
  SGD, clip_gradient_norm_to_value=2.0): its learners and p.train after."""
  p = _TinyTask.Params().Set(name='task')
  p.train.Set(learning_rate=0.5, optimizer=optimizer.SGD.Params(),
              clip_gradient_norm_to_value=2.0)
  with tf.Graph().as_default():
    py_utils.GetOrCreateGlobalStepVar()
    task = p.Instantiate()
    tp = task.params.train
    return {
        'set': {'learning_rate': 0.5, 'optimizer': 'SGD',
                'clip_gradient_norm_to_value': 2.0},
        'learners': [_Json(l.params)['params'] for l in task.learners],
        'train_after': {k: _Json(v) for k, v in tp.IterParams()
                        if k in learner_lib._LEGACY_LEARNER_PARAMS or  # pylint: disable=protected-access
                        k == 'learner'},
    }


def _Block(git_dir, commit, segments):
  """The verbatim lines of `segments`, and the block: each segment dedented."""
  lines, parts = [], []
  cache = {}
  for path, first, last in segments:
    if path not in cache:
      cache[path] = subprocess.check_output(
          ['git', '--git-dir', git_dir, 'show', '%s:%s' % (commit, path)],
          text=True).split('\n')
    seg = cache[path][first - 1:last]
    lines.extend(seg)
    parts.append(textwrap.dedent('\n'.join(seg)))  # Each its own indent.
  return lines, '\n'.join(parts) + '\n'


def _Namespace(cfg, p):
  """Names the block reads: Lingvo modules, `p`, `self` and stand-ins."""
  train_input = hyperparams.Params()
  for k, v in cfg.get('train_input', {}).items():
    train_input.Define(k, v, '')
  me = types.SimpleNamespace(**cfg.get('self_attrs', {}))
  me.Train = lambda: train_input
  return {
      'p': p, 'tp': p.train, 'self': me, 'optimizer': optimizer,
      'schedule': schedule, 'layers': layers, 'lingvo_layers': layers,
      'py_utils': py_utils, 'lr_util': lr_util,
      'cluster_factory': cluster_factory, 'train_input_p': train_input,
      'TrainerInputParams': lambda fn: fn(),
      'device_assignment_lib': types.SimpleNamespace(
          DeviceOrderMode=types.SimpleNamespace(MESH='MESH')),
  }


def _Problem():
  """A seeded linear regression: X [8, 3], y [8], w0 [3], b0 scalar."""
  rng = np.random.RandomState(23)
  x = rng.normal(size=(8, 3)).astype(np.float32)
  y = (x @ np.array([1.0, -2.0, 0.5]) + 0.3 +
       0.1 * rng.normal(size=8)).astype(np.float32)
  return dict(x=x.tolist(), y=y.tolist(), w0=[0.1, 0.2, -0.1], b0=0.0,
              loss='mean((x @ w + b - y)**2)')


def _LrSteps(horizon):
  geo = np.geomspace(1, horizon, NUM_LR_STEPS // 2)
  lin = np.linspace(0, horizon, NUM_LR_STEPS // 2 + 1)
  steps = sorted({int(round(s)) for s in np.concatenate([geo, lin])})
  extra = 2
  while len(steps) < NUM_LR_STEPS:
    steps = sorted(set(steps) | {extra})
    extra += 1
  return steps[:NUM_LR_STEPS] if len(steps) > NUM_LR_STEPS else steps


def _SyncCluster():
  """One sync trainer with one worker device (a schedule that counts splits
  infers 1 from it; Lingvo's default cluster is async and such a schedule
  asserts sync)."""
  cp = cluster_factory.Current().params.Copy()
  cp.mode = 'sync'
  cp.job = 'trainer_client'
  cp.worker.replicas = 1
  return cluster_factory.Cluster(cp)


def _RunLearner(lp, steps, start_steps, problem):
  """Rates at `steps`; weights after each of 5 steps from each start."""
  out = {'lr': [], 'windows': []}
  with tf.Graph().as_default(), tf.Session() as sess:
    gs = py_utils.GetOrCreateGlobalStepVar()
    w = tf.Variable(np.array(problem['w0'], np.float32), name='w')
    b = tf.Variable(np.float32(problem['b0']), name='b')
    x = tf.constant(np.array(problem['x'], np.float32))
    y = tf.constant(np.array(problem['y'], np.float32))
    loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, w) + b - y))
    with _SyncCluster():
      learner = lp.Instantiate()
    vmap = py_utils.NestedMap(w=w, b=b)
    _, update, metrics = learner.Apply({'loss': (loss, tf.constant(1.0))},
                                       vmap)
    lr = metrics['learning_rate'][0]
    inc = tf.assign_add(gs, 1)
    init = tf.global_variables_initializer()
    sess.run(init)
    for s in steps:
      gs.load(s, sess)
      out['lr'].append(float(sess.run(lr)))
    for start in start_steps:
      sess.run(init)
      gs.load(start, sess)
      window = {'start_step': start, 'lr': [], 'w': [], 'b': []}
      for _ in range(NUM_STEPS):
        window['lr'].append(float(sess.run(lr)))
        sess.run(update)
        sess.run(inc)
        wv, bv = sess.run([w, b])
        window['w'].append(wv.tolist())
        window['b'].append(float(bv))
      out['windows'].append(window)
  return out


def _Config(cfg, git_dir, commit, problem):
  lines, block = _Block(git_dir, commit, cfg['segments'])
  p = base_model.BaseTask.Params()
  p.name = 'task'
  for k, v in cfg.get('task_train_keys', {}).items():
    p.train.Define(k, v, '')
  default = dict(base_model.BaseTask.Params().train.IterParams())
  ns = _Namespace(cfg, p)
  exec(cfg.get('prelude', '') + block, ns)  # pylint: disable=exec-used
  tp = p.train
  set_keys = {k: _Json(v) for k, v in tp.IterParams()
              if k not in default or _Json(v) != _Json(default[k])}
  horizon = int(tp.max_steps)
  lp = learner_lib.ExtractLearnerFromLegacyParams(tp.Copy())
  steps = _LrSteps(horizon)
  probe = _RunLearner(lp, steps, [], problem)
  peak = steps[int(np.argmax(probe['lr']))]
  run = _RunLearner(lp, steps, sorted({0, peak}), problem)
  out = {k: cfg[k] for k in ('id', 'model', 'segments')}
  out.update(
      source_lines=lines, block=block, prelude=cfg.get('prelude', ''),
      task_train_keys=cfg.get('task_train_keys', {}),
      self_attrs=cfg.get('self_attrs', {}),
      train_input=cfg.get('train_input', {}), stubs=cfg.get('stubs', []),
      train_set=set_keys, horizon=horizon, learner=_Json(lp)['params'],
      learner_cls='%s.%s' % (lp.cls.__module__, lp.cls.__name__),
      lr_steps=steps, lr=run['lr'], windows=run['windows'])
  return out


def _Adafactor():
  """XLAShardingAdafactor, 5 steps from global step 10,000 and from 0."""
  rng = np.random.RandomState(10000)
  x = rng.normal(size=(6, 4)).astype(np.float32)
  yv = rng.normal(size=(6, 3)).astype(np.float32)
  w0 = (0.5 * rng.normal(size=(4, 3))).astype(np.float32)
  b0 = (0.1 * rng.normal(size=(3,))).astype(np.float32)
  base = dict(beta1=0, beta2=0.99, multiply_by_parameter_scale=True,
              clipping_threshold=1.0, factored=True, decay_exponent_pow=0.8)
  cases = [('wiki_bert', {}),
           ('wiki_bert_factored', {'min_dim_size_to_factor': 2}),
           ('beta2_only', {'decay_exponent_pow': None}),
           ('beta1_offset', {'beta1': 0.9, 'decay_exponent_offset': 9990,
                             'min_dim_size_to_factor': 2})]
  out = {'problem': dict(x=x.tolist(), y=yv.tolist(), w0=w0.tolist(),
                         b0=b0.tolist(), loss='mean((x @ w + b - y)**2)'),
         'learning_rate': 0.01, 'lr_schedule': 'Constant (1.0)',
         'cases': []}
  for name, over in cases:
    op = optimizer.XLAShardingAdafactor.Params().Set(**base).Set(**over)
    lp = learner_lib.Learner.Params().Set(
        name='loss', learning_rate=0.01, optimizer=op,
        lr_schedule=schedule.Constant.Params())
    # The offset case only from 10,000: before its offset, (step - offset)
    # is negative and Lingvo's decay is NaN.
    for start in (10000,) if 'decay_exponent_offset' in over else (10000, 0):
      with tf.Graph().as_default(), tf.Session() as sess:
        gs = py_utils.GetOrCreateGlobalStepVar()
        w = tf.Variable(w0, name='w')
        b = tf.Variable(b0, name='b')
        pred = tf.matmul(tf.constant(x), w) + b
        loss = tf.reduce_mean(tf.square(pred - tf.constant(yv)))
        learner = lp.Instantiate()
        _, update, _ = learner.Apply({'loss': (loss, tf.constant(1.0))},
                                     py_utils.NestedMap(w=w, b=b))
        inc = tf.assign_add(gs, 1)
        sess.run(tf.global_variables_initializer())
        gs.load(start, sess)
        ws, bs = [], []
        for _ in range(NUM_STEPS):
          sess.run(update)
          sess.run(inc)
          wv, bv = sess.run([w, b])
          ws.append(wv.tolist())
          bs.append(bv.tolist())
      out['cases'].append({'name': name, 'optimizer': _Json(op)['params'],
                           'start_step': start, 'w': ws, 'b': bs})
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--lingvo-git', required=True)
  ap.add_argument('--commit', required=True)
  ap.add_argument('-o', '--output', required=True)
  args = ap.parse_args()
  tf.disable_eager_execution()
  problem = _Problem()
  data = {
      'lingvo_version': importlib.metadata.version('lingvo'),
      'tensorflow_version': importlib.metadata.version('tensorflow'),
      'lingvo_commit': args.commit,
      'command': ('python tools/record_lingvo_task.py --lingvo-git %s '
                  '--commit %s -o %s' % (args.lingvo_git, args.commit,
                                         args.output)),
      'task_params': _TaskParams(),
      'legacy': _Legacy(),
      'problem': problem,
      'configs': [_Config(c, args.lingvo_git, args.commit, problem)
                  for c in lingvo_task_configs.CONFIGS],
      'adafactor': _Adafactor(),
  }
  with open(args.output, 'w') as f:
    json.dump(data, f, indent=1)
    f.write('\n')


if __name__ == '__main__':
  main()
