"""Keras layers in a task behave as Keras users expect (issue 21, item 2).

A Keras layer set trainable=False is frozen for every learner and shown so
in model_analysis.txt; Keras layers held in a list, tuple or dict are
trained like an attribute's; a run seeds the global RNGs from --seed, else
task.random_seed, else 0, before the task is built (two runs identical);
init_from_checkpoint reaches Keras variables.
"""

import numpy as np
import pytest
import tensorflow as tf

import learner
from learner.training.services import checkpointer
from learner.training.model import model_analysis
from learner.training.jobs import trainer as trainer_lib
from params import BaseLayer
from params import IsTrainable
from params import Params

X = np.arange(6, dtype=np.float32).reshape(2, 3) / 6.0


class KerasTask(BaseLayer):
  """Dense layers: frozen in the constructor, frozen after build, free, and
  in a list, a tuple and a dict."""

  def __init__(self, params):
    super().__init__(params)
    self.frozen = tf.keras.layers.Dense(1, trainable=False)
    self.later = tf.keras.layers.Dense(1)
    self.free = tf.keras.layers.Dense(1)
    self.in_list = [tf.keras.layers.Dense(1), tf.keras.layers.Dense(1)]
    self.in_tuple = (tf.keras.layers.Dense(1),)
    self.in_dict = {'a': tf.keras.layers.Dense(1)}
    for layer in self.Layers():
      layer.build((None, 3))
    self.later.trainable = False  # after it is built

  def Layers(self):
    return ([self.frozen, self.later, self.free] + list(self.in_list) +
            list(self.in_tuple) + list(self.in_dict.values()))

  def Loss(self, x):
    # mean over the batch of the sum of every layer's output.
    return tf.reduce_mean(tf.add_n([l(x) for l in self.Layers()]))


def _Task():
  return KerasTask(KerasTask.Params().Set(name='task'))


def _Learner(task):
  lrn = learner.Learner.Params().Set(
      name='learner', loss_name='loss', learning_rate=0.5,
      optimizer=learner.SGD.Params()).Instantiate()
  return lrn.Bind(task.vars)


def test_vars_of_a_list_tuple_and_dict_and_their_names():
  names = {k: v.name for k, v in _Task().vars.FlattenItems()}
  assert names['in_list[0].kernel'] == 'task/in_list_0/kernel:0'
  assert names['in_list[1].bias'] == 'task/in_list_1/bias:0'
  assert names['in_tuple[0].kernel'] == 'task/in_tuple_0/kernel:0'
  assert names['in_dict.a.kernel'] == 'task/in_dict_a/kernel:0'


def test_one_sgd_step_trains_containers_and_leaves_frozen_layers():
  task = _Task()
  lrn = _Learner(task)
  before = {k: v.numpy().copy() for k, v in task.vars.FlattenItems()}

  @tf.function
  def Step():
    lrn.Apply({'loss': (task.Loss(X), tf.constant(2.0))}, task.vars)

  Step()
  after = {k: v.numpy() for k, v in task.vars.FlattenItems()}
  # d loss / d kernel = mean of x over the batch (per input), d / d bias = 1.
  grad_kernel = X.mean(0)[:, None]
  for key in ('free', 'in_list[0]', 'in_list[1]', 'in_tuple[0]', 'in_dict.a'):
    np.testing.assert_allclose(after[key + '.kernel'],
                               before[key + '.kernel'] - 0.5 * grad_kernel,
                               rtol=1e-6)
    np.testing.assert_allclose(after[key + '.bias'],
                               before[key + '.bias'] - 0.5, rtol=1e-6)
  for key in ('frozen.kernel', 'frozen.bias', 'later.kernel', 'later.bias'):
    np.testing.assert_array_equal(after[key], before[key])


def test_frozen_is_read_from_the_keras_flag_and_shown_in_model_analysis():
  task = _Task()
  assert not IsTrainable(task.vars.frozen.kernel)
  assert not IsTrainable(task.vars.later.bias)
  assert IsTrainable(task.vars.free.kernel)
  assert task.vars.later.bias.trainable  # the tf.Variable's own flag

  class _Holder:
    ModelVars = lambda self: task.vars  # pylint: disable=unnecessary-lambda-assignment

  text = model_analysis.ModelAnalysis(_Holder(), [_Learner(task)])
  lines = {l.split()[0]: l for l in text.splitlines() if l.startswith('task/')}
  assert lines['task/frozen/kernel'].endswith('frozen')
  assert lines['task/later/bias'].endswith('frozen')
  assert lines['task/free/kernel'].endswith('learner')
  # 7 layers of 3 + 1 values; 5 trainable.
  assert 'Total: 14 variables, 28 values (20 trainable)' in text


def test_a_list_mixing_keras_layers_and_other_values_is_refused():

  class Mixed(BaseLayer):

    def __init__(self, params):
      super().__init__(params)
      self.parts = [tf.keras.layers.Dense(1), 3]

  with pytest.raises(ValueError, match=r"'parts' holds Keras layers and "
                     r"other values \(\['int'\]\).*own attribute"):
    Mixed(Mixed.Params().Set(name='m'))


def test_init_from_checkpoint_keys_cover_keras_variables(tmp_path):
  task = _Task()
  keys = checkpointer.VariableCheckpointKeys(task)
  path = tf.train.Checkpoint(task=task).write(str(tmp_path / 'ckpt'))
  stored = dict(tf.train.list_variables(path))
  for name in ('task/free/kernel', 'task/in_list_1/bias',
               'task/in_dict_a/kernel', 'task/frozen/kernel'):
    assert keys[name] in stored, (name, keys[name])
  reader = tf.train.load_checkpoint(path)
  np.testing.assert_array_equal(reader.get_tensor(keys['task/free/kernel']),
                                task.vars.free.kernel.numpy())


@pytest.mark.parametrize('seed, random_seed, expected', [
    (7, 1, 7), (None, 1234, 1234), (None, None, 0), (None, 2**32 + 5, 5)])
def test_the_global_seed_of_a_run(seed, random_seed, expected):
  p = Params()
  p.Define('task', Params(), '')
  p.task.Define('random_seed', random_seed, '')
  assert trainer_lib._GlobalSeed(seed, p) == expected  # pylint: disable=protected-access
