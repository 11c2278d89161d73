"""The experiments' model tasks: metrics by hand (DenseLayer: tests/test_layers/test_dense.py)."""

import numpy as np
import pytest
import tensorflow as tf

from configs import model_tasks


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
