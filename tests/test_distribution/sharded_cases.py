"""The ZeRO-1 test cases, shared by test_sharded_state.py and the
multi-worker processes of zero_worker.py (as scenarios.py for issue 7).

A small MLP (variables of 15 + 5 + 10 + 3 = 33 float32 elements: the
shards of 17 span variables and the last one has one padding element)
trains on per-replica data (the replica's global id seeds it).
"""

import numpy as np
import tensorflow as tf

from learner import gradient_tape
from learner.learner import Learner
from learner.optimizers.rules.adam import Adam
from learner.optimizers.rules.adadelta import AdaDelta
from learner.optimizers.rules.ademamix import AdEMAMix
from learner.optimizers.rules.simplified_ademamix import SimplifiedAdEMAMix
from learner.optimizers.rules.cocob import COCOB
from learner.optimizers.rules.madgrad import MADGRAD
from learner.optimizers.rules.adam import AdamW
from learner.optimizers.rules import adam_family
from learner.optimizers.rules.adafactor import Adafactor
from learner.optimizers.rules.lamb import LAMB
from learner.optimizers.rules.lion import Lion
from learner.optimizers.rules.muon import Muon
from learner.optimizers.rules.soap import SOAP
from learner.optimizers.wrappers.lars import Lars
from learner.optimizers.rules.momentum import Momentum
from learner.optimizers.rules.schedule_free import ScheduleFreeAdamW
from learner.optimizers.rules.schedule_free import ScheduleFreeSGD
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.optimizers.wrappers.ema import Ema
from learner.optimizers.wrappers.lookahead import Lookahead
from learner.optimizers.wrappers.swa import SWA
from params import BaseLayer
from schedules import ConstantOne

SHAPES = (('w1', [3, 5]), ('b1', [5]), ('w2', [5, 2]), ('b2', [3]))


