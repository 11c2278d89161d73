"""ZeRO-1 with reduce-scattered gradients (update_step.MeanOverReplicas,
cross_replica.ScatteredMean).

MirroredStrategy on the 2 logical CPUs of tests/conftest.py, the model and
data of sharded_cases.py (33 float32 elements: shards of 17 that span
variables, one padding element). Each sharded run is compared with the
unsharded run of the same steps under the same strategy.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import function_def_to_graph  # pylint: disable=g-direct-tensorflow-import

from learner import update_step
from learner import gradient_tape
from learner.optimizers.rules.adam import Adam
from learner.training.cluster import distribution

import sharded_cases as cases  # pylint: disable=g-bad-import-order


@pytest.fixture(scope='module')
def strategy():
  s = distribution.CreateStrategy('mirrored')
  assert s.num_replicas_in_sync == 2
  return s


def _Collectives(strategy, opt, **kw):
  """{op type: [input shapes]} of the collectives of one traced step."""
  task, lrn, _ = cases.Build(strategy, opt, True, **kw)

  def _Replica(x, y):
    with gradient_tape.GradientTape():
      loss = task.Loss(x, y)
    lrn.Apply({'loss': (loss, tf.constant(4.0))}, task.vars)

  spec = [tf.TensorSpec([4, 3]), tf.TensorSpec([4, 2])]
  fn = tf.function(lambda x, y: strategy.run(_Replica, args=(x, y)))
  graph = fn.get_concrete_function(*spec).graph
  graphs = [graph] + [function_def_to_graph.function_def_to_graph(f)
                      for f in graph.as_graph_def().library.function]
  found = {}
  for g in graphs:
    for op in g.get_operations():
      if op.type.startswith('Collective') and op.device.endswith(':0'):
        found.setdefault(op.type, []).append(op.inputs[0].shape.as_list())
  return found


def test_step_sends_one_all_to_all_and_no_gradient_all_reduce(strategy):
  # 33 elements -> [2, 17] chunks, each with 2 extras (weight, loss flag):
  # [2, 19]. All-reduces: the global norm [1] and AnyReplica's 3 flags.
  # The all-gather: the updated [17] slice.
  found = _Collectives(strategy, Adam.Params(),
                       clip_gradient_norm_to_value=0.5,
                       scatter_clipped_gradients=True)
  assert found['CollectiveAllToAllV2'] == [[2, 19]]
  assert sorted(found['CollectiveReduceV2']) == [[1], [3]]
  assert found['CollectiveGatherV2'] == [[17]]


@pytest.mark.parametrize('kw', [dict(l2_regularizer_weight=1e-3),
                                dict(clip_gradient_norm_to_value=0.5)])
def test_l2_or_a_clip_by_default_keeps_the_all_reduce_of_33(strategy, kw):
  found = _Collectives(strategy, Adam.Params(), **kw)
  assert 'CollectiveAllToAllV2' not in found
  assert [33 + 2] in found['CollectiveReduceV2']  # Weight and loss flag.


@pytest.mark.parametrize('name', ['adam', 'momentum', 'adamw'])
def test_without_clip_equals_unsharded_bit_for_bit(strategy, name):
  # a + b == b + a: each slice is the all-reduce's to the bit, and with no
  # clip nothing reads the norm. Step 3's NaN on replica 1 skips in both.
  kw = dict(steps=8, nan_at=(3, 1))
  ref, ref_l = cases.Run(strategy, cases.OPTS[name](), False, **kw)
  got, got_l = cases.Run(strategy, cases.OPTS[name](), True, **kw)
  assert update_step.ScatterReason(got_l.params, got_l.optimizer) is None
  cases.AssertBitEqual(cases.Weights(strategy, ref),
                       cases.Weights(strategy, got))
  res = strategy.experimental_local_results
  for lrn in (ref_l, got_l):
    assert [int(x) for x in res(lrn.num_skipped_steps)] == [1, 1]
    assert [int(x) for x in res(lrn.num_updates)] == [7, 7]


@pytest.mark.parametrize('name', sorted(cases.OPTS))
def test_with_clip_matches_unsharded_and_replicas_agree(strategy, name):
  # The norm is summed slice by slice then over replicas: within 1e-6 of
  # the unsharded (the ZeRO-1 acceptance bound); the replicas bit-equal.
  kw = dict(steps=20, nan_at=(5, 1), clip_gradient_norm_to_value=0.5,
            scatter_clipped_gradients=True)
  ref, _ = cases.Run(strategy, cases.OPTS[name](), False, **kw)
  got, _ = cases.Run(strategy, cases.OPTS[name](), True, **kw)
  want, have = cases.Weights(strategy, ref), cases.Weights(strategy, got)
  for k in want:
    np.testing.assert_array_equal(have[k][0], have[k][1], err_msg=k)
    np.testing.assert_allclose(have[k][0], want[k][0], rtol=1e-6, atol=1e-7,
                               err_msg=k)


def test_mixed_dtypes_scatter_each_and_match_unsharded(strategy):
  # b1 and b2 in bfloat16 (8 elements: one slice of 4 each), w1 and w2 in
  # float32 (25: slices of 13): two all-to-alls, the extras in the first.
  kw = dict(var_dtypes={'b1': tf.bfloat16, 'b2': tf.bfloat16})
  found = _Collectives(strategy, Adam.Params(), **kw)
  assert sorted(found['CollectiveAllToAllV2']) == [[2, 4 + 2], [2, 13]]
  ref, _ = cases.Run(strategy, Adam.Params(), False, steps=6, **kw)
  got, _ = cases.Run(strategy, Adam.Params(), True, steps=6, **kw)
  cases.AssertBitEqual(cases.Weights(strategy, ref),
                       cases.Weights(strategy, got))


def test_reasons_that_keep_the_all_reduce(strategy):
  def Reason(opt, shard=True, **kw):
    _, lrn, _ = cases.Build(strategy, opt, shard, **kw)
    return update_step.ScatterReason(lrn.params, lrn.optimizer)
  assert Reason(Adam.Params()) is None
  assert Reason(Adam.Params(), clip_gradient_norm_to_value=1.0) == (
      'the global norm clips or tracks (scatter_clipped_gradients=False)')
  assert Reason(Adam.Params(), grad_norm_to_clip_to_zero=9.0,
                scatter_clipped_gradients=True) is None
  assert Reason(Adam.Params(), l1_regularizer_weight=0.0) == (
      'an L1/L2 regularizer')
  assert Reason(Adam.Params(), per_variable_norm_metrics=True) == (
      'per_variable_norm_metrics')
  assert Reason(Adam.Params(), adaptive_clip_ratio=0.1) == 'adaptive clipping'
  assert Reason(cases.Accumulated('adam')) == (
      'a wrapper or accumulation around the rule')
  assert Reason(Adam.Params(), shard=False) == 'no flat-slice sharded state'
  opt, kw = cases.HomeRule('muon')
  assert Reason(opt, **kw) == 'no flat-slice sharded state'
