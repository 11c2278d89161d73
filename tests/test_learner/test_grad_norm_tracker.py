"""Tests of learner/grad_norm_tracker.py (Lingvo's GradNormTracker)."""

import math
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from learner.grad_norm_tracker import GradNormTracker
from learner.training.cluster import distribution


def _Tracker(**kw):
  return GradNormTracker.Params().Set(name='tracker', **kw).Instantiate()


def _NumpyTracker(norms, nans, decay, threshold, lower_cap, cap_min):
  """Independent float64 implementation of Lingvo's update rule."""
  lm = lms = tw = 0.0
  rejections = 0
  accepts = []
  for g, nan in zip(norms, nans):
    x = math.log(max(g, lower_cap) + 1.0)
    t = max(tw, 1e-6)
    mean = lm / t
    std = math.sqrt(max(lms / t - mean * mean, 1e-6))
    cap = max(mean + threshold * std, math.log(1.0 + cap_min))
    reject = (x > cap and tw > 0.75) or nan
    rejections += int(reject)
    accepts.append(not reject)
    if not nan:
      xc = min(x, cap)
      lm += (1 - decay) * (xc - lm)
      lms += (1 - decay) * (xc * xc - lms)
      tw += (1 - decay) * (1 - tw)
  return accepts, rejections, (lm, lms, tw)


def _Stats(t):
  return (t._log_mean.numpy(), t._log_mean_squared.numpy(),
          t._total_weight.numpy())


def test_statistics_are_bias_corrected_moving_averages_by_hand():
  # decay 0.5, no capping (cap_min 1e6): x = log(1+norm) = 1 then 3.
  # log_mean = 0.5*1 = 0.5, then 0.5 + 0.5*(3-0.5) = 1.75; total_weight 0.75;
  # log_mean_squared 0.5 then 0.5 + 0.5*(9-0.5) = 4.75.
  # mean = 1.75/0.75 = 7/3; var = 4.75/0.75 - 49/9 = 8/9; std = 0.942809.
  t = _Tracker(decay=0.5, grad_norm_clip_cap_min=1e6, grad_norm_lower_cap=0.0)
  assert bool(t.Check(math.e - 1.0))
  assert bool(t.Check(math.exp(3.0) - 1.0))
  np.testing.assert_allclose(_Stats(t), (1.75, 4.75, 0.75), rtol=1e-5)
  stats = t.Statistics()
  np.testing.assert_allclose(stats['log_grad_norm_mean'], 7.0 / 3, rtol=1e-5)
  np.testing.assert_allclose(stats['log_grad_norm_std'], 0.942809, rtol=1e-5)
  assert int(t.total_rejections.numpy()) == 0


def test_spike_after_warmup_is_rejected_and_counted_by_hand():
  # decay 0.5, threshold 4, cap_min e-1 so cap >= log(e) = 1 and x = 1 is
  # never capped. After three steps of x = 1: mean 1, std sqrt(1e-6) = 1e-3,
  # cap 1.004, total_weight 0.875 > 0.75. A step with x = 2 is rejected and
  # enters the averages capped at 1.004: log_mean = 0.875 + 0.5*(1.004 -
  # 0.875) = 0.9395.
  t = _Tracker(decay=0.5, clip_threshold=4.0,
               grad_norm_clip_cap_min=math.e - 1.0)
  for _ in range(3):
    assert bool(t.Check(math.e - 1.0))
  assert not bool(t.Check(math.exp(2.0) - 1.0))
  assert int(t.total_rejections.numpy()) == 1
  np.testing.assert_allclose(t._log_mean.numpy(), 0.9395, rtol=1e-5)
  np.testing.assert_allclose(t._total_weight.numpy(), 0.9375, rtol=1e-6)
  # A normal step is accepted again.
  assert bool(t.Check(math.e - 1.0))
  assert int(t.total_rejections.numpy()) == 1


def test_reject_then_record_is_check_split_in_two():
  # The same case as above through Reject (reads only) and Record (the
  # verdict given): the spike x = 2 is rejected, log_mean ends at 0.9395
  # and total_weight at 0.9375, one rejection.
  t = _Tracker(decay=0.5, clip_threshold=4.0,
               grad_norm_clip_cap_min=math.e - 1.0)
  for norm in [math.e - 1.0] * 3 + [math.exp(2.0) - 1.0]:
    before = _Stats(t)
    rejected = t.Reject(norm)
    assert _Stats(t) == before  # Reject changes nothing.
    t.Record(norm, tf.constant(False), rejected)
    last = bool(rejected)
  assert last
  assert int(t.total_rejections.numpy()) == 1
  np.testing.assert_allclose(t._log_mean.numpy(), 0.9395, rtol=1e-5)
  np.testing.assert_allclose(t._total_weight.numpy(), 0.9375, rtol=1e-6)
  # A verdict from elsewhere (another replica rejected) is counted; a bad
  # step leaves the averages alone.
  t.Record(math.e - 1.0, tf.constant(True), tf.constant(True))
  assert int(t.total_rejections.numpy()) == 2
  np.testing.assert_allclose(t._total_weight.numpy(), 0.9375, rtol=1e-6)


