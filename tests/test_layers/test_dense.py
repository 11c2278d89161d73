"""DenseLayer: values by hand and refused params."""

import numpy as np
import pytest
import tensorflow as tf

from layers import dense
from params import InstantiableParams


def test_dense_layer_computes_relu_of_affine():
  layer = dense.DenseLayer.Params().Set(
      name='d', input_dim=2, output_dim=2, activation='relu',
      params_init=1.0).Instantiate()
  # w = ones(2, 2), b = 0: [1, -3] @ w = [-2, -2] -> relu 0; [2, 1] -> 3.
  y = layer.FProp(layer.theta, tf.constant([[1.0, -3.0], [2.0, 1.0]]))
  np.testing.assert_allclose(y.numpy(), [[0.0, 0.0], [3.0, 3.0]])


@pytest.mark.parametrize('key,value', [('input_dim', 0),
                                       ('activation', 'gelu_fast')])
def test_dense_layer_refuses_bad_params(key, value):
  p = dense.DenseLayer.Params().Set(name='d', input_dim=2, output_dim=2)
  p.Set(**{key: value})
  with pytest.raises(ValueError, match=key):
    p.Instantiate()


def test_params_text_naming_the_old_dense_layer_path_still_loads():
  # DenseLayer lived in configs/model_tasks.py before issue 22.
  p = InstantiableParams().Set(cls=None)
  p.Define('layer', None, '')
  text = ("layer.cls : Class('configs.model_tasks.DenseLayer')\n"
          'layer.input_dim : 3\nlayer.output_dim : 2\n'
          "layer.activation : 'tanh'\n")
  with pytest.warns(FutureWarning, match="'configs.model_tasks.DenseLayer' "
                    "has moved to 'layers.dense.DenseLayer'"):
    p.FromText(text)
  assert p.layer.cls is dense.DenseLayer
  assert (p.layer.input_dim, p.layer.output_dim, p.layer.activation) == (
      3, 2, 'tanh')
  assert "layer.cls : Class('layers.dense.DenseLayer')" in p.ToText()


def test_dense_layer_takes_every_activation_of_the_one_table():
  # One table for every layer (layers/activations.py): exact GELU of
  # x @ w + b with w = 1, b = 0: [1, -3] -> -2 each; gelu(-2) =
  # -2 * Phi(-2) = -2 * 0.0227501319 = -0.0455002639.
  layer = dense.DenseLayer.Params().Set(
      name='d', input_dim=2, output_dim=2, activation='gelu',
      params_init=1.0).Instantiate()
  y = layer.FProp(layer.theta, tf.constant([[1.0, -3.0]]))
  np.testing.assert_allclose(y.numpy(), [[-0.0455002639] * 2], rtol=1e-6)
