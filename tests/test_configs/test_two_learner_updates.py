"""One update by hand: a tied embedding, and a Keras task with two learners.

  * Tied embedding: a tiny LM-like task looks the table up and uses it as
    the softmax weight; one SGD step must give
    emb - lr * (g_lookup + g_softmax), both parts computed in numpy.
  * mnist1d.KerasConvNetTask (Keras Conv1D / MaxPooling1D / Dense held by
    the task) trained by two SGD learners split by bprop_variable_filter:
    each changes only its own variables, by lr x the numpy gradient
    (central differences of a numpy forward pass, float64).
"""

import numpy as np
import tensorflow as tf

import layers
from configs import mnist1d
from learner import learner as learner_lib
from learner import optimizers
from learner.training.model import task as task_lib
from params import NestedMap


class _TiedLm(task_lib.BaseTask):

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('emb', layers.EmbeddingLayer.Params().Set(
        vocab_size=4, embedding_dim=3))

  def ComputePredictions(self, theta, batch):
    h = self.emb.EmbLookup(theta.emb, batch.ids)
    return NestedMap(logits=self.emb.Logits(theta.emb, h))

  def ComputeLoss(self, theta, predictions, batch):
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=batch.labels, logits=predictions.logits)
    return NestedMap(loss=(tf.reduce_mean(xent), tf.constant(1.0))), None


def _Sgd(name, lr, filt):
  return learner_lib.Learner.Params().Set(
      name=name, loss_name='loss', learning_rate=lr,
      optimizer=optimizers.SGD.Params(), bprop_variable_filter=filt,
      var_norm_metrics=False)


def _Softmax(z):
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_tied_embedding_update_is_lookup_plus_softmax_gradient():
  p = _TiedLm.Params().Set(name='lm', random_seed=3)
  p.train.learner = _Sgd('embedding', 0.5, 'emb/emb$')
  task = p.Instantiate()
  task.CreateLearners()
  emb = task.vars.emb.emb.numpy().astype(np.float64)
  ids = np.array([0, 2, 2, 1], np.int32)
  labels = np.array([1, 3, 0, 2], np.int32)
  task.TrainStep({'ids': ids, 'labels': labels})
  # numpy: h = emb[ids]; logits = h emb^T; dL/dlogits = (softmax - 1hot)/N.
  h = emb[ids]
  d_logits = _Softmax(h @ emb.T)
  d_logits[np.arange(4), labels] -= 1.0
  d_logits /= 4.0
  g_softmax = d_logits.T @ h  # d(h emb^T)/d emb, the output use.
  g_lookup = np.zeros_like(emb)
  np.add.at(g_lookup, ids, d_logits @ emb)  # the rows looked up.
  assert np.abs(g_lookup[3]).max() == 0.0 and np.abs(g_softmax[3]).max() > 0
  expected = emb - 0.5 * (g_lookup + g_softmax)
  np.testing.assert_allclose(task.vars.emb.emb.numpy(), expected, rtol=1e-5,
                             atol=1e-6)
  assert int(task.learners[0].num_updates.numpy()) == 1


def _NumpyConvNetLoss(w, x, labels):
  """The KerasConvNetTask forward pass (1 conv of width 3, SAME) in numpy."""
  k = w['kernel']  # [3, 1, filters]
  xp = np.pad(x[:, :, None], ((0, 0), (1, 1), (0, 0)))
  conv = sum(xp[:, i:i + x.shape[1], :] @ k[i] for i in range(3)) + w['bias']
  h = np.maximum(conv, 0.0)
  h = np.maximum(h[:, 0::2], h[:, 1::2]).reshape(len(x), -1)
  logits = h @ w['head_kernel'] + w['head_bias']
  logp = np.log(_Softmax(logits))
  return -logp[np.arange(len(x)), labels].mean()


def _NumericGradients(w, x, labels, eps=1e-6):
  out = {}
  for k, v in w.items():
    g = np.zeros_like(v)
    for i in np.ndindex(v.shape):
      up = {kk: vv.copy() for kk, vv in w.items()}
      dn = {kk: vv.copy() for kk, vv in w.items()}
      up[k][i] += eps
      dn[k][i] -= eps
      g[i] = (_NumpyConvNetLoss(up, x, labels) -
              _NumpyConvNetLoss(dn, x, labels)) / (2 * eps)
    out[k] = g
  return out


def test_keras_task_two_learners_each_update_own_variables_by_hand():
  p = mnist1d.KerasConvNetTask.Params().Set(
      name='net', random_seed=5, length=8, num_conv=1, filters=2,
      kernel_size=3, num_classes=3)
  p.train.learner = [_Sgd('conv_learner', 0.3, '/conv_'),
                       _Sgd('head_learner', 0.1, '/head/')]
  task = p.Instantiate()
  task.CreateLearners()
  v = task.vars
  names = sorted(x.name for x in task.ModelVars().Flatten())
  assert names == ['net/conv_0/bias:0', 'net/conv_0/kernel:0',
                   'net/head/bias:0', 'net/head/kernel:0'], names
  # Non-zero biases so the relu and max-pool paths are all exercised.
  v.conv_0.bias.assign([0.1, -0.05])
  w = {'kernel': v.conv_0.kernel.numpy(), 'bias': v.conv_0.bias.numpy(),
       'head_kernel': v.head.kernel.numpy(), 'head_bias': v.head.bias.numpy()}
  w = {k: x.astype(np.float64) for k, x in w.items()}
  rng = np.random.RandomState(0)
  x = rng.normal(size=[6, 8]).astype(np.float32)
  labels = np.array([0, 1, 2, 0, 1, 2], np.int32)
  g = _NumericGradients(w, x.astype(np.float64), labels)
  task.TrainStep({'features': x, 'labels': labels})
  lr = {'kernel': 0.3, 'bias': 0.3, 'head_kernel': 0.1, 'head_bias': 0.1}
  got = {'kernel': v.conv_0.kernel, 'bias': v.conv_0.bias,
         'head_kernel': v.head.kernel, 'head_bias': v.head.bias}
  for k in w:
    assert np.abs(g[k]).max() > 1e-4, k  # Every variable gets a gradient.
    np.testing.assert_allclose(got[k].numpy(), w[k] - lr[k] * g[k],
                               rtol=1e-4, atol=1e-6, err_msg=k)
  conv, head = task.learners
  assert ({x.name for x in conv.GetTrainableVariables(
      task.ModelVars()).Flatten()} == {'net/conv_0/bias:0',
                                       'net/conv_0/kernel:0'})
  assert ({x.name for x in head.GetTrainableVariables(
      task.ModelVars()).Flatten()} == {'net/head/bias:0', 'net/head/kernel:0'})
