"""ZeRO-1 sharded optimizer state (issue 26, items 1-3): same numbers.

MirroredStrategy on the 2 logical CPUs of tests/conftest.py; the model and
data are sharded_cases.py's (33 elements: shards of 17 that span
variables, one padding element). Every case runs twice under the same strategy, with
`shard_optimizer_state` False and True, and compares the weights after
the steps (within 1e-6 relative, the acceptance bound; in practice equal).
"""

import io
import json
import os
import pathlib
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

from learner import gradient_tape
from learner.optimizers import sharded_state
from learner.learner import Learner
from learner.optimizers.rules.adam import Adam
from learner.optimizers.rules.dog import DoG
from learner.optimizers.rules.muon import Muon
from learner.training.cluster import distribution
from learner.training.cluster import launcher
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import export as export_lib
from learner.training.jobs import trainer as trainer_lib
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from learner.optimizers.var_grad import VarGrad
from learner.optimizers.wrappers.ema import Ema
from learner.optimizers.wrappers.sam import Sam
from params import NestedMap
from params import registry
from schedules import ConstantOne
from schedules import CosineDecay
from schedules import LinearSchedule

import sharded_cases as cases  # pylint: disable=g-bad-import-order
import trainer_helpers  # pylint: disable=g-bad-import-order

_HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope='module')
def strategy():
  s = distribution.CreateStrategy('mirrored')
  assert s.num_replicas_in_sync == 2
  return s


def _AssertSame(strategy, a, b):
  wa, wb = cases.Weights(strategy, a), cases.Weights(strategy, b)
  for k in wa:
    np.testing.assert_array_equal(wb[k][0], wb[k][1], err_msg=k)
    np.testing.assert_allclose(wb[k][0], wa[k][0], rtol=1e-6, atol=1e-7,
                               err_msg=k)


@pytest.mark.parametrize('name', sorted(cases.OPTS))
def test_sharded_matches_unsharded_with_clip(strategy, name, tmp_path):
  """20 steps with clip: the unsharded weights, and the unsharded run's
  checkpoint (_AssertCheckpointIsTheUnsharded)."""
  kw = dict(clip_gradient_norm_to_value=0.5, l2_regularizer_weight=1e-3)
  ref, ref_l = cases.Run(strategy, cases.OPTS[name](), False, **kw)
  got, lrn = cases.Run(strategy, cases.OPTS[name](), True, **kw)
  _AssertSame(strategy, ref, got)
  _AssertCheckpointIsTheUnsharded(name, (ref, ref_l), (got, lrn), tmp_path)
  # Each replica holds half of the 33 (padded to 34) elements per slot.
  zero = lrn.optimizer.state_sharding
  per_slot = 17 * 4
  assert zero.SlotBytesPerReplica() == per_slot * (1 if name == 'momentum'
                                                   else 2)
  for slot in zero.shard_slots['float32'].values():
    assert slot.synchronization == tf.VariableSynchronization.ON_READ
    assert [c.shape for c in slot.values] == [[17], [17]]
  # The weights moved (the test can fail).
  w0 = cases.Mlp.Params().Instantiate().vars.w1.numpy()
  assert np.abs(cases.Weights(strategy, got)['w1'][0] - w0).max() > 1e-3


@pytest.mark.parametrize('name', sorted(cases.MORE_RULES))
def test_more_elementwise_rules_match_unsharded_with_clip(strategy, name,
                                                          tmp_path):
  """Lion, Nadam, RAdam, Adamax, AMSGrad, ADOPT, AdaDelta, AdEMAMix,
  SimplifiedAdEMAMix, COCOB, MADGRAD: each rule's own Apply on the [17]
  shard gives the unsharded weights (20 steps, clip), and the sharded
  run's checkpoint is the unsharded run's (_AssertCheckpointIsTheUnsharded;
  MADGRAD's after a run without clip, test_madgrad_sharded_checkpoint_...)."""
  kw = dict(clip_gradient_norm_to_value=0.5, l2_regularizer_weight=1e-3)
  ref, ref_l = cases.Run(strategy, cases.MORE_RULES[name](), False, **kw)
  got, lrn = cases.Run(strategy, cases.MORE_RULES[name](), True, **kw)
  _AssertSame(strategy, ref, got)
  if name not in _CHECKPOINT_WITHOUT_CLIP:
    _AssertCheckpointIsTheUnsharded(name, (ref, ref_l), (got, lrn), tmp_path)
  zero = lrn.optimizer.state_sharding
  assert zero.sharded
  num_slots = len(ref_l.optimizer.GetSlots(ref.vars.w1))
  assert num_slots >= 1
  assert zero.SlotBytesPerReplica() == 17 * 4 * num_slots
  w0 = cases.Mlp.Params().Instantiate().vars.w1.numpy()
  # AdaDelta at lr 0.05 moves w1 by ~4e-4 in 20 steps.
  assert np.abs(cases.Weights(strategy, got)['w1'][0] - w0).max() > 1e-4


def test_wrapper_without_sharded_state_is_refused_in_one_short_line():
  """Sam keeps its own perturbation state and declares neither
  SHARDS_WITH_RULE nor SHARDS_INNER; Ema around it is refused for Sam, the
  first optimizer that is neither."""
  for opt in (Sam.Params().Set(optimizer=Adam.Params()),
              Ema.Params().Set(optimizer=Sam.Params().Set(
                  optimizer=Adam.Params()))):
    p = Learner.Params().Set(name='loss', learning_rate=0.1,
                             optimizer=opt, shard_optimizer_state=True)
    with pytest.raises(ValueError) as e:
      p.Instantiate()
    msg = str(e.value)
    assert ('shard_optimizer_state=True with Sam: a wrapper whose own state '
            'is not sharded.') in msg
    assert '\n' not in msg and len(msg) < 300, msg


def test_averaging_copies_above_a_homed_rule_are_refused():
  """Ema's copies live in an elementwise rule's flat slices; Muon is homed
  whole (home_sharding.py): refused in one line."""
  p = Learner.Params().Set(name='loss', learning_rate=0.1,
                           optimizer=Ema.Params().Set(optimizer=Muon.Params()),
                           shard_optimizer_state=True)
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  msg = str(e.value)
  assert ('shard_optimizer_state=True with Muon: Ema keeps its copies in the '
          'flat slices of an elementwise rule, and this rule is homed whole '
          '(WHOLE_TENSOR).') in msg
  assert '\n' not in msg and len(msg) < 300, msg


