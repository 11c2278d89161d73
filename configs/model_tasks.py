"""The models the registered experiments train: small, real, CPU-friendly.

  * `MlpClassifierTask`: an MLP classifier (softmax cross-entropy); metrics
    'loss', 'accuracy'.
  * `LinearRegressionTask`: y = w * x + b on scalar inputs (the seeds'
    example); metrics 'loss' (mean squared error), 'w', 'b'.
  * `LinearModelTask`: y = x @ w + b on feature vectors; metrics 'loss'
    (mean squared error plus nothing: regularisation is the learner's),
    'mse'.

Every metric is `(value, weight)` with weight = examples in the batch. The
layers they are built of are in layers/ (`layers.DenseLayer`).
"""

import tensorflow as tf

from params import NestedMap
from params import checks
from layers import DenseLayer
from learner.training.model import task as task_lib

class MlpClassifierTask(task_lib.BaseTask):
  """An MLP classifier with softmax cross-entropy.

  Batch: 'features' float32 [batch, input_dim], 'labels' int32 [batch].
  Children 'layer_0' .. 'layer_<n>' (the last one linear, num_classes wide).
  Metrics: 'loss' (mean cross-entropy, nats), 'accuracy' (fraction correct),
  both weighted by the batch size. per_example: 'xent', 'correct'.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 64, 'Input features.')
    p.Define('hidden_dims', [64], 'Widths of the hidden (ReLU) layers.')
    p.Define('num_classes', 10, 'Output classes.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(input_dim=checks.Int(1, example=64),
                 num_classes=checks.Int(1, example=10))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    dims = [p.input_dim] + list(p.hidden_dims) + [p.num_classes]
    self._num_layers = len(dims) - 1
    for i in range(self._num_layers):
      last = i == self._num_layers - 1
      self.CreateChild('layer_%d' % i, DenseLayer.Params().Set(
          input_dim=dims[i], output_dim=dims[i + 1],
          activation='none' if last else 'relu'))

  def ComputePredictions(self, theta, batch):
    x = tf.cast(batch.features, self.fprop_dtype)
    for i in range(self._num_layers):
      name = 'layer_%d' % i
      x = self.children[name].FProp(theta[name], x)
    return NestedMap(logits=x)

  def ComputeLoss(self, theta, predictions, batch):
    return ClassificationMetrics(predictions.logits, batch.labels)


def ClassificationMetrics(logits, labels):
  """(metrics, per_example) of softmax cross-entropy classification.

  Args:
    logits: float [batch, num_classes].
    labels: int [batch], in [0, num_classes).

  Returns:
    metrics NestedMap: 'loss' (mean cross-entropy, nats) and 'accuracy'
    (fraction whose argmax is the label), both (value, batch size);
    per_example NestedMap: 'xent', 'correct', float32 [batch].
  """
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits)
  correct = tf.cast(
      tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels),
      tf.float32)
  n = tf.cast(tf.shape(labels)[0], tf.float32)
  metrics = NestedMap(
      loss=(tf.reduce_mean(xent), n),
      accuracy=(tf.reduce_mean(correct), n))
  return metrics, NestedMap(xent=xent, correct=correct)


class LinearRegressionTask(task_lib.BaseTask):
  """y = w * x + b on scalars, trained on the mean squared error.

  Batch: 'x' float32 [batch], 'y' float32 [batch]. Variables 'w', 'b'
  (scalars, 0 at start). Metrics: 'loss' (MSE), 'w', 'b' (weight 1).
  """

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [], init=0.0)
    self.CreateVariable('b', [], init=0.0)

  def ComputePredictions(self, theta, batch):
    return NestedMap(y=theta.w * batch.x + theta.b)

  def ComputeLoss(self, theta, predictions, batch):
    err = predictions.y - batch.y
    n = tf.cast(tf.shape(err)[0], tf.float32)
    metrics = NestedMap(loss=(tf.reduce_mean(tf.square(err)), n),
                        w=(tf.identity(theta.w), tf.constant(1.0)),
                        b=(tf.identity(theta.b), tf.constant(1.0)))
    return metrics, NestedMap(squared_error=tf.square(err))


class LinearModelTask(task_lib.BaseTask):
  """y = x @ w + b on feature vectors, trained on the mean squared error.

  Batch: 'features' float32 [batch, input_dim], 'targets' float32 [batch].
  Child 'linear' (a DenseLayer without activation, output 1). Metrics:
  'loss' and 'mse' (both the mean squared error; regularisation terms are
  reported by the learner as l1_loss / l2_loss).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 10, 'Input features.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['input_dim'] = checks.Int(1, example=10)
    return specs

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('linear', DenseLayer.Params().Set(
        input_dim=self.params.input_dim, output_dim=1, activation='none',
        params_init=0.0))

  def ComputePredictions(self, theta, batch):
    y = self.linear.FProp(theta.linear, tf.cast(batch.features, tf.float32))
    return NestedMap(y=tf.squeeze(y, -1))

  def ComputeLoss(self, theta, predictions, batch):
    se = tf.square(predictions.y - batch.targets)
    n = tf.cast(tf.shape(se)[0], tf.float32)
    mse = tf.reduce_mean(se)
    return NestedMap(loss=(mse, n), mse=(mse, n)), NestedMap(squared_error=se)
