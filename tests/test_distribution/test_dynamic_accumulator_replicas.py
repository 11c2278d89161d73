"""DynamicAccumulator under MirroredStrategy (2 logical CPUs) and ZeRO-1.

The weight a window counts under a strategy is the global batch weight:
each step's weight summed over the replicas. Two replicas, SGD inside,
rate 1, min_accum_weight 10, loss = w * g; replica weights (3, 4) then
(2, 1): the global sums are 7, then 10, so the update comes on step 2 (a
replica alone would count 5 on step 2 and wait). The update is the
weighted mean over all four shards, (3*1 + 4*2 + 2*3 + 1*4) / 10 = 2.1,
so w = -2.1 on both replicas; one process fed the union of each step
(weight 7, mean 11/7; weight 3, mean 10/3) gives the same numbers.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import gradient_tape
from learner import learner as learner_lib
from learner.optimizers import sharded_state
from learner.optimizers.base import SGD
from learner.optimizers.rules.adam import Adam
from learner.optimizers.wrappers.dynamic_accumulator import DynamicAccumulator
from learner.training.cluster import distribution
from params import NestedMap

import sharded_cases as cases  # pylint: disable=g-bad-import-order

# Per step: [(g, weight) of replica 0, of replica 1].
_SHARDS = [[(1.0, 3.0), (2.0, 4.0)], [(3.0, 2.0), (4.0, 1.0)]]


@pytest.fixture(scope='module')
def mirrored():
  s = distribution.CreateStrategy('mirrored')
  assert s.num_replicas_in_sync == 2
  return s


def _Build(sync_on_apply=True):
  w = tf.Variable(0.0, name='w')
  vmap = NestedMap(w=w)
  opt = DynamicAccumulator.Params().Set(
      optimizer=SGD.Params(), min_accum_weight=10.0,
      sync_on_apply=sync_on_apply)
  lrn = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=1.0, optimizer=opt).Instantiate()
  lrn.Bind(vmap)

  def _Step(g, n):
    with gradient_tape.GradientTape():
      loss = w * g
    lrn.Apply({'loss': (loss, n)}, vmap)

  return w, lrn, _Step


def _Locals(strategy, v):
  return [float(x.numpy()) for x in strategy.experimental_local_results(v)]


@pytest.mark.parametrize('sync_on_apply', [True, False])
def test_window_counts_the_global_batch_weight(mirrored, sync_on_apply):
  with mirrored.scope():
    w, lrn, replica_step = _Build(sync_on_apply)

  @tf.function
  def _Step(g, n):
    mirrored.run(replica_step, args=(g, n))

  def _Dist(vals):
    return mirrored.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(vals[ctx.replica_id_in_sync_group]))

  seen = []
  for shards in _SHARDS:
    _Step(_Dist([g for g, _ in shards]), _Dist([n for _, n in shards]))
    seen.append((_Locals(mirrored, lrn.optimizer.window_weight),
                 _Locals(mirrored, lrn.num_updates)))
  assert seen == [([7.0, 7.0], [0.0, 0.0]), ([0.0, 0.0], [1.0, 1.0])]
  distribution.AssertReplicasIdentical([w] + lrn.vars.Flatten())
  np.testing.assert_allclose(_Locals(mirrored, w), [-2.1, -2.1], rtol=1e-6)
  # A partial window, then Reset in the cross-replica context: emptied.
  _Step(_Dist([1.0, 1.0]), _Dist([3.0, 4.0]))
  assert _Locals(mirrored, lrn.optimizer.window_weight) == [7.0, 7.0]
  lrn.optimizer.Reset()
  assert _Locals(mirrored, lrn.optimizer.window_weight) == [0.0, 0.0]
  assert _Locals(mirrored, lrn.optimizer.GetAccumulator(w)) == [0.0, 0.0]


def test_one_process_over_the_union_gives_the_same_numbers():
  w, lrn, step = _Build()
  fn = tf.function(step)
  for shards in _SHARDS:
    total = sum(n for _, n in shards)
    mean = sum(g * n for g, n in shards) / total
    fn(tf.constant(mean), tf.constant(total))
  np.testing.assert_allclose(w.numpy(), -2.1, rtol=1e-6)
  assert int(lrn.num_updates.numpy()) == 1


@pytest.mark.parametrize('sync_on_apply', [True, False])
def test_sharded_state_bit_identical_to_unsharded(mirrored, sync_on_apply):
  # sharded_cases' MLP, 4 examples (weight 4) per replica: a global 8 per
  # step, so min 20 applies on steps 3, 6, 9, ... (6 updates in 20 steps
  # with 2 pending); Adam inside, clip 0.5, a NaN shard at step 5.
  opt = DynamicAccumulator.Params().Set(
      optimizer=Adam.Params(), min_accum_weight=20.0,
      sync_on_apply=sync_on_apply)
  kw = dict(clip_gradient_norm_to_value=0.5, nan_at=(5, 1))
  ref, ref_l = cases.Run(mirrored, opt, False, **kw)
  got, got_l = cases.Run(mirrored, opt, True, **kw)
  wa, wb = cases.Weights(mirrored, ref), cases.Weights(mirrored, got)
  for k in wa:
    np.testing.assert_array_equal(wb[k][0], wb[k][1], err_msg=k)
    np.testing.assert_array_equal(wb[k][0], wa[k][0], err_msg=k)
  for lrn in (ref_l, got_l):
    assert _Locals(mirrored, lrn.num_updates) == [6.0, 6.0]
    assert _Locals(mirrored, lrn.optimizer.window_weight) == [16.0, 16.0]
    assert _Locals(mirrored, lrn.optimizer.num_dropped_microbatches) == [
        1.0, 1.0]
  # The sharded run keeps Adam's slots in halves: 2 x 17 x 4 B per replica.
  assert sharded_state.ShardedBytesLine([got_l.optimizer]) == (
      'Optimizer state sharded over 2 replicas: 136 B per replica '
      '(unsharded 264 B).')
  assert sharded_state.ShardedBytesLine([ref_l.optimizer]) is None
