"""Lingvo 0.14.2's learner tests with numeric expectations, ported.

Sources (tensorflow/lingvo at the commit whose learner.py is the wheel's;
/work/lingvo_report.md §5.2, §5.4, §5.5):
  lingvo/core/learner_test.py LearnerTest: testBasic, testMultiLoss,
    testBPropVariableFilter, testBPropVariableExclusion.
  lingvo/core/py_utils_test.py: testClipSingleTensorGradients.
  lingvo/core/base_model_test.py BaseTaskTest: testScaleGradients,
    testScaleGradientsInf, testScaleGradientsNaN, testScaleGradientsError,
    testScaleGradientsSingleTensorNorm.
Deliberate differences (docs/lingvo.md, "Learner and GradNormTracker"):
a skipped step runs no optimizer (Lingvo applies a zero gradient; for SGD
the variables end the same), and the two-clip error comes at construction.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import gradient_combiner
from learner import learner as learner_lib
from learner.optimizers.base import SGD
from params import NestedMap


def _Vars():
  # learner_test.py: trainable hello, world, moon (0) and non-trainable mars.
  return NestedMap(
      hello=tf.Variable(0.0, name='hello'),
      world=tf.Variable(0.0, name='world'),
      moon=tf.Variable(0.0, name='moon'),
      mars=tf.Variable(0.0, name='mars', trainable=False))


def _Learner(**kw):
  p = learner_lib.Learner.Params().Set(name='learner', learning_rate=0.1,
                                       optimizer=SGD.Params())
  return p.Set(**kw).Instantiate()


def _Run(learner, vmap, metrics_fn):
  learner.Bind(vmap)

  @tf.function
  def _Step():
    losses, _, m = learner.Apply(metrics_fn(), vmap)
    return losses, {k: v for k, (v, _) in m.items()}

  return _Step()


def _Values(vmap):
  return {k: float(v.numpy()) for k, v in vmap.FlattenItems()}


def _MainAux(v):
  return v.hello * 1.0, -2.0 * v.world


def test_basic():
  """learner_test.py testBasic: hello -0.1, world 0.2, moon and mars 0."""
  v = _Vars()
  losses, _ = _Run(_Learner(), v,
                   lambda: {'learner': (sum(_MainAux(v)), 1.0)})
  assert len(losses) == 1
  np.testing.assert_allclose(float(losses[0]), 0.0)
  assert _Values(v) == pytest.approx(
      {'hello': -0.1, 'world': 0.2, 'moon': 0.0, 'mars': 0.0}, rel=1e-6)


def test_multi_loss():
  """learner_test.py testMultiLoss: a summing combiner, same values."""
  v = _Vars()
  lrn = _Learner(loss_name=('main_loss', 'aux_loss'),
                 gradient_combiner=gradient_combiner.GradientSum.Params())

  def _Metrics():
    main, aux = _MainAux(v)
    return {'main_loss': (main, 1.0), 'aux_loss': (aux, 1.0)}

  losses, _ = _Run(lrn, v, _Metrics)
  assert len(losses) == 2
  assert _Values(v) == pytest.approx(
      {'hello': -0.1, 'world': 0.2, 'moon': 0.0, 'mars': 0.0}, rel=1e-6)


def test_bprop_variable_filter():
  """learner_test.py testBPropVariableFilter: 'ello' trains hello only."""
  v = _Vars()
  _, m = _Run(_Learner(bprop_variable_filter='ello'), v,
              lambda: {'learner': (sum(_MainAux(v)), 1.0)})
  assert 'grad_scale_all' in m
  assert _Values(v) == pytest.approx(
      {'hello': -0.1, 'world': 0.0, 'moon': 0.0, 'mars': 0.0}, rel=1e-6)


def test_bprop_variable_exclusion():
  """learner_test.py testBPropVariableExclusion: filter 'o', exclude 'ello'."""
  v = _Vars()
  _Run(_Learner(bprop_variable_filter='o', bprop_variable_exclusion='ello'),
       v, lambda: {'learner': (sum(_MainAux(v)), 1.0)})
  assert _Values(v) == pytest.approx(
      {'hello': 0.0, 'world': 0.2, 'moon': 0.0, 'mars': 0.0}, rel=1e-6)


def _AB(grad_a, grad_b, **kw):
  # base_model_test.py / py_utils_test.py: scalar a and b from 0, given
  # gradients; SGD at rate 1 makes the applied gradient -w.
  a, b = tf.Variable(0.0, name='a'), tf.Variable(0.0, name='b')
  vmap = NestedMap(a=a, b=b)
  lrn = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=1.0, optimizer=SGD.Params(), **kw)
  lrn = lrn.Instantiate().Bind(vmap)
  _, m = lrn.ApplyGradients(NestedMap(
      a=learner_lib.VarGrad(a, tf.constant(grad_a)),
      b=learner_lib.VarGrad(b, tf.constant(grad_b))))
  return -a.numpy(), -b.numpy(), {k: float(x) for k, (x, _) in m.items()}


def test_clip_single_tensor_gradients():
  """py_utils_test.py testClipSingleTensorGradients and base_model_test.py
  testScaleGradientsSingleTensorNorm: norm 1: a 10 -> 1.0, b 0.5 -> 0.5."""
  ga, gb, _ = _AB(10.0, 0.5, clip_gradient_single_norm_to_value=1.0)
  np.testing.assert_allclose([ga, gb], [1.0, 0.5], rtol=1e-6)


def test_scale_gradients():
  """base_model_test.py testScaleGradients: grad 1, grad_scale 1.0."""
  ga, _, m = _AB(1.0, 1.0)
  assert m['grad_scale_all'] == 1.0 and ga == 1.0
  assert m['grad_norm_is_nan_or_inf'] == 0.0 and m['has_nan_or_inf'] == 0.0


@pytest.mark.parametrize('bad', [-np.inf, np.nan])
def test_scale_gradients_inf_and_nan(bad):
  """base_model_test.py testScaleGradientsInf / NaN: grad_scale 0.0 and a
  finite (zero) applied gradient. Ours skips the step (no optimizer run):
  for SGD the same values, and num_skipped_steps counts it."""
  ga, gb, m = _AB(float(bad), 1.0)
  assert m['grad_scale_all'] == 0.0
  assert ga == 0.0 and gb == 0.0
  assert m['grad_norm_is_nan_or_inf'] == 1.0 and m['has_nan_or_inf'] == 1.0
  assert m['num_skipped_steps'] == 1.0


def test_scale_gradients_error():
  """base_model_test.py testScaleGradientsError: both clips set is an
  error (Lingvo at ScaleGradients; ours at construction)."""
  with pytest.raises(ValueError, match='exclusive'):
    learner_lib.Learner.Params().Set(
        name='loss', learning_rate=1.0, optimizer=SGD.Params(),
        clip_gradient_single_norm_to_value=1.0,
        clip_gradient_norm_to_value=1.0).Instantiate()


def test_l2_weight_zero_reports_l2_loss():
  """learner.py: l2_loss is reported unless the weight is None."""
  _, _, m = _AB(1.0, 1.0, l2_regularizer_weight=0.0)
  assert m['l2_loss'] == 0.0
  _, _, m = _AB(1.0, 1.0)
  assert 'l2_loss' not in m and 'l1_loss' not in m
