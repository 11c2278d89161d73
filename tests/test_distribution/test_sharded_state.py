"""ZeRO-1 sharded optimizer state (issue 26, items 1-3): same numbers.

MirroredStrategy on the 2 logical CPUs of tests/conftest.py. A small MLP
(variables of 15 + 5 + 10 + 3 = 33 float32 elements: the shards of 17
span variables and the last one has one padding element) trains on
per-replica data. Every case runs twice under the same strategy, with
`shard_optimizer_state` False and True, and compares the weights after
the steps (within 1e-6 relative, the acceptance bound; in practice equal).
"""

import io

import numpy as np
import pytest
import tensorflow as tf

from learner import gradient_tape
from learner import sharded_state
from learner.learner import Learner
from learner.optimizers.rules.adam import Adam
from learner.optimizers.rules.adam import AdamW
from learner.optimizers.rules.momentum import Momentum
from learner.optimizers.rules.muon import Muon
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.training.cluster import distribution
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import export as export_lib
from learner.training.jobs import trainer as trainer_lib
from params import BaseLayer
from params import registry
from schedules import ConstantOne

_SHAPES = (('w1', [3, 5]), ('b1', [5]), ('w2', [5, 2]), ('b2', [3]))


@pytest.fixture(scope='module')
def strategy():
  s = distribution.CreateStrategy('mirrored')
  assert s.num_replicas_in_sync == 2
  return s


