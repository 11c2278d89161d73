"""Lingvo 0.14.2's learner tests with numeric expectations, ported.

Sources (tensorflow/lingvo at the commit whose learner.py is the wheel's;
/work/lingvo_report.md §5.2, §5.4, §5.5):
  lingvo/core/learner_test.py LearnerTest: testBasic, testMultiLoss,
    testBPropVariableFilter, testBPropVariableExclusion, testMultiLearner.
  lingvo/core/py_utils_test.py: testClipSingleTensorGradients,
    testMaskGradient (its L1/L2 cases are in
    test_lingvo_regularization_cases.py).
  lingvo/core/base_model_test.py BaseTaskTest: testScaleGradients,
    testScaleGradientsInf, testScaleGradientsNaN, testScaleGradientsError,
    testScaleGradientsSingleTensorNorm, testScaleGradientsCheckNumerics.
  lingvo/core/learner.py ScaleGradients: the single-norm path (no test of
    its own in Lingvo).
Deliberate differences (docs/lingvo.md, "Learner and GradNormTracker"):
a skipped step runs no optimizer (Lingvo applies a zero gradient; for SGD
the variables end the same), a non-finite gradient never raises, and the
two-clip error comes at construction.
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


class _SGDWithVariable(SGD):
  """learner_test.py TestSGD: an SGD that owns a variable of its own."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('ext', [], init=0.0)


def _GradsAndStep(lrn, v):
  """One step of `lrn` on `v` from zeros: ({name: (var, grad)}, values)."""
  for var in v.Flatten():
    var.assign(0.0)  # Lingvo's test re-initialises in a new session.

  @tf.function
  def _Step():
    metrics = {lrn.params.name: (sum(_MainAux(v)), 1.0)}
    _, var_grads = lrn.ComputeGradients(metrics, v)
    # Read before the update (tf.function keeps program order).
    out = {k: (vg.var.read_value(), vg.grad)
           for k, vg in var_grads.FlattenItems()}
    lrn.ApplyGradients(var_grads)
    return out

  grads = {k: (float(a), float(b)) for k, (a, b) in _Step().items()}
  return grads, _Values(v)


def test_multi_learner():
  """learner_test.py testMultiLearner: two learners whose optimizer, lr
  schedule (DevBasedSchedule) and tracker have variables of their own build
  side by side on one layer, and give the same gradients and updates: those
  of testBasic (grads hello 1, world -2 from 0; then hello -0.1, world
  0.2)."""
  from learner import grad_norm_tracker  # pylint: disable=g-import-not-at-top
  import schedules  # pylint: disable=g-import-not-at-top
  v = _Vars()
  p1 = learner_lib.Learner.Params().Set(
      name='learner1', learning_rate=0.1,
      optimizer=_SGDWithVariable.Params(),
      lr_schedule=schedules.DevBasedSchedule.Params(),
      grad_norm_tracker=grad_norm_tracker.GradNormTracker.Params())
  lrn1 = p1.Instantiate().Bind(v)
  lrn2 = p1.Copy().Set(name='learner2').Instantiate().Bind(v)
  grads1, values1 = _GradsAndStep(lrn1, v)
  grads2, values2 = _GradsAndStep(lrn2, v)
  assert grads1 == grads2 == {'hello': (0.0, 1.0), 'world': (0.0, -2.0)}
  assert values1 == values2
  assert values1 == pytest.approx(
      {'hello': -0.1, 'world': 0.2, 'moon': 0.0, 'mars': 0.0}, rel=1e-6)
  # Each learner's own variables (its tf.Module also tracks the model's).
  names = [x.name for x in lrn1.variables + lrn2.variables
           if x.name.startswith('learner')]
  assert len(names) == len(set(names))
  assert 'learner1/optimizer/ext:0' in names
  assert 'learner2/optimizer/ext:0' in names


