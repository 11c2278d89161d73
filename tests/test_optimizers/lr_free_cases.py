"""Shared by test_dog.py, test_cocob.py and test_madgrad.py: the optax
cases of tests/data/optax_lr_free.json as our params, and a two-replica
MirroredStrategy run against one replica.

The data are written by tools/record_optax_lr_free.py (its docstring lists
the recorded rules and their hyperparameters).
"""

import numpy as np
import tensorflow as tf

import learner as learner_lib
from learner.learner import Learner
from learner.optimizers.rules.cocob import COCOB
from learner.optimizers.rules.dog import DoG
from learner.optimizers.rules.dog import DoWG
from learner.optimizers.rules.madgrad import MADGRAD
from params import BaseLayer
from schedules import ConstantOne
import optax_references as refs

DATA = refs.Load('lr_free')


def Cases(prefix):
  """The recorded cases whose rule is `prefix` or `prefix_<variant>`."""
  return [c for c in DATA['cases']
          if c['rule'] == prefix or c['rule'].startswith(prefix + '_')]


def OurParams(case):
  """Our rule's params for a recorded case (optax keyword -> our param)."""
  rule, kw = case['rule'], dict(case['kwargs'])
  if 'eps' in kw:
    kw['epsilon'] = kw.pop('eps')
  if rule.startswith('dowg'):
    return DoWG.Params().Set(**kw)
  if rule.startswith('dog'):
    return DoG.Params().Set(init_step=kw['init_step'],
                            init_step_value=kw['init_value'])
  if rule.startswith('cocob'):
    return COCOB.Params().Set(**kw)
  return MADGRAD.Params().Set(**kw)


def Tolerance(case, float64_exact, float64_rounded):
  """1e-6 in float32; in float64 `float64_exact` without clip, else
  `float64_rounded` (the learner's clip scale is float32)."""
  if case['dtype'] == 'float32':
    return 1e-6
  return float64_rounded if case['clip'] else float64_exact


class _Linear(BaseLayer):
  """y = x w + b, w [3, 2] and b [2] seeded."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'linear'
    return p

  def __init__(self, params):
    super().__init__(params)
    rng = np.random.RandomState(0)
    self.CreateVariable('w', [3, 2], init=rng.normal(size=[3, 2]).astype(
        np.float32))
    self.CreateVariable('b', [2], init=rng.normal(size=[2]).astype(
        np.float32))


def _Batch(step):
  rng = np.random.RandomState(step)
  return (rng.normal(size=[8, 3]).astype(np.float32),
          rng.normal(size=[8, 2]).astype(np.float32))


def Train(strategy, opt, lr, steps=5):
  """[w, b] of each replica after `steps` steps on the global batches
  (half each on two replicas), clip 0.5, under `strategy`."""
  with strategy.scope():
    task = _Linear.Params().Instantiate()
    lrn = Learner.Params().Set(
        name='loss', learning_rate=lr, lr_schedule=ConstantOne.Params(),
        optimizer=opt, clip_gradient_norm_to_value=0.5).Instantiate()
    lrn.Bind(task.vars)

  def Replica(x, y):
    with learner_lib.GradientTape():
      out = tf.matmul(x, task.vars.w) + task.vars.b
      loss = tf.reduce_mean(tf.square(out - y))
    n = tf.cast(tf.shape(x)[0], tf.float32)
    lrn.Apply({'loss': (loss, n)}, task.vars)

  @tf.function
  def Step(x, y):
    strategy.run(Replica, args=(x, y))

  n = strategy.num_replicas_in_sync
  for step in range(steps):
    x, y = _Batch(step)

    def Part(ctx, a):
      k = 8 // n
      i = ctx.replica_id_in_sync_group
      return tf.constant(a[i * k:(i + 1) * k])

    dist = strategy.experimental_distribute_values_from_function
    Step(dist(lambda ctx, a=x: Part(ctx, a)),
         dist(lambda ctx, a=y: Part(ctx, a)))
  local = strategy.experimental_local_results
  return [np.concatenate([w.numpy().ravel(), b.numpy().ravel()])
          for w, b in zip(local(task.vars.w), local(task.vars.b))]


def InitialWeights():
  """[w, b] of `_Linear` before any step, flat."""
  v = _Linear.Params().Instantiate().vars
  return np.concatenate([v.w.numpy().ravel(), v.b.numpy().ravel()])
