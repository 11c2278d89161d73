"""Accumulation under MirroredStrategy with a non-finite shard (issue 13 B).

Two replicas, GradientAccumulation(num_batches=2) around SGD, learner rate
1.0, loss = g * w (d loss / d w = g), w from 0. Micro-batch 1: replica 0
(g 1, weight 1), replica 1 (g NaN, weight 3); micro-batch 2: replica 0
(g 2, weight 2), replica 1 (g 4, weight 4). Only the NaN shard is dropped,
with either sync_on_apply: the update is sum(w g) / sum(w) over the finite
shards = (1 + 4 + 16) / (1 + 2 + 4) = 3, so w = -3; the window drops one
shard and every replica counts num_dropped_microbatches = 1. A one-process
run whose four micro-batches are those shards gives the same numbers.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import gradient_tape
from learner import learner as learner_lib
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.optimizers.base import SGD
from learner.training.cluster import distribution
from params import NestedMap

_SHARDS = [[(1.0, 1.0), (np.nan, 3.0)], [(2.0, 2.0), (4.0, 4.0)]]


@pytest.fixture(scope='module')
def mirrored():
  return distribution.CreateStrategy('mirrored')


def _Build(num_batches, sync_on_apply):
  w = tf.Variable(0.0, name='w')
  vmap = NestedMap(w=w)
  opt = GradientAccumulation.Params().Set(
      optimizer=SGD.Params(), num_batches=num_batches,
      sync_on_apply=sync_on_apply)
  lrn = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=1.0, optimizer=opt).Instantiate()
  lrn.Bind(vmap)

  def _Step(g, n):
    with gradient_tape.GradientTape():
      loss = w * g
    _, _, m = lrn.Apply({'loss': (loss, n)}, vmap)
    return m['num_dropped_microbatches'][0]

  return w, lrn, _Step


def _Locals(strategy, v):
  return [float(x.numpy()) for x in strategy.experimental_local_results(v)]


@pytest.mark.parametrize('sync_on_apply', [True, False])
def test_non_finite_shard_dropped_on_its_replica_only(mirrored,
                                                      sync_on_apply):
  assert mirrored.num_replicas_in_sync == 2
  with mirrored.scope():
    w, lrn, replica_step = _Build(2, sync_on_apply)

  @tf.function
  def _Step(g, n):
    return mirrored.run(replica_step, args=(g, n))

  def _Dist(vals):
    return mirrored.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(vals[ctx.replica_id_in_sync_group]))

  reported = None
  for micro in _SHARDS:
    reported = _Step(_Dist([g for g, _ in micro]),
                     _Dist([n for _, n in micro]))
  distribution.AssertReplicasIdentical([w] + lrn.vars.Flatten())
  np.testing.assert_allclose(_Locals(mirrored, w), [-3.0, -3.0], rtol=1e-6)
  assert _Locals(mirrored, lrn.optimizer.num_dropped_microbatches) == [1, 1]
  assert _Locals(mirrored, reported) == [1.0, 1.0]
  assert _Locals(mirrored, lrn.num_updates) == [1, 1]
  assert _Locals(mirrored, lrn.num_skipped_steps) == [0, 0]


def test_one_process_over_the_shards_gives_the_same_numbers():
  w, lrn, step = _Build(4, True)
  fn = tf.function(step)
  for micro in _SHARDS:
    for g, n in micro:
      fn(tf.constant(g), tf.constant(n))
  np.testing.assert_allclose(w.numpy(), -3.0, rtol=1e-6)
  assert int(lrn.optimizer.num_dropped_microbatches.numpy()) == 1
  assert int(lrn.num_updates.numpy()) == 1
