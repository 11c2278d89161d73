"""The update rules under Lingvo names compute Lingvo 0.14.2's numbers.

Lingvo's optimizer_test.py has no numeric case for these classes (its two
tests are CompositeOptimizer and Accumulator, which have no class of that
name here; they are ported to Composite and GradientAccumulation in
test_lingvo_optimizer_cases.py). Lingvo's `optimizer.py` builds each update from a TF1 optimizer
(`GetOptimizer`): SGD -> GradientDescentOptimizer(lr), Momentum ->
MomentumOptimizer(lr, alpha, use_nesterov), RMSProp -> RMSPropOptimizer(lr,
decay, momentum, epsilon), Adagrad -> AdagradOptimizer(lr,
initial_accumulator_value), AdaDelta -> AdadeltaOptimizer(lr, rho=decay,
epsilon), Adam -> AdamOptimizer(lr, beta1, beta2, epsilon). So the reference
here is that TF1 optimizer (tf.compat.v1.train), built exactly as Lingvo
builds it from OUR default params, which tests/test_lingvo/
test_params_match.py checks are Lingvo's. A hand-computed RMSProp case
checks the TF1 semantics that differed before (slot at 1, epsilon in the
sqrt, rate in the momentum).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from params import NestedMap
from learner.optimizers.var_grad import VarGrad

V1 = tf.compat.v1.train


def _Tf1(name, p, lr):
  """The TF1 optimizer Lingvo 0.14.2's GetOptimizer(lr) builds from p."""
  if name == 'SGD':
    return V1.GradientDescentOptimizer(lr)
  if name == 'Momentum':
    return V1.MomentumOptimizer(lr, p.alpha, use_nesterov=p.use_nesterov)
  if name == 'RMSProp':
    return V1.RMSPropOptimizer(lr, p.decay, momentum=p.momentum,
                               epsilon=p.epsilon)
  if name == 'Adagrad':
    return V1.AdagradOptimizer(lr, p.initial_accumulator_value)
  if name == 'AdaDelta':
    return V1.AdadeltaOptimizer(lr, rho=p.decay, epsilon=p.epsilon)
  return V1.AdamOptimizer(lr, beta1=p.beta1, beta2=p.beta2,
                          epsilon=p.epsilon)


def _Grads(sparse, steps=5):
  rng = np.random.RandomState(0)
  if not sparse:
    return [rng.normal(size=(3, 2)).astype(np.float32) for _ in range(steps)]
  # Two steps: row 0, then row 1 (rows 2 and 3 never appear).
  return [tf.IndexedSlices(tf.constant([[1., -2.]]), tf.constant([r]),
                           tf.constant([4, 2])) for r in (0, 1)]


def _RunOurs(params, grads, lr, w0):
  var = tf.Variable(w0, name='w')
  opt = params.Instantiate()
  opt.Bind(NestedMap(w=var))
  for g in grads:
    opt.Apply(tf.constant(lr), NestedMap(w=VarGrad(var, g)))
  return var.numpy()


def _RunTf1(name, params, grads, lr, w0):
  var = tf.Variable(w0, name='w')
  opt = _Tf1(name, params, lr)
  for g in grads:
    opt.apply_gradients([(g if isinstance(g, tf.IndexedSlices)
                          else tf.constant(g), var)])
  return var.numpy()


CASES = [('SGD', {}), ('Momentum', {}), ('Momentum', {'use_nesterov': True}),
         ('RMSProp', {}), ('Adagrad', {}), ('AdaDelta', {}), ('Adam', {})]


@pytest.mark.parametrize('name,kw', CASES,
                         ids=['%s%s' % (n, ''.join(k)) for n, k in CASES])
def test_default_params_match_lingvo_tf1_update_dense(name, kw):
  """Five dense steps, lr 0.1, a 3x2 variable, Lingvo's defaults."""
  p = getattr(optimizers, name).Params().Set(**kw)
  w0 = np.linspace(-1., 1., 6, dtype=np.float32).reshape(3, 2)
  grads = _Grads(sparse=False)
  want = _RunTf1(name, p, grads, 0.1, w0)
  got = _RunOurs(p, grads, 0.1, w0)
  # Adam: TF1 keeps beta powers as float32 variables multiplied each step;
  # ours computes pow(beta, t): equal to float32 rounding (~1e-6).
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize('name', ['SGD', 'Momentum', 'RMSProp', 'Adagrad',
                                  'AdaDelta', 'Adam'])
