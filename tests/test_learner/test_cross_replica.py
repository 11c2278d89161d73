"""The all-reduce under MirroredStrategy (2 logical CPUs, tests/conftest.py):
C-clip-after-allreduce and gradient accumulation with sync_on_apply."""

import logging as py_logging

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner.optimizers import base as base_optimizer
from learner import cross_replica
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.learner import Learner
from params import BaseLayer
from learner.training.cluster import distribution


@pytest.fixture(scope='module')
def strategy():
  return distribution.CreateStrategy('mirrored')


class WTask(BaseLayer):
  """One variable w = [0, 0]; loss = <g, w> with g fed per replica."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'wtask'
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [2], init=0.0)


def PerReplica(strategy, values):
  return strategy.experimental_distribute_values_from_function(
      lambda ctx: tf.constant(values[ctx.replica_id_in_sync_group],
                              tf.float32))


def Build(strategy, eager=False, **kw):
  with strategy.scope():
    task = WTask.Params().Instantiate()
    lrn = Learner.Params().Set(name='loss', learning_rate=1.0, **kw)
    if lrn.optimizer is None:
      lrn.optimizer = base_optimizer.SGD.Params()
    lrn = lrn.Instantiate()
    lrn.Bind(task.vars)

  def Step(g, weight):
    def Fn(g, weight):
      with learner_lib.GradientTape():  # Used only when eager.
        loss = tf.reduce_sum(g * task.theta.w)
      return lrn.Apply({'loss': (loss, weight)}, task.vars)[2]
    return strategy.run(Fn, args=(g, weight))

  return task, lrn, (Step if eager else tf.function(Step))


def Identical(task, lrn):
  """Both replicas hold the same weights and learner state, bit for bit."""
  distribution.AssertReplicasIdentical(task.vars.Flatten() +
                                       lrn.vars.Flatten())


def test_num_replicas_outside_a_strategy_is_one():
  assert cross_replica.NumReplicas() == 1
  x = tf.constant([1.0, 2.0])
  assert cross_replica.AllReduceSum([x])[0] is x


@pytest.mark.parametrize('eager', [False, True])
def test_c_clip_after_allreduce(strategy, eager):
  task, lrn, step = Build(strategy, eager=eager,
                          clip_gradient_norm_to_value=1.0)
  m = step(PerReplica(strategy, [[3., 0.], [0., 4.]]),
           PerReplica(strategy, [1.0, 1.0]))
  Identical(task, lrn)
  for r in range(2):
    assert float(m['grad_norm/all'][0].values[r]) == pytest.approx(2.5)
    np.testing.assert_allclose(task.vars.w.values[r].numpy(), [-0.6, -0.8],
                               rtol=1e-6)


def test_weights_normalise_the_all_reduce(strategy):
  # Replica 0: grad [3, 0] over 1 example; replica 1: [0, 4] over 3:
  # (1*[3,0] + 3*[0,4]) / 4 = [0.75, 3].
  task, lrn, step = Build(strategy)
  step(PerReplica(strategy, [[3., 0.], [0., 4.]]),
       PerReplica(strategy, [1.0, 3.0]))
  Identical(task, lrn)
  for r in range(2):
    np.testing.assert_allclose(task.vars.w.values[r].numpy(), [-0.75, -3.0],
                               rtol=1e-6)


@pytest.mark.parametrize('sync_on_apply', [True, False])
def test_accumulation_under_mirrored_equals_one_big_batch(strategy,
                                                          sync_on_apply):
  # Two micro-steps x two replicas, weights 1, 3, 2, 2:
  # (1*[1,0] + 3*[0,1] + 2*[2,2] + 2*[4,0]) / 8 = [1.625, 0.875];
  # clip 1 is applied once to that mean (norm 1.8457).
  acc = GradientAccumulation.Params().Set(
      num_batches=2, sync_on_apply=sync_on_apply,
      optimizer=base_optimizer.SGD.Params())
  task, lrn, step = Build(strategy, optimizer=acc,
                          clip_gradient_norm_to_value=1.0)
  m1 = step(PerReplica(strategy, [[1., 0.], [0., 1.]]),
            PerReplica(strategy, [1.0, 3.0]))
  Identical(task, lrn)
  for r in range(2):
    np.testing.assert_array_equal(task.vars.w.values[r].numpy(), [0., 0.])
    assert float(m1['grad_norm/all'][1].values[r]) == 0.0
  m2 = step(PerReplica(strategy, [[2., 2.], [4., 0.]]),
            PerReplica(strategy, [2.0, 2.0]))
  Identical(task, lrn)
  mean = np.array([1.625, 0.875])
  for r in range(2):
    assert float(m2['grad_norm/all'][0].values[r]) == pytest.approx(
        np.linalg.norm(mean), rel=1e-6)
    np.testing.assert_allclose(task.vars.w.values[r].numpy(),
                               -mean / np.linalg.norm(mean), rtol=1e-6)
    assert float(m2['num_updates'][0].values[r]) == 1.0
  accum = lrn.optimizer.GetAccumulator(task.vars.w)
  for v in getattr(accum, 'values', [accum]):
    np.testing.assert_array_equal(v.numpy(), [0., 0.])
  # Reset in cross-replica context works on per-replica accumulators.
  step(PerReplica(strategy, [[1., 0.], [0., 1.]]),
       PerReplica(strategy, [1.0, 1.0]))
  lrn.optimizer.Reset()
  for v in getattr(accum, 'values', [accum]):
    np.testing.assert_array_equal(v.numpy(), [0., 0.])
  assert int(lrn.optimizer.micro_step.numpy()) == 0


def _TopLevelCollectives(step, strategy):
  g = step.get_concrete_function(
      PerReplica(strategy, [[1., 0.], [0., 1.]]),
      PerReplica(strategy, [1.0, 1.0])).graph
  return [op for op in g.get_operations() if op.type == 'CollectiveReduceV2']


def test_sync_on_apply_has_no_collective_on_accumulating_micro_steps(strategy):
  # With sync_on_apply the only all-reduce is inside the branch of the
  # applying micro-step; sync_on_apply=False all-reduces every micro-step.
  on_apply = GradientAccumulation.Params().Set(
      num_batches=2, optimizer=base_optimizer.SGD.Params())
  _, _, step = Build(strategy, optimizer=on_apply)
  assert not _TopLevelCollectives(step, strategy)
  every = on_apply.Copy().Set(sync_on_apply=False)
  _, _, step = Build(strategy, optimizer=every)
  assert len(_TopLevelCollectives(step, strategy)) == 2  # One per replica.


def test_sync_on_apply_false_warns_once_under_a_strategy(strategy, caplog):
  acc = GradientAccumulation.Params().Set(
      num_batches=4, sync_on_apply=False,
      optimizer=base_optimizer.SGD.Params())
  with caplog.at_level(py_logging.WARNING):
    _, _, step = Build(strategy, optimizer=acc)
    step(PerReplica(strategy, [[1., 0.], [0., 1.]]),
         PerReplica(strategy, [1.0, 1.0]))
  msgs = [r.getMessage() for r in caplog.records
          if 'sync_on_apply=True' in r.getMessage()]
  assert len(msgs) == 1


def test_accumulation_with_loss_scale_and_tracker_under_mirrored(strategy):
  # The tracker and the loss scale are updated inside the applying branch's
  # tf.cond in replica context (their variables need no merge_call).
  from learner import grad_norm_tracker  # pylint: disable=g-import-not-at-top
  acc = GradientAccumulation.Params().Set(
      num_batches=2, optimizer=base_optimizer.SGD.Params())
  task, lrn, step = Build(
      strategy, optimizer=acc, loss_scale='dynamic',
      grad_norm_tracker=grad_norm_tracker.GradNormTracker.Params())
  for _ in range(2):
    m = step(PerReplica(strategy, [[1., 0.], [0., 1.]]),
             PerReplica(strategy, [1.0, 1.0]))
    Identical(task, lrn)
  for r in range(2):
    # Mean of [1, 0] and [0, 1] over both micro-steps: [0.5, 0.5].
    np.testing.assert_allclose(task.vars.w.values[r].numpy(), [-0.5, -0.5],
                               rtol=1e-6)
    assert float(m['loss_scale'][0].values[r]) == 32768.0
    assert float(m['num_updates'][0].values[r]) == 1.0
  assert int(lrn.loss_scale.good_steps.numpy()) == 1


def test_partial_window_survives_a_checkpoint_under_mirrored(strategy,
                                                              tmp_path):
  # Micro-step 1 of 2 saved with per-replica accumulators; a fresh learner
  # restored before any step finishes the window like the uninterrupted run.
  def Acc():
    return GradientAccumulation.Params().Set(
        num_batches=2, optimizer=base_optimizer.SGD.Params())

  g1 = ([[1., 0.], [0., 3.]], [1.0, 3.0])
  g2 = ([[2., 2.], [4., 0.]], [2.0, 2.0])

  def Feed(step, g):
    return step(PerReplica(strategy, g[0]), PerReplica(strategy, g[1]))

  task, lrn, step = Build(strategy, optimizer=Acc())
  Feed(step, g1)
  path = tf.train.Checkpoint(task=task, learner=lrn).save(
      str(tmp_path / 'ckpt'))
  Feed(step, g2)
  task2, lrn2, step2 = Build(strategy, optimizer=Acc())
  tf.train.Checkpoint(task=task2, learner=lrn2).restore(path)
  Feed(step2, g2)
  Identical(task, lrn)
  Identical(task2, lrn2)
  # (1*[1,0] + 3*[0,3] + 2*[2,2] + 2*[4,0]) / 8 = [1.625, 1.625].
  for r in range(2):
    np.testing.assert_allclose(task.vars.w.values[r].numpy(),
                               [-1.625, -1.625], rtol=1e-6)
    np.testing.assert_allclose(task2.vars.w.values[r].numpy(),
                               task.vars.w.values[r].numpy(), rtol=1e-6)


def _ScatterOnReplicas(strategy, make, eager=False):
  """Each replica's ReduceScatterSum of make(replica id) (local order)."""
  def Fn():
    rid = tf.distribute.get_replica_context().replica_id_in_sync_group
    return cross_replica.ReduceScatterSum(make(tf.cast(rid, tf.float32)))
  run = (lambda: strategy.run(Fn)) if eager else tf.function(
      lambda: strategy.run(Fn))
  return [t.numpy() for t in strategy.experimental_local_results(run())]


