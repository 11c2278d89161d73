"""Replicas never diverge: every skip decision is taken once (issue 21, 3).

MirroredStrategy on the 2 logical CPUs of tests/conftest.py. The task has
one variable w [2]; loss = <g, w> + c with g, c and the loss weight fed per
replica, so d loss / d w = g and c alone can make a loss NaN while its
gradient stays finite. SGD (rate 1) unless said: an applied step moves w by
-sum(n_r g_r) / sum(n_r). Whatever one replica sees, both replicas end
with the same weights (distribution.AssertReplicasIdentical, bit for bit),
the same counters, and a skip counted once on each copy.
"""

import io
import json

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from configs import model_tasks
from learner import cross_replica
from learner import grad_norm_tracker
from learner import optimizers
from learner.learner import Learner
from learner.optimizers import base as base_optimizer
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.training.cluster import distribution
from learner.training.jobs import trainer as trainer_lib
from learner.training.model.input_generator import DatasetInput
from params import BaseLayer
from params import NestedMap
from params import hyperparams
from schedules import ConstantOne

import scenarios  # pylint: disable=g-bad-import-order

_NAN = float('nan')


@pytest.fixture(scope='module')
def strategy():
  s = distribution.CreateStrategy('mirrored')
  assert s.num_replicas_in_sync == 2
  return s


