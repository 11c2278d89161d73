"""BaseWrapper: what a new wrapper gets for free; the optimizer tree's averages.

Numbers are worked by hand: SGD is w <- w - lr * g; Momentum (alpha 0.9) is
m <- 0.9 m + g, w <- w - lr * m; Ema is avg <- d * avg + (1 - d) * w_new.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.optimizers.wrappers import accumulation
from learner.optimizers.wrappers import composite
from learner.optimizers.wrappers import ema as ema_lib
from learner.optimizers import keras_optimizer
from learner.optimizers.wrappers import lars
from learner.optimizers import wrapper
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


class PassThrough(wrapper.BaseWrapper):
  """The smallest wrapper: everything comes from BaseWrapper."""


class Halve(wrapper.BaseWrapper):
  """Hands the inner optimizer half of every gradient."""

  def _ApplyWrapped(self, lr, var_grads):
    halved = var_grads.Transform(
        lambda vg: VarGrad(vg.var, 0.5 * vg.grad))
    return [self.optimizer.Apply(lr, NestedMap(halved))]


def _Grads(w, g):
  return NestedMap(w=VarGrad(w, tf.constant(g)))


def test_a_new_wrapper_binds_applies_and_counts_through_its_inner():
  w = tf.Variable(1.0, name='w')
  opt = PassThrough.Params().Set(
      name='opt', optimizer=optimizers.Momentum.Params().Set(alpha=0.9)
  ).Instantiate().Bind([w])
  assert opt.inner is opt.optimizer
  assert opt.inner_optimizers == [opt.optimizer]
  assert list(opt.optimizer.bound_variables) == ['w']
  assert float(opt.optimizer.GetSlots(w)['momentum'].numpy()) == 0.0
  assert opt.Apply(0.1, _Grads(w, 0.5)) is None  # eager: no op
  # m = 0.5, w = 1 - 0.1 * 0.5 = 0.95.
  np.testing.assert_allclose(w.numpy(), 0.95, rtol=1e-6)
  opt.Apply(0.1, _Grads(w, 0.5))
  # m = 0.9 * 0.5 + 0.5 = 0.95, w = 0.95 - 0.1 * 0.95 = 0.855.
  np.testing.assert_allclose(w.numpy(), 0.855, rtol=1e-6)
  assert int(opt.num_updates.numpy()) == 2
  assert int(opt.optimizer.num_updates.numpy()) == 2


def test_a_new_wrapper_returns_an_op_in_a_graph_and_counts_after_it():
  w = tf.Variable(1.0, name='w')
  opt = PassThrough.Params().Set(
      name='opt', optimizer=optimizers.SGD.Params()).Instantiate().Bind([w])

  @tf.function
  def Step():
    op = opt.Apply(0.1, _Grads(w, 0.5))
    assert isinstance(op, tf.Operation)
    return opt.num_updates.read_value()

  assert int(Step().numpy()) == 1
  np.testing.assert_allclose(w.numpy(), 0.95, rtol=1e-6)  # 1 - 0.1 * 0.5


def test_a_wrapper_changes_the_gradient_in_apply_wrapped_only():
  w = tf.Variable(1.0, name='w')
  opt = Halve.Params().Set(
      name='opt', optimizer=optimizers.SGD.Params()).Instantiate().Bind([w])
  opt.Apply(0.1, _Grads(w, 0.5))
  np.testing.assert_allclose(w.numpy(), 0.975, rtol=1e-6)  # 1 - 0.1 * 0.25
  # ApplyScaled hands Apply the scaled copy: 1 * 4 halved = 2.
  opt.ApplyScaled(0.1, _Grads(w, 1.0), tf.constant(4.0))
  np.testing.assert_allclose(w.numpy(), 0.775, rtol=1e-6)  # 0.975 - 0.2
  assert int(opt.num_updates.numpy()) == 2


def test_a_new_wrapper_refuses_unbound_variables_naming_them():
  w = tf.Variable(1.0, name='w')
  stray = tf.Variable(1.0, name='stray_v')
  opt = PassThrough.Params().Set(
      name='opt', optimizer=optimizers.SGD.Params()).Instantiate().Bind([w])
  with pytest.raises(ValueError, match="'stray_v' was not bound"):
    opt.Apply(0.1, _Grads(stray, 1.0))
  assert int(opt.num_updates.numpy()) == 0
  # A variable without a gradient needs no binding.
  opt.Apply(0.1, NestedMap(s=VarGrad(stray, None)))
  assert float(stray.numpy()) == 1.0


def test_a_new_wrapper_checks_its_inner_params_and_its_own_decay():
  with pytest.raises(ValueError,
                     match=r'PassThrough: params\.optimizer must be'):
    PassThrough.Params().Set(name='opt').Instantiate()
  accum = accumulation.GradientAccumulation.Params().Set(
      optimizer=optimizers.SGD.Params(), num_batches=2)
  with pytest.raises(ValueError,
                     match='PassThrough: .*accumulation must be the outermost'):
    PassThrough.Params().Set(name='opt', optimizer=accum).Instantiate()
  with pytest.raises(ValueError, match='decoupled_weight_decay=0.1'):
    PassThrough.Params().Set(name='opt', optimizer=optimizers.SGD.Params(),
                             decoupled_weight_decay=0.1).Instantiate()


def test_accumulation_in_accumulation_is_told_to_multiply_num_batches():
  inner = accumulation.GradientAccumulation.Params().Set(
      optimizer=optimizers.SGD.Params(), num_batches=2)
  with pytest.raises(ValueError, match='num_batches = the product'):
    accumulation.GradientAccumulation.Params().Set(
        name='acc', optimizer=inner, num_batches=3).Instantiate()


def test_the_inner_optimizer_is_saved_under_optimizer_in_a_checkpoint(
    tmp_path):
  w = tf.Variable(1.0, name='w')
  opt = PassThrough.Params().Set(
      name='opt', optimizer=optimizers.Momentum.Params()).Instantiate()
  opt.Bind([w]).Apply(0.1, _Grads(w, 0.5))
  path = tf.train.Checkpoint(opt=opt).save(str(tmp_path / 'ckpt'))
  reader = tf.train.load_checkpoint(path)
  key = 'opt/_private_children/optimizer/_slots/w/momentum/.ATTRIBUTES/'
  assert float(reader.get_tensor(key + 'VARIABLE_VALUE')) == 0.5
  assert int(reader.get_tensor(
      'opt/_num_updates/.ATTRIBUTES/VARIABLE_VALUE')) == 1


def test_the_inner_optimizer_doc_is_the_wrappers_own():
  assert 'scaled gradient' in lars.Lars.Params().GetDoc('optimizer')
  assert 'once per window' in (
      accumulation.GradientAccumulation.Params().GetDoc('optimizer'))
  assert PassThrough.Params().GetDoc('optimizer') == (
      'Params of the inner optimizer.')


# ---- the optimizer tree's averages -------------------------------------------


def _Ema(inner=None, decay=0.9):
  return ema_lib.Ema.Params().Set(
      decay=decay, optimizer=inner or optimizers.SGD.Params())


def _Accum(inner):
  return accumulation.GradientAccumulation.Params().Set(
      optimizer=inner, num_batches=1)


def _Composite(w_params, default_params):
  return composite.Composite.Params().Set(optimizer_map={
      '^w$': (w_params, 1.0), 'default_optimizer': (default_params, 1.0)})


def _Keras():
  return keras_optimizer.KerasOptimizerParams(
      lambda: tf.keras.optimizers.SGD(0.1))


@pytest.mark.parametrize('make,path', [
    (lambda: optimizers.SGD.Params(), None),
    (_Keras, None),
    (lambda: lars.Lars.Params().Set(optimizer=optimizers.Momentum.Params()),
     None),
    (_Ema, []),
    (lambda: lars.Lars.Params().Set(optimizer=_Ema()), ['optimizer']),
    (lambda: _Accum(_Ema(lars.Lars.Params().Set(
        optimizer=optimizers.SGD.Params()))), ['optimizer']),
    (lambda: _Composite(_Ema(), optimizers.SGD.Params()), ['group_0']),
    (lambda: PassThrough.Params().Set(optimizer=_Ema()), ['optimizer']),
])
def test_eval_averages_finds_an_ema_anywhere_in_the_tree(make, path):
  w = tf.Variable(1.0, name='w')
  b = tf.Variable(2.0, name='b')
  p = make().Set(name='opt')
  opt = p.Instantiate().Bind([w, b])
  found = opt.EvalAverages()
  classes = p.cls.EvalAverageClasses(p)
  if path is None:
    assert found == [] and classes == []
    return
  expected = opt
  for name in path:
    expected = expected.children[name]
  assert found == [expected]
  assert classes == [ema_lib.Ema]


def test_an_ema_of_an_ema_lists_both_outermost_first():
  p = _Ema(_Ema()).Set(name='opt')
  opt = p.Instantiate()
  assert opt.EvalAverages() == [opt, opt.optimizer]
  assert p.cls.EvalAverageClasses(p) == [ema_lib.Ema, ema_lib.Ema]


def test_a_renamed_ema_subclass_is_found_by_the_method_not_the_name():

  class PolyakAverage(ema_lib.Ema):
    pass

  p = lars.Lars.Params().Set(
      name='opt', optimizer=PolyakAverage.Params().Set(
          optimizer=optimizers.SGD.Params()))
  opt = p.Instantiate()
  assert opt.EvalAverages() == [opt.optimizer]
  assert p.cls.EvalAverageClasses(p) == [PolyakAverage]


def test_average_checkpoint_key_suffix_names_the_saved_average(tmp_path):
  # Accum(1) -> Ema(0.9) -> SGD, lr 0.1, g 0.5 twice:
  # w 1 -> 0.95 -> 0.90; avg 1 -> 0.9 + 0.095 = 0.995 -> 0.8955 + 0.09 = 0.9855.
  w = tf.Variable(1.0, name='enc/w')
  opt = _Accum(_Ema()).Set(name='opt').Instantiate().Bind([w])
  for _ in range(2):
    opt.Apply(0.1, _Grads(w, 0.5))
  np.testing.assert_allclose(w.numpy(), 0.90, rtol=1e-6)
  path = tf.train.Checkpoint(opt=opt).save(str(tmp_path / 'ckpt'))
  keys = list(tf.train.load_checkpoint(path).get_variable_to_shape_map())
  suffix = ema_lib.Ema.AverageCheckpointKeySuffix(w)
  assert suffix == ema_lib.Ema.AverageCheckpointKeySuffix('enc/w')
  found = [k for k in keys if k.endswith(suffix)]
  assert found == ['opt/_private_children/optimizer' + suffix]
  np.testing.assert_allclose(
      tf.train.load_checkpoint(path).get_tensor(found[0]), 0.9855, rtol=1e-6)