@pytest.mark.parametrize('name', ['adam', 'momentum'])
def test_nan_on_one_replica_is_skipped_as_unsharded(strategy, name):
  ref, ref_l = cases.Run(strategy, cases.OPTS[name](), False, steps=6, nan_at=(3, 1),
                    clip_gradient_norm_to_value=0.5)
  got, got_l = cases.Run(strategy, cases.OPTS[name](), True, steps=6, nan_at=(3, 1),
                    clip_gradient_norm_to_value=0.5)
  _AssertSame(strategy, ref, got)
  for lrn in (ref_l, got_l):
    res = strategy.experimental_local_results
    assert [int(x) for x in res(lrn.num_skipped_steps)] == [1, 1]
    assert [int(x) for x in res(lrn.num_updates)] == [5, 5]


@pytest.mark.parametrize('name', sorted(cases.OPTS))
def test_sharded_with_accumulation(strategy, name):
  # Micro-step 5 (window 2) holds a NaN on replica 1: that shard is
  # dropped on its replica, in both runs.
  kw = dict(clip_gradient_norm_to_value=0.5, nan_at=(5, 1))
  ref, ref_l = cases.Run(strategy, cases.Accumulated(name), False, **kw)
  got, got_l = cases.Run(strategy, cases.Accumulated(name), True, **kw)
  _AssertSame(strategy, ref, got)
  res = strategy.experimental_local_results
  for lrn in (ref_l, got_l):
    assert [int(x) for x in res(lrn.optimizer.num_dropped_microbatches)] == [
        1, 1]
    assert [int(x) for x in res(lrn.num_updates)] == [5, 5]


def test_rule_reading_several_variables_is_refused_in_one_short_line():
  # DoG's step reads global norms: neither elementwise nor whole-tensor.
  # (Muon, Adafactor, LAMB, SOAP: home replicas, test_home_sharding.py.)
  p = Learner.Params().Set(name='loss', learning_rate=0.1,
                           optimizer=DoG.Params(),
                           shard_optimizer_state=True)
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  assert str(e.value) == (
      'loss: shard_optimizer_state=True with DoG: it declares neither '
      'ELEMENTWISE nor WHOLE_TENSOR (its step reads more than one variable, '
      'or its state changes outside the step). Set '
      'shard_optimizer_state=False.')


def test_check_finite_weights_and_decay_exclusion_are_refused(strategy):
  p = Learner.Params().Set(name='loss', learning_rate=0.1,
                           optimizer=Adam.Params(), check_finite_weights=True,
                           shard_optimizer_state=True)
  with pytest.raises(ValueError, match='check_finite_weights=True'):
    p.Instantiate()
  with strategy.scope():
    task = cases.Mlp.Params().Instantiate()
    lrn = Learner.Params().Set(
        name='loss', learning_rate=0.1, shard_optimizer_state=True,
        optimizer=cases.OPTS['adamw']().Set(
            weight_decay_exclude=['b1$'])).Instantiate()
    with pytest.raises(ValueError, match=r"weight_decay_exclude=\['b1\$'\]"):
      lrn.Bind(task.vars)


def test_one_replica_is_a_plain_bind():
  task = cases.Mlp.Params().Instantiate()
  lrn = Learner.Params().Set(name='loss', learning_rate=0.1,
                             optimizer=Adam.Params(),
                             shard_optimizer_state=True).Instantiate()
  lrn.Bind(task.vars)
  zero = lrn.optimizer.state_sharding
  assert not zero.sharded
  assert lrn.optimizer.GetSlots(task.vars.w1)['m'].shape == [3, 5]
  assert sharded_state.ShardedBytesLine([lrn.optimizer]) is None
  assert sharded_state.SHARDED_REASON


# ---- the start-up line: optimizer-state bytes per replica --------------------


@pytest.mark.parametrize('accumulate', [False, True])
def test_bytes_line_counts_the_created_slots_by_hand(strategy, accumulate):
  # Adam, 33 float32 elements over 2 replicas: shards of 17 (1 padding).
  # Per replica 2 slots x 17 x 4 B = 136 B; unsharded 2 x 33 x 4 B = 264 B.
  # GradientAccumulation's accumulators are not counted (full size in both).
  opt = cases.Accumulated('adam') if accumulate else cases.OPTS['adam']()
  _, lrn = cases.Run(strategy, opt, True, steps=1)
  assert sharded_state.ShardedBytesLine([lrn.optimizer]) == (
      'Optimizer state sharded over 2 replicas: 136 B per replica '
      '(unsharded 264 B).')
  _, plain = cases.Run(strategy, cases.OPTS['adam'](), False, steps=1)
  assert sharded_state.StateOf(plain.optimizer) is None
  assert sharded_state.ShardedBytesLine([plain.optimizer]) is None
  # Two learners: the sharded one is counted; Momentum's 1 slot adds
  # 17 x 4 = 68 B per replica and 33 x 4 = 132 B unsharded.
  _, mom = cases.Run(strategy, cases.OPTS['momentum'](), True, steps=1)
  assert sharded_state.ShardedBytesLine(
      [lrn.optimizer, plain.optimizer, mom.optimizer]) == (
          'Optimizer state sharded over 2 replicas: 204 B per replica '
          '(unsharded 396 B).')


def test_bytes_line_in_mib_with_padding(strategy):
  # 1000 x 1000 + 3 = 1,000,003 float32 elements over 2 replicas: shards of
  # 500,002 (1 padding element). Adam per replica: 2 x 500,002 x 4 B =
  # 4,000,016 B = 3.81 MiB; unsharded 2 x 1,000,003 x 4 B = 8,000,024 B =
  # 7.63 MiB.
  with strategy.scope():
    variables = NestedMap(w=tf.Variable(tf.zeros([1000, 1000]), name='w'),
                          b=tf.Variable(tf.zeros([3]), name='b'))
    lrn = Learner.Params().Set(name='loss', learning_rate=0.1,
                               optimizer=Adam.Params(),
                               shard_optimizer_state=True).Instantiate()
    lrn.Bind(variables)
  zero = sharded_state.StateOf(lrn.optimizer)
  assert zero.SlotBytesPerReplica() == 4000016
  assert zero.UnshardedSlotBytes() == 8000024
  assert sharded_state.ShardedBytesLine([lrn.optimizer]) == (
      'Optimizer state sharded over 2 replicas: 3.81 MiB per replica '
      '(unsharded 7.63 MiB).')