class Mlp(BaseLayer):
  """x [B, 3] -> tanh(x w1 + b1) w2 + b2[:2]; b2 has a spare entry."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'mlp'
    return p

  def __init__(self, params):
    super().__init__(params)
    rng = np.random.RandomState(0)
    for name, shape in _SHAPES:
      self.CreateVariable(name, shape, init=rng.normal(
          size=shape).astype(np.float32) * 0.5)

  def Loss(self, x, y):
    v = self.vars
    h = tf.tanh(tf.matmul(x, v.w1) + v.b1)
    out = tf.matmul(h, v.w2) + v.b2[:2] + 0.01 * v.b2[2]
    return tf.reduce_mean(tf.square(out - y))


def _Data(step, replica, nan=False):
  rng = np.random.RandomState(100 * step + replica)
  x = rng.normal(size=[4, 3]).astype(np.float32)
  y = rng.normal(size=[4, 2]).astype(np.float32)
  if nan:
    x[0, 0] = np.nan
  return x, y


def _Build(strategy, opt, shard, **kw):
  """(task, learner, step(i, nan_at=None)) built under `strategy`."""
  with strategy.scope():
    task = Mlp.Params().Instantiate()
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
      return tf.constant(_Data(step, r, nan=(step, r) == nan_at)[k])
    dist = strategy.experimental_distribute_values_from_function
    _Step(dist(lambda ctx: _Value(ctx, 0)), dist(lambda ctx: _Value(ctx, 1)))

  return task, lrn, _Train


def _Run(strategy, opt, shard, steps=20, nan_at=None, **kw):
  """Trains `steps` steps; returns (task, learner) after them."""
  task, lrn, train = _Build(strategy, opt, shard, **kw)
  for step in range(steps):
    train(step, nan_at)
  return task, lrn


def _Weights(strategy, task):
  return {k: [x.numpy() for x in strategy.experimental_local_results(v)]
          for k, v in task.vars.items()}


def _AssertSame(strategy, a, b):
  wa, wb = _Weights(strategy, a), _Weights(strategy, b)
  for k in wa:
    np.testing.assert_array_equal(wb[k][0], wb[k][1], err_msg=k)
    np.testing.assert_allclose(wb[k][0], wa[k][0], rtol=1e-6, atol=1e-7,
                               err_msg=k)


_OPTS = {
    'momentum': lambda: Momentum.Params().Set(alpha=0.9),
    'adam': lambda: Adam.Params(),
    'adamw': lambda: AdamW.Params().Set(decoupled_weight_decay=0.1),
}


@pytest.mark.parametrize('name', sorted(_OPTS))
def test_sharded_matches_unsharded_with_clip(strategy, name):
  kw = dict(clip_gradient_norm_to_value=0.5, l2_regularizer_weight=1e-3)
  ref, _ = _Run(strategy, _OPTS[name](), False, **kw)
  got, lrn = _Run(strategy, _OPTS[name](), True, **kw)
  _AssertSame(strategy, ref, got)
  # Each replica holds half of the 33 (padded to 34) elements per slot.
  zero = lrn.optimizer.__dict__['_zero']
  per_slot = 17 * 4
  assert zero.SlotBytesPerReplica() == per_slot * (1 if name == 'momentum'
                                                   else 2)
  # The weights moved (the test can fail).
  w0 = Mlp.Params().Instantiate().vars.w1.numpy()
  assert np.abs(_Weights(strategy, got)['w1'][0] - w0).max() > 1e-3


@pytest.mark.parametrize('name', ['adam', 'momentum'])
def test_nan_on_one_replica_is_skipped_as_unsharded(strategy, name):
  ref, ref_l = _Run(strategy, _OPTS[name](), False, steps=6, nan_at=(3, 1),
                    clip_gradient_norm_to_value=0.5)
  got, got_l = _Run(strategy, _OPTS[name](), True, steps=6, nan_at=(3, 1),
                    clip_gradient_norm_to_value=0.5)
  _AssertSame(strategy, ref, got)
  for lrn in (ref_l, got_l):
    res = strategy.experimental_local_results
    assert [int(x) for x in res(lrn.num_skipped_steps)] == [1, 1]
    assert [int(x) for x in res(lrn.num_updates)] == [5, 5]


@pytest.mark.parametrize('name', sorted(_OPTS))
def test_sharded_with_accumulation(strategy, name):
  def _Acc():
    return GradientAccumulation.Params().Set(optimizer=_OPTS[name](),
                                             num_batches=4)
  kw = dict(clip_gradient_norm_to_value=0.5)
  ref, _ = _Run(strategy, _Acc(), False, **kw)
  got, _ = _Run(strategy, _Acc(), True, **kw)
  _AssertSame(strategy, ref, got)


def test_non_elementwise_rule_is_refused():
  p = Learner.Params().Set(name='loss', learning_rate=0.1,
                           optimizer=Muon.Params(),
                           shard_optimizer_state=True)
  with pytest.raises(ValueError, match='Muon orthogonalizes'):
    p.Instantiate()


def test_one_replica_is_a_plain_bind():
  task = Mlp.Params().Instantiate()
  lrn = Learner.Params().Set(name='loss', learning_rate=0.1,
                             optimizer=Adam.Params(),
                             shard_optimizer_state=True).Instantiate()
  lrn.Bind(task.vars)
  zero = lrn.optimizer.__dict__['_zero']
  assert not zero.sharded
  assert lrn.optimizer.GetSlots(task.vars.w1)['m'].shape == [3, 5]
  assert sharded_state.SHARDED_REASON


def _Save(strategy, opt, shard, path, steps=5):
  task, lrn, train = _Build(strategy, opt, shard)
  for step in range(steps):
    train(step)
  return tf.train.Checkpoint(task=task, learner=lrn).write(path)


def _Continue(strategy, opt, shard, path, steps=(5, 6, 7)):
  task, lrn, train = _Build(strategy, opt, shard)
  tf.train.Checkpoint(task=task, learner=lrn).read(path).assert_consumed()
  for step in steps:
    train(step)
  return _Weights(strategy, task)


def _Tensors(path):
  reader = tf.train.load_checkpoint(path)
  return {k: reader.get_tensor(k) for k, _ in tf.train.list_variables(path)
          if '_CHECKPOINTABLE_OBJECT_GRAPH' not in k}


def _AssertBitEqual(a, b):
  for k in a:
    for x, y in zip(a[k], b[k]):
      np.testing.assert_array_equal(x, y, err_msg=k)


@pytest.mark.parametrize('name', ['adam', 'momentum'])
def test_sharded_checkpoint_is_the_unsharded_one(strategy, name, tmp_path):
  """Same keys, shapes and values as the unsharded run's checkpoint."""
  a = _Save(strategy, _OPTS[name](), False, str(tmp_path / 'a'))
  b = _Save(strategy, _OPTS[name](), True, str(tmp_path / 'b'))
  ta, tb = _Tensors(a), _Tensors(b)
  assert sorted(ta) == sorted(tb)
  assert any('/m/.ATTRIBUTES' in k or '/momentum/.ATTRIBUTES' in k
             for k in ta)
  for k in ta:
    np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)


