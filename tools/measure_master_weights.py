"""Measures bfloat16 weights with and without a float32 master (issue 38.3).

Trains lm.CharTransformer through the Trainer (mode train_and_eval, seed 1,
the experiment's data order, 400 steps, held-out bits/char evaluated every
200 steps) in one of three variants, and prints the bytes of the model's
variables, the held-out metrics and the wall time:

  float32      the experiment as registered (float32 weights).
  bf16         task.dtype=tf.bfloat16, task.fprop_dtype=tf.float32: the
               weights are stored in bfloat16 and cast to float32 for the
               computation; each learner's Adam updates the bfloat16
               variables directly (the control: an update smaller than
               half of bfloat16's spacing at the weight is lost).
  bf16_master  the same bfloat16 weights, and each learner's optimizer with
               master_weights=True: Adam runs on a float32 master copy
               (a slot) and the variable gets the master rounded to nearest.

Measured 2026-12-06 (one session, one process at a time on a shared
2-core machine): model weight bytes 1 640 348 (float32) and 820 174
(bfloat16, 0.5x); held-out bits/char at step 200 / 400: float32 2.5156 /
2.0371, bf16_master 2.5390 / 2.0403, bf16 2.5385 / 2.0530; wall 94 s,
230 s, 235 s (the bfloat16 runs shared the cores with tests).

Usage, from the repository root (one variant per process):

    PYTHONPATH=. python tools/measure_master_weights.py float32 /tmp/mw_f32
    PYTHONPATH=. python tools/measure_master_weights.py bf16 /tmp/mw_bf16
    PYTHONPATH=. python tools/measure_master_weights.py bf16_master /tmp/mw_master
"""

import sys
import time

import tensorflow as tf

from params import registry
from learner.training.jobs import trainer as trainer_lib
import configs.lm  # pylint: disable=unused-import

VARIANTS = ('float32', 'bf16', 'bf16_master')


def VariantParams(variant, steps=400):
  """lm.CharTransformer's experiment params for `variant` (module doc)."""
  if variant not in VARIANTS:
    raise ValueError('variant %r; expected one of %s.' % (variant, VARIANTS))
  p = registry.GetParams('lm.CharTransformer')
  p.task.train.max_steps = steps
  p.task.eval.interval_steps = 200
  p.task.train.save_interval_steps = 10**6
  if variant != 'float32':
    p.task.dtype = tf.bfloat16
    p.task.fprop_dtype = tf.float32
  if variant == 'bf16_master':
    for lp in p.task.train.learner:
      lp.optimizer.master_weights = True
  return p


def WeightBytes(p):
  """Bytes of the model's floating point variables (not the learners')."""
  task = p.task.Instantiate()
  return sum(int(v.shape.num_elements()) * v.dtype.size
             for v in task.vars.Flatten() if v.dtype.is_floating)


def Main(variant, logdir):
  p = VariantParams(variant)
  print('%s: model weight bytes %d' % (variant, WeightBytes(p)))
  start = time.time()
  metrics = trainer_lib.Trainer(p, logdir, mode='train_and_eval', seed=1,
                                stream=sys.stdout).Run()
  print('%s: wall %.1f s: %s' % (variant, time.time() - start, metrics))


if __name__ == '__main__':
  Main(sys.argv[1], sys.argv[2])
