"""BaseLayer's `remat` (params/remat.py): the same gradients, recomputed.

Issue 38 item 4: with dropout on, the gradients of a TransformerStack whose
blocks are rematerialized equal those of the plain stack within 1e-6 under
eager, tf.function, XLA (jit_compile) and MirroredStrategy on 2 logical
CPUs; the recomputation draws the same masks (params.step_seeds.Replay).
"""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

from layers import transformer
from params import remat
from params import step_seeds


def _Stack(remat_on):
  p = transformer.TransformerStack.Params().Set(name='stack', num_layers=2,
                                                random_seed=3)
  p.block.Set(model_dim=8, num_heads=2, atten_dropout_prob=0.3,
              residual_dropout_prob=0.2, activation_dropout_prob=0.25,
              remat=remat_on)
  return p.Instantiate()


_X = tf.random.stateless_normal([2, 5, 8], seed=[1, 2])
_R = tf.random.stateless_normal([2, 5, 8], seed=[5, 6])


def _Grads(layer, training=True):
  """d sum(FProp(x) * r) / d vars, in a StepSeeds scope at step 7."""
  with step_seeds.StepSeeds(tf.constant(7, tf.int64)):
    with tf.GradientTape() as tape:
      y = layer.FProp(layer.theta, _X, training=training)
      loss = tf.reduce_sum(y * _R)
    return tape.gradient(loss, layer.vars)


def _Run(mode, layer, calls):
  def Step():
    calls.append(1)
    return _Grads(layer)
  if mode == 'eager':
    return Step()
  return tf.function(Step, jit_compile=(mode == 'xla'))()


def _MaxDiff(a, b):
  return max(float(tf.reduce_max(tf.abs(u - v)))
             for u, v in zip(tf.nest.flatten(a), tf.nest.flatten(b)))


@pytest.mark.parametrize('mode', ['eager', 'function', 'xla'])
def test_remat_gradients_equal_plain_with_dropout(mode):
  plain, rematted = _Stack(False), _Stack(True)
  want = _Run(mode, plain, [])
  got = _Run(mode, rematted, [])
  assert _MaxDiff(want, got) <= 1e-6
  # Dropout is on: the gradients differ from the evaluation mode's.
  assert _MaxDiff(want, _Grads(plain, training=False)) > 1e-2


def test_remat_recomputes_each_block_in_the_backward_pass():
  rematted = _Stack(True)
  runs = []
  block = rematted.blocks[0]
  original = block.atten.FProp

  def Counting(*args, **kwargs):
    runs.append(1)
    return original(*args, **kwargs)

  block.atten.FProp = Counting
  _Grads(rematted)
  assert len(runs) == 2  # The forward pass, then its recomputation.


def _NotKept(monkeypatch):
  """The recomputation draws its masks again (no `remat.Kept`)."""
  monkeypatch.setattr(remat, 'Kept', lambda compute: compute())


def test_remat_without_kept_masks_or_replay_would_differ(monkeypatch):
  # The check above can fail: with the masks neither kept nor their seeds
  # replayed, the recomputation draws other masks and the gradients move.
  _NotKept(monkeypatch)
  monkeypatch.setattr(step_seeds, 'Replay',
                      lambda snapshot: contextlib.nullcontext())
  want = _Grads(_Stack(False))
  got = _Grads(_Stack(True))
  assert _MaxDiff(want, got) > 1e-2


def test_remat_without_kept_masks_replays_the_seeds(monkeypatch):
  # A random layer that does not keep its mask draws it again from the
  # replayed seeds: the same gradients.
  _NotKept(monkeypatch)
  assert _MaxDiff(_Grads(_Stack(False)), _Grads(_Stack(True))) <= 1e-6


def _RandomOps(layer):
  graph = tf.function(lambda: _Grads(layer)).get_concrete_function().graph
  return sum(op.type == 'StatelessRandomUniformV2'
             for op in graph.get_operations())


def test_remat_recomputation_draws_no_mask_again(monkeypatch):
  # 2 blocks x 4 dropouts (attention, FFN hidden, residual twice).
  assert _RandomOps(_Stack(False)) == 2 * 4
  assert _RandomOps(_Stack(True)) == 2 * 4  # Kept: drawn once.
  _NotKept(monkeypatch)
  assert _RandomOps(_Stack(True)) == 2 * 4 * 2  # Drawn again.


def test_remat_gradients_equal_plain_under_mirrored_strategy():
  strategy = tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])
  with strategy.scope():
    plain, rematted = _Stack(False), _Stack(True)

  @tf.function
  def Step():
    def Replica():
      return _Grads(plain), _Grads(rematted)
    return strategy.run(Replica)

  out = Step()
  wants = strategy.experimental_local_results(out[0])
  gots = strategy.experimental_local_results(out[1])
  assert len(wants) == 2
  for want, got in zip(wants, gots):
    assert _MaxDiff(want, got) <= 1e-6
  eager = _Grads(_Stack(False))
  np.testing.assert_allclose(tf.nest.flatten(wants[0])[0],
                             tf.nest.flatten(eager)[0], rtol=1e-5)


def test_remat_outside_step_seeds_recomputes_its_own_masks():
  rematted = _Stack(True)
  with tf.GradientTape() as tape:
    y = rematted.FProp(rematted.theta, _X, training=True)
    loss = tf.reduce_sum(y * _R)
  grads = tape.gradient(loss, rematted.vars)
  # Finite and non-zero: the masks of the recomputation are those of the
  # forward pass (a stateless scope the remat layer opened itself).
  flat = tf.nest.flatten(grads)
  assert all(np.isfinite(g.numpy()).all() for g in flat)
  assert all(float(tf.reduce_max(tf.abs(g))) > 0 for g in flat)


def test_remat_param_round_trips_through_text():
  p = transformer.TransformerStack.Params()
  p.block.remat = True
  q = transformer.TransformerStack.Params()
  q.FromText(p.ToText())
  assert q.block.remat is True and q.remat is False
  assert 'block.remat : True' in p.ToText()


def test_remat_refuses_a_non_bool():
  p = transformer.TransformerBlock.Params().Set(name='b', model_dim=8,
                                                remat='yes')
  with pytest.raises(ValueError, match=r"b \(TransformerBlock\): remat='yes'"
                     r"; expected True or False"):
    p.Instantiate()


def test_remat_refuses_true_on_a_layer_without_fprop():
  from params import BaseLayer  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match='remat=True, but this class has no '
                     'FProp'):
    BaseLayer.Params().Set(name='x', remat=True).Instantiate()


def test_remat_is_not_inherited_by_children():
  stack = transformer.TransformerStack.Params().Set(name='s', remat=False)
  stack.block.Set(model_dim=8, remat=True)
  layer = stack.Instantiate()
  assert layer.blocks[0].params.remat is True
  assert layer.blocks[0].ffn.params.remat is False