# Rules whose checkpoint is compared after a run of their own without clip:
# with clip, MADGRAD's sharded run is equal to the unsharded one within
# 1e-6 (the weights' check above) but not bit for bit, and the checkpoint
# is compared bit for bit.
_CHECKPOINT_WITHOUT_CLIP = ('madgrad',)


def _AssertCheckpointIsTheUnsharded(name, plain, sharded, tmp_path):
  """The sharded run's checkpoint has the unsharded run's keys, shapes and
  values (bit for bit; AdaDelta within 1e-6). plain, sharded: (task,
  learner) after the same steps, unsharded and sharded."""
  ta, tb = [cases.Tensors(tf.train.Checkpoint(task=task, learner=lrn).write(
      str(tmp_path / where))) for (task, lrn), where in ((plain, 'a'),
                                                         (sharded, 'b'))]
  assert sorted(ta) == sorted(tb)
  assert any('/_slots/' in k for k in ta)
  for k in ta:
    if name == 'adadelta':
      # TF's ResourceApplyAdadelta kernel rounds the last bit differently
      # on one [17] shard than on each variable (Eigen's packet vs scalar
      # tail path): equal within 1e-6, not bit for bit.
      np.testing.assert_allclose(ta[k], tb[k], rtol=1e-6, atol=1e-12,
                                 err_msg=k)
    else:
      np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)


@pytest.mark.parametrize('name', _CHECKPOINT_WITHOUT_CLIP)
def test_madgrad_sharded_checkpoint_is_the_unsharded_one(strategy, name,
                                                         tmp_path):
  """Same keys, shapes and values as the unsharded run's checkpoint, after
  5 steps without clip. Every other elementwise rule's checkpoint is
  compared in its clip test above (test_sharded_matches_unsharded_with_clip,
  test_more_elementwise_rules_match_unsharded_with_clip): one pair of runs
  checks both."""
  runs = [cases.Run(strategy, cases.MORE_RULES[name](), shard, steps=5)
          for shard in (False, True)]
  _AssertCheckpointIsTheUnsharded(name, runs[0], runs[1], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['adam', 'momentum'])
def test_restore_2_to_1_and_1_to_2_continue_bit_identically(strategy, name,
                                                            tmp_path):
  one = tf.distribute.get_strategy()  # The default: one device.
  sharded2 = cases.Save(strategy, cases.OPTS[name](), True, str(tmp_path / 's2'))
  plain2 = cases.Save(strategy, cases.OPTS[name](), False, str(tmp_path / 'p2'))
  # 2 -> 1: the sharded run's checkpoint continues on one device exactly as
  # the unsharded run's does.
  cases.AssertBitEqual(cases.Continue(one, cases.OPTS[name](), False, sharded2),
                  cases.Continue(one, cases.OPTS[name](), False, plain2))
  # 1 -> 2: a one-device checkpoint continues sharded exactly as unsharded.
  plain1 = cases.Save(one, cases.OPTS[name](), False, str(tmp_path / 'p1'))
  cases.AssertBitEqual(cases.Continue(strategy, cases.OPTS[name](), True, plain1),
                  cases.Continue(strategy, cases.OPTS[name](), False, plain1))
  # 2 -> 2 across a restart: as the uninterrupted sharded run.
  task, _, train = cases.Build(strategy, cases.OPTS[name](), True)
  for step in range(8):
    train(step)
  cases.AssertBitEqual(cases.Continue(strategy, cases.OPTS[name](), True, sharded2),
                  cases.Weights(strategy, task))


# ---- the trainer (what --strategy=mirrored runs), then evaler and export ----

_KEY = 'regression.LinearRegression'


def _Params(shard, ema=False):
  """The regression experiment's params; `ema`: Ema(Momentum, 0.8)."""
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=30, save_interval_steps=10)
  p.task.train.learner.shard_optimizer_state = shard
  if ema:
    p.task.train.learner.optimizer_fn = get_optimizer_wrapper_fn(
        'ema', get_optimizer_fn('momentum', learning_rate=0.05,
                                momentum=0.9), decay=0.8)
    p.task.eval.interval_steps = 15
  return p


def _TrainRun(logdir, shard, mode='train', ema=False, stream=None):
  p = _Params(shard, ema)
  t = trainer_lib.Trainer(p, str(logdir), strategy='mirrored', mode=mode,
                          stream=stream or io.StringIO(), tty=False)
  t.Run()
  return t


def test_trainer_sharded_run_then_evaler_and_export_on_one_device(
    strategy, tmp_path):
  plain = _TrainRun(tmp_path / 'plain', False)
  sharded = _TrainRun(tmp_path / 'sharded', True)
  assert sharded.task.learners[0].optimizer.state_sharding.sharded
  distribution.AssertReplicasIdentical(sharded.task.vars.Flatten())
  want = cases.Tensors(str(tmp_path / 'plain' / 'ckpt' / 'ckpt-30'))
  got = cases.Tensors(str(tmp_path / 'sharded' / 'ckpt' / 'ckpt-30'))
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


def test_trainer_sharded_ema_then_evaler_reads_the_averages(tmp_path):
  """train_and_eval on 2 replicas with Ema(Momentum) sharded: its final
  evaluation (the swap of the gathered averages) and its checkpoint are the
  unsharded run's; the evaler on one device reads the averages from it."""
  runs = {}
  for shard in (False, True):
    logdir = tmp_path / ('sharded' if shard else 'plain')
    stream = io.StringIO()
    t = _TrainRun(logdir, shard, mode='train_and_eval', ema=True,
                  stream=stream)
    (final,) = [l for l in stream.getvalue().splitlines()
                if l.startswith('Eval at global step 30 (final)')]
    metrics = evaler_lib.Evaler(
        _Params(False, ema=True), str(logdir), timeout_secs=0.5,
        poll_secs=0, stream=io.StringIO()).Run()['evaluations'][-1]['metrics']
    runs[shard] = (t, final, cases.Tensors(str(logdir / 'ckpt' / 'ckpt-30')),
                   metrics)
  assert sharded_state.StateOf(runs[True][0].task.learners[0].optimizer).copies
  want, got = runs[False][2], runs[True][2]
  assert sorted(want) == sorted(got)
  averages = {k.split('/_averages/')[1].split('/')[0]: v
              for k, v in got.items() if '/_averages/' in k}
  assert sorted(averages) == ['regression_b', 'regression_w']
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)
  assert runs[True][1] == runs[False][1]  # 'Eval at ... (final): b .., w ..'
  for name in ('b', 'w'):
    # The evaler's w and b are the averages (not the trained weights).
    avg = np.ravel(averages['regression_' + name])[0]
    raw = np.ravel(got['task/_private_vars/%s/.ATTRIBUTES/VARIABLE_VALUE'
                       % name])[0]
    assert abs(avg - raw) > 1e-3
    for shard in (False, True):
      np.testing.assert_allclose(runs[shard][3][name], avg, rtol=1e-5)
    assert '%s %.5g' % (name, runs[True][3][name]) in runs[True][1]


