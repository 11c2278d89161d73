"""What the code wrote before the layout move (issue 11) still loads today.

tests/data/pre_move/<model>/ was written by the trainer at the commit before
the move (885df5a): `python -m learner.trainer --model=<model> --max_steps=12
--params_override='task.train.save_interval_steps : 1000'`, so each logdir
holds ckpt/ckpt-12 (weights, optimizer slots, accumulators, counters and the
input iterator after 12 steps), ckpt/variable_names.json and params.txt,
whose classes are named by their old import paths
('learner.input_generator.DigitsInput', 'learner.optimizer_factory....').

The checkpoint is restored into a task built the way the trainer builds one
to train (learner/training/jobs/trainer.py `_BuildTask(train=True)` and
`_RunTrain`: the task with its learners, so every slot exists before the
restore, in one tf.train.Checkpoint with the iterator), and each restored
variable is compared with the value stored under its key, read on its own
with tf.train.load_checkpoint.
"""

import json
import pathlib
import warnings

import numpy as np
import pytest
import tensorflow as tf

from learner.training.services import checkpointer as checkpointer_lib
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import cli as cli_lib
from params import registry

DATA = pathlib.Path(__file__).resolve().parents[1] / 'data' / 'pre_move'
MODELS = ('digits.MlpLarsAccumulate', 'multi.TwoLearners')
STEPS = 12
# The flags of the run that wrote the data, applied to today's params.
RUN_MAX_STEPS = 12
RUN_SAVE_INTERVAL_STEPS = 1000
# Keys of the tf.train.Checkpoint object itself, not of the task.
CHECKPOINT_OWN_KEYS = {'_CHECKPOINTABLE_OBJECT_GRAPH',
                       'save_counter/.ATTRIBUTES/VARIABLE_VALUE'}
VALUE_SUFFIX = '/.ATTRIBUTES/VARIABLE_VALUE'
ITERATOR_KEY = 'iterator/.ATTRIBUTES/ITERATOR_STATE'


def _Escape(name):
  # How tf.train.Checkpoint writes a child's name in a key ('/' and '.').
  return name.replace('.', '..').replace('/', '.S')


def VariablesByPath(root):
  """{checkpoint-style path: tf.Variable} over every path to each variable.

  Walks the trackable children from `root` (a variable reachable along
  several paths is listed under each); the checkpoint keys one of them.
  """
  view = tf.train.TrackableView(root)
  out = {}

  def Walk(obj, path, ancestors):
    if isinstance(obj, tf.Variable):
      out[path] = obj
      return
    if id(obj) in ancestors:
      return
    for name, child in view.children(obj).items():
      Walk(child, (path + '/' if path else '') + _Escape(name),
           ancestors | {id(obj)})

  Walk(root, '', frozenset())
  # The Checkpoint's own save_counter (created by a restore) is not the task's.
  return {p: v for p, v in out.items()
          if p + VALUE_SUFFIX not in CHECKPOINT_OWN_KEYS}


def BuildForTraining(model):
  """The experiment's task with its learners and the trainer's checkpoint."""
  p = registry.GetParams(model)
  with tf.distribute.get_strategy().scope():
    task = p.task.Instantiate()
    task.CreateLearners()
  iterator = iter(p.train_input.Instantiate().GetDataset())
  return task, tf.train.Checkpoint(task=task, iterator=iterator)


@pytest.fixture(scope='module', params=MODELS)
def restored(request):
  model = request.param
  ckpt_path = str(DATA / model / 'ckpt' / ('ckpt-%d' % STEPS))
  task, ckpt = BuildForTraining(model)
  fresh = {k: v.numpy().copy() for k, v in VariablesByPath(ckpt).items()}
  status = ckpt.restore(ckpt_path)
  return model, ckpt_path, task, ckpt, status, fresh


def test_pre_move_checkpoint_restores_every_object_both_ways(restored):
  _, _, _, _, status, _ = restored
  # Every object of the checkpoint found a Python object, and every Python
  # object of the task (weights, slots, accumulators, counters) got a value.
  status.assert_consumed()


def test_pre_move_checkpoint_keys_are_todays_variables(restored):
  _, ckpt_path, _, ckpt, _, _ = restored
  stored = set(tf.train.load_checkpoint(ckpt_path).get_variable_to_shape_map())
  stored -= CHECKPOINT_OWN_KEYS
  assert ITERATOR_KEY in stored
  stored.discard(ITERATOR_KEY)
  paths = VariablesByPath(ckpt)
  by_key = {p + VALUE_SUFFIX: v for p, v in paths.items()}
  # Nothing in the checkpoint is left unmatched ...
  assert sorted(stored - set(by_key)) == []
  # ... and every variable of today's task is under one of its keys.
  keyed = {id(by_key[k]) for k in stored}
  unkeyed = sorted({v.name for v in paths.values() if id(v) not in keyed})
  assert unkeyed == []


def test_pre_move_checkpoint_values_equal_the_restored_variables(restored):
  _, ckpt_path, task, ckpt, _, fresh = restored
  reader = tf.train.load_checkpoint(ckpt_path)
  by_key = {p + VALUE_SUFFIX: v for p, v in VariablesByPath(ckpt).items()}
  keys = sorted(set(reader.get_variable_to_shape_map()) -
                CHECKPOINT_OWN_KEYS - {ITERATOR_KEY})
  changed = 0
  for key in keys:
    want = reader.get_tensor(key)
    got = by_key[key].numpy()
    assert got.dtype == want.dtype and got.shape == want.shape, key
    np.testing.assert_array_equal(got, want, err_msg=key)
    changed += not np.array_equal(fresh[key[:-len(VALUE_SUFFIX)]], want)
  # The restore really moved values: 12 steps changed the global step, the
  # weights and the slots, so most keys differ from a fresh build.
  assert int(task.global_step.numpy()) == STEPS
  assert changed >= len(keys) // 2, (changed, len(keys))


def test_pre_move_variable_names_equal_todays(restored):
  model, _, task, _, _, _ = restored
  with open(DATA / model / 'ckpt' / 'variable_names.json') as f:
    old = json.load(f)
  assert checkpointer_lib.VariableCheckpointKeys(task) == old


def _ExpectedParams(model):
  p = registry.GetParams(model)
  p.task.train.max_steps = RUN_MAX_STEPS
  p.task.train.save_interval_steps = RUN_SAVE_INTERVAL_STEPS
  return p


# Old path in the pre-move params.txt -> the new path the warning names.
MOVED = {
    'digits.MlpLarsAccumulate': {
        'learner.input_generator.DigitsInput': 'configs.inputs.DigitsInput',
        'learner.optimizer_factory.get_optimizer_wrapper_fn':
            'learner.optimizers.factory.get_optimizer_wrapper_fn',
        'learner.optimizer_factory.get_optimizer_fn':
            'learner.optimizers.factory.get_optimizer_fn',
    },
    'multi.TwoLearners': {
        'learner.input_generator.DigitsInput': 'configs.inputs.DigitsInput',
    },
}


@pytest.mark.parametrize('model', MODELS)
def test_pre_move_params_text_loads_as_todays_params_with_a_warning(model):
  path = DATA / model / 'params.txt'
  assert all(old in path.read_text() for old in MOVED[model])
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    # The trainer's reader of a params file (--params_file).
    p = cli_lib.LoadExperimentParams(model, params_file=str(path))
  assert p.ToText() == _ExpectedParams(model).ToText()
  messages = [str(w.message) for w in caught
              if issubclass(w.category, FutureWarning)]
  for old, new in MOVED[model].items():
    assert any(repr(old) in m and repr(new) in m for m in messages), (
        old, messages)
