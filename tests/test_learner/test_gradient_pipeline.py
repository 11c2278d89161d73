"""The gradient pipeline's stages (learner/gradient_pipeline.py), one by one,
and the gradient_adjuster's keys through Learner.Apply.

Expected numbers are worked out by hand in the comments.
"""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner import gradient_pipeline as pipeline
from learner.learner import Learner
from learner.optimizers import base as base_optimizer
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.optimizers.var_grad import VarGrad
from params import BaseLayer
from params import NestedMap


def _Var(value, name):
  return tf.Variable(np.asarray(value, np.float32), name=name)


def _Np(xs):
  return [None if x is None else tf.convert_to_tensor(x).numpy() for x in xs]


# ---- stages ------------------------------------------------------------------


def test_regularize_adds_coupled_l1_and_l2_and_reports_their_losses():
  # w = [3, 4], g = [1, 1]: g + 0.1*w + 0.01*sign(w) = [1.31, 1.41];
  # l2_loss = 0.5 * 0.1 * (9 + 16) = 1.25; l1_loss = 0.01 * (3 + 4) = 0.07.
  w = _Var([3.0, 4.0], 'w')
  grads, m = pipeline.Regularize([w], [tf.constant([1.0, 1.0])], 0.01, 0.1,
                                 skip_1d=False)
  np.testing.assert_allclose(_Np(grads)[0], [1.31, 1.41], rtol=1e-6)
  assert float(m[pipeline.L2_LOSS]) == pytest.approx(1.25, rel=1e-6)
  assert float(m[pipeline.L1_LOSS]) == pytest.approx(0.07, rel=1e-6)


def test_regularize_skips_rank_1_variables_when_asked():
  # skip_1d: the bias keeps g = [1, 1] and adds nothing to l2_loss (0).
  w = _Var([3.0, 4.0], 'bias')
  # L1 None is off (0.0 would report l1_loss = 0, as Lingvo does).
  grads, m = pipeline.Regularize([w], [tf.constant([1.0, 1.0])], None, 0.1,
                                 skip_1d=True)
  np.testing.assert_array_equal(_Np(grads)[0], [1.0, 1.0])
  assert float(m[pipeline.L2_LOSS]) == 0.0 and pipeline.L1_LOSS not in m


def test_regularize_weight_zero_reports_zero_loss_and_none_is_off():
  # Lingvo 0.14.2 learner.py: the loss is computed and reported unless the
  # weight is None; with 0.0 it is 0 and the gradient is unchanged.
  w = _Var([3.0, 4.0], 'w0')
  grads, m = pipeline.Regularize([w], [tf.constant([1.0, 2.0])], 0.0, 0.0,
                                 skip_1d=False)
  np.testing.assert_array_equal(_Np(grads)[0], [1.0, 2.0])
  assert float(m[pipeline.L1_LOSS]) == 0.0
  assert float(m[pipeline.L2_LOSS]) == 0.0
  _, m = pipeline.Regularize([w], [tf.constant([1.0, 2.0])], None, None,
                             skip_1d=False)
  assert m == {}


def test_mask_multiplies_by_the_entry_of_the_variable_name():
  # 'x:0' and 'y' both match by name (':0' dropped); z is not in the mask.
  x, y, z = _Var([1.0], 'x'), _Var([1.0], 'y'), _Var([1.0], 'z')
  grads = pipeline.Mask([x, y, z], [tf.constant([2.0])] * 3,
                        {'x:0': 0.0, 'y': 0.5})
  np.testing.assert_array_equal(np.concatenate(_Np(grads)), [0.0, 1.0, 2.0])


def test_norms_measure_the_prescaled_gradient_without_materialising_it():
  # grads [3, 4] and [0, 12]: norm 13; prescale 0.5 -> 6.5. Per variable:
  # 0.5 * 5 = 2.5 and 0.5 * 12 = 6. Variables [1, 2] and [2, 0]: var norm
  # sqrt(1 + 4 + 4) = 3.
  a, b = _Var([1.0, 2.0], 'a'), _Var([2.0, 0.0], 'b')
  norms, m = pipeline.Norms([a, b], [tf.constant([3.0, 4.0]),
                                     tf.constant([0.0, 12.0])],
                            tf.constant(0.5), var_norms=True,
                            per_variable=True)
  assert float(norms.norm) == pytest.approx(6.5, rel=1e-6)
  assert float(m[pipeline.GRAD_NORM]) == pytest.approx(6.5, rel=1e-6)
  assert float(m[pipeline.VAR_NORM]) == pytest.approx(3.0, rel=1e-6)
  assert float(m['grad_norm/a']) == pytest.approx(2.5, rel=1e-6)
  assert float(m['grad_norm/b']) == pytest.approx(6.0, rel=1e-6)
  assert float(m['var_norm/b']) == pytest.approx(2.0, rel=1e-6)


