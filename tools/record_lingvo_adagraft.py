"""Records Lingvo 0.14.2's AdaGraft for tests/test_optimizers/test_adagraft.py.

Runs only in a Lingvo venv (Lingvo imported, TF 2.21 graph mode); the tests
read only the JSON it writes. Command, from the repository root (the venv
recipe: tests/data/README.md, "lingvo_0_14_2_task.json"):

    /work/lingvo_venv/bin/python tools/record_lingvo_adagraft.py \\
        -o tests/data/lingvo_0_14_2_adagraft.json

Lingvo's own `optimizer.AdaGraft` (its AdaGraftOptimizer around the TF1
optimizers of two instantiated Lingvo optimizer layers) inside Lingvo's
own `learner.Learner` (rate `LR`, schedule Constant,
clip_gradient_norm_to_value off or 1.0) on the loss sum(w * g_t), whose
gradient is exactly the recorded g_t; the global step incremented after
each update. Nothing is transcribed or changed.

Recorded: `cases` in the format of tools/optax_reference.py (kwargs:
{'magnitude': [class, params], 'direction': [class, params],
'direction_optimizer_lr': ...}; 20 steps; float32), and `global_norm`:
the same first rule with use_global_norm=True on two variables, whose
weights Lingvo 0.14.2 never moves (`max_change` 0.0): its _finish adds
the norms with tf.assign_add ops nothing runs.
"""

import argparse
import importlib.metadata
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lingvo_glibc_shim  # pylint: disable=g-import-not-at-top

lingvo_glibc_shim.Preload()

import numpy as np  # pylint: disable=g-import-not-at-top,g-bad-import-order
import lingvo.compat as tf  # pylint: disable=g-import-not-at-top
from lingvo.core import learner as learner_lib  # pylint: disable=g-import-not-at-top
from lingvo.core import optimizer
from lingvo.core import py_utils
from lingvo.core import schedule

STEPS = 20
LR = 0.0625
CLIP = 1.0
SHAPES = {'matrix': (4, 3), 'vector': (5,), 'conv': (3, 3, 2, 4)}
RULES = (
    ('adagraft_adam_momentum', dict(
        magnitude=['Adam', {}], direction=['Momentum', {'alpha': 0.9}],
        direction_optimizer_lr=None)),
    ('adagraft_adagrad_sgd', dict(
        magnitude=['Adagrad', {'initial_accumulator_value': 0.5}],
        direction=['SGD', {}], direction_optimizer_lr=0.5)),
)


def _Learner(kwargs, clip, use_global_norm=False):
  mag_cls, mag_kw = kwargs['magnitude']
  dir_cls, dir_kw = kwargs['direction']
  mag = getattr(optimizer, mag_cls).Params().Set(name='mag', **mag_kw)
  dirn = getattr(optimizer, dir_cls).Params().Set(name='dir', **dir_kw)
  op = optimizer.AdaGraft.Params().Set(
      magnitude_optimizer=mag.Instantiate(),
      direction_optimizer=dirn.Instantiate(),
      direction_optimizer_lr=kwargs['direction_optimizer_lr'],
      use_global_norm=use_global_norm)
  return learner_lib.Learner.Params().Set(
      name='loss', learning_rate=LR, optimizer=op,
      lr_schedule=schedule.Constant.Params(),
      clip_gradient_norm_to_value=clip or 0.0).Instantiate()


def _Run(kwargs, inits, grads, clip, use_global_norm=False):
  """Each variable's values after each step (lists of float64 arrays)."""
  out = [[] for _ in inits]
  with tf.Graph().as_default(), tf.Session() as sess:
    gs = py_utils.GetOrCreateGlobalStepVar()
    ws = [tf.Variable(x.astype(np.float32), name='w%d' % i)
          for i, x in enumerate(inits)]
    gs_in = [tf.placeholder(tf.float32, x.shape) for x in inits]
    loss = tf.add_n([tf.reduce_sum(w * g) for w, g in zip(ws, gs_in)])
    learner = _Learner(kwargs, clip, use_global_norm)
    vmap = py_utils.NestedMap({'w%d' % i: w for i, w in enumerate(ws)})
    _, update, _ = learner.Apply({'loss': (loss, tf.constant(1.0))}, vmap)
    inc = tf.assign_add(gs, 1)
    sess.run(tf.global_variables_initializer())
    for t in range(STEPS):
      sess.run(update, {g: gr[t].astype(np.float32)
                        for g, gr in zip(gs_in, grads)})
      sess.run(inc)
      for i, w in enumerate(ws):
        out[i].append(sess.run(w).astype(np.float64))
  return out


def _Cases():
  cases = []
  for rule, kwargs in RULES:
    for i, (name, shape) in enumerate(sorted(SHAPES.items())):
      rng = np.random.RandomState(31 + i)
      init = rng.normal(0., 1., size=shape)
      grads = rng.normal(0., 1., size=(STEPS,) + shape)
      for clip in (None, CLIP):
        params = _Run(kwargs, [init], [grads], clip)[0]
        cases.append(dict(
            rule=rule, kwargs=kwargs, lr=LR, shape_name=name,
            shape=list(shape), dtype='float32', clip=clip,
            init=init.ravel().tolist(),
            grads=[g.ravel().tolist() for g in grads],
            params=[p.ravel().tolist() for p in params]))
  return cases


def _GlobalNorm():
  rng = np.random.RandomState(7)
  inits = [rng.normal(size=(4, 3)), rng.normal(size=(3,))]
  grads = [rng.normal(size=(STEPS, 4, 3)), rng.normal(size=(STEPS, 3))]
  out = _Run(RULES[0][1], inits, grads, None, use_global_norm=True)
  change = max(float(np.abs(o[-1] - x.astype(np.float32)).max())
               for o, x in zip(out, inits))
  return dict(rule=RULES[0][0], use_global_norm=True, max_change=change)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('-o', '--output', required=True)
  args = ap.parse_args()
  tf.disable_eager_execution()
  data = dict(
      command=('/work/lingvo_venv/bin/python tools/record_lingvo_adagraft.py '
               '-o tests/data/lingvo_0_14_2_adagraft.json'),
      versions=dict(lingvo=importlib.metadata.version('lingvo'),
                    tensorflow=importlib.metadata.version('tensorflow'),
                    numpy=np.__version__),
      cases=_Cases(), global_norm=_GlobalNorm())
  with open(args.output, 'w') as f:
    json.dump(data, f, sort_keys=True)
    f.write('\n')
  print('wrote %d cases to %s; global norm: max change %g' % (
      len(data['cases']), args.output, data['global_norm']['max_change']))


if __name__ == '__main__':
  main()
