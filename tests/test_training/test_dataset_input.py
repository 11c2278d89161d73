"""DatasetInput: the user's own tf.data factory, one device and mirrored.

The numbers are checked against numpy: the batches are exactly the
examples the documented sharding rule gives, and a resumed training run
under MirroredStrategy (2 logical CPUs, the one strategy per process the
tests share: distribution.CreateStrategy returns it) ends with the
uninterrupted run's weights.
"""

import io

import numpy as np
import pytest
import tensorflow as tf

import learner
from configs import model_tasks
from learner import learner as learner_lib
from learner import optimizers
from learner.training.cluster import distribution
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import validate
from learner.training.model import task_params
from learner.training.model.input_generator import DatasetInput
from params import hyperparams
import schedules as sch

_X = np.linspace(-1.0, 1.0, 64).astype(np.float32)
_Y = (3.0 * _X - 1.0).astype(np.float32)


def _Examples():
  return tf.data.Dataset.from_tensor_slices({'x': _X, 'y': _Y}).repeat()


def test_exported_from_learner():
  assert learner.DatasetInput is DatasetInput


def test_one_device_batches_and_skip():
  inp = DatasetInput.Params().Set(dataset_fn=_Examples,
                                  batch_size=8).Instantiate()
  ds = inp.GetDataset(skip_batches=3)
  first = next(iter(ds))
  np.testing.assert_array_equal(first['x'].numpy(), _X[24:32])


def test_input_context_form_is_not_sharded_again():
  seen = []

  def Fn(ctx):
    seen.append((ctx.input_pipeline_id, ctx.num_input_pipelines))
    return tf.data.Dataset.from_tensor_slices({'x': _X[ctx.input_pipeline_id::
                                                       2]})

  inp = DatasetInput.Params().Set(dataset_fn=Fn, batch_size=4).Instantiate()
  ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                   num_replicas_in_sync=2)
  batch = next(iter(inp.GetDataset(skip_batches=1, input_context=ctx)))
  assert seen == [(1, 2)]
  # Pipeline 1's own examples 1, 3, 5, ...; per-replica batch 2; one global
  # step skipped = 1 batch of this pipeline's single replica.
  np.testing.assert_array_equal(batch['x'].numpy(), _X[[5, 7]])


@pytest.mark.parametrize('fn,match', [
    (None, 'dataset_fn must be a callable'),
    (lambda: [1, 2], 'must return an unbatched tf.data.Dataset of dicts'),
    (lambda: tf.data.Dataset.range(3), 'of dicts'),
])
def test_refuses_bad_factories(fn, match):
  with pytest.raises(TypeError, match=match):
    inp = DatasetInput.Params().Set(dataset_fn=fn).Instantiate()
    inp.GetDataset()


def _Params(max_steps):
  tp = model_tasks.LinearRegressionTask.Params().Set(name='lin')
  tp.train.Set(max_steps=max_steps, save_interval_steps=3,
               summary_interval_steps=100, log_interval_steps=100)
  tp.train.learner = learner_lib.Learner.Params().Set(
      name='learner', loss_name='loss', learning_rate=0.1,
      optimizer=optimizers.SGD.Params())
  p = hyperparams.Params()
  p.Define('task', tp, '')
  p.Define('train_input', DatasetInput.Params().Set(
      name='train_input', dataset_fn=_Examples, batch_size=8), '')
  p.Define('eval_input', DatasetInput.Params().Set(
      name='eval_input', dataset_fn=lambda: _Examples().take(64),
      batch_size=64), '')
  return p


def _Run(logdir, max_steps):
  t = trainer_lib.Trainer(_Params(max_steps), str(logdir),
                          strategy='mirrored', stream=io.StringIO())
  t.Run()
  distribution.AssertReplicasIdentical(t.task.vars.Flatten())
  return float(t.task.vars.w.numpy()), float(t.task.vars.b.numpy())


def _NumpySgd(steps, batch=8, lr=0.1):
  """SGD on the mean squared error over the ordered, repeated examples."""
  w = b = 0.0
  for s in range(steps):
    idx = (np.arange(batch) + s * batch) % len(_X)
    err = w * _X[idx] + b - _Y[idx]
    w, b = w - lr * 2 * np.mean(err * _X[idx]), b - lr * 2 * np.mean(err)
  return w, b


def test_mirrored_resume_reproduces_uninterrupted_run(tmp_path):
  strategy = distribution.CreateStrategy('mirrored')
  assert strategy.num_replicas_in_sync == 2
  whole = _Run(tmp_path / 'whole', 10)
  _Run(tmp_path / 'parts', 6)
  resumed = _Run(tmp_path / 'parts', 10)
  np.testing.assert_allclose(resumed, whole, rtol=1e-6)
  # And both are the single-device SGD on the same batches (each step's
  # two per-replica halves are one global batch of 8 consecutive examples).
  np.testing.assert_allclose(whole, _NumpySgd(10), rtol=1e-5)


def _EpochParams(**input_kw):
  """_Params with a cosine schedule of '3 epochs' and batch 100."""
  p = _Params(30)
  p.task.train.learner.lr_schedule = sch.CosineDecay.Params().Set(
      total_steps='3 epochs')
  p.train_input.Set(batch_size=100, **input_kw)
  return p


def test_num_examples_lets_a_schedule_length_be_given_in_epochs():
  # 3 epochs * 1000 examples / batch 100 = 30 updates.
  p = _EpochParams(num_examples=1000)
  assert p.train_input.Instantiate().num_examples == 1000
  lines = task_params.ResolveDurations(p)
  assert p.task.train.learner.lr_schedule.total_steps == 30
  assert lines == ["task.train.learner.lr_schedule.total_steps : '3 epochs' "
                   '-> 30 updates (3000 examples at 100 per update)']


def test_epochs_without_num_examples_name_it_as_the_fix(tmp_path):
  # It said only "give it in examples or updates"; DatasetInput had no way
  # to state its epoch size.
  with pytest.raises(validate.ExperimentError, match=(
      r"^task.train.learner.lr_schedule.total_steps : '3 epochs' is in "
      r'epochs, but the train input does not say how many examples an epoch '
      r'has; set train_input.num_examples \(examples per epoch\), or give '
      r'it in examples or updates.$')):
    trainer_lib.Trainer(_EpochParams(), str(tmp_path / 'run'),
                        stream=io.StringIO())
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('bad', [0, -5, 2.5, True, '1000'])
def test_refuses_a_bad_num_examples(bad):
  p = DatasetInput.Params().Set(dataset_fn=_Examples, num_examples=bad)
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  assert 'num_examples' in str(e.value) and repr(bad) in str(e.value)
  assert len(str(e.value).splitlines()) == 1