# ---- 2-worker MultiWorkerMirroredStrategy on localhost ------------------------


@pytest.fixture(scope='module')
def two_workers(tmp_path_factory):
  """The result dicts of one 2-worker launch of zero_worker.py, which runs
  the flat, homed and averaging cases (one launch: two TensorFlow start-ups
  and one cluster for all of them)."""
  out_dir = str(tmp_path_factory.mktemp('zero_workers'))
  logs = [os.path.join(out_dir, 'w%d.log' % i) for i in range(2)]
  root = os.path.dirname(os.path.dirname(_HERE))  # The repository.
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=root)
  procs = launcher.StartWorkers(
      [sys.executable, os.path.join(_HERE, 'zero_worker.py'), out_dir], 2,
      env=env, log_paths=logs)
  try:
    code, failed = launcher.WaitForWorkers(procs, 400)
  finally:
    launcher.StopProcesses(procs)
  if code != 0:
    with open(logs[failed or 0]) as f:
      pytest.fail('worker %s exit %d:\n%s' % (failed, code, f.read()[-3000:]))
  results = []
  for i in range(2):
    with open(os.path.join(out_dir, 'result_%d.json' % i)) as f:
      results.append(json.load(f))
  assert [r['num_replicas'] for r in results] == [2, 2]
  return results


def _AssertWorkersMatchUnsharded(results, names):
  """Each case of `names` on each worker: one NaN micro-batch dropped in
  both runs, the sharded weights within 1e-6 of the unsharded; both
  workers end with the same sharded weights, bit for bit."""
  for name in names:
    for r in results:
      assert r[name]['plain_dropped'] == r[name]['sharded_dropped'] == 1
      for k, want in r[name]['plain'].items():
        np.testing.assert_allclose(r[name]['sharded'][k], want, rtol=1e-6,
                                   atol=1e-7, err_msg=(name, k))
    assert results[0][name]['sharded'] == results[1][name]['sharded']


@pytest.mark.slow
def test_two_workers_sharded_equals_unsharded(two_workers):
  """Momentum, Adam, AdamW; clip; accumulation of 4; a NaN micro-batch.
  schedule-free SGD and AdamW, Ema, Lookahead and SWA around Adam, their
  eval weights gathered."""
  results = two_workers
  _AssertWorkersMatchUnsharded(results, sorted(cases.OPTS))
  for name in sorted(cases.AVERAGING):  # Eval weights gathered.
    for r in results:
      for part in ('', '_eval'):
        for k, want in r[name]['plain' + part].items():
          np.testing.assert_allclose(r[name]['sharded' + part][k], want,
                                     rtol=1e-6, atol=1e-7,
                                     err_msg=(name, part, k))
    assert results[0][name]['sharded_eval'] == results[1][name][
        'sharded_eval']


@pytest.mark.slow
def test_two_workers_reduce_scattered_equal_unsharded(two_workers):
  """Momentum, Adam, AdamW with no wrapper: the gradients reduce-scattered
  across 2 processes (update_step.MeanOverReplicas). Without clipping the
  unsharded weights bit for bit (a + b is the all-reduce's sum); with it
  within 1e-6 (the norm is summed slice by slice). Step 3's NaN is
  skipped on both workers, and both end with the same weights."""
  for name in sorted(cases.OPTS):
    for clip in (0.0, 0.5):
      key = 'scatter_%s_clip%g' % (name, clip)
      for r in two_workers:
        assert r[key]['plain_skipped'] == r[key]['sharded_skipped'] == 1
        for k, want in r[key]['plain'].items():
          if clip:
            np.testing.assert_allclose(r[key]['sharded'][k], want, rtol=1e-6,
                                       atol=1e-7, err_msg=(key, k))
          else:
            assert r[key]['sharded'][k] == want, (key, k)
      assert two_workers[0][key]['sharded'] == two_workers[1][key]['sharded']


@pytest.mark.slow
def test_two_workers_homes_equal_unsharded(two_workers):
  """Muon, Adafactor (factored and not), LAMB and LARS homed
  (test_home_sharding.py), accumulation of 4, clip, a NaN micro-batch,
  across 2 processes."""
  _AssertWorkersMatchUnsharded(two_workers, cases.HOME_WORKER_CASES)


@pytest.mark.slow
def test_launcher_runs_a_sharded_experiment(tmp_path, capfd):
  """The README's launcher line with shard_optimizer_state on 2 workers."""
  logdir = str(tmp_path / 'run')
  code = launcher.main([
      '--num_workers=2', '--deadline_secs=400', '--',
      '--model=regression.LinearRegression', '--logdir=%s' % logdir,
      '--strategy=multi_worker',
      '--params_override=task.train.max_steps : 20; '
      'task.train.learner.shard_optimizer_state : True'])
  err = capfd.readouterr().err
  assert code == 0, err[-3000:]
  assert 'final weights identical on every worker' in err
  got = cases.Tensors(os.path.join(logdir, 'ckpt', 'ckpt-20'))
  slot = ('task/_private_children/learner/_private_children/optimizer/'
          '_slots/regression_w/momentum/.ATTRIBUTES/VARIABLE_VALUE')
  assert got[slot].shape == got[
      'task/_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE'].shape
  assert np.all(got[slot] != 0.0)