class Mlp(BaseLayer):
  """x [B, 3] -> tanh(x w1 + b1) w2 + b2[:2]; b2 has a spare entry."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'mlp'
    p.Define('var_dtypes', None, '{variable: dtype} for those not in dtype.')
    return p

  def __init__(self, params):
    super().__init__(params)
    rng = np.random.RandomState(0)
    for name, shape in SHAPES:
      self.CreateVariable(name, shape, init=rng.normal(
          size=shape).astype(np.float32) * 0.5,
                          dtype=(self.params.var_dtypes or {}).get(name))

  def Loss(self, x, y):
    v = self.theta  # The variables' values, cast to fprop_dtype.
    h = tf.tanh(tf.matmul(x, v.w1) + v.b1)
    out = tf.matmul(h, v.w2) + v.b2[:2] + 0.01 * v.b2[2]
    return tf.reduce_mean(tf.square(out - y))


def Data(step, replica, nan=False):
  """(x [4, 3], y [4, 2]) float32 of `replica` at `step`; x[0, 0] NaN."""
  rng = np.random.RandomState(100 * step + replica)
  x = rng.normal(size=[4, 3]).astype(np.float32)
  y = rng.normal(size=[4, 2]).astype(np.float32)
  if nan:
    x[0, 0] = np.nan
  return x, y


def Build(strategy, opt, shard, dtype=None, var_dtypes=None, **kw):
  """(task, learner, step(i, nan_at=None)) built under `strategy`; `dtype`
  (e.g. tf.bfloat16): the Mlp's weights in it (`var_dtypes`: {variable:
  dtype} for the exceptions), its math in float32."""
  with strategy.scope():
    task = Mlp.Params().Set(var_dtypes=var_dtypes, **(
        dict(dtype=dtype, fprop_dtype=tf.float32) if dtype else {}
    )).Instantiate()
    lrn = Learner.Params().Set(
        name='loss', learning_rate=0.05, lr_schedule=ConstantOne.Params(),
        optimizer=opt, shard_optimizer_state=shard, **kw).Instantiate()
    lrn.Bind(task.vars)

  def _Replica(x, y):
    with gradient_tape.GradientTape():
      loss = task.Loss(x, y)
    lrn.Apply({'loss': (loss, tf.constant(4.0))}, task.vars)

  @tf.function
  def _Step(x, y):
    strategy.run(_Replica, args=(x, y))

  def _Train(step, nan_at=None):
    def _Value(ctx, k):
      r = ctx.replica_id_in_sync_group
      return tf.constant(Data(step, r, nan=(step, r) == nan_at)[k])
    dist = strategy.experimental_distribute_values_from_function
    _Step(dist(lambda ctx: _Value(ctx, 0)), dist(lambda ctx: _Value(ctx, 1)))

  return task, lrn, _Train


def Run(strategy, opt, shard, steps=20, nan_at=None, **kw):
  """Trains `steps` steps; returns (task, learner) after them."""
  task, lrn, train = Build(strategy, opt, shard, **kw)
  for step in range(steps):
    train(step, nan_at)
  return task, lrn


def Weights(strategy, task):
  """{variable key: [this process's copies as numpy arrays]}."""
  return {k: [x.numpy() for x in strategy.experimental_local_results(v)]
          for k, v in task.vars.items()}


OPTS = {
    'momentum': lambda: Momentum.Params().Set(alpha=0.9),
    'adam': lambda: Adam.Params(),
    'adamw': lambda: AdamW.Params().Set(decoupled_weight_decay=0.1),
}


# The other elementwise rules (issue 26 item 2), each with a non-default
# setting that reaches every slot.
MORE_RULES = {
    'lion': lambda: Lion.Params().Set(decoupled_weight_decay=0.1),
    'nadam': lambda: adam_family.Nadam.Params().Set(
        momentum_schedule='dozat'),
    'radam': lambda: adam_family.RAdam.Params().Set(threshold=4.0),
    'adamax': lambda: adam_family.Adamax.Params(),
    'amsgrad': lambda: adam_family.AMSGrad.Params().Set(beta2=0.9),
    'adopt': lambda: adam_family.ADOPT.Params(),
    'adadelta': lambda: AdaDelta.Params().Set(decay=0.9),
    'ademamix': lambda: AdEMAMix.Params().Set(
        beta3=0.99, alpha=8.0, decoupled_weight_decay=0.1),
    'simplified_ademamix': lambda: SimplifiedAdEMAMix.Params().Set(
        beta1=0.9, alpha=2.0, decoupled_weight_decay=0.1),
    'cocob': lambda: COCOB.Params().Set(alpha=10.0),
    'madgrad': lambda: MADGRAD.Params().Set(decoupled_weight_decay=0.1),
    # Cautious weight decay is elementwise (the cautious update is not:
    # refused, test_cautious.py).
    'adamw_cwd': lambda: AdamW.Params().Set(decoupled_weight_decay=0.1,
                                            cautious_weight_decay=True),
}


def Accumulated(name, num_batches=4):
  """GradientAccumulation(num_batches) around OPTS[name]."""
  return GradientAccumulation.Params().Set(optimizer=OPTS[name](),
                                           num_batches=num_batches)


# The whole-tensor rules (issue 38 item 1): each variable has a home
# replica (learner/optimizers/home_sharding.py). Name -> (optimizer params,
# Learner kwargs): Muon takes the matrices w1, w2 only.
HOME_RULES = {
    'muon': lambda: (Muon.Params().Set(decoupled_weight_decay=0.1),
                     dict(bprop_variable_filter=r'/w\d$')),
    'adafactor_factored': lambda: (Adafactor.Params().Set(
        min_dim_size_to_factor=2, beta1=0.9), {}),
    'adafactor': lambda: (Adafactor.Params().Set(factored=False), {}),
    'lamb': lambda: (LAMB.Params().Set(weight_decay=0.01), {}),
    'lars': lambda: (Lars.Params().Set(
        optimizer=Momentum.Params().Set(alpha=0.9), eta=0.01,
        weight_decay=1e-3), {}),
    'soap': lambda: (SOAP.Params().Set(precondition_frequency=3), {}),
}


# The home cases zero_worker.py runs across 2 processes (issue 38's list:
# Muon, Adafactor factored and not, LAMB, LARS).
HOME_WORKER_CASES = ('muon', 'adafactor_factored', 'adafactor', 'lamb',
                     'lars')


def HomeRule(name, num_batches=None):
  """(optimizer params, Learner kwargs) of HOME_RULES[name], inside
  GradientAccumulation(num_batches) when given."""
  opt, kw = HOME_RULES[name]()
  if num_batches:
    opt = GradientAccumulation.Params().Set(optimizer=opt,
                                            num_batches=num_batches)
  return opt, kw


# The optimizers with weights to evaluate (issue 38 item 1, part B): their
# averages sharded with the rule's slots; settings that move every copy
# within 20 steps (Lookahead synchronizes at 3, 6, ...; SWA samples from 4).
AVERAGING = {
    'sf_sgd': lambda: ScheduleFreeSGD.Params().Set(momentum=0.9,
                                                   warmup_steps=3),
    'sf_adamw': lambda: ScheduleFreeAdamW.Params().Set(
        warmup_steps=3, decoupled_weight_decay=0.1),
    'ema_adam': lambda: Ema.Params().Set(optimizer=Adam.Params(), decay=0.8),
    'lookahead_adam': lambda: Lookahead.Params().Set(
        optimizer=Adam.Params(), k=3, alpha=0.5),
    'swa_adam': lambda: SWA.Params().Set(optimizer=Adam.Params(),
                                         swa_start=4, swa_freq=2),
}


def EvalWeights(strategy, task, lrn):
  """{variable key: the eval weights (gathered under ZeRO-1), numpy}: the
  copies of the learner's averaging optimizers, outermost first."""
  del strategy
  out = {}
  for k, v in task.vars.items():
    value = v
    for avg in lrn.optimizer.EvalAverages():
      value = avg.GetAverage(v)
    out[k] = value.read_value().numpy()
  return out


# ---- checkpoints: save, continue, compare (test_sharded_state.py,
# test_home_sharding.py) ------------------------------------------------------


def Save(strategy, opt, shard, path, steps=5, **kw):
  """Builds (Build's kwargs), trains `steps` micro-steps and writes a
  checkpoint of task and learner to `path`; returns its path."""
  task, lrn, train = Build(strategy, opt, shard, **kw)
  for step in range(steps):
    train(step)
  return tf.train.Checkpoint(task=task, learner=lrn).write(path)


def Continue(strategy, opt, shard, path, steps=(5, 6, 7), **kw):
  """Builds, restores `path` (every value consumed), trains `steps`;
  returns Weights."""
  task, lrn, train = Build(strategy, opt, shard, **kw)
  tf.train.Checkpoint(task=task, learner=lrn).read(path).assert_consumed()
  for step in steps:
    train(step)
  return Weights(strategy, task)


def Tensors(path):
  """{checkpoint key: value} of every saved tensor but the object graph."""
  reader = tf.train.load_checkpoint(path)
  return {k: reader.get_tensor(k) for k, _ in tf.train.list_variables(path)
          if '_CHECKPOINTABLE_OBJECT_GRAPH' not in k}


def AssertBitEqual(a, b):
  """Weights `a` and `b` ({key: [copies]}) equal bit for bit."""
  for k in a:
    for x, y in zip(a[k], b[k]):
      np.testing.assert_array_equal(x, y, err_msg=k)
