"""The experiments' model layers: shapes, values and refused params."""

import numpy as np
import pytest
import tensorflow as tf

from configs import model_tasks


def test_dense_layer_computes_relu_of_affine():
  layer = model_tasks.DenseLayer.Params().Set(
      name='d', input_dim=2, output_dim=2, activation='relu',
      params_init=1.0).Instantiate()
  # w = ones(2, 2), b = 0: [1, -3] @ w = [-2, -2] -> relu 0; [2, 1] -> 3.
  y = layer.FProp(layer.theta, tf.constant([[1.0, -3.0], [2.0, 1.0]]))
  np.testing.assert_allclose(y.numpy(), [[0.0, 0.0], [3.0, 3.0]])


@pytest.mark.parametrize('key,value', [('input_dim', 0),
                                       ('activation', 'gelu')])
def test_dense_layer_refuses_bad_params(key, value):
  p = model_tasks.DenseLayer.Params().Set(name='d', input_dim=2, output_dim=2)
  p.Set(**{key: value})
  with pytest.raises(ValueError, match=key):
    p.Instantiate()


def test_mlp_classifier_metrics_by_hand():
  task = model_tasks.MlpClassifierTask.Params().Set(
      name='t', input_dim=2, hidden_dims=[], num_classes=2,
      params_init=0.0).Instantiate()
  batch = {'features': np.zeros([4, 2], np.float32),
           'labels': np.array([0, 1, 0, 0], np.int32)}
  metrics = task.EvalStep(batch)
  # All-zero weights: logits 0, xent log(2); argmax 0 is right 3 times of 4.
  np.testing.assert_allclose(metrics['loss'][0], np.log(2.0), rtol=1e-6)
  np.testing.assert_allclose(metrics['accuracy'][0], 0.75)
  assert float(metrics['loss'][1]) == 4.0
