"""Lingvo 0.14.2's GradNormTracker tests (layers_test.py), ported.

Source: lingvo/core/layers_test.py GradNormTrackerTest: testGradNormTracker,
testGradNormTrackerClipCapMin, testGradNormTrackerHasNan (tensorflow/lingvo
at the commit whose layers.py is the wheel's). The sequence: np.random.seed
(12345); 10000 norms exp(N(5, 1)), then 100 outliers exp(N(7, 1)); for i in
0..99, 100 ordinary norms, then outlier i; count the outliers rejected.
Lingvo asserts only "more than 5" rejected for the first case; here the
count is also checked against a numpy float32 transcription of Lingvo's
FProp (layers.py GradNormTracker), written independently of ours.
"""

import math

import numpy as np
import tensorflow as tf

from learner import grad_norm_tracker


def _Sequence():
  np.random.seed(12345)
  ordinary = np.exp(np.random.normal(5.0, 1.0, size=10000))
  outliers = np.exp(np.random.normal(7.0, 1.0, size=100))
  norms, is_outlier = [], []
  for i in range(100):
    norms += list(ordinary[i * 100:(i + 1) * 100]) + [outliers[i]]
    is_outlier += [False] * 100 + [True]
  return np.array(norms, np.float32), np.array(is_outlier)


def _LingvoRejections(norms, is_outlier, cap_min=0.0, has_nan=False):
  """numpy float32 transcription of Lingvo's GradNormTracker.FProp."""
  f = np.float32
  decay, lower, thr = f(0.995), f(1e-2), f(3.0)
  log_mean = log_sq = weight = f(0.0)
  rejected = 0
  for g, outlier in zip(norms, is_outlier):
    g = max(f(g), lower)
    mean = log_mean / max(weight, f(1e-6))
    var = log_sq / max(weight, f(1e-6)) - mean * mean
    std = np.sqrt(max(var, f(1e-6)))
    x = np.log(g + f(1.0))
    cap = max(mean + std * thr, f(math.log(cap_min + 1.0)))
    trigger = (x > cap and weight > 0.75) or has_nan
    if not has_nan:
      xc = min(x, cap)
      log_mean += (f(1) - decay) * (xc - log_mean)
      log_sq += (f(1) - decay) * (xc * xc - log_sq)
      weight += (f(1) - decay) * (f(1) - weight)
    rejected += int(trigger and outlier)
  return rejected


def _OurRejections(norms, is_outlier, has_nan=False, **kw):
  tracker = grad_norm_tracker.GradNormTracker.Params().Set(
      name='grad_norm_tracker', clip_threshold=3.0, **kw).Instantiate()

  @tf.function
  def _Run(norms, is_outlier):
    rejected = tf.constant(0, tf.int32)
    for i in tf.range(tf.shape(norms)[0]):
      ok = tracker.Check(norms[i], tf.constant(has_nan))
      if is_outlier[i] and not ok:
        rejected += 1
    return rejected

  return int(_Run(tf.constant(norms), tf.constant(is_outlier)))


def test_grad_norm_tracker():
  """layers_test.py testGradNormTracker: clip_threshold 3: more than 5 of
  the 100 outliers are rejected (Lingvo's assertion), exactly as many as
  Lingvo's formula rejects."""
  norms, is_outlier = _Sequence()
  ours = _OurRejections(norms, is_outlier)
  assert ours > 5
  assert ours == _LingvoRejections(norms, is_outlier)


def test_grad_norm_tracker_clip_cap_min():
  """layers_test.py testGradNormTrackerClipCapMin: grad_norm_clip_cap_min =
  e^10: no outlier is rejected."""
  norms, is_outlier = _Sequence()
  assert _OurRejections(norms, is_outlier,
                        grad_norm_clip_cap_min=math.exp(10.0)) == 0
  assert _LingvoRejections(norms, is_outlier, cap_min=math.exp(10.0)) == 0


def test_grad_norm_tracker_has_nan():
  """layers_test.py testGradNormTrackerHasNan: has_nan on every call: every
  outlier (every step) is rejected: 100."""
  norms, is_outlier = _Sequence()
  assert _OurRejections(norms, is_outlier, has_nan=True) == 100