def _TwoLearnerRun(strategy, shard, steps=8):
  """Learner 'a' (w1, b1): Adam, beta1 scheduled 0.9 -> 0.5 over 6
  updates, cosine rate, decoupled decay; learner 'b' (w2, b2): Momentum.
  Gradients from one tf.GradientTape, handed to ApplyGradients."""
  with strategy.scope():
    task = cases.Mlp.Params().Instantiate()
    sched = {'beta1': LinearSchedule.Params().Set(start=(0, 0.9),
                                                  limit=(6, 0.5))}
    a = Learner.Params().Set(
        name='a', loss_name='loss', learning_rate=0.05,
        bprop_variable_filter='/(w1|b1)$', shard_optimizer_state=shard,
        lr_schedule=CosineDecay.Params().Set(total_steps=8, alpha=0.1),
        optimizer=Adam.Params().Set(hyper_schedules=sched,
                                    decoupled_weight_decay=0.05),
    ).Instantiate()
    b = Learner.Params().Set(
        name='b', loss_name='loss', learning_rate=0.05,
        bprop_variable_filter='/(w2|b2)$', shard_optimizer_state=shard,
        lr_schedule=ConstantOne.Params(),
        optimizer=cases.OPTS['momentum']()).Instantiate()
    a.Bind(task.vars)
    b.Bind(task.vars)

  def _Replica(x, y):
    vs = task.vars
    with tf.GradientTape() as tape:
      loss = task.Loss(x, y)
    grads = dict(zip(vs.keys(), tape.gradient(loss, list(vs.values()))))
    for lrn, keys in ((a, ('w1', 'b1')), (b, ('w2', 'b2'))):
      lrn.ApplyGradients(NestedMap({k: VarGrad(vs[k], grads[k])
                                    for k in keys}), 4.0)

  step = tf.function(lambda x, y: strategy.run(_Replica, args=(x, y)))
  dist = strategy.experimental_distribute_values_from_function
  for i in range(steps):
    step(dist(lambda ctx, i=i: tf.constant(
        cases.Data(i, ctx.replica_id_in_sync_group)[0])),
         dist(lambda ctx, i=i: tf.constant(
             cases.Data(i, ctx.replica_id_in_sync_group)[1])))
  return task, (a, b)


def test_two_learners_with_schedules_match_unsharded(strategy):
  ref, _ = _TwoLearnerRun(strategy, False)
  got, learners = _TwoLearnerRun(strategy, True)
  assert all(l.optimizer.state_sharding.sharded for l in learners)
  _AssertSame(strategy, ref, got)


def test_layout_flat_slices_by_hand():
  """Sizes 15, 5, 10, 3 (n = 33): N = 2 gives shards of 17, the second
  with 1 padding element; N = 4 shards of 9 (3 padding on the last)."""
  variables = [tf.Variable(tf.zeros(shape)) for _, shape in cases.SHAPES]
  two = sharded_state._Layout(variables, 2)  # pylint: disable=protected-access
  assert two.shard == 17
  assert two.Pieces(0) == ([(0, 0, 15), (1, 0, 2)], 0)
  assert two.Pieces(1) == ([(1, 2, 5), (2, 0, 10), (3, 0, 3)], 1)
  four = sharded_state._Layout(variables, 4)  # pylint: disable=protected-access
  assert four.shard == 9
  assert [four.Pieces(r) for r in range(4)] == [
      ([(0, 0, 9)], 0), ([(0, 9, 15), (1, 0, 3)], 0),
      ([(1, 3, 5), (2, 0, 7)], 0), ([(2, 7, 10), (3, 0, 3)], 3)]
  values = [tf.reshape(tf.range(s, s + v.shape.num_elements(),
                                dtype=tf.float32), v.shape)
            for s, v in zip(two.offsets, variables)]
  np.testing.assert_array_equal(two.Slice(values, 1).numpy(),
                                list(range(17, 33)) + [0])
  flat = tf.concat([two.Slice(values, 0), two.Slice(values, 1)], 0)
  for got, want in zip(two.Split(flat), values):
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_eager_strategy_run_matches_unsharded(strategy):
  """strategy.run without tf.function (the strategy's own all_gather)."""
  weights = []
  for shard in (False, True):
    task, lrn, _ = cases.Build(strategy, cases.OPTS['adam'](), shard)

    def _Replica(x, y, task=task, lrn=lrn):
      with gradient_tape.GradientTape():
        loss = task.Loss(x, y)
      lrn.Apply({'loss': (loss, tf.constant(4.0))}, task.vars)

    dist = strategy.experimental_distribute_values_from_function
    for i in range(3):
      strategy.run(_Replica, args=(
          dist(lambda ctx, i=i: tf.constant(
              cases.Data(i, ctx.replica_id_in_sync_group)[0])),
          dist(lambda ctx, i=i: tf.constant(
              cases.Data(i, ctx.replica_id_in_sync_group)[1]))))
    weights.append(task)
  _AssertSame(strategy, weights[0], weights[1])


def test_decay_exclusion_matching_no_model_variable_keeps_decay(strategy):
  """'optimizer' matches only the shard's own name: the model variables are
  all decayed, as unsharded (the shard is not spared)."""
  def _Opt():
    return cases.OPTS['adamw']().Set(weight_decay_exclude=['optimizer'])
  ref, _ = cases.Run(strategy, _Opt(), False, steps=5)
  got, _ = cases.Run(strategy, _Opt(), True, steps=5)
  _AssertSame(strategy, ref, got)


def _NoSync():
  return cases.Accumulated('adam').Set(sync_on_apply=False)


def test_accumulation_without_sync_on_apply_keeps_the_replicas_slice(
    strategy):
  """All-reduce every micro-batch: each replica adds only its [17] slice
  of the sums (17 x 4 B <= 33 x 4 / 2 B + 1 padding element, against
  33 x 4 B mirrored), gathered once per update. 10 micro-steps (a window
  of 2 pending), clip, a NaN shard: weights and pending sums the same."""
  kw = dict(steps=10, nan_at=(5, 1), clip_gradient_norm_to_value=0.5)
  ref, ref_l = cases.Run(strategy, _NoSync(), False, **kw)
  got, lrn = cases.Run(strategy, _NoSync(), True, **kw)
  _AssertSame(strategy, ref, got)
  (acc,) = lrn.optimizer.Accumulators()
  assert acc.synchronization == tf.VariableSynchronization.ON_READ
  assert [c.shape for c in acc.values] == [[17], [17]]
  assert 17 * 4 <= 33 * 4 / 2 + 4
  assert sum(a.shape.num_elements() for a in ref_l.optimizer.Accumulators()
             ) == 33
  for name in ('w1', 'b2'):
    want = ref_l.optimizer.GetAccumulator(ref.vars[name]).read_value()
    have = lrn.optimizer.GetAccumulator(got.vars[name]).read_value()
    assert np.abs(want.numpy()).max() > 0
    np.testing.assert_array_equal(have.numpy(), want.numpy(), err_msg=name)
  res = strategy.experimental_local_results
  assert [int(x) for x in res(lrn.optimizer.num_dropped_microbatches)] == [
      1, 1]