def test_default_sparse_behaviour_matches_lingvo_tf1(name):
  """Sparse gradients (rows 0 then 1 of a 4x2 variable): TF1 updates only the
  rows present for all but Adam, whose m and v decay on every row; our
  lazy_sparse_updates default is that choice per class."""
  p = getattr(optimizers, name).Params()
  assert p.lazy_sparse_updates == (name != 'Adam')
  w0 = np.ones((4, 2), np.float32)
  want = _RunTf1(name, p, _Grads(sparse=True), 0.1, w0)
  got = _RunOurs(p, _Grads(sparse=True), 0.1, w0)
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
  np.testing.assert_array_equal(got[2:], w0[2:])


def test_rmsprop_tf1_semantics_by_hand():
  """Lingvo RMSProp (TF1 RMSPropOptimizer), defaults decay 0.9, momentum 0.9,
  epsilon 1.0; w = 1, g = 2, lr 0.1, two steps.

  step 1: ms = 0.9*1 + 0.1*4 = 1.3;  mom = 0.1*2/sqrt(2.3) = 0.1318760
          w = 1 - 0.1318760 = 0.8681240
  step 2: ms = 0.9*1.3 + 0.4 = 1.57;  mom = 0.9*0.1318760 + 0.2/sqrt(2.57)
          = 0.1186884 + 0.1247567 = 0.2434451;  w = 0.6246789
  """
  got = _RunOurs(optimizers.RMSProp.Params(), [np.float32(2.)] * 2, 0.1,
                 np.float32(1.))
  np.testing.assert_allclose(got, 0.6246789, rtol=1e-6)


def test_rmsprop_keras_semantics_slot_starts_at_zero():
  """keras_semantics=True: ms starts at 0 (Keras RMSprop). With Keras's
  defaults momentum 0, epsilon 1e-7: w = 1 - 0.1*2/sqrt(0.4 + 1e-7) =
  0.6837723 after one step; checked against keras.optimizers.RMSprop."""
  import keras  # pylint: disable=g-import-not-at-top
  p = optimizers.RMSProp.Params().Set(keras_semantics=True, momentum=0.0,
                                      epsilon=1e-7)
  got = _RunOurs(p, [np.float32(2.)], 0.1, np.float32(1.))
  np.testing.assert_allclose(got, 1 - 0.2 / np.sqrt(0.4 + 1e-7), rtol=1e-6)
  var = keras.Variable(np.float32(1.))
  keras.optimizers.RMSprop(learning_rate=0.1).apply([tf.constant(2.)], [var])
  np.testing.assert_allclose(got, var.numpy(), rtol=1e-6)


def test_adagrad_refuses_non_positive_initial_accumulator():
  """TF1's AdagradOptimizer (Lingvo's) raises for <= 0; so do we."""
  with pytest.raises(ValueError, match='initial_accumulator_value'):
    optimizers.Adagrad.Params().Set(initial_accumulator_value=0.).Instantiate()


def test_bf16_gradient_all_reduce_is_refused():
  with pytest.raises(ValueError, match='use_bf16_gradients_ar'):
    optimizers.Adam.Params().Set(use_bf16_gradients_ar=True).Instantiate()


def test_rmsprop_keras_semantics_with_momentum_matches_keras():
  """keras_semantics=True with momentum 0.9, epsilon 1e-7: three steps equal
  keras.optimizers.RMSprop(momentum=0.9), whose rate is also inside the
  momentum accumulator (Keras 3 RMSprop.update_step)."""
  import keras  # pylint: disable=g-import-not-at-top
  grads = [np.float32(2.), np.float32(-1.), np.float32(0.5)]
  p = optimizers.RMSProp.Params().Set(keras_semantics=True, momentum=0.9,
                                      epsilon=1e-7)
  got = _RunOurs(p, grads, 0.1, np.float32(1.))
  var = keras.Variable(np.float32(1.))
  opt = keras.optimizers.RMSprop(learning_rate=0.1, momentum=0.9)
  for g in grads:
    opt.apply([tf.constant(g)], [var])
  np.testing.assert_allclose(got, var.numpy(), rtol=1e-6)
