"""One train step for every strategy: BaseTask under MirroredStrategy (issue 11).

The task's TrainStep/TrainLoop run each replica's share with
`strategy.run`, so a distributed run gets steps_per_loop (several steps in
one tf.function call, batches from a distributed iterator inside the graph)
and jit_compile like a one-device run.

tests/conftest.py gives two logical CPUs. The process has ONE
MirroredStrategy over them (`distribution.CreateStrategy('mirrored')`
returns the same one every time): two over the same devices share TF's
collective keys and their all-reduces collide.

The problem: y = w x + b, w = b = 0 at start, loss the mean squared error,
Momentum(0.9) with learning rate 0.1 (TF1 form: v <- 0.9 v + g,
w <- w - 0.1 v); global batches of 4 consecutive examples of
x = 0.05 i, y = 5 x + 2, split 2 + 2 over the replicas.
"""

import io

import numpy as np
import pytest
import tensorflow as tf

from configs import model_tasks
from learner import learner as learner_lib
from learner import optimizers
from learner.training.cluster import distribution
from learner.training.model import task as task_lib
from learner.training.jobs import trainer as trainer_lib
from params import registry

_STEPS = 6
_BATCH = 4
_LR = 0.1


@pytest.fixture(scope='module')
def mirrored():
  strategy = distribution.CreateStrategy('mirrored')
  assert strategy.num_replicas_in_sync == 2
  return strategy


def _Examples():
  x = np.arange(_BATCH * (_STEPS + 1), dtype=np.float32) * 0.05
  return tf.data.Dataset.from_tensor_slices({'x': x, 'y': 5.0 * x + 2.0})


def _Task(strategy, jit_compile=False):
  p = model_tasks.LinearRegressionTask.Params().Set(name='reg')
  p.train.jit_compile = jit_compile
  p.train.learner = learner_lib.Learner.Params().Set(
      name='learner', loss_name='loss', learning_rate=_LR,
      optimizer=optimizers.Momentum.Params().Set(alpha=0.9))
  with strategy.scope():
    task = p.Instantiate()
    task.CreateLearners()
  return task


def _Iterator(strategy):
  return iter(distribution.DistributeDataset(strategy, _Examples, _BATCH))


def _Weights(task):
  """(w, b) of replica 0, after checking every replica holds the same."""
  distribution.AssertReplicasIdentical(task.vars.Flatten())
  out = []
  for v in (task.vars.w, task.vars.b):
    copies = [c.numpy() for c in
              task.strategy.experimental_local_results(v)]
    assert all(c == copies[0] for c in copies), (v.name, copies)
    out.append(copies[0])
  return tuple(out)


def _NumpyMomentum(steps):
  """(w, b) after `steps` Momentum steps on the global batches, float64."""
  x_all = np.arange(_BATCH * (_STEPS + 1), dtype=np.float64) * 0.05
  w = b = vw = vb = 0.0
  for s in range(steps):
    x = x_all[s * _BATCH:(s + 1) * _BATCH]
    r = w * x + b - (5.0 * x + 2.0)
    gw, gb = np.mean(2.0 * r * x), np.mean(2.0 * r)
    vw, vb = 0.9 * vw + gw, 0.9 * vb + gb
    w, b = w - _LR * vw, b - _LR * vb
  return w, b


def test_numpy_reference_moves_towards_the_line():
  # Step 1 by hand: x = [0, .05, .1, .15], y = 5x + 2, w = b = 0:
  # gw = mean(-2 y x) = -(0 + .225 + .5 + .825) / 4 = -0.3875,
  # gb = mean(-2 y) = -4.75, so w = 0.03875, b = 0.475.
  w, b = _NumpyMomentum(1)
  np.testing.assert_allclose([w, b], [0.03875, 0.475], rtol=1e-12)


def test_mirrored_train_loop_equals_single_steps_one_device_and_numpy(
    mirrored):
  looped = _Task(mirrored)
  it = _Iterator(mirrored)
  looped.TrainLoop(it, 2)  # Steps 1-2, then 3-6 with the same trace.
  out = looped.TrainLoop(it, _STEPS - 2)
  assert int(looped.global_step.numpy()) == _STEPS
  # The iterator moved by exactly 6 global batches: next are 24 .. 27.
  rest = mirrored.experimental_local_results(next(it))
  np.testing.assert_allclose(
      np.concatenate([r['x'].numpy() for r in rest]),
      np.arange(24, 28) * 0.05, rtol=1e-6)
  # The output is the last step's, per replica: each replica's MSE on its
  # 2 examples, weight 2.
  losses = mirrored.experimental_local_results(out['metrics']['loss'][1])
  assert [float(w) for w in losses] == [2.0, 2.0]

  single = _Task(mirrored)
  it = _Iterator(mirrored)
  for _ in range(_STEPS):
    single.TrainLoop(it, 1)
  assert _Weights(looped) == _Weights(single)  # bit-identical

  one_device = _Task(tf.distribute.get_strategy())
  one_device.TrainLoop(iter(_Examples().batch(_BATCH)), _STEPS)
  np.testing.assert_allclose(_Weights(looped), _Weights(one_device),
                             rtol=1e-6)
  np.testing.assert_allclose(_Weights(looped), _NumpyMomentum(_STEPS),
                             rtol=1e-5)