def test_no_rejection_during_warmup():
  # total_weight after 2 steps is exactly 0.75, not > 0.75: still warming up,
  # so a huge norm on the 3rd step is accepted (but capped in the averages).
  t = _Tracker(decay=0.5, grad_norm_clip_cap_min=math.e - 1.0)
  assert bool(t.Check(math.e - 1.0))
  assert bool(t.Check(math.e - 1.0))
  assert bool(t.Check(1e6))
  assert int(t.total_rejections.numpy()) == 0
  # Capped at mean + 4 std = 1.004: log_mean = 0.75 + 0.5*(1.004 - 0.75).
  np.testing.assert_allclose(t._log_mean.numpy(), 0.877, rtol=1e-5)


def test_nan_step_is_rejected_and_leaves_statistics_alone():
  t = _Tracker(decay=0.5)
  t.Check(1.0)
  before = _Stats(t)
  assert not bool(t.Check(1.0, has_nan=tf.constant(True)))
  assert not bool(t.Check(float('nan')))
  assert not bool(t.Check(float('inf')))
  assert _Stats(t) == before
  assert int(t.total_rejections.numpy()) == 3


def test_dry_run_counts_but_always_accepts():
  t = _Tracker(decay=0.5, grad_norm_clip_cap_min=math.e - 1.0, dry_run=True)
  for _ in range(3):
    t.Check(math.e - 1.0)
  assert bool(t.Check(math.exp(2.0) - 1.0))
  assert bool(t.Check(1.0, has_nan=True))
  assert int(t.total_rejections.numpy()) == 2


def _Sequence():
  rng = np.random.default_rng(1)
  norms = np.exp(rng.normal(0.0, 0.3, 60))
  norms[[25, 40, 41]] = [50.0, 80.0, 1e4]
  nans = np.zeros(60, bool)
  nans[30] = True
  return norms.astype(np.float32), nans


@pytest.mark.parametrize('jit', [False, True])
def test_matches_numpy_reference_in_tf_function(jit):
  norms, nans = _Sequence()
  kw = dict(decay=0.9, clip_threshold=3.0, grad_norm_lower_cap=0.01,
            grad_norm_clip_cap_min=0.0)
  want_acc, want_rej, want_stats = _NumpyTracker(
      norms.astype(np.float64), nans, kw['decay'], kw['clip_threshold'],
      kw['grad_norm_lower_cap'], kw['grad_norm_clip_cap_min'])
  t = _Tracker(**kw)
  step = tf.function(t.Check, jit_compile=jit, autograph=False)
  got = [bool(step(tf.constant(g), tf.constant(n))) for g, n in
         zip(norms, nans)]
  assert got == want_acc
  # The spikes after warm-up (step 14 on, 1 - 0.9^14 > 0.75) and the NaN.
  assert not got[25] and not got[30] and not got[40] and not got[41]
  assert int(t.total_rejections.numpy()) == want_rej
  np.testing.assert_allclose(_Stats(t), want_stats, rtol=1e-4)


def test_checkpoint_round_trip_restores_statistics():
  t = _Tracker(decay=0.5)
  for g in (1.0, 2.0, 3.0):
    t.Check(g)
  t.Check(1.0, has_nan=True)
  saved = _Stats(t) + (int(t.total_rejections.numpy()),)
  with tempfile.TemporaryDirectory() as d:
    path = tf.train.Checkpoint(model=t).save(os.path.join(d, 'ckpt'))
    t2 = _Tracker(decay=0.5)
    tf.train.Checkpoint(model=t2).restore(path).assert_consumed()
  assert _Stats(t2) + (int(t2.total_rejections.numpy()),) == saved
  # Both continue identically.
  assert bool(t.Check(1.5)) == bool(t2.Check(1.5))
  assert _Stats(t) == _Stats(t2)


def test_replica_context_counts_once():
  strategy = distribution.CreateStrategy('mirrored')
  with strategy.scope():
    t = _Tracker(decay=0.5, grad_norm_clip_cap_min=math.e - 1.0)

  @tf.function
  def Step(g):
    return strategy.run(t.Check, args=(g,))

  for _ in range(3):
    Step(tf.constant(math.e - 1.0))
  out = Step(tf.constant(math.exp(2.0) - 1.0))
  assert [bool(v) for v in strategy.experimental_local_results(out)] == [
      False, False]
  assert int(t.total_rejections.numpy()) == 1
  np.testing.assert_allclose(t._log_mean.numpy(), 0.9395, rtol=1e-5)


@pytest.mark.parametrize('key,value', [
    ('decay', 1.0), ('decay', 0.0), ('clip_threshold', 0.0),
    ('grad_norm_lower_cap', -1.0), ('grad_norm_clip_cap_min', -0.5)])
def test_bad_params_raise_naming_the_key(key, value):
  with pytest.raises(ValueError, match=key):
    _Tracker(**{key: value})
