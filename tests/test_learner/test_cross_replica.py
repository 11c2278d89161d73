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
