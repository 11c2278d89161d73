"""Lingvo 0.14.2's optimizer_test.py, ported to our counterparts.

Sources (tensorflow/lingvo at the commit whose optimizer.py is the wheel's;
/work/lingvo_report.md §5.3):
  lingvo/core/optimizer_test.py OptimizerTest.testAccumulator: Lingvo's
    Accumulator(accum_steps=2, SGD) is our GradientAccumulation(num_batches=2,
    SGD) (another name: docs/lingvo.md, "Learner and GradNormTracker",
    Accumulation row; with equal weights the two compute the same update).
  lingvo/core/optimizer_test.py OptimizerTest.testCompositeOptimizer: its
    only checked behaviour besides op names is the error for a variable
    matched by two regexes; Lingvo's CompositeOptimizer is our Composite.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import learner as learner_lib
from learner import optimizers
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.optimizers.base import SGD
from learner.optimizers.wrappers.composite import Composite
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def _Inputs():
  # optimizer_test.py testAccumulator: two batches [2, 4, 3].
  np.random.seed(12345)
  x1 = np.random.normal(0.1, 0.5, [2, 4, 3])
  np.random.seed(12346)
  x2 = np.random.normal(0.1, 0.5, [2, 4, 3])
  return x1, x2


def test_accumulator():
  """optimizer_test.py testAccumulator: a [3, 2] float64 projection, loss =
  sum(x @ w). Two micro-batches accumulated over 2 steps: the variables do
  not move after the first; the accumulator holds the first gradient, then
  is 0 again; the result equals SGD(0.1) applied to each gradient times 1/2
  (w0 - 0.05 * (g1 + g2)). d loss / d w[i, j] = sum over the batch of
  x[..., i], the same for both columns j."""
  x1, x2 = _Inputs()
  np.random.seed(123456)
  w0 = np.random.normal(0.0, 0.01, [3, 2])
  w = tf.Variable(w0, dtype=tf.float64, name='proj/w')
  vmap = NestedMap(w=w)
  lrn = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=0.1,
      optimizer=GradientAccumulation.Params().Set(
          optimizer=SGD.Params(), num_batches=2)).Instantiate().Bind(vmap)

  @tf.function(autograph=False)
  def _Step(x):
    loss = tf.reduce_sum(tf.einsum('bti,ij->btj', x, w))
    lrn.Apply({'loss': (loss, 1.0)}, vmap)

  def _Grad(x):
    return np.repeat(x.reshape(-1, 3).sum(0)[:, None], 2, axis=1)

  accum = lrn.optimizer.GetAccumulator(w)
  np.testing.assert_array_equal(accum.numpy(), np.zeros([3, 2]))
  _Step(tf.constant(x1))
  np.testing.assert_array_equal(w.numpy(), w0)
  np.testing.assert_allclose(accum.numpy(), _Grad(x1), rtol=1e-12)
  _Step(tf.constant(x2))
  np.testing.assert_array_equal(accum.numpy(), np.zeros([3, 2]))
  want = w0 - 0.1 * 0.5 * _Grad(x1) - 0.1 * 0.5 * _Grad(x2)
  # Lingvo asserts with assertAllClose (rtol 1e-6); our rate is float32.
  np.testing.assert_allclose(w.numpy(), want, rtol=1e-6)


def test_composite_optimizer_variable_matched_twice():
  """optimizer_test.py testCompositeOptimizer: {'fc/w': SGD, '.': Adagrad,
  default: Adagrad} matches fc/w twice: an error naming the variable (Lingvo
  'Variable fc/w/var:0 is matched 2 times by regex', at Apply; ours at
  Bind, naming both regexes)."""
  w = tf.Variable(np.zeros([3, 2]), name='fc/w')
  b = tf.Variable(np.zeros([2]), name='fc/b')
  opt = Composite.Params().Set(optimizer_map={
      'fc/w': (SGD.Params(), 1.0),
      '.': (optimizers.Adagrad.Params(), 1.0),
      'default_optimizer': (optimizers.Adagrad.Params(), 1.0),
  }).Instantiate()
  with pytest.raises(ValueError, match='fc/w') as e:
    opt.Bind(NestedMap(w=w, b=b))
  assert "'.'" in str(e.value), str(e.value)


def test_composite_optimizer_maps_that_build():
  """optimizer_test.py testCompositeOptimizer: the map {'fc/w': Adam,
  'fc/b': RMSProp, default: Adam} builds and applies (Lingvo checks only
  the op name). Here, one step at rate 0.1 from zeros with gradient 1 gives
  each variable its group's first update, worked by hand below."""
  w = tf.Variable(np.zeros([3, 2]), name='fc/w')
  b = tf.Variable(np.zeros([2]), name='fc/b')
  vmap = NestedMap(w=w, b=b)
  opt = Composite.Params().Set(optimizer_map={
      'fc/w': (optimizers.Adam.Params(), 1.0),
      'fc/b': (optimizers.RMSProp.Params(), 1.0),
      'default_optimizer': (optimizers.Adam.Params(), 1.0),
  }).Instantiate()
  opt.Bind(vmap)
  opt.Apply(0.1, NestedMap(
      w=VarGrad(w, tf.ones([3, 2], tf.float64)),
      b=VarGrad(b, tf.ones([2], tf.float64))))
  # Adam, t = 1: m = 0.1, v = 0.001; step = lr * sqrt(1 - 0.999) / (1 - 0.9)
  # * m / (sqrt(v) + 1e-6).
  adam = 0.1 * np.sqrt(0.001) / 0.1 * 0.1 / (np.sqrt(0.001) + 1e-6)
  np.testing.assert_allclose(w.numpy(), -adam * np.ones([3, 2]), rtol=1e-6)
  # RMSProp: ms = 0.9 * 1 + 0.1 * 1 = 1; mom = 0.1 * 1 / sqrt(1 + 1.0).
  np.testing.assert_allclose(b.numpy(), -0.1 / np.sqrt(2.0) * np.ones([2]),
                             rtol=1e-6)
