"""ZeRO-1 by home replica (issue 38, item 1): whole-tensor rules, same numbers.

MirroredStrategy on the 2 logical CPUs of tests/conftest.py; the model and
data are sharded_cases.py's. Muon, Adafactor (factored and not), LAMB,
SOAP: each variable's slots live on its home replica only
(learner/optimizers/home_sharding.py); LARS: its trust ratio reads the
full tensors every replica holds, its inner Momentum is sharded by flat
slices. Each case runs with `shard_optimizer_state` False and True under
the same strategy and compares the weights (within 1e-6 relative, the
acceptance bound; measured: equal bit for bit). bfloat16 weights with
float32 masters (issue 38 item 3; Muon, Adafactor, nearest and stochastic
rounding, and weights of both dtypes in one learner) are compared bit for
bit: every tensor of the two runs' checkpoints. The same rules across 2
worker processes: test_two_workers_homes_equal_unsharded, in
test_sharded_state.py (one launch of zero_worker.py for every ZeRO-1 case).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import cross_replica
from learner.learner import Learner
from learner.optimizers import home_sharding
from learner.optimizers import sharded_state
from learner.optimizers.rules.adafactor import Adafactor
from learner.optimizers.rules.adam import Adam
from learner.optimizers.rules import muon as muon_lib
from learner.optimizers.rules.muon import Muon
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import NestedMap
from schedules import ConstantOne

import sharded_cases as cases  # pylint: disable=g-bad-import-order

_CLIP = dict(clip_gradient_norm_to_value=0.5, l2_regularizer_weight=1e-3)


@pytest.fixture(scope='module')
def strategy():
  s = distribution.CreateStrategy('mirrored')
  assert s.num_replicas_in_sync == 2
  return s


def _Run(strategy, name, shard, num_batches=None, **kw):
  opt, lkw = cases.HomeRule(name, num_batches)
  return cases.Run(strategy, opt, shard, **dict(kw, **lkw))


def _AssertSame(strategy, a, b):
  wa, wb = cases.Weights(strategy, a), cases.Weights(strategy, b)
  for k in wa:
    np.testing.assert_array_equal(wb[k][0], wb[k][1], err_msg=k)
    np.testing.assert_allclose(wb[k][0], wa[k][0], rtol=1e-6, atol=1e-7,
                               err_msg=k)


def _AssertMoved(strategy, task, names):
  w0 = cases.Mlp.Params().Instantiate().vars
  w = cases.Weights(strategy, task)
  for k in names:
    assert np.abs(w[k][0] - w0[k].numpy()).max() > 1e-4, k


def _StateOf(lrn):
  return sharded_state.StateOf(lrn.optimizer)


@pytest.mark.parametrize('name', sorted(cases.HOME_RULES))
def test_whole_tensor_rules_match_unsharded_with_clip(strategy, name):
  ref, _ = _Run(strategy, name, False, **_CLIP)
  got, lrn = _Run(strategy, name, True, **_CLIP)
  _AssertSame(strategy, ref, got)
  _AssertMoved(strategy, got, ['w1', 'w2'])
  zero = _StateOf(lrn)
  assert zero.sharded
  if name == 'lars':  # Momentum inside: flat slices, 17 of 33 (+1 pad).
    assert isinstance(zero, sharded_state.ShardedState)
    assert zero.SlotBytesPerReplica() == 17 * 4
    return
  assert isinstance(zero, home_sharding.HomeState)
  # ZeRO-1's memory bound for homes: a replica holds at most 1/N of the
  # unsharded state plus the largest one variable's.
  assert zero.SlotBytesPerReplica() <= (zero.UnshardedSlotBytes() / 2 +
                                        zero.LargestVariableSlotBytes())
  assert zero.SlotBytesPerReplica() < zero.UnshardedSlotBytes()
  for buf in zero.buffers:
    assert buf.synchronization == tf.VariableSynchronization.ON_READ


@pytest.mark.parametrize('name', ['muon', 'adafactor_factored', 'lamb',
                                  'lars'])
def test_whole_tensor_rules_with_accumulation(strategy, name):
  # GradientAccumulation(4) outermost, clip; micro-step 5 (window 2) holds
  # a NaN on replica 1: dropped on its replica, in both runs.
  kw = dict(clip_gradient_norm_to_value=0.5, nan_at=(5, 1))
  ref, ref_l = _Run(strategy, name, False, num_batches=4, **kw)
  got, got_l = _Run(strategy, name, True, num_batches=4, **kw)
  assert _StateOf(got_l).sharded
  _AssertSame(strategy, ref, got)
  res = strategy.experimental_local_results
  for lrn in (ref_l, got_l):
    assert [int(x) for x in res(lrn.optimizer.num_dropped_microbatches)] == [
        1, 1]
    assert [int(x) for x in res(lrn.num_updates)] == [5, 5]


def _TwoLearnersRun(strategy, shard, steps=20):
  """Muon.TwoLearners: Muon on w1, w2 and AdamW on b1, b2, each learner
  sharded (Muon by homes, AdamW by flat slices), clip."""
  base = Learner.Params().Set(
      name='x', loss_name='loss', learning_rate=0.05,
      lr_schedule=ConstantOne.Params(), clip_gradient_norm_to_value=0.5,
      shard_optimizer_state=shard)
  params = Muon.TwoLearners(base, r'/w\d$')
  with strategy.scope():
    task = cases.Mlp.Params().Instantiate()
    learners = [p.Instantiate() for p in params]
    for lrn in learners:
      lrn.Bind(task.vars)

  def _Replica(x, y):
    vs = task.vars
    with tf.GradientTape() as tape:
      loss = task.Loss(x, y)
    grads = dict(zip(vs.keys(), tape.gradient(loss, list(vs.values()))))
    for lrn, keys in zip(learners, (('w1', 'w2'), ('b1', 'b2'))):
      lrn.ApplyGradients(NestedMap({k: VarGrad(vs[k], grads[k])
                                    for k in keys}), 4.0)

  step = tf.function(lambda x, y: strategy.run(_Replica, args=(x, y)))
  dist = strategy.experimental_distribute_values_from_function
  for i in range(steps):
    step(dist(lambda ctx, i=i: tf.constant(
        cases.Data(i, ctx.replica_id_in_sync_group)[0])),
         dist(lambda ctx, i=i: tf.constant(
             cases.Data(i, ctx.replica_id_in_sync_group)[1])))
  return task, learners


def test_muon_two_learners_each_sharded_match_unsharded(strategy):
  ref, _ = _TwoLearnersRun(strategy, False)
  got, (muon, adamw) = _TwoLearnersRun(strategy, True)
  assert isinstance(_StateOf(muon), home_sharding.HomeState)
  assert isinstance(_StateOf(adamw), sharded_state.ShardedState)
  _AssertSame(strategy, ref, got)
  _AssertMoved(strategy, got, ['w1', 'b1', 'w2', 'b2'])
  # w1 [3, 5] and w2 [5, 2] on different homes: 15 and 10 momentum
  # elements; each replica's buffer holds 15 (w2's replica pads 5).
  assert _StateOf(muon).homes == [0, 1]
  assert _StateOf(muon).SlotBytesPerReplica() == 15 * 4
  assert sharded_state.ShardedBytesLine([muon.optimizer, adamw.optimizer]) == (
      'Optimizer state sharded over 2 replicas: 92 B per replica '
      '(unsharded 164 B).')  # Muon 60 + AdamW 2 x 4 x 4; 100 + 2 x 8 x 4.


# ---- checkpoints: the unsharded format, 2 -> 1 and 1 -> 2 --------------------


def _Save(strategy, name, shard, path, steps=5, rule=None):
  opt, kw = (rule or (lambda: cases.HomeRule(name)))()
  return cases.Save(strategy, opt, shard, path, steps, **kw)


def _Continue(strategy, name, shard, path, steps=(5, 6, 7), rule=None):
  opt, kw = (rule or (lambda: cases.HomeRule(name)))()
  return cases.Continue(strategy, opt, shard, path, steps, **kw)




@pytest.mark.slow  # ~20 s on a loaded 2-core machine.
@pytest.mark.parametrize('name', ['muon', 'adafactor_factored'])
def test_checkpoint_is_the_unsharded_one_and_restores_across_counts(
    strategy, name, tmp_path):
  one = tf.distribute.get_strategy()  # The default: one device.
  sharded2 = _Save(strategy, name, True, str(tmp_path / 's2'))
  plain2 = _Save(strategy, name, False, str(tmp_path / 'p2'))
  ta, tb = cases.Tensors(plain2), cases.Tensors(sharded2)
  assert sorted(ta) == sorted(tb)
  slots = [k for k in ta if '/_slots/' in k]
  assert slots and all(np.abs(ta[k]).max() > 0 for k in slots)
  if name == 'adafactor_factored':  # vr [3] and vc [5] of w1 [3, 5].
    assert {ta[k].shape for k in slots if '_w1/v' in k} == {(3,), (5,)}
  for k in ta:
    np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)
  # 2 -> 1: continues on one device as the unsharded run's checkpoint.
  cases.AssertBitEqual(_Continue(one, name, False, sharded2),
                  _Continue(one, name, False, plain2))
  # 1 -> 2: a one-device checkpoint continues sharded as unsharded.
  plain1 = _Save(one, name, False, str(tmp_path / 'p1'))
  cases.AssertBitEqual(_Continue(strategy, name, True, plain1),
                  _Continue(strategy, name, False, plain1))


# ---- the partition, the costs, the refusals ----------------------------------


def test_homes_are_greedy_by_cost_by_hand():
  # Largest first to the least-loaded replica (ties: lower index, lower
  # replica): 5 -> r0 (5), 3 -> r1 (3), 3 -> r1 (6), 2 -> r0 (7), 1 -> r1.
  assert home_sharding.Homes([3, 5, 1, 3, 2], 2) == [1, 0, 1, 1, 0]
  assert home_sharding.Homes([4, 4, 4], 3) == [0, 1, 2]
  assert home_sharding.Homes([1, 1], 4) == [0, 1]
  # Muon's cost: 5 iterations on [3, 5] (r = 3, c = 5): per iteration
  # 4 r^2 c + 2 r^3 = 180 + 54; [5, 2] is seen on its wide side [2, 5].
  muon = Muon.Params().Set(name='m').Instantiate()
  assert muon.ShardCost(tf.zeros([3, 5])) == 5 * 234
  assert muon.ShardCost(tf.zeros([5, 2])) == 5 * (4 * 4 * 5 + 2 * 8)
  # Adafactor's: its slots' bytes, vr [3] + vc [5] factored, v [3, 5] not.
  ada = Adafactor.Params().Set(name='a', min_dim_size_to_factor=2)
  assert ada.Instantiate().ShardCost(tf.zeros([3, 5])) == 8 * 4
  assert ada.Set(factored=False).Instantiate().ShardCost(
      tf.zeros([3, 5])) == 15 * 4


def test_adafactor_buffers_and_bytes_line_by_hand(strategy):
  # Slot bytes, beta1 = 0.9 (m) and factored: w1 (15 + 3 + 5) x 4 = 92,
  # w2 (10 + 5 + 2) x 4 = 68, b1 (5 + 5) x 4 = 40, b2 (3 + 3) x 4 = 24.
  # Homes: w1 -> r0, w2 -> r1, b1 -> r1 (68 < 92), b2 -> r0 (92 < 108):
  # replica 0 holds 29 elements, replica 1 27 (2 padding): 116 B each.
  _, lrn = _Run(strategy, 'adafactor_factored', True, steps=1)
  zero = _StateOf(lrn)
  order = [k for k, _ in sorted(cases.SHAPES)]  # Bind order: b1 b2 w1 w2.
  assert dict(zip(order, zero.homes)) == dict(w1=0, w2=1, b1=1, b2=0)
  (buf,) = zero.buffers
  assert [c.shape for c in buf.values] == [[29], [29]]
  assert sharded_state.ShardedBytesLine([lrn.optimizer]) == (
      'Optimizer state sharded over 2 replicas: 116 B per replica '
      '(unsharded 224 B).')
  assert zero.LargestVariableSlotBytes() == 92


def test_a_rule_that_is_not_whole_tensor_is_refused_by_homes_in_one_line():
  # Install gives such a rule flat slices; HomeState itself refuses it.
  adam = Adam.Params().Set(name='opt').Instantiate()
  with pytest.raises(ValueError) as e:
    home_sharding.HomeState(adam, None).CheckRule(adam)
  assert str(e.value) == (
      'opt: shard_optimizer_state=True with Adam: it is not a WHOLE_TENSOR '
      'rule. Set shard_optimizer_state=False.')


# ---- bfloat16 weights with a float32 master (issue 38 item 3) ----------------


def _MasterRule(name, stochastic, num_batches=None):
  """HomeRule(name, num_batches) with master_weights on the rule."""
  opt, kw = cases.HomeRule(name, num_batches)
  rule = opt.optimizer if num_batches else opt
  rule.Set(master_weights=True, master_stochastic_rounding=stochastic)
  return opt, dict(kw, dtype=tf.bfloat16)


@pytest.mark.parametrize('stochastic', [False, True])
@pytest.mark.parametrize('name', ['muon', 'adafactor_factored'])
def test_bf16_master_weights_match_unsharded(strategy, name, stochastic,
                                             tmp_path):
  # bfloat16 weights, float32 masters homed; clip, GradientAccumulation(4),
  # 20 micro-steps (5 updates): every checkpointed tensor (weights, masters,
  # slots, counters) bit for bit the unsharded run's.
  runs = []
  for shard in (False, True):
    opt, kw = _MasterRule(name, stochastic, num_batches=4)
    task, lrn = cases.Run(strategy, opt, shard,
                          clip_gradient_norm_to_value=0.5, **kw)
    path = tf.train.Checkpoint(task=task, learner=lrn).write(
        str(tmp_path / str(shard)))
    runs.append((task, lrn, cases.Tensors(path)))
  (_, _, ta), (task, lrn, tb) = runs
  assert sorted(ta) == sorted(tb)
  for k in ta:
    np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)
  w = cases.Weights(strategy, task)
  for k in w:
    assert w[k][0].dtype == tf.bfloat16.as_numpy_dtype
    np.testing.assert_array_equal(w[k][0], w[k][1], err_msg=k)
  _AssertMoved(strategy, task, ['w1', 'w2'])
  masters = {k.split('/')[-4]: tb[k] for k in tb if k.endswith(
      '/master/.ATTRIBUTES/VARIABLE_VALUE')}
  bound = ['mlp_w1', 'mlp_w2'] + ([] if name == 'muon' else
                                  ['mlp_b1', 'mlp_b2'])
  assert sorted(masters) == sorted(bound)
  off = 0  # Elements whose weight is not the master rounded to nearest.
  for key, master in masters.items():
    assert master.dtype == np.float32
    nearest = master.astype(tf.bfloat16.as_numpy_dtype)
    off += int(np.sum(w[key.split('_')[1]][0] != nearest))
  # Nearest: none; stochastic: some round the other way (with the unsharded
  # seeds: the weights are equal above).
  assert (off > 0) == stochastic, off
  zero = _StateOf(lrn)
  assert zero.sharded and isinstance(zero, home_sharding.HomeState)
  assert [b.dtype for b in zero.buffers] == [tf.float32]
  assert zero.SlotBytesPerReplica() <= (zero.UnshardedSlotBytes() / 2 +
                                        zero.LargestVariableSlotBytes())
  if name == 'muon':  # w1 [3, 5] on r0, w2 [5, 2] on r1: master + momentum
    # of w1, 30 float32 per replica (w2's 20 padded); unsharded 50.
    assert zero.homes == [0, 1]
    assert zero.SlotBytesPerReplica() == 30 * 4
    assert zero.UnshardedSlotBytes() == 50 * 4


def test_bf16_and_float32_weights_mixed_in_homes_match_unsharded(
    strategy, tmp_path, monkeypatch):
  # w1, b2 bfloat16 (float32 masters), w2, b1 float32 (their own masters);
  # slots in bfloat16. Costs (SlotBytes), m + vr + vc or m + v at 2 B:
  # w1 15 x 4 master + 23 x 2 = 106, w2 17 x 2 = 34, b1 10 x 2 = 20,
  # b2 3 x 4 + 6 x 2 = 24. Homes: w1 -> r0, w2, b2, b1 -> r1 (34, 58,
  # 78 < 106): r1 gathers bfloat16 b2 and float32 w2, b1 in one vector.
  # Buffers: float32 masters 15 (r0) and 3 (r1); bfloat16 slots 23 (r0)
  # and 33 (r1): 15 x 4 + 33 x 2 = 126 B per replica (unsharded 18 x 4 +
  # 56 x 2 = 184 B).
  gathers = []  # (dtype, size) of each traced weights' all-gather.
  monkeypatch.setattr(cross_replica, 'AllGather', lambda t, f=(
      cross_replica.AllGather): gathers.append((t.dtype, t.shape)) or f(t))
  tensors = []
  for shard in (False, True):
    opt, kw = _MasterRule('adafactor_factored', False)
    opt.slot_dtype = tf.bfloat16
    task, lrn = cases.Run(strategy, opt, shard, var_dtypes=dict(
        w2=tf.float32, b1=tf.float32), clip_gradient_norm_to_value=0.5, **kw)
    tensors.append(cases.Tensors(tf.train.Checkpoint(task=task, learner=lrn).write(
        str(tmp_path / str(shard)))))
  ta, tb = tensors
  assert sorted(ta) == sorted(tb)
  for k in ta:
    np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)
  w = cases.Weights(strategy, task)
  assert {k: w[k][0].dtype.name for k in w} == dict(
      w1='bfloat16', b2='bfloat16', w2='float32', b1='float32')
  _AssertMoved(strategy, task, ['w1', 'w2', 'b1', 'b2'])
  assert sorted(k.split('/')[-4] for k in tb if '/master/' in k) == [
      'mlp_b2', 'mlp_w1']
  zero = _StateOf(lrn)
  assert zero.homes == [1, 1, 0, 1]  # Bind order b1 b2 w1 w2.
  assert lrn.optimizer.ShardCost(task.vars.w1) == 106
  assert [b.dtype for b in zero.buffers] == [tf.bfloat16, tf.float32]
  assert zero.SlotBytesPerReplica() == 126
  assert zero.UnshardedSlotBytes() == 184
  # One float32 gather per replica's trace: r1's 10 + 5 + 3, r0's 15 + 3.
  assert gathers == [(tf.float32, [18])] * 2


def test_homed_masters_are_refused_without_bf16_weights_as_unsharded(
    strategy):
  # The unsharded Bind's refusal (low_precision.CheckMastersBound) holds.
  opt, kw = _MasterRule('muon', False)
  with pytest.raises(ValueError, match=r'master_weights=True but no bound '
                     r'variable is bfloat16 or float16'):
    cases.Build(strategy, opt, True, **dict(kw, dtype=None))


@pytest.mark.slow  # ~15 s on a loaded 2-core machine.
def test_bf16_master_checkpoint_restores_across_counts(strategy, tmp_path):
  # Muon, stochastic rounding (its seed is num_updates, restored too).
  one = tf.distribute.get_strategy()
  rule = lambda: _MasterRule('muon', True)
  sharded2 = _Save(strategy, 'muon', True, str(tmp_path / 's2'), rule=rule)
  plain2 = _Save(strategy, 'muon', False, str(tmp_path / 'p2'), rule=rule)
  ta, tb = cases.Tensors(plain2), cases.Tensors(sharded2)
  assert sorted(ta) == sorted(tb) and any('/master/' in k for k in ta)
  for k in ta:
    np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)
  cases.AssertBitEqual(_Continue(one, 'muon', False, sharded2, rule=rule),
                  _Continue(one, 'muon', False, plain2, rule=rule))
  plain1 = _Save(one, 'muon', False, str(tmp_path / 'p1'), rule=rule)
  cases.AssertBitEqual(_Continue(strategy, 'muon', True, plain1, rule=rule),
                  _Continue(strategy, 'muon', False, plain1, rule=rule))


# ---- Muon's same-shape batches inside a replica (issue 40 item 2) -----------


def _SameShapeMuonRun(strategy, shard, stacks, steps=3):
  """Muon (decay 0.1, batch_shapes) on four [4, 3] matrices and a [3, 5] one, 2 replicas;
  appends the leading dim of every Newton-Schulz input traced to `stacks`.
  Returns the weights (replica 0's copy)."""
  rng = np.random.RandomState(0)
  shapes = [(4, 3)] * 4 + [(3, 5)]
  init = [rng.randn(*s).astype(np.float32) for s in shapes]
  grads = [[rng.randn(*s).astype(np.float32) for s in shapes]
           for _ in range(steps)]
  p = Learner.Params().Set(
      name='x', loss_name='loss', learning_rate=0.05,
      lr_schedule=ConstantOne.Params(), shard_optimizer_state=shard,
      optimizer=Muon.Params().Set(decoupled_weight_decay=0.1,
                                  batch_shapes=True))
  with strategy.scope():
    vs = NestedMap({'w%d' % i: tf.Variable(w, name='w%d' % i)
                    for i, w in enumerate(init)})
    lrn = p.Instantiate()
    lrn.Bind(vs)
  original = muon_lib.NewtonSchulz

  def Recording(x, *args, **kw):
    stacks.append(int(x.shape[0]))
    return original(x, *args, **kw)

  def _Replica(g):
    lrn.ApplyGradients(NestedMap({k: VarGrad(vs[k], g[i])
                                  for i, k in enumerate(sorted(vs))}))

  step = tf.function(lambda g: strategy.run(_Replica, args=(g,)))
  muon_lib.NewtonSchulz = Recording
  try:
    for g in grads:
      step([tf.constant(x) for x in g])
  finally:
    muon_lib.NewtonSchulz = original
  return [strategy.experimental_local_results(vs[k])[0].numpy()
          for k in sorted(vs)], sharded_state.StateOf(lrn.optimizer)


def test_muon_batches_same_shapes_within_each_home_replica(strategy):
  # Unsharded, each replica steps all five: a stack of four [4, 3] and one
  # of one [3, 5]; sharded, a replica stacks only its own homes. The
  # grouping changes no number: batched matmuls round a matrix the same in
  # any batch, so the runs are equal bit for bit.
  plain_stacks, sharded_stacks = [], []
  plain, _ = _SameShapeMuonRun(strategy, False, plain_stacks)
  sharded, state = _SameShapeMuonRun(strategy, True, sharded_stacks)
  assert sorted(set(plain_stacks)) == [1, 4]
  homes = state.homes  # Of w0..w3 [4, 3] and w4 [3, 5].
  assert 0 < homes[:4].count(0) < 4
  expected = {homes[:4].count(0), homes[:4].count(1), 1}
  assert set(sharded_stacks) == expected
  for a, b in zip(plain, sharded):
    np.testing.assert_array_equal(b, a)
