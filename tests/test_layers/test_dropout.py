"""DropoutLayer: inverted dropout, only when training (Srivastava et al.)."""

import numpy as np
import pytest
import tensorflow as tf

from layers import dropout
from params import step_seeds


def _Drop(**kw):
  return dropout.DropoutLayer.Params().Set(name='drop', **kw).Instantiate()


def test_identity_when_not_training():
  layer = _Drop(keep_prob=0.5)
  x = tf.ones([4, 5])
  np.testing.assert_array_equal(layer.FProp(layer.theta, x).numpy(), 1.0)


def test_training_keeps_about_keep_prob_and_scales_by_its_inverse():
  layer = _Drop(keep_prob=0.8, random_seed=1)
  out = layer.FProp(layer.theta, tf.ones([200, 100]), training=True).numpy()
  kept = out != 0
  np.testing.assert_allclose(out[kept], 1.0 / 0.8, rtol=1e-6)
  # 20000 Bernoulli(0.8) draws: std of the mean 0.0028; 5 sigma.
  assert abs(kept.mean() - 0.8) < 0.015


def test_broadcast_dims_share_one_mask_value():
  layer = _Drop(keep_prob=0.5, noise_shape_broadcast_dims=[1])
  out = layer.FProp(layer.theta, tf.ones([8, 6, 10]), training=True).numpy()
  np.testing.assert_array_equal(out, np.broadcast_to(out[:, :1], out.shape))


def test_keep_prob_one_is_identity_when_training():
  layer = _Drop(keep_prob=1.0)
  x = tf.constant([[1.0, 2.0]])
  np.testing.assert_array_equal(
      layer.FProp(layer.theta, x, training=True).numpy(), x.numpy())


@pytest.mark.parametrize('keep_prob', [0.0, 1.5])
def test_bad_keep_prob_raises(keep_prob):
  with pytest.raises(ValueError,
                     match=r'keep_prob=%r is outside \(0, 1\]' % keep_prob):
    _Drop(keep_prob=keep_prob)


def test_in_a_step_seeds_scope_the_mask_is_keyed_by_step_and_call():
  layer = dropout.DropoutLayer.Params().Set(name='d', keep_prob=0.5).Instantiate()
  x = tf.ones([4, 256])

  def Masks(step, calls=1):
    with step_seeds.StepSeeds(step):
      return [layer.FProp(layer.theta, x, training=True).numpy()
              for _ in range(calls)]

  first, second = Masks(7, calls=2)
  # The same step gives the same mask in a new scope (a resumed run) ...
  np.testing.assert_array_equal(Masks(7)[0], first)
  # ... another step, or a second draw in the step, another mask.
  assert (Masks(8)[0] != first).any() and (second != first).any()
  # Inverted dropout: kept units are 1 / keep_prob, about half are kept.
  assert set(np.unique(first).tolist()) <= {0.0, 2.0}
  assert 0.4 < float(np.mean(first == 2.0)) < 0.6
  # Not training: the identity, scope or not.
  with step_seeds.StepSeeds(7):
    np.testing.assert_array_equal(layer.FProp(layer.theta, x).numpy(),
                                  x.numpy())
