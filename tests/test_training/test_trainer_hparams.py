"""The train run's hparams and throughput scalars (issue 15.3), read back.

Read as a user would, with TensorBoard's EventAccumulator: scalars written
by TF 2 are tensors (`Tags()['tensors']`, `Tensors(tag)`), the hparams are
the 'hparams' plugin's session-start record.
"""

import glob
import io
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.hparams import plugin_data_pb2

from params import registry
from learner.training.services import summary as summary_lib
from learner.training.jobs import trainer as trainer_lib


def _Params(max_steps=60):
  p = registry.GetParams('regression.LinearRegression')
  p.task.train.Set(max_steps=max_steps, save_interval_steps=20,
                   summary_interval_steps=10, log_interval_steps=10)
  return p


def _Accumulator(run_dir):
  acc = event_accumulator.EventAccumulator(
      run_dir, size_guidance={event_accumulator.TENSORS: 0})
  acc.Reload()
  return acc


def _HParams(run_dir):
  """{name: value} of every session-start record in the run's files."""
  records = []
  for path in sorted(glob.glob(os.path.join(run_dir, 'events*'))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for v in event.summary.value:
        if v.metadata.plugin_data.plugin_name == hparams_metadata.PLUGIN_NAME:
          data = plugin_data_pb2.HParamsPluginData.FromString(
              v.metadata.plugin_data.content)
          if data.HasField('session_start_info'):
            records.append({
                k: getattr(h, h.WhichOneof('kind'))
                for k, h in data.session_start_info.hparams.items()})
  return records


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  logdir = tmp_path_factory.mktemp('trained')
  trainer_lib.Trainer(_Params(), str(logdir), mode='train',
                      stream=io.StringIO()).Run()
  return str(logdir)


def test_step_counter_rates_by_hand():
  times = iter([100.0, 102.0, 102.5, 103.0])
  counter = summary_lib.StepCounter(examples_per_step=64,
                                    clock=lambda: next(times))
  assert counter.Rates(10) == {}            # Starts the clock only.
  # 10 steps in 2 s: 5 steps/s, 5 * 64 = 320 examples/s.
  assert counter.Rates(20) == {'global_step/sec': (5.0, 1.0),
                               'examples/sec': (320.0, 1.0)}
  assert counter.Rates(20) == {}            # No step since.
  no_batch = summary_lib.StepCounter(clock=iter([0.0, 4.0]).__next__)
  no_batch.Rates(0)
  assert no_batch.Rates(10) == {'global_step/sec': (2.5, 1.0)}


def test_throughput_scalars_in_the_train_run(trained):
  acc = _Accumulator(os.path.join(trained, 'train'))
  assert {'global_step/sec', 'examples/sec'} <= set(acc.Tags()['tensors'])
  steps = acc.Tensors('global_step/sec')
  # Every summary step but the first (10), which starts the clock.
  assert [e.step for e in steps] == [20, 30, 40, 50, 60]
  rates = np.array([tf.make_ndarray(e.tensor_proto) for e in steps])
  examples = np.array([tf.make_ndarray(e.tensor_proto)
                       for e in acc.Tensors('examples/sec')])
  assert (rates > 0).all()
  # examples/sec = global_step/sec * the batch size, 32.
  np.testing.assert_allclose(examples, rates * 32, rtol=1e-6)
  assert acc.Tags()['scalars'] == []  # Why Tags()['scalars'] is no help.


def test_hparams_are_the_scalar_params_written_once(trained):
  records = _HParams(os.path.join(trained, 'train'))
  assert len(records) == 1
  hp = records[0]
  assert hp['task.train.max_steps'] == 60
  assert hp['task.train.save_interval_steps'] == 20
  assert hp['train_input.batch_size'] == 32
  assert hp['task.eval.dev_metric'] == 'loss'
  assert hp['task.name'] == 'regression'
  assert hp['task.cls'] == 'configs.model_tasks.LinearRegressionTask'
  assert hp['train_input.shuffle'] is True
  # Lists and None are left out.
  assert 'task.train.init_from_checkpoint_rules' not in hp
  assert 'task.train.replicas_to_aggregate' not in hp
  # A resumed run does not write them again.
  trainer_lib.Trainer(_Params(max_steps=80), trained, mode='train',
                      stream=io.StringIO()).Run()
  assert len(_HParams(os.path.join(trained, 'train'))) == 1


def test_scalar_params_are_flat_and_scalar():
  flat = summary_lib.ScalarParams(_Params())
  assert flat and all(isinstance(v, (bool, int, float, str))
                      for v in flat.values())
  assert flat['task.eval.dev_metric_mode'] == 'min'
  assert flat['task.eval.early_stop_patience'] == 0