def test_mask_gradient():
  """py_utils_test.py testMaskGradient: loss a + b + c + d (every gradient
  1; e unused; n.aa is a second key for a); masks 'a:0', 'b:0' -> 0 and
  'c:0', 'd:0' -> 1: the applied gradients are a 0, b 0, c 1, d 1, so with
  SGD at rate 1 from 0: a 0, b 0, c -1, d -1."""
  names = ['a', 'b', 'c', 'd', 'e']
  var = {n: tf.Variable(0.0, name=n) for n in names}
  vmap = NestedMap(a=var['a'], b=var['b'], c=var['c'], d=var['d'],
                   n=NestedMap(aa=var['a'], e=var['e']))
  lrn = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=1.0,
      optimizer=SGD.Params()).Instantiate().Bind(vmap)
  select = tf.one_hot(1, 3)
  mask = {'a:0': tf.zeros(3), 'b:0': tf.zeros(3), 'c:0': select,
          'd:0': select}
  mask = {k: tf.tensordot(m, tf.one_hot(1, 3), 1) for k, m in mask.items()}

  @tf.function
  def _Step():
    loss = var['a'] + var['b'] + var['c'] + var['d']
    lrn.Apply({'loss': (loss, 1.0)}, vmap, gradient_mask=mask)

  _Step()
  got = {n: float(var[n].numpy()) for n in names}
  assert got == {'a': 0.0, 'b': 0.0, 'c': -1.0, 'd': -1.0, 'e': 0.0}


def test_scale_gradients_check_numerics():
  """base_model_test.py testScaleGradientsCheckNumerics: with Lingvo's
  --enable_check_numerics a NaN gradient raises InvalidArgumentError ('is
  not finite'). Deliberate difference (docs/lingvo.md, "Skipped step"):
  ours has no such flag and never raises; the step is skipped and counted."""
  ga, gb, m = _AB(float('nan'), 1.0)
  assert ga == 0.0 and gb == 0.0
  assert m['has_nan_or_inf'] == 1.0 and m['num_skipped_steps'] == 1.0


def _SingleNormTracker(grad_a, **kw):
  from learner import grad_norm_tracker  # pylint: disable=g-import-not-at-top
  ga, gb, m = _AB(
      grad_a, 0.5, clip_gradient_single_norm_to_value=1.0,
      grad_norm_tracker=grad_norm_tracker.GradNormTracker.Params(), **kw)
  return ga, gb, m


def test_single_norm_path_ignores_clip_to_zero_and_the_tracker():
  """learner.py ScaleGradients: with clip_gradient_single_norm_to_value
  Lingvo runs only ApplyGradNormClipping: grad_norm_to_clip_to_zero and the
  tracker are not used. Grads a 10, b 0.5, norm sqrt(100.25) = 10.0125 >=
  clip-to-zero 5: still applied, clipped to a 1.0, b 0.5 (a global-norm
  learner would skip this step)."""
  ga, gb, m = _SingleNormTracker(10.0, grad_norm_to_clip_to_zero=5.0)
  np.testing.assert_allclose([ga, gb], [1.0, 0.5], rtol=1e-6)
  assert m['num_skipped_steps'] == 0.0 and m['num_updates'] == 1.0
  # Kept (docs/lingvo.md): grad_norm/all, var_norm/all and grad_scale_all
  # are reported on this path too; grad_scale_all is 1 (no global scale).
  assert m['grad_norm/all'] == pytest.approx(np.sqrt(100.25), rel=1e-6)
  assert m['var_norm/all'] == 0.0 and m['grad_scale_all'] == 1.0
  # The global-norm path with the same clip-to-zero skips it.
  ga, _, m = _AB(10.0, 0.5, grad_norm_to_clip_to_zero=5.0)
  assert ga == 0.0 and m['num_skipped_steps'] == 1.0


def test_single_norm_path_does_not_feed_the_tracker():
  """learner.py ScaleGradients: the tracker's FProp is called only on the
  global-norm path, so its statistics stay at their initial 0."""
  from learner import grad_norm_tracker  # pylint: disable=g-import-not-at-top
  a = tf.Variable(0.0, name='a')
  vmap = NestedMap(a=a)
  lrn = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=1.0, optimizer=SGD.Params(),
      clip_gradient_single_norm_to_value=1.0,
      grad_norm_tracker=grad_norm_tracker.GradNormTracker.Params()
  ).Instantiate().Bind(vmap)
  lrn.ApplyGradients(NestedMap(a=learner_lib.VarGrad(a, tf.constant(3.0))))
  tracker_vars = {x.name: float(x.numpy())
                  for x in lrn.grad_norm_tracker.variables}
  assert set(tracker_vars.values()) == {0.0}, tracker_vars
  assert float(a.numpy()) == -1.0


def test_single_norm_path_still_skips_a_non_finite_step():
  """Deliberate difference (docs/lingvo.md, "Skipped step"): Lingvo's
  single-norm path has no NaN zeroing (with check numerics off the NaN
  reaches the variable); ours skips the step, as on every path."""
  ga, gb, m = _SingleNormTracker(float('inf'))
  assert ga == 0.0 and gb == 0.0
  assert m['has_nan_or_inf'] == 1.0 and m['num_skipped_steps'] == 1.0