@pytest.mark.parametrize('eager', [False, True])
def test_reduce_scatter_sum_gives_each_replica_its_padded_slice(
    strategy, eager):
  # Replica r packs [a (2x2), b (3)] = 1..7 + 10 r: 7 elements, padded to
  # 2 x 4. The sum is 2 * (1..7) + 10 = 12, 14, ..., 24, then 0 (padding):
  # replica 0 gets 12, 14, 16, 18; replica 1 gets 20, 22, 24, 0.
  def Make(r):
    v = tf.range(1.0, 8.0) + 10.0 * r
    return [tf.reshape(v[:4], [2, 2]), v[4:]]
  got = _ScatterOnReplicas(strategy, Make, eager)
  np.testing.assert_array_equal(got[0], [12.0, 14.0, 16.0, 18.0])
  np.testing.assert_array_equal(got[1], [20.0, 22.0, 24.0, 0.0])


def test_reduce_scatter_sum_is_the_all_reduce_bit_for_bit(strategy):
  # Two replicas: each element is a + b (a + b == b + a in float32), so
  # the slices are exactly the all-reduce's; bfloat16 sums in float32 and
  # comes back as bfloat16 (1 + 2**-8 + 2**-8 rounds to 1 + 2**-7).
  rng = np.random.default_rng(0)
  vals = rng.standard_normal([2, 1001]).astype(np.float32)

  def Both():
    rid = tf.distribute.get_replica_context().replica_id_in_sync_group
    x = tf.gather(tf.constant(vals), rid)
    half = tf.fill([3], tf.where(rid == 0, tf.constant(1.5, tf.bfloat16),
                                 tf.constant(0.25, tf.bfloat16)))
    return (cross_replica.ReduceScatterSum([x]),
            cross_replica.AllReduceSum([x])[0],
            cross_replica.ReduceScatterSum([half]))
  out = tf.function(lambda: strategy.run(Both))()
  res = [[t.numpy() for t in strategy.experimental_local_results(o)]
         for o in out]
  full = vals[0] + vals[1]
  np.testing.assert_array_equal(res[1][0], full)
  np.testing.assert_array_equal(res[0][0], full[:501])
  np.testing.assert_array_equal(res[0][1][:500], full[501:])
  assert res[0][1][500] == 0.0  # 1001 elements padded to 2 x 501.
  assert res[2][0].dtype == tf.bfloat16.as_numpy_dtype
  np.testing.assert_array_equal(res[2][0].astype(np.float32),
                                [1.75, 1.75])
  np.testing.assert_array_equal(res[2][1].astype(np.float32), [1.75, 0.0])


def test_reduce_scatter_sum_refuses_mixed_dtypes_in_one_line():
  with pytest.raises(ValueError, match=r'of one dtype; got dtypes '
                     r"\['bfloat16', 'float32'\]\. Call it once per dtype"):
    cross_replica.ReduceScatterSum([tf.zeros([2]),
                                    tf.zeros([2], tf.bfloat16)])


def test_reduce_scatter_sum_with_one_replica_is_the_packed_vector():
  got = cross_replica.ReduceScatterSum([tf.ones([2, 2]), tf.zeros([1])])
  np.testing.assert_array_equal(got.numpy(), [1, 1, 1, 1, 0])