def test_sliced_accumulators_checkpoint_mid_window_restores_2_1_2(
    strategy, tmp_path):
  """Saved after 6 micro-steps (2 of a window of 4 pending): the unsharded
  keys and values; 2 -> 1 and 1 -> 2 continue bit-identically."""
  one = tf.distribute.get_strategy()
  sharded2 = cases.Save(strategy, _NoSync(), True, str(tmp_path / 's2'), steps=6)
  plain2 = cases.Save(strategy, _NoSync(), False, str(tmp_path / 'p2'), steps=6)
  ta, tb = cases.Tensors(plain2), cases.Tensors(sharded2)
  assert sorted(ta) == sorted(tb)
  accums = [k for k in ta if '/accum_mlp_' in k]
  assert len(accums) == 4 and all(np.abs(ta[k]).max() > 0 for k in accums)
  for k in ta:
    np.testing.assert_array_equal(tb[k], ta[k], err_msg=k)
  cases.AssertBitEqual(cases.Continue(one, _NoSync(), False, sharded2, steps=(6, 7)),
                  cases.Continue(one, _NoSync(), False, plain2, steps=(6, 7)))
  plain1 = cases.Save(one, _NoSync(), False, str(tmp_path / 'p1'), steps=6)
  cases.AssertBitEqual(cases.Continue(strategy, _NoSync(), True, plain1, steps=(6, 7)),
                  cases.Continue(strategy, _NoSync(), False, plain1, steps=(6, 7)))


def test_variables_outside_the_first_bind_are_refused(strategy):
  with strategy.scope():
    task = cases.Mlp.Params().Instantiate()
    lrn = Learner.Params().Set(name='loss', learning_rate=0.1,
                               optimizer=Adam.Params(),
                               shard_optimizer_state=True).Instantiate()
    lrn.optimizer.Bind([task.vars.w1, task.vars.b1])
    with pytest.raises(ValueError, match=r"Bind with variables \['mlp/w2'\]"):
      lrn.optimizer.Bind([task.vars.w1, task.vars.w2])


# ---- the command line: --cpu_devices, the one-replica notice ------------------