def _TrainerParams(steps_per_loop):
  p = registry.GetParams('regression.LinearRegression')
  p.task.train.Set(max_steps=30, save_interval_steps=30,
                   summary_interval_steps=10, log_interval_steps=30,
                   steps_per_loop=steps_per_loop)
  return p


def _RunTrainer(logdir, p, **kw):
  return trainer_lib.Trainer(p, str(logdir), mode='train', tty=False,
                             stream=io.StringIO(), **kw).Run()


def test_mirrored_trainer_runs_loops_of_steps_per_loop_with_same_numbers(
    mirrored, tmp_path, monkeypatch):
  del mirrored  # The trainer's CreateStrategy('mirrored') returns it.
  sizes = []
  loop = task_lib.BaseTask.TrainLoop

  def _Recording(self, iterator, num_steps):
    sizes.append((self.strategy.num_replicas_in_sync, int(num_steps)))
    return loop(self, iterator, num_steps)

  monkeypatch.setattr(task_lib.BaseTask, 'TrainLoop', _Recording)
  four = _RunTrainer(tmp_path / 'four', _TrainerParams(4),
                     strategy='mirrored')
  # Summaries every 10 steps end the loops: 4 + 4 + 2, three times.
  assert sizes == [(2, 4), (2, 4), (2, 2)] * 3, sizes
  del sizes[:]
  one = _RunTrainer(tmp_path / 'one', _TrainerParams(1), strategy='mirrored')
  assert sizes == [(2, 1)] * 30
  del sizes[:]
  one_device = _RunTrainer(tmp_path / 'dev', _TrainerParams(4))
  assert sizes == [(1, 4), (1, 4), (1, 2)] * 3
  assert four == one  # The same steps, only grouped into fewer calls.
  assert four['global_step'] == 30
  for k in ('train/w', 'train/b', 'train/loss'):
    np.testing.assert_allclose(four[k], one_device[k], rtol=1e-5, err_msg=k)


def test_jit_compile_under_mirrored_on_cpus_is_refused_naming_the_key(
    mirrored, tmp_path):
  with pytest.raises(ValueError) as e:
    _Task(mirrored, jit_compile=True)
  msg = str(e.value)
  assert 'train.jit_compile is True under MirroredStrategy' in msg
  assert '2 replicas on CPU' in msg
  assert 'task.train.jit_compile : False' in msg
  # The trainer stops before it writes any checkpoint.
  p = _TrainerParams(4)
  p.task.train.jit_compile = True
  with pytest.raises(ValueError, match='train.jit_compile'):
    _RunTrainer(tmp_path, p, strategy='mirrored')
  assert not (tmp_path / 'ckpt').exists()


def test_the_refusal_is_what_xla_on_cpu_does(mirrored, monkeypatch):
  # Without the check, XLA fails at the first step. If this test fails, a
  # TF release compiles CPU collectives: drop BaseTask._CheckJitCompile.
  monkeypatch.setattr(task_lib.BaseTask, '_CheckJitCompile', lambda self: None)
  task = _Task(mirrored, jit_compile=True)
  with pytest.raises(tf.errors.UnimplementedError,
                     match='Collectives are not yet implemented for CPU'):
    task.TrainLoop(_Iterator(mirrored), 2)


def _XlaCompiledCalls(graph_def):
  """Names of the call ops that carry _XlaMustCompile=True."""
  nodes = list(graph_def.node)
  for f in graph_def.library.function:
    nodes.extend(f.node_def)
  return [n.name for n in nodes if n.attr['_XlaMustCompile'].b]


def test_jit_compile_under_a_one_replica_mirrored_strategy_uses_xla():
  # One replica needs no all-reduce, so XLA compiles the replica step under
  # strategy.run, and steps_per_loop loops it: the same numbers.
  strategy = distribution.CreateStrategy('mirrored',
                                         devices=['/device:CPU:0'])
  assert strategy.num_replicas_in_sync == 1
  task = _Task(strategy, jit_compile=True)
  it = _Iterator(strategy)
  task.TrainLoop(it, 2)
  task.TrainLoop(it, _STEPS - 2)
  np.testing.assert_allclose(_Weights(task), _NumpyMomentum(_STEPS),
                             rtol=1e-5)
  batch = next(it)
  # pylint: disable=protected-access
  graph = tf.function(task._TrainStep, autograph=False).get_concrete_function(
      batch).graph.as_graph_def()
  assert _XlaCompiledCalls(graph), 'no XLA-compiled call in the step'
  plain = _Task(strategy, jit_compile=False)
  graph = tf.function(plain._TrainStep, autograph=False).get_concrete_function(
      batch).graph.as_graph_def()
  # pylint: enable=protected-access
  assert not _XlaCompiledCalls(graph)
