"""Measures 8-bit blockwise optimizer state against float32 state (issue 38.2).

Trains an experiment twice through the Trainer (mode train_and_eval, seed
1, the experiment's data order and steps): once as configured (float32
slots) and once with `slot_dtype=tf.int8` set on every learner's update
rule (inside wrappers too: the innermost `optimizer` of each learner);
prints both final metrics, their difference, the slot bytes of each run
(float32 slots vs codes + scales, from the built learners) and the wall
time. Nothing else changes between the two runs.

Usage, from the repository root (a logdir per run is made under DIR):

    PYTHONPATH=. python tools/measure_int8_state.py lm.CharTransformer /tmp/q8_lm
    PYTHONPATH=. python tools/measure_int8_state.py digits.MlpMomentum /tmp/q8_digits
    PYTHONPATH=. python tools/measure_int8_state.py KEY DIR [block_size]

Measured results are in docs/distributed.md ("8-bit optimizer state").
"""

import os
import sys
import time

import tensorflow as tf

from params import registry
from learner.optimizers.kernels import quantized_state
from learner.training.jobs import trainer as trainer_lib
import configs.digits  # pylint: disable=unused-import
import configs.lm  # pylint: disable=unused-import


def _Rules(learner_params):
  """The innermost optimizer params of each learner (the update rules)."""
  learners = (learner_params if isinstance(learner_params, list)
              else [learner_params])
  out = []
  for lp in learners:
    opt = lp.optimizer
    while 'optimizer' in opt and opt.optimizer is not None:
      opt = opt.optimizer
    out.append(opt)
  return out


def Params(key, int8, block_size):
  """The experiment's params, with 8-bit state on every rule if `int8`."""
  p = registry.GetParams(key)
  p.task.train.save_interval_steps = 10**6
  if int8:
    for rule in _Rules(p.task.train.learner):
      rule.slot_dtype = tf.int8
      rule.slot_block_size = block_size
  return p


def SlotBytes(p):
  """Bytes of every learner's slots in a task built from `p`."""
  task = p.task.Instantiate()
  task.CreateLearners()
  total = 0
  for lrn in task.learners:
    opt = lrn.optimizer
    while opt.inner_optimizers:
      opt = opt.inner_optimizers[0]
    for var in opt.bound_variables.values():
      total += sum(quantized_state.SlotBytes(s)
                   for s in opt.GetSlots(var).values())
  return total


def Run(key, root, block_size=quantized_state.DEFAULT_BLOCK_SIZE):
  """Trains both forms of `key` under `root`; prints and returns metrics."""
  out = {}
  for name, int8 in (('float32', False), ('int8', True)):
    p = Params(key, int8, block_size)
    start = time.time()
    metrics = trainer_lib.Trainer(
        p, os.path.join(root, name), mode='train_and_eval', seed=1,
        stream=sys.stdout).Run()
    wall = time.time() - start
    slot_bytes = SlotBytes(Params(key, int8, block_size))
    out[name] = metrics
    print('RESULT %s %s: %s; slot bytes %d; wall %.1f s' % (
        key, name, metrics, slot_bytes, wall))
    sys.stdout.flush()
  for k in sorted(out['float32']):
    a, b = out['float32'][k], out['int8'].get(k)
    if isinstance(a, float) and isinstance(b, float):
      print('DIFF %s %s: float32 %.5f int8 %.5f (int8 - float32 %+.5f)' %
            (key, k, a, b, b - a))
  return out


if __name__ == '__main__':
  Run(sys.argv[1], sys.argv[2],
      *(int(a) for a in sys.argv[3:4]))