def test_check_finite_sees_a_nan_the_adjuster_made():
  # The measured norm 1.0 is finite; the adjusted gradient is not.
  has, m = pipeline.CheckFinite(tf.constant(1.0), tf.constant(False))
  assert bool(has) and float(m[pipeline.HAS_NAN_OR_INF]) == 1.0
  has, m = pipeline.CheckFinite(tf.constant(1.0))
  assert not bool(has) and float(m[pipeline.HAS_NAN_OR_INF]) == 0.0


def test_track_skips_at_the_clip_to_zero_norm_and_on_extra_skip():
  no = tf.constant(False)
  assert bool(pipeline.Track(tf.constant(5.0), no, 5.0, None))  # 5 >= 5.
  assert not bool(pipeline.Track(tf.constant(4.9), no, 5.0, None))
  assert bool(pipeline.Track(tf.constant(1.0), no, 0.0, None,
                             extra_skip=tf.constant(True)))


def test_clip_by_global_norm_scales_to_the_limit_and_zeroes_non_finite():
  # grads [3, 4]: norm 5, c = 1 -> scale 0.2, clipped norm 1.
  norms = pipeline.GradNorms([tf.constant(12.5)], tf.constant(5.0))
  clip, m = pipeline.ClipByNorm(norms, tf.constant(False), 1.0, 0.0)
  assert clip.global_clip and clip.per_variable is None
  assert float(m[pipeline.GRAD_SCALE]) == pytest.approx(0.2, rel=1e-6)
  assert float(m[pipeline.GRAD_NORM_CLIPPED]) == pytest.approx(1.0, rel=1e-6)
  clip, m = pipeline.ClipByNorm(norms, tf.constant(True), 1.0, 0.0)
  assert float(m[pipeline.GRAD_SCALE]) == 0.0


def test_clip_by_single_norm_scales_each_variable_to_the_limit():
  # Norms 5 and 1 (half squares 12.5 and 0.5), c = 1: factors 0.2 and 1,
  # clipped norm sqrt(1 + 1) = 1.4142136; grad_scale_all stays 1.
  norms = pipeline.GradNorms([tf.constant(12.5), tf.constant(0.5)],
                             tf.constant(np.sqrt(26.0), tf.float32))
  clip, m = pipeline.ClipByNorm(norms, tf.constant(False), 0.0, 1.0)
  assert not clip.global_clip
  np.testing.assert_allclose(_Np(clip.per_variable), [0.2, 1.0], rtol=1e-6)
  assert float(m[pipeline.GRAD_NORM_CLIPPED]) == pytest.approx(1.4142136,
                                                               rel=1e-6)
  assert float(m[pipeline.GRAD_SCALE]) == 1.0


def test_scale_folds_the_prescale_into_the_clip_scale():
  # Global clip 0.2 x prescale 0.5 = 0.1, one scalar the optimizer can
  # fold; per-variable factors [0.2, 1] x 0.5 = [0.1, 0.5], not foldable.
  clip = pipeline.NormClip(tf.constant(0.2), True, None)
  scaling = pipeline.Scale(clip, tf.constant(0.5), 0.0)
  assert scaling.foldable and float(scaling.scale) == pytest.approx(0.1)
  clip = pipeline.NormClip(tf.constant(1.0), False,
                           [tf.constant(0.2), tf.constant(1.0)])
  scaling = pipeline.Scale(clip, tf.constant(0.5), 0.0)
  assert scaling.scale is None and not scaling.foldable
  np.testing.assert_allclose(_Np(scaling.per_variable), [0.1, 0.5])
  # No clipping, no prescale: nothing to apply (scale None, not foldable).
  clip = pipeline.NormClip(tf.constant(1.0), False, None)
  assert not pipeline.Scale(clip, None, 0.0).foldable


def test_clip_by_value_clips_the_scaled_gradient_and_measures_it():
  # [3, -4] x 0.5 = [1.5, -2], clipped to [-1, 1]: [1, -1], norm sqrt(2).
  scaling = pipeline.Scaling(tf.constant(0.5), None, 1.0)
  grads = [tf.constant([3.0, -4.0]), None]
  assert not scaling.foldable
  np.testing.assert_array_equal(_Np(scaling.Gradients(grads))[0], [1.0, -1.0])
  assert scaling.Gradients(grads)[1] is None
  m = pipeline.ClipByValue(grads, scaling)
  assert float(m[pipeline.GRAD_NORM_CLIPPED]) == pytest.approx(np.sqrt(2.0))
  assert pipeline.ClipByValue(grads, scaling._replace(clip_value=0.0)) == {}


def test_prescale_is_materialised_only_when_a_stage_reads_the_gradient():
  grads = [tf.constant([2.0, 4.0])]
  same, pre = pipeline.Prescale(grads, tf.constant(0.25), False)
  assert same is grads and float(pre) == 0.25
  scaled, pre = pipeline.Prescale(grads, tf.constant(0.25), True)
  assert pre is None
  np.testing.assert_array_equal(_Np(scaled)[0], [0.5, 1.0])


