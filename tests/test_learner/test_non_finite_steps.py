"""Skipped steps: why they are skipped, counted, and exact undo of an
update that would make a weight non-finite (Learner.check_finite_weights).

Momentum (TF's rule, as Lingvo's): v <- alpha * v + g; w <- w - lr * v.
The loss is -w (gradient -1), so each applied update adds lr * v to w.
"""

import numpy as np
import pytest
import tensorflow as tf

import learner
from params import NestedMap
from schedules import ConstantOne

_F32_MAX = float(np.finfo(np.float32).max)  # 3.4028235e38


def _Learner(check, w0=1e38, lr=1e38):
  vmap = NestedMap(w=tf.Variable(w0, dtype=tf.float32, name='w'))
  p = learner.Learner.Params().Set(
      name='learner', loss_name='loss', learning_rate=lr,
      optimizer=learner.Momentum.Params().Set(alpha=0.9),
      lr_schedule=ConstantOne.Params(), check_finite_weights=check)
  lrn = p.Instantiate()
  lrn.Bind(vmap)
  return lrn, vmap


def _Step(lrn, vmap, loss_fn, graph):

  def _Once():
    if graph:
      loss = loss_fn(vmap.w)
      lrn.Apply({'loss': (loss, tf.constant(1.0))}, vmap)
      return
    with learner.GradientTape():
      loss = loss_fn(vmap.w)
    lrn.Apply({'loss': (loss, tf.constant(1.0))}, vmap)

  if graph:
    tf.function(_Once, autograph=False)()
  else:
    _Once()


def _Slot(lrn):
  slots = [v for v in lrn.optimizer.variables
           if v.name.endswith('/momentum:0')]
  assert len(slots) == 1, slots
  return float(slots[0].numpy())


@pytest.mark.parametrize('graph', [False, True])
def test_update_that_overflows_a_weight_is_undone_with_its_slot(graph):
  # Step 1: v = -1, w = 1e38 + 1e38 * 1 = 2e38 (finite, applied).
  # Step 2: v = 0.9 * -1 - 1 = -1.9, w = 2e38 + 1.9e38 = 3.9e38 > 3.40e38:
  # Inf, so the step is skipped: w stays 2e38 and v stays -1.
  lrn, vmap = _Learner(check=True)
  _Step(lrn, vmap, lambda w: -w, graph)
  assert vmap.w.numpy() == np.float32(2e38)
  assert _Slot(lrn) == -1.0
  _Step(lrn, vmap, lambda w: -w, graph)
  assert vmap.w.numpy() == np.float32(2e38)
  assert _Slot(lrn) == -1.0
  assert int(lrn.num_updates.numpy()) == 1
  assert int(lrn.num_skipped_steps.numpy()) == 1
  consecutive, reasons = lrn.SkipStatistics()
  assert consecutive == 1
  assert reasons == {'non-finite loss': 0, 'non-finite gradient': 0,
                     'non-finite updated weights': 1, 'other': 0}


def test_without_the_check_the_overflowing_update_is_applied():
  # The same steps without check_finite_weights: w = Inf after step 2; the
  # loss -w is then -Inf, so step 3 is skipped as 'non-finite loss'.
  lrn, vmap = _Learner(check=False)
  for _ in range(3):
    _Step(lrn, vmap, lambda w: -w, graph=True)
  assert np.isinf(vmap.w.numpy()) and vmap.w.numpy() > _F32_MAX
  assert int(lrn.num_updates.numpy()) == 2
  consecutive, reasons = lrn.SkipStatistics()
  assert consecutive == 1 and reasons['non-finite loss'] == 1


def test_non_finite_loss_with_finite_gradient_is_skipped():
  # loss = (w - 1)^2 + Inf: gradient 2 (w - 1) = 2 at w = 2 is finite, the
  # loss is not, so nothing moves and the reason is 'non-finite loss'.
  lrn, vmap = _Learner(check=False, w0=2.0, lr=0.1)
  _Step(lrn, vmap, lambda w: tf.square(w - 1.0) + float('inf'), graph=True)
  assert vmap.w.numpy() == 2.0 and _Slot(lrn) == 0.0
  assert lrn.SkipStatistics() == (1, {
      'non-finite loss': 1, 'non-finite gradient': 0,
      'non-finite updated weights': 0, 'other': 0})
  # A finite step then applies (w = 2 - 0.1 * 2 = 1.8) and ends the run of
  # skips; the counts stay.
  _Step(lrn, vmap, lambda w: tf.square(w - 1.0), graph=True)
  np.testing.assert_allclose(vmap.w.numpy(), 1.8, rtol=1e-6)
  assert lrn.SkipStatistics()[0] == 0
  assert lrn.SkipStatistics()[1]['non-finite loss'] == 1


def test_nan_gradient_is_counted_as_non_finite_gradient():
  # A finite loss (w) whose gradient is NaN (a custom gradient): nothing
  # moves, and the reason is the gradient, not the loss.
  @tf.custom_gradient
  def _Bad(w):
    return tf.identity(w), lambda dy: dy * float('nan')

  lrn, vmap = _Learner(check=False, w0=2.0, lr=0.1)
  _Step(lrn, vmap, _Bad, graph=True)
  assert vmap.w.numpy() == 2.0
  assert lrn.SkipStatistics()[1]['non-finite gradient'] == 1
  assert lrn.SkipStatistics()[1]['non-finite loss'] == 0


def test_under_accumulation_the_undone_window_leaves_zero_accumulators():
  # Windows of 2 micro-batches of gradient -1 (mean -1): window 1 applies
  # v = -1, w = 2e38; window 2 would give w = 3.9e38 (Inf) and is undone:
  # w = 2e38, v = -1, and its accumulators are emptied as on any skip.
  vmap = NestedMap(w=tf.Variable(1e38, dtype=tf.float32, name='w'))
  accumulation = learner.GradientAccumulation.Params().Set(
      num_batches=2, optimizer=learner.Momentum.Params().Set(alpha=0.9))
  lrn = learner.Learner.Params().Set(
      name='learner', loss_name='loss', learning_rate=1e38,
      optimizer=accumulation, lr_schedule=ConstantOne.Params(),
      check_finite_weights=True).Instantiate()
  lrn.Bind(vmap)
  inner = lrn.optimizer.optimizer

  def _State():
    return [float(v.numpy()) for v in inner.variables]

  for _ in range(2):
    _Step(lrn, vmap, lambda w: -w, graph=True)
  assert vmap.w.numpy() == np.float32(2e38)
  after_first = _State()  # The slot holds v / c with c = 1/2 folded in.
  for _ in range(2):
    _Step(lrn, vmap, lambda w: -w, graph=True)
  assert vmap.w.numpy() == np.float32(2e38)
  assert _State() == after_first
  assert float(lrn.optimizer.GetAccumulator(vmap.w).numpy()) == 0.0
  assert int(lrn.num_updates.numpy()) == 1
  assert lrn.SkipStatistics()[1]['non-finite updated weights'] == 1