class WTask(BaseLayer):
  """One variable w [2], starting at `init`."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'wtask'
    p.Define('init', 0.0, 'Initial value of both entries of w.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [2], init=self.params.init)


def _PerReplica(strategy, values):
  return strategy.experimental_distribute_values_from_function(
      lambda ctx: tf.constant(values[ctx.replica_id_in_sync_group],
                              tf.float32))


def _Build(strategy, init=0.0, via=None, eager=False, **kw):
  """(task, learner, step(g, c, n, m)): m is a per-replica scalar passed
  as the gradient mask of w (via='mask') or multiplied into the gradient
  by a gradient_adjuster (via='adjuster'); ignored otherwise. With eager,
  the step is not a tf.function (strategy.run eagerly)."""
  with strategy.scope():
    task = WTask.Params().Set(init=init).Instantiate()
    p = Learner.Params().Set(name='loss', learning_rate=1.0,
                             lr_schedule=ConstantOne.Params()).Set(**kw)
    if p.optimizer is None:
      p.optimizer = base_optimizer.SGD.Params()
    lrn = p.Instantiate()
    lrn.Bind(task.vars)

  def _Fn(g, c, n, m):
    kwargs = {}
    if via == 'mask':
      kwargs['gradient_mask'] = {'wtask/w': m}
    elif via == 'adjuster':
      kwargs['gradient_adjuster'] = lambda vgs: vgs.Transform(
          lambda vg: learner_lib.VarGrad(vg.var, vg.grad * m))
    with learner_lib.GradientTape():  # Used only when eager.
      loss = tf.reduce_sum(g * task.theta.w) + c
    return lrn.Apply({'loss': (loss, n)}, task.vars, **kwargs)[2]

  def _Step(g, c, n, m=(1.0, 1.0)):
    args = [_PerReplica(strategy, v) for v in (g, c, n, m)]
    return strategy.run(_Fn, args=args)

  return task, lrn, (_Step if eager else tf.function(_Step))


def _Locals(strategy, v):
  return [x.numpy() for x in strategy.experimental_local_results(v)]


def _Reasons(strategy, lrn):
  """{reason: count} of each replica's copy of the learner's statistics."""
  by_reason = lrn._update_step.by_reason  # pylint: disable=protected-access
  return [dict(zip(learner_lib.learner.SKIP_REASONS, (int(c) for c in x)))
          for x in _Locals(strategy, by_reason)]


def _Counted(strategy, lrn, updates, skipped, reason=None):
  """Both replicas hold the same counters: updates, skips, their reason."""
  assert [int(x) for x in _Locals(strategy, lrn.num_updates)] == [updates] * 2
  assert [int(x) for x in _Locals(strategy, lrn.num_skipped_steps)] == (
      [skipped] * 2)
  if reason is not None:
    for counts in _Reasons(strategy, lrn):
      assert counts[reason] == skipped, counts


def _Same(task, lrn, w):
  """w on both replicas (bit-identical) equals `w`."""
  distribution.AssertReplicasIdentical(task.vars.Flatten() + lrn.vars.Flatten())
  np.testing.assert_allclose(task.vars.w.values[0].numpy(), w, rtol=1e-6)


# ---- the losses: empty replica batches and a NaN on one replica -------------


def test_nan_loss_on_one_replica_skips_on_both(strategy):
  # Replica 1's loss is NaN (c), its gradient [0, 1] finite. Before issue
  # 21 only replica 1 skipped: replica 0 moved to [-0.5, -0.5].
  task, lrn, step = _Build(strategy)
  step([[1., 0.], [0., 1.]], [0., _NAN], [1., 1.])
  _Same(task, lrn, [0., 0.])
  _Counted(strategy, lrn, updates=0, skipped=1, reason='non-finite loss')
  # The next finite step applies on both: -(1*[1,0] + 1*[0,1]) / 2.
  step([[1., 0.], [0., 1.]], [0., 0.], [1., 1.])
  _Same(task, lrn, [-0.5, -0.5])
  _Counted(strategy, lrn, updates=1, skipped=1)


def test_empty_replica_batch_contributes_weight_0(strategy):
  # Replica 1 has no example: weight 0, NaN loss and NaN gradient. The
  # update is replica 0's alone: w = -[1, 2] (not NaN, not skipped).
  task, lrn, step = _Build(strategy)
  m = step([[1., 2.], [_NAN, _NAN]], [0., _NAN], [2., 0.])
  _Same(task, lrn, [-1., -2.])
  _Counted(strategy, lrn, updates=1, skipped=0)
  assert [float(x) for x in _Locals(strategy, m['has_nan_or_inf'][0])] == [
      0., 0.]


def test_no_example_on_any_replica_skips_as_other(strategy):
  task, lrn, step = _Build(strategy)
  step([[1., 2.], [3., 4.]], [_NAN, _NAN], [0., 0.])
  _Same(task, lrn, [0., 0.])
  _Counted(strategy, lrn, updates=0, skipped=1, reason='other')


# ---- flags raised on one replica only ----------------------------------------


def test_non_finite_adjusted_gradient_on_one_replica_skips_on_both(strategy):
  # The adjuster makes replica 1's gradient NaN (x NaN); replica 0's is
  # finite. Both skip, both count 'non-finite gradient'.
  task, lrn, step = _Build(strategy, via='adjuster')
  m = step([[1., 0.], [0., 1.]], [0., 0.], [1., 1.], [1., _NAN])
  _Same(task, lrn, [0., 0.])
  _Counted(strategy, lrn, updates=0, skipped=1, reason='non-finite gradient')
  assert [float(x) for x in _Locals(strategy, m['has_nan_or_inf'][0])] == [
      1., 1.]


@pytest.mark.parametrize('eager', [False, True])
def test_clip_to_zero_on_one_replica_skips_on_both(strategy, eager):
  # All-reduced gradient [3, 4] (norm 5 < 10); replica 1's mask 4 makes
  # its norm 20 >= grad_norm_to_clip_to_zero 10: both skip ('other').
  task, lrn, step = _Build(strategy, via='mask', eager=eager,
                           grad_norm_to_clip_to_zero=10.0)
  step([[3., 4.], [3., 4.]], [0., 0.], [1., 1.], [1., 4.])
  _Same(task, lrn, [0., 0.])
  _Counted(strategy, lrn, updates=0, skipped=1, reason='other')
  step([[3., 4.], [3., 4.]], [0., 0.], [1., 1.], [1., 1.])
  _Same(task, lrn, [-3., -4.])


def test_tracker_records_the_agreed_verdict_on_both(strategy):
  # Step 1 applies (tracker total_weight 0 -> 0.5 with decay 0.5); step 2
  # has a NaN loss on replica 1: both replicas skip, both trackers count a
  # rejection and keep their averages (total_weight stays 0.5).
  tracker = grad_norm_tracker.GradNormTracker.Params().Set(decay=0.5)
  task, lrn, step = _Build(strategy, grad_norm_tracker=tracker)
  step([[1., 0.], [0., 1.]], [0., 0.], [1., 1.])
  step([[1., 0.], [0., 1.]], [0., _NAN], [1., 1.])
  _Same(task, lrn, [-0.5, -0.5])
  _Counted(strategy, lrn, updates=1, skipped=1, reason='non-finite loss')
  t = lrn.grad_norm_tracker
  assert [int(x) for x in _Locals(strategy, t.total_rejections)] == [1, 1]
  np.testing.assert_array_equal(_Locals(strategy, t.vars.total_weight),
                                [0.5, 0.5])


# ---- check_finite_weights: a tentative update, then one verdict -------------


def _MomentumSlot(strategy, lrn):
  (slot,) = [v for v in lrn.optimizer.variables
             if v.name.endswith('/momentum:0')]
  return [x.tolist() for x in _Locals(strategy, slot)]


def _Checked(strategy, **kw):
  return _Build(strategy, check_finite_weights=True,
                optimizer=optimizers.Momentum.Params().Set(alpha=0.9), **kw)


def test_weights_overflow_on_one_replica_is_undone_on_both(strategy):
  # Momentum v = 0.9 v + g, w -= lr v, with w = 1e38 and lr 1e38 (as
  # test_non_finite_steps.py). Gradient -1: w = 1e38 + 1e38 = 2e38, finite.
  # Replica 1's mask 4 makes its v = -4 and w = 5e38 = Inf: both replicas
  # put w and v back and count 'non-finite updated weights'.
  task, lrn, step = _Checked(strategy, init=1e38, via='mask',
                             learning_rate=1e38)
  step([[-1., -1.], [-1., -1.]], [0., 0.], [1., 1.], [1., 4.])
  _Same(task, lrn, [1e38, 1e38])
  assert _MomentumSlot(strategy, lrn) == [[0., 0.], [0., 0.]]
  _Counted(strategy, lrn, updates=0, skipped=1,
           reason='non-finite updated weights')
  step([[-1., -1.], [-1., -1.]], [0., 0.], [1., 1.], [1., 1.])
  _Same(task, lrn, [2e38, 2e38])
  assert _MomentumSlot(strategy, lrn) == [[-1., -1.], [-1., -1.]]
  _Counted(strategy, lrn, updates=1, skipped=1)


@pytest.mark.parametrize('eager', [False, True])
def test_a_flag_on_one_replica_undoes_the_others_tentative_update(strategy,
                                                                  eager):
  # check_finite_weights: replica 0 applies tentatively (v = [-1, 0],
  # w = [1, 0]); replica 1's adjusted gradient is NaN, so after the one
  # collective both put w and v back and count 'non-finite gradient'.
  task, lrn, step = _Checked(strategy, via='adjuster', eager=eager)
  step([[-1., 0.], [-1., 0.]], [0., 0.], [1., 1.], [1., _NAN])
  _Same(task, lrn, [0., 0.])
  assert _MomentumSlot(strategy, lrn) == [[0., 0.], [0., 0.]]
  _Counted(strategy, lrn, updates=0, skipped=1, reason='non-finite gradient')


# ---- accumulation: an empty shard adds nothing and is not "dropped" ---------


@pytest.mark.parametrize('sync_on_apply', [True, False])
def test_empty_shard_in_a_window_adds_weight_0_and_no_drop(strategy,
                                                          sync_on_apply):
  # num_batches 2. Micro-batch 1: replica 0 g [1, 1] x 1 example, replica 1
  # no example (g NaN, weight 0); micro-batch 2: [2, 2] x 2 and [4, 4] x 4.
  # Update: (1 + 2*2 + 4*4) / (1 + 2 + 4) = 3 per entry, so w = [-3, -3];
  # nothing dropped (issue 13's NaN shard with weight 3 is dropped and
  # counted; an empty one is not).
  acc = GradientAccumulation.Params().Set(
      num_batches=2, sync_on_apply=sync_on_apply,
      optimizer=base_optimizer.SGD.Params())
  task, lrn, step = _Build(strategy, optimizer=acc)
  step([[1., 1.], [_NAN, _NAN]], [0., _NAN], [1., 0.])
  step([[2., 2.], [4., 4.]], [0., 0.], [2., 4.])
  _Same(task, lrn, [-3., -3.])
  _Counted(strategy, lrn, updates=1, skipped=0)
  assert [int(x) for x in _Locals(
      strategy, lrn.optimizer.num_dropped_microbatches)] == [0, 0]


def test_one_process_over_those_shards_gives_the_same_numbers():
  # The same four shards as micro-batches of one window (num_batches 4) on
  # one device: w = -3, nothing dropped, as under the two replicas.
  w = tf.Variable([0.0, 0.0], name='w_one')
  vmap = NestedMap(w=w)
  lrn = Learner.Params().Set(
      name='loss', learning_rate=1.0, lr_schedule=ConstantOne.Params(),
      optimizer=GradientAccumulation.Params().Set(
          num_batches=4, optimizer=base_optimizer.SGD.Params())).Instantiate()
  lrn.Bind(vmap)

  @tf.function
  def _Step(g, n):
    loss = tf.reduce_sum(g * w)
    return lrn.Apply({'loss': (loss, n)}, vmap)[2]

  for g, n in (([1., 1.], 1.), ([_NAN, _NAN], 0.), ([2., 2.], 2.),
               ([4., 4.], 4.)):
    _Step(tf.constant(g), tf.constant(n))
  np.testing.assert_allclose(w.numpy(), [-3., -3.], rtol=1e-6)
  assert int(lrn.optimizer.num_dropped_microbatches.numpy()) == 0
  assert int(lrn.num_updates.numpy()) == 1


# ---- the cost: one small collective per applied update ----------------------


def _CollectiveSizes(concrete):
  """Sorted input sizes of every CollectiveReduceV2 of a traced function,
  its branches included (the function library)."""
  graph_def = concrete.graph.as_graph_def()
  nodes = list(graph_def.node)
  for f in graph_def.library.function:
    nodes.extend(f.node_def)
  sizes = []
  for op in concrete.graph.get_operations():
    if op.type == 'CollectiveReduceV2':
      sizes.append(op.inputs[0].shape.num_elements())
  return sorted(sizes), sum(n.op == 'CollectiveReduceV2' for n in nodes)


def _Trace(step):
  return step.get_concrete_function([[1., 0.], [0., 1.]], [0., 0.],
                                    [1., 1.], [1., 1.])


@pytest.mark.parametrize('check,flags', [(False, 3), (True, 4)])
def test_one_flags_collective_besides_the_gradients(strategy, check, flags):
  # Per replica: the gradient all-reduce (w's 2 entries, the weight, the
  # losses' verdict = 4 floats) and one of the skip flags (3; 4 with
  # check_finite_weights), nothing else.
  kw = dict(check_finite_weights=True) if check else {}
  _, _, step = _Build(strategy, **kw)
  sizes, total = _CollectiveSizes(_Trace(step))
  assert sizes == sorted([4, 4, flags, flags])
  assert total == 4


def test_accumulating_micro_step_has_no_collective(strategy):
  # sync_on_apply: both collectives (the window's sums: w, weight, dropped
  # = 4 floats; the flags: 3) sit in the applying branch, per replica.
  acc = GradientAccumulation.Params().Set(
      num_batches=2, optimizer=base_optimizer.SGD.Params())
  _, _, step = _Build(strategy, optimizer=acc)
  sizes, total = _CollectiveSizes(_Trace(step))
  assert sizes == []  # None outside a branch.
  assert total == 4
  unconditional, conditional = scenarios.CollectiveLayout(
      _Trace(step).graph.as_graph_def())
  assert unconditional == 0
  assert sorted(c for _, counts in conditional for c in counts) == [0, 0, 2, 2]


def test_one_device_adds_no_collective():
  assert cross_replica.NumReplicas() == 1
  flag = tf.constant(True)
  assert cross_replica.AnyReplica([flag])[0] is flag
  w = tf.Variable([0.0, 0.0], name='w1')
  lrn = Learner.Params().Set(
      name='loss', learning_rate=1.0, optimizer=base_optimizer.SGD.Params(),
      check_finite_weights=True,
      grad_norm_tracker=grad_norm_tracker.GradNormTracker.Params()
  ).Instantiate()
  vmap = NestedMap(w=w)
  lrn.Bind(vmap)

  @tf.function
  def _Step():
    return lrn.Apply({'loss': (tf.reduce_sum(w), tf.constant(1.0))}, vmap)[2]

  assert _CollectiveSizes(_Step.get_concrete_function()) == ([], 0)
  _Step()
  np.testing.assert_allclose(w.numpy(), [-1.0, -1.0])


# ---- the trainer: an empty replica batch and a NaN on one replica -----------

# 18 examples, global batch 8 (4 per replica), partial last batch kept.
# Step 1: replica 1 holds example 5, whose y is NaN: skipped on both.
# Step 2: examples 8..15. Step 3: examples 16, 17 on replica 0, none on
# replica 1 (weight 0): applied on both with the mean over those two.
_X = np.linspace(-1.0, 1.0, 18).astype(np.float32)
_Y = (3.0 * _X - 1.0).astype(np.float32)
_Y[5] = np.nan


def _TrainerParams():
  tp = model_tasks.LinearRegressionTask.Params().Set(name='lin')
  tp.train.Set(max_steps=3, save_interval_steps=100, summary_interval_steps=1,
               log_interval_steps=1)
  tp.train.learner = Learner.Params().Set(
      name='learner', loss_name='loss', learning_rate=0.1,
      optimizer=optimizers.SGD.Params())
  examples = lambda: tf.data.Dataset.from_tensor_slices({'x': _X, 'y': _Y})
  p = hyperparams.Params()
  p.Define('task', tp, '')
  p.Define('train_input', DatasetInput.Params().Set(
      name='train_input', dataset_fn=examples, batch_size=8,
      drop_remainder=False), '')
  p.Define('eval_input', DatasetInput.Params().Set(
      name='eval_input', dataset_fn=examples, batch_size=18), '')
  return p


def test_trainer_with_empty_replica_batch_and_nan_keeps_replicas_equal(
    strategy, tmp_path):
  out = io.StringIO()
  t = trainer_lib.Trainer(_TrainerParams(), str(tmp_path), strategy='mirrored',
                          stream=out, tty=False)
  t.Run()
  distribution.AssertReplicasIdentical(t.task.vars.Flatten())
  w = b = 0.0
  for idx in (np.arange(8, 16), np.arange(16, 18)):  # Step 1 is skipped.
    err = w * _X[idx] + b - _Y[idx]
    w, b = w - 0.1 * 2 * np.mean(err * _X[idx]), b - 0.1 * 2 * np.mean(err)
  for r in range(2):
    np.testing.assert_allclose([t.task.vars.w.values[r].numpy(),
                                t.task.vars.b.values[r].numpy()], [w, b],
                               rtol=1e-5)
  # The skip is counted once: 1, not 0 (replica 0 alone) or 2 (a sum).
  metrics = json.loads((tmp_path / 'metrics.json').read_text())
  assert metrics['num_skipped_steps'] == 1
  assert metrics['train/num_skipped_steps'] == 1.0
  assert metrics['train/num_updates'] == 2.0
  assert np.isfinite(metrics['train/loss'])  # Step 3's, replica 0 only.
  assert 'skipped 1 update(s) in global steps 1-1' in out.getvalue()