def test_metric_names_are_in_the_reported_order():
  p = Learner.Params().Set(l1_regularizer_weight=0.1,
                           l2_regularizer_weight=0.1,
                           per_variable_norm_metrics=True)
  names = pipeline.MetricNames(p, [_Var([1.0], 'task/w')])
  assert names == ['l1_loss', 'l2_loss', 'grad_norm/all', 'var_norm/all',
                   'grad_norm/clipped', 'grad_scale_all',
                   'grad_norm_is_nan_or_inf', 'has_nan_or_inf',
                   'grad_norm/task/w', 'var_norm/task/w']
  names = pipeline.MetricNames(Learner.Params().Set(var_norm_metrics=False),
                               [])
  assert names == ['grad_norm/all', 'grad_norm/clipped', 'grad_scale_all',
                   'grad_norm_is_nan_or_inf', 'has_nan_or_inf']


def test_adjust_refuses_a_map_of_another_structure_naming_the_keys():
  w = _Var([1.0], 'w')
  vgs = NestedMap(enc=NestedMap(w=VarGrad(w, tf.constant([1.0]))))
  with pytest.raises(ValueError, match=r"keys it was given: \['enc.w'\]"):
    pipeline.Adjust(vgs, [tf.constant([1.0])],
                    lambda m: NestedMap(v0000=m.enc.w))


# ---- the adjuster's keys through Learner.Apply -------------------------------


class _Enc(BaseLayer):

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [2], init=np.array([1.0, 2.0], np.float32))


class _Task(BaseLayer):
  """vars: b (scalar 0.5) and enc.w ([1, 2]), i.e. keys 'b' and 'enc.w'."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('enc', _Enc.Params())
    self.CreateVariable('b', [], init=np.float32(0.5))


def _Loss(theta):
  # d/d enc.w = [1, -1], d/d b = 3.
  return {'loss': (tf.reduce_sum(tf.constant([1.0, -1.0]) * theta.enc.w) +
                   3.0 * theta.b, 1.0)}


def _TenfoldEncW(seen):
  """An adjuster that reads enc.w's gradient by its vmap key, x10."""

  def Adjuster(vgs):
    seen.append([k for k, _ in vgs.FlattenItems()])
    out = vgs.Transform(lambda vg: vg)  # New containers, same VarGrads.
    out.enc.w = VarGrad(vgs.enc.w.var, 10.0 * vgs.enc.w.grad)
    return out

  return Adjuster


def _Run(optimizer, steps, use_function):
  task = _Task.Params().Set(name='task').Instantiate()
  lrn = Learner.Params().Set(name='loss', learning_rate=0.1,
                             optimizer=optimizer).Instantiate()
  lrn.Bind(task.vars)
  seen = []
  adjuster = _TenfoldEncW(seen)

  def Step():
    with learner_lib.GradientTape():
      metrics = _Loss(task.theta)
    return lrn.Apply(metrics, task.vars, gradient_adjuster=adjuster)[2]

  step = tf.function(Step) if use_function else Step
  for _ in range(steps):
    m = step()
  return task, seen, m


@pytest.mark.parametrize('use_function', [False, True])
def test_adjuster_gets_the_vmap_keys_and_its_change_is_applied(use_function):
  # SGD lr 0.1. The adjuster multiplies enc.w's gradient [1, -1] by 10:
  # enc.w = [1, 2] - 0.1 * [10, -10] = [0, 3]; b = 0.5 - 0.1 * 3 = 0.2.
  # grad_norm/all is measured before it: sqrt(1 + 1 + 9) = 3.3166248.
  task, seen, m = _Run(base_optimizer.SGD.Params(), 1, use_function)
  assert seen[0] == ['b', 'enc.w']
  np.testing.assert_allclose(task.vars.enc.w.numpy(), [0.0, 3.0], rtol=1e-6)
  assert float(task.vars.b.numpy()) == pytest.approx(0.2, rel=1e-6)
  assert float(m['grad_norm/all'][0]) == pytest.approx(3.3166248, rel=1e-6)


def test_adjuster_gets_the_vmap_keys_of_an_accumulation_window():
  # Two micro-steps of the same gradient: the window's mean is it, so the
  # update is the one above; the adjuster runs once, on the window.
  acc = GradientAccumulation.Params().Set(
      num_batches=2, optimizer=base_optimizer.SGD.Params())
  task, seen, _ = _Run(acc, 2, use_function=False)
  assert seen == [['b', 'enc.w']]
  np.testing.assert_allclose(task.vars.enc.w.numpy(), [0.0, 3.0], rtol=1e-6)
  assert float(task.vars.b.numpy()) == pytest.approx(0.2, rel=1e-6)