@pytest.mark.parametrize('name', ['adam', 'momentum'])
def test_restore_2_to_1_and_1_to_2_continue_bit_identically(strategy, name,
                                                            tmp_path):
  one = tf.distribute.get_strategy()  # The default: one device.
  sharded2 = _Save(strategy, _OPTS[name](), True, str(tmp_path / 's2'))
  plain2 = _Save(strategy, _OPTS[name](), False, str(tmp_path / 'p2'))
  # 2 -> 1: the sharded run's checkpoint continues on one device exactly as
  # the unsharded run's does.
  _AssertBitEqual(_Continue(one, _OPTS[name](), False, sharded2),
                  _Continue(one, _OPTS[name](), False, plain2))
  # 1 -> 2: a one-device checkpoint continues sharded exactly as unsharded.
  plain1 = _Save(one, _OPTS[name](), False, str(tmp_path / 'p1'))
  _AssertBitEqual(_Continue(strategy, _OPTS[name](), True, plain1),
                  _Continue(strategy, _OPTS[name](), False, plain1))
  # 2 -> 2 across a restart: as the uninterrupted sharded run.
  task, _, train = _Build(strategy, _OPTS[name](), True)
  for step in range(8):
    train(step)
  _AssertBitEqual(_Continue(strategy, _OPTS[name](), True, sharded2),
                  _Weights(strategy, task))


# ---- the trainer (what --strategy=mirrored runs), then evaler and export ----

_KEY = 'regression.LinearRegression'


def _TrainRun(logdir, shard):
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=30, save_interval_steps=10)
  p.task.train.learner.shard_optimizer_state = shard
  t = trainer_lib.Trainer(p, str(logdir), strategy='mirrored', mode='train',
                          stream=io.StringIO(), tty=False)
  t.Run()
  return t


def test_trainer_sharded_run_then_evaler_and_export_on_one_device(
    strategy, tmp_path):
  plain = _TrainRun(tmp_path / 'plain', False)
  sharded = _TrainRun(tmp_path / 'sharded', True)
  assert sharded.task.learners[0].optimizer.__dict__['_zero'].sharded
  distribution.AssertReplicasIdentical(sharded.task.vars.Flatten())
  want = _Tensors(str(tmp_path / 'plain' / 'ckpt' / 'ckpt-30'))
  got = _Tensors(str(tmp_path / 'sharded' / 'ckpt' / 'ckpt-30'))
  assert sorted(want) == sorted(got)
  assert any('/momentum/' in k for k in got)
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)
  del plain
  # The evaler and export read the sharded run's checkpoint on one device.
  p = registry.GetParams(_KEY)
  record = evaler_lib.Evaler(p, str(tmp_path / 'sharded'), timeout_secs=0.5,
                             poll_secs=0, stream=io.StringIO()).Run()
  assert [e['global_step'] for e in record['evaluations']][-1] == 30
  export_dir = export_lib.Export(registry.GetParams(_KEY),
                                 str(tmp_path / 'sharded'),
                                 stream=io.StringIO())
  w = got['task/_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE']
  b = got['task/_private_vars/b/.ATTRIBUTES/VARIABLE_VALUE']
  x = np.array([0.0, 1.0, -2.5], np.float32)
  y = tf.saved_model.load(export_dir).signatures['serving_default'](
      x=tf.constant(x))['y'].numpy()
  np.testing.assert_allclose(y, np.ravel(w)[0] * x + np.ravel(b)[0],
                             rtol=1e-5)