def _Cli(tmp_path, *flags):
  import subprocess  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, PYTHONPATH=os.getcwd())
  return subprocess.run(
      [sys.executable, '-m', 'learner.trainer',
       '--model=regression.DistributedLinearRegression',
       '--logdir=%s' % (tmp_path / 'run'), '--max_steps=20',
       '--params_override=task.train.learner.shard_optimizer_state : True'] +
      list(flags), capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_cli_mirrored_on_two_cpu_devices_shards_and_one_replica_says_not(
    tmp_path):
  two = _Cli(tmp_path, '--strategy=mirrored', '--cpu_devices=2')
  assert two.returncode == 0, two.stderr
  assert 'Training on 2 replicas in sync (MirroredStrategy).' in two.stdout
  assert 'NOTICE' not in two.stdout
  # Plain SGD keeps no slot: nothing to shard, and the line says so.
  assert ('Optimizer state sharded over 2 replicas: 0 B per replica '
          '(unsharded 0 B).') in two.stdout.splitlines()
  one = _Cli(tmp_path / 'one')
  assert one.returncode == 0, one.stderr
  assert ('NOTICE: learner(s) learner set shard_optimizer_state but the '
          'strategy has 1 replica') in one.stdout
  assert 'Optimizer state sharded' not in one.stdout
  # 2 replicas on the same global batches train the one-device weights.
  for name in ('w', 'b'):
    key = 'task/_private_vars/%s/.ATTRIBUTES/VARIABLE_VALUE' % name
    got = [tf.train.load_checkpoint(str(d / 'run' / 'ckpt')).get_tensor(key)
           for d in (tmp_path, tmp_path / 'one')]
    np.testing.assert_allclose(got[0], got[1], rtol=1e-5)


def _SavesAndEvals(tmp_path):
  """A 60-step train_and_eval on 2 CPU replicas, Momentum sharded: 6
  periodic saves of 2 variables x 1 slot, 3 evals (20, 40 and the final
  one), each eval that improves also saving best/."""
  import subprocess  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, PYTHONPATH=os.getcwd())
  return subprocess.run(
      [sys.executable, '-m', 'learner.trainer',
       '--model=regression.LinearRegression', '--mode=train_and_eval',
       '--strategy=mirrored', '--cpu_devices=2',
       '--logdir=%s' % (tmp_path / 'run'), '--max_steps=60',
       '--params_override=task.train.learner.shard_optimizer_state : True; '
       'task.train.save_interval_steps : 10; task.eval.interval_steps : 20'],
      capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_cli_saves_of_sharded_slots_trace_no_new_function(tmp_path):
  # Each save gathered each (variable, slot) with strategy.gather called
  # eagerly, which defines a new tf.function inside TF at every call: here
  # 12 + traces of CollectiveAllReduce._batch_all_gather's function, TF's
  # 'triggered tf.function retracing' warning, and ~1 s per save (digits).
  out = _SavesAndEvals(tmp_path)
  assert out.returncode == 0, out.stderr
  assert out.stdout.count('Eval at global step') == 3, out.stdout
  assert 'triggered tf.function retracing' not in out.stderr, out.stderr
  # w [1] and b [1]: 2 elements, shards of 1; Momentum's one float32 slot.
  assert ('Optimizer state sharded over 2 replicas: 4 B per replica '
          '(unsharded 8 B).') in out.stdout.splitlines()
  ckpt = str(tmp_path / 'run' / 'ckpt')
  assert tf.train.latest_checkpoint(ckpt).endswith('ckpt-60')
  # The saved slot is the full, gathered one (w and b: shape [1] each).
  reader = tf.train.load_checkpoint(ckpt)
  slots = [k for k in reader.get_variable_to_shape_map()
           if '/momentum/' in k and k.endswith('VARIABLE_VALUE')]
  assert len(slots) == 2, slots
  assert all(np.abs(reader.get_tensor(k)).max() > 0 for k in slots)


@pytest.mark.slow
def test_cli_sharded_bf16_slots_and_sliced_accumulators_save(tmp_path):
  # Found by the fresh-user trial: both trained, then the first save failed
  # (bfloat16 shard slots: the all-gather kernel takes no bfloat16; sliced
  # accumulators: their checkpointed views had no name for
  # variable_names.json), losing the run.
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, PYTHONPATH=os.getcwd())
  accum = ("task.train.learner.optimizer_fn : Object("
           "'learner.optimizers.factory.get_optimizer_wrapper_fn', "
           "name='batch_gradients', inner=Object("
           "'learner.optimizers.factory.get_optimizer_fn', name='momentum', "
           "learning_rate=5.0, momentum=0.9), num_batches=2, "
           "sync_on_apply=False)")
  runs = {
      'bf16': ('digits.MlpMomentum', "task.train.learner.optimizer.cls : "
               "Class('learner.optimizers.rules.adam.Adam'); "
               "task.train.learner.optimizer.slot_dtype : DType('bfloat16')"),
      'accum': ('digits.MlpLarsAccumulate', accum)}
  for label, (model, override) in runs.items():
    out = subprocess.run(
        [sys.executable, '-m', 'learner.trainer', '--model=' + model,
         '--logdir=%s' % (tmp_path / label), '--max_steps=4',
         '--strategy=mirrored', '--cpu_devices=2', '--params_override=' +
         override + '; task.train.learner.shard_optimizer_state : True'],
        capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, (label, out.stderr[-3000:])
  reader = tf.train.load_checkpoint(str(tmp_path / 'bf16' / 'ckpt'))
  key = ('task/_private_children/learner/_private_children/optimizer/'
         '_slots/digits_layer_0_w/m/.ATTRIBUTES/VARIABLE_VALUE')
  assert reader.get_variable_to_dtype_map()[key] == tf.bfloat16
  assert reader.get_variable_to_shape_map()[key] == [64, 128]
  assert np.abs(reader.get_tensor(key).astype(np.float32)).max() > 0
  ckpt = tmp_path / 'accum' / 'ckpt'
  with open(ckpt / 'variable_names.json') as f:
    names = json.load(f)
  name = 'digits/learner/gradient_accumulation/accum_digits_layer_0_w'
  assert names[name] == ('task/_private_children/learner/_private_children/'
                         'optimizer/_private_vars/accum_digits_layer_0_w/'
                         '.ATTRIBUTES/VARIABLE_VALUE')
  reader = tf.train.load_checkpoint(str(ckpt))
  assert reader.get_variable_to_shape_map()[names[name]] == [64, 128]


_CPU_DEVICES_REFUSED = (
    (['--cpu_devices=0', '--strategy=mirrored'], '--cpu_devices=0 must be'),
    (['--cpu_devices=2'], 'only applies with --strategy=mirrored'),
)


def test_cli_cpu_devices_is_checked_before_any_file(tmp_path):
  # Both cases through `python -m learner.trainer` in one new interpreter
  # (trainer_helpers.RunModuleBatch: TensorFlow loads once, not per case;
  # each case has its own exit status and stderr).
  env = dict(os.environ, PYTHONPATH=os.getcwd())
  argvs = [['--model=regression.DistributedLinearRegression',
            '--logdir=%s' % (tmp_path / str(i) / 'run'), '--max_steps=20',
            '--params_override=task.train.learner.shard_optimizer_state : '
            'True'] + flags
           for i, (flags, _) in enumerate(_CPU_DEVICES_REFUSED)]
  runs = trainer_helpers.RunModuleBatch('learner.trainer', argvs, env,
                                        timeout=300)
  assert len(runs) == len(_CPU_DEVICES_REFUSED)
  for i, ((_, needle), run) in enumerate(zip(_CPU_DEVICES_REFUSED, runs)):
    assert run['code'] == 2 and needle in run['stderr'], run['stderr']
    assert len(run['stderr'].strip().splitlines()) == 1, run['stderr']
    assert not (tmp_path / str(i) / 'run').exists()


def test_distributed_md_lists_exactly_the_shardable_rules():
  # docs/distributed.md names the rules ZeRO-1 shards; the list is typed
  # there, so it is checked against the declared flags here.
  text = (pathlib.Path(__file__).resolve().parents[2] / 'docs' /
          'distributed.md').read_text()
  start = text.index('weights to evaluate:')
  listed = re.findall(r'`(\w+)`', text[start:text.index(
      '`sharded_state.ShardableRuleNames()`', start)])
  assert sorted(listed) == sorted(sharded_state.ShardableRuleNames())


# ---- 8-bit blockwise state (slot_dtype=tf.int8, issue 38 item 2) ----------


def _Int8Adam(block=8):
  return Adam.Params().Set(slot_dtype=tf.int8, slot_block_size=block)


def test_int8_state_mirrored_and_sharded_train_like_float32(strategy):
  """Under MirroredStrategy, unsharded and ZeRO-1 (a replica quantizes its
  [17] shard in blocks of 8 inside it: 3 blocks, the last one padded),
  the replicas stay identical and the weights near float32 state's."""
  ref, _ = cases.Run(strategy, Adam.Params(), False)
  plain, plain_l = cases.Run(strategy, _Int8Adam(), False)
  got, lrn = cases.Run(strategy, _Int8Adam(), True)
  zero = lrn.optimizer.state_sharding
  assert zero.sharded
  for slot in zero.shard_slots['float32'].values():
    assert [c.shape for c in slot.codes.values] == [[17], [17]]
    assert [a.shape for a in slot.absmax.values] == [[3], [3]]
  # Per replica: 2 slots x (17 codes + 3 scales x 4 bytes); unsharded: each
  # variable's codes and blocks (15: 2 blocks, 5: 1, 10: 2, 3: 1).
  assert zero.SlotBytesPerReplica() == 2 * (17 + 3 * 4)
  assert zero.UnshardedSlotBytes() == 2 * (33 + 6 * 4)
  wr = cases.Weights(strategy, ref)
  for run in (plain, got):
    w = cases.Weights(strategy, run)
    for k in w:
      np.testing.assert_array_equal(w[k][0], w[k][1], err_msg=k)
      np.testing.assert_allclose(w[k][0], wr[k][0], atol=0.02, err_msg=k)
  assert any(np.any(cases.Weights(strategy, got)[k][0] != wr[k][0])
             for k in wr)
  del plain_l


def test_int8_sharded_checkpoint_resumes_bit_identically(strategy, tmp_path):
  """Keys: each element's code and block absmax at the variable's shape;
  2 -> 2 across a restart continues as the uninterrupted run."""
  path = cases.Save(strategy, _Int8Adam(), True, str(tmp_path / 's2'))
  keys = cases.Tensors(path)
  codes = [k for k in keys if k.endswith('/m/.ATTRIBUTES/codes')]
  assert codes and all(keys[k].dtype == np.int8 for k in codes)
  w1 = [k for k in keys if '_w1/v/.ATTRIBUTES/absmax' in k]
  assert len(w1) == 1 and keys[w1[0]].shape == (3, 5)
  assert np.all(keys[w1[0]] > 0)
  task, _, train = cases.Build(strategy, _Int8Adam(), True)
  for step in range(8):
    train(step)
  cases.AssertBitEqual(cases.Continue(strategy, _Int8Adam(), True, path),
                  cases.Weights(strategy, task))


# ---- averages sharded: Ema, Lookahead, SWA, schedule-free (issue 38 item 1B)


def _AccumulatedAveraging(name):
  """GradientAccumulation(2) around sharded_cases.AVERAGING[name]."""
  return cases.GradientAccumulation.Params().Set(
      optimizer=cases.AVERAGING[name](), num_batches=2)


@pytest.mark.parametrize('name', sorted(cases.AVERAGING))
def test_averages_sharded_match_unsharded_with_clip_and_accumulation(
    strategy, name):
  """20 micro-steps, 10 updates: weights and the gathered eval weights are
  the unsharded ones (bit for bit in practice; 1e-6 is the bound), and a
  replica holds 17 of the 33 (+1 padding) elements of every slot and copy."""
  kw = dict(clip_gradient_norm_to_value=0.5, l2_regularizer_weight=1e-3)
  ref, ref_l = cases.Run(strategy, _AccumulatedAveraging(name), False, **kw)
  got, lrn = cases.Run(strategy, _AccumulatedAveraging(name), True, **kw)
  _AssertSame(strategy, ref, got)
  want = cases.EvalWeights(strategy, ref, ref_l)
  have = cases.EvalWeights(strategy, got, lrn)
  for k in want:
    np.testing.assert_allclose(have[k], want[k], rtol=1e-6, atol=1e-7,
                               err_msg=k)
  # The eval weights differ from the trained ones (the test can fail).
  weights = cases.Weights(strategy, got)
  assert max(np.abs(have[k] - weights[k][0]).max() for k in have) > 1e-3
  zero = sharded_state.StateOf(lrn.optimizer)
  copies = [c for cs in zero.copies.values() for c in cs]
  assert len(copies) == (0 if name.startswith('sf_') else 1)
  for c in copies:
    assert c.synchronization == tf.VariableSynchronization.ON_READ
    assert [x.shape for x in c.values] == [[17], [17]]
  # State per replica: (slots + copies) x 17 x 4 B; unsharded x 33 x 4 B.
  # Bound: 1/N of unsharded + the largest tensor's (w1: 15 elements) state.
  n = {'sf_sgd': 2, 'sf_adamw': 3}.get(name, 3)
  assert zero.SlotBytesPerReplica() == n * 17 * 4
  assert zero.UnshardedSlotBytes() == n * 33 * 4
  assert zero.SlotBytesPerReplica() <= n * 33 * 4 / 2 + n * 15 * 4


@pytest.mark.parametrize('name', ['sf_adamw', 'lookahead_adam', 'swa_adam'])
def test_eval_swap_reads_the_gathered_copies(strategy, name):
  """SwapAverages() (the trainer's evaluations) puts the gathered copies in
  every replica's variables and the trained weights back, as unsharded: 2
  more steps after the swap continue equal."""
  runs = []
  for shard in (False, True):
    task, lrn, train = cases.Build(strategy, cases.AVERAGING[name](), shard)
    for step in range(7):
      train(step)
    before = cases.Weights(strategy, task)
    evals = cases.EvalWeights(strategy, task, lrn)
    (avg,) = lrn.optimizer.EvalAverages()
    with avg.SwapAverages():
      inside = cases.Weights(strategy, task)
    for k in inside:
      np.testing.assert_array_equal(inside[k][0], inside[k][1], err_msg=k)
      np.testing.assert_array_equal(inside[k][0], evals[k], err_msg=k)
    cases.AssertBitEqual(cases.Weights(strategy, task), before)
    for step in (7, 8):
      train(step)
    runs.append((inside, task))
  for k in runs[0][0]:
    np.testing.assert_allclose(runs[1][0][k][0], runs[0][0][k][0],
                               rtol=1e-6, atol=1e-7, err_msg=k)
  _AssertSame(strategy, runs[0][1], runs[1][1])


@pytest.mark.parametrize('name', sorted(cases.AVERAGING))
def test_sharded_wrappers_checkpoint_is_the_unsharded_one(strategy, name,
                                                          tmp_path):
  """The copies and x, z saved under the unsharded keys and shapes."""
  a = cases.Save(strategy, cases.AVERAGING[name](), False, str(tmp_path / 'a'))
  b = cases.Save(strategy, cases.AVERAGING[name](), True, str(tmp_path / 'b'))
  ta, tb = cases.Tensors(a), cases.Tensors(b)
  assert sorted(ta) == sorted(tb)
  needle = '/x/' if name.startswith('sf_') else '/_averages/'
  assert sum(needle in k for k in ta) == 4
  for k in ta:
    np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['sf_adamw', 'lookahead_adam', 'swa_adam'])
def test_averages_restore_2_to_1_and_1_to_2_continue_bit_identically(
    strategy, name, tmp_path):
  """Restored at update 5, continued 3: Lookahead synchronizes at 6, SWA
  samples at 4 and 6, schedule-free's weight sum carries over."""
  one = tf.distribute.get_strategy()
  opt = cases.AVERAGING[name]
  sharded2 = cases.Save(strategy, opt(), True, str(tmp_path / 's2'))
  plain2 = cases.Save(strategy, opt(), False, str(tmp_path / 'p2'))
  cases.AssertBitEqual(cases.Continue(one, opt(), False, sharded2),
                  cases.Continue(one, opt(), False, plain2))
  plain1 = cases.Save(one, opt(), False, str(tmp_path / 'p1'))
  cases.AssertBitEqual(cases.Continue(strategy, opt(), True, plain1),
                  cases.Continue(strategy, opt(), False, plain1))
