"""KerasLayer: a Keras layer configured by params, its variables in vars."""

import os

import numpy as np
import pytest
import tensorflow as tf

from params import BaseLayer
from layers import keras_layer


def _Conv(name='conv'):
  return keras_layer.KerasLayer.Params().Set(
      name=name, keras_class='Conv1D',
      keras_config=dict(filters=4, kernel_size=3, padding='valid'),
      input_shape=[10, 2])


class _Task(BaseLayer):

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('conv', _Conv())


def test_variables_in_vars_with_path_names():
  task = _Task(_Task.Params().Set(name='task'))
  names = {k: v.name for k, v in task.vars.FlattenItems()}
  assert names == {'conv.layer.kernel': 'task/conv/layer/kernel:0',
                   'conv.layer.bias': 'task/conv/layer/bias:0'}
  assert task.vars.conv.layer.kernel.shape == (3, 2, 4)


def test_fprop_equals_numpy_convolution():
  layer = _Conv().Instantiate()
  rng = np.random.default_rng(0)
  layer.layer.bias.assign(rng.normal(size=4).astype(np.float32))
  x = rng.normal(size=(2, 10, 2)).astype(np.float32)
  out = layer.FProp(layer.theta, tf.constant(x)).numpy()
  w = layer.vars.layer.kernel.numpy()
  b = layer.vars.layer.bias.numpy()
  expected = np.stack([np.einsum('bkc,kcf->bf', x[:, t:t + 3], w) + b
                       for t in range(8)], axis=1)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_checkpoint_round_trip(tmp_path):
  task = _Task(_Task.Params().Set(name='task'))
  kernel = task.vars.conv.layer.kernel
  saved = kernel.numpy()
  path = tf.train.Checkpoint(model=task).save(os.path.join(tmp_path, 'ckpt'))
  kernel.assign(tf.zeros_like(kernel))
  other = _Task(_Task.Params().Set(name='task'))  # fresh init, other values
  assert not np.allclose(other.vars.conv.layer.kernel.numpy(), saved)
  tf.train.Checkpoint(model=other).restore(path).assert_consumed()
  np.testing.assert_array_equal(other.vars.conv.layer.kernel.numpy(), saved)
  tf.train.Checkpoint(model=task).restore(path).assert_consumed()
  np.testing.assert_array_equal(kernel.numpy(), saved)


def test_class_by_import_path_and_by_class():
  a = keras_layer.KerasLayer.Params().Set(
      name='a', keras_class='keras.layers.Dense', keras_config=dict(units=3),
      input_shape=[5]).Instantiate()
  b = keras_layer.KerasLayer.Params().Set(
      name='b', keras_class=tf.keras.layers.Dense, keras_config=dict(units=3),
      input_shape=[5]).Instantiate()
  assert a.vars.layer.kernel.shape == b.vars.layer.kernel.shape == (5, 3)


def test_unbuilt_without_input_shape_raises():
  with pytest.raises(ValueError, match='set input_shape'):
    keras_layer.KerasLayer.Params().Set(
        name='d', keras_class='Dense',
        keras_config=dict(units=3)).Instantiate()


def test_unknown_class_raises():
  with pytest.raises(ValueError, match='not in tf.keras.layers'):
    keras_layer.KerasLayer.Params().Set(name='d', keras_class='Dense9',
                                        input_shape=[2]).Instantiate()


def test_params_text_round_trip():
  p = _Conv()
  q = keras_layer.KerasLayer.Params().FromText(p.ToText())
  assert q.keras_config == p.keras_config and q.keras_class == 'Conv1D'


def test_class_path_of_a_module_not_imported_is_refused_and_not_imported(
    tmp_path, monkeypatch):
  # Params text is data (issue 12): naming a class must not import its module.
  marker = tmp_path / 'imported'
  (tmp_path / 'kl_not_imported_q3.py').write_text(
      'open(%r, "w").write("x")\n' % str(marker))
  monkeypatch.syspath_prepend(str(tmp_path))
  p = keras_layer.KerasLayer.Params().Set(
      name='k', keras_class='kl_not_imported_q3.Dense',
      keras_config={'units': 2})
  with pytest.raises(ValueError):
    p.Instantiate()
  assert not marker.exists()
