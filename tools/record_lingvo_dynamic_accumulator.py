"""Records Lingvo 0.14.2's DynamicAccumulator for test_dynamic_accumulator.py.

Runs only in a Lingvo venv (Lingvo imported, TF 2.21 graph mode); the tests
read only the JSON it writes. Command, from the repository root (the venv
recipe: tests/data/README.md, "lingvo_0_14_2_task.json"; here it was
/work/venv-dynacc, the same recipe under another path):

    /work/lingvo_venv/bin/python tools/record_lingvo_dynamic_accumulator.py \\
        -o tests/data/lingvo_0_14_2_dynamic_accumulator.json

What Lingvo 0.14.2 ships: the TF1 class `optimizer.DynamicAccumulator`
(lingvo/core/optimizer.py; the wheel has no lingvo/jax), which is what runs
here, imported, nothing changed or transcribed: inside Lingvo's own
`learner.Learner` (rate `LR`, clip_gradient_norm_to_value off or `CLIP`),
around an instantiated-by-params Lingvo Adam (defaults) or Momentum (alpha
0.9), `min_accum_weight` `MIN_WEIGHT`. One learner trains three variables
(a (4, 3) matrix, a (5,) vector, a (3, 3, 2, 4) conv kernel) on the loss
sum_v sum(w_v * g_v,t), whose gradient is exactly the recorded g_v,t, with
the loss metric's weight the recorded `weights[t]` (integers 1..8, so the
updates fall on irregular steps); the global step incremented after each
step. A third rule keeps Momentum with Lingvo's
PiecewiseConstantSchedule(boundaries [2, 4], values [1, 0.5, 0.25]): Lingvo
evaluates it at `param_update_step` (the updates applied), not the global
step. Clipping is Lingvo's learner's, before the optimizer: each step's
gradient is clipped to global norm 1, then weighted and accumulated.

Recorded per case: `rule`, `inner` ([class, params]), `min_accum_weight`,
`lr`, `clip`, `schedule` (None or [class, params]), `weights`, `variables`
({name: {shape, init, grads (STEPS lists), params (the weights after each
step)}}), and Lingvo's `param_update_step` and `accum_weight` after each
step. float32.
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
MIN_WEIGHT = 10.0
SHAPES = (('matrix', (4, 3)), ('vector', (5,)), ('conv', (3, 3, 2, 4)))
PIECEWISE = ['PiecewiseConstantSchedule',
             {'boundaries': [2, 4], 'values': [1.0, 0.5, 0.25]}]
RULES = (
    ('dynacc_adam', ['Adam', {}], None),
    ('dynacc_momentum', ['Momentum', {'alpha': 0.9}], None),
    ('dynacc_momentum_piecewise', ['Momentum', {'alpha': 0.9}], PIECEWISE),
)


def _Learner(inner, sched, clip):
  cls, kw = inner
  op = optimizer.DynamicAccumulator.Params().Set(
      optimizer_tpl=getattr(optimizer, cls).Params().Set(**kw),
      min_accum_weight=MIN_WEIGHT)
  if sched is None:
    lr_schedule = schedule.Constant.Params()
  else:
    lr_schedule = getattr(schedule, sched[0]).Params().Set(**sched[1])
  return learner_lib.Learner.Params().Set(
      name='loss', learning_rate=LR, optimizer=op, lr_schedule=lr_schedule,
      clip_gradient_norm_to_value=clip or 0.0).Instantiate()


def _Run(inner, sched, clip, inits, grads, weights):
  """(weights after each step per variable, update counts, accum weights)."""
  out = [[] for _ in inits]
  updates, accum = [], []
  with tf.Graph().as_default(), tf.Session() as sess:
    gs = py_utils.GetOrCreateGlobalStepVar()
    ws = [tf.Variable(x.astype(np.float32), name='w%d' % i)
          for i, x in enumerate(inits)]
    gs_in = [tf.placeholder(tf.float32, x.shape) for x in inits]
    weight = tf.placeholder(tf.float32, [])
    loss = tf.add_n([tf.reduce_sum(w * g) for w, g in zip(ws, gs_in)])
    learner = _Learner(inner, sched, clip)
    vmap = py_utils.NestedMap({'w%d' % i: w for i, w in enumerate(ws)})
    _, update, _ = learner.Apply({'loss': (loss, weight)}, vmap)
    inc = tf.assign_add(gs, 1)
    acc = learner.optimizer.vars
    sess.run(tf.global_variables_initializer())
    for t in range(STEPS):
      feed = {g: gr[t].astype(np.float32) for g, gr in zip(gs_in, grads)}
      feed[weight] = np.float32(weights[t])
      sess.run(update, feed)
      sess.run(inc)
      for i, w in enumerate(ws):
        out[i].append(sess.run(w).astype(np.float64))
      updates.append(float(sess.run(acc.param_update_step)))
      accum.append(float(sess.run(acc.accum_weight)))
  return out, updates, accum


def _Cases():
  rng = np.random.RandomState(39)
  inits = [rng.normal(0., 1., size=s) for _, s in SHAPES]
  grads = [rng.normal(0., 1., size=(STEPS,) + s) for _, s in SHAPES]
  weights = [float(x) for x in rng.randint(1, 9, size=STEPS)]
  cases = []
  for rule, inner, sched in RULES:
    for clip in (None, CLIP):
      params, updates, accum = _Run(inner, sched, clip, inits, grads,
                                    weights)
      variables = {}
      for (name, shape), init, g, p in zip(SHAPES, inits, grads, params):
        variables[name] = dict(
            shape=list(shape), init=init.ravel().tolist(),
            grads=[x.ravel().tolist() for x in g],
            params=[x.ravel().tolist() for x in p])
      cases.append(dict(
          rule=rule, inner=inner, schedule=sched, lr=LR, clip=clip,
          min_accum_weight=MIN_WEIGHT, dtype='float32', weights=weights,
          variables=variables, param_update_step=updates,
          accum_weight=accum))
  return cases


def main():
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('-o', '--output', required=True)
  args = ap.parse_args()
  tf.disable_eager_execution()
  data = dict(
      command=('/work/lingvo_venv/bin/python '
               'tools/record_lingvo_dynamic_accumulator.py '
               '-o tests/data/lingvo_0_14_2_dynamic_accumulator.json'),
      versions=dict(lingvo=importlib.metadata.version('lingvo'),
                    tensorflow=importlib.metadata.version('tensorflow'),
                    numpy=np.__version__),
      steps=STEPS, cases=_Cases())
  with open(args.output, 'w') as f:
    json.dump(data, f, sort_keys=True)
    f.write('\n')
  first = data['cases'][0]
  print('wrote %d cases to %s; updates after each step: %s' % (
      len(data['cases']), args.output, first['param_update_step']))


if __name__ == '__main__':
  main()
