"""Muon's fused ops (issue 40 item 2) against its pure-TF path, bit for bit.

The fused path runs Muon in two ops of multi_tensor_rules.cc around the
Newton-Schulz iteration (TfLearnerMultiMuonMomentum, then
TfLearnerMultiApplyMuon); it must give the pure-TF path's numbers exactly
(eb19daa's checkpoints continue bit for bit: test_checkpoint_continuation).
Each case runs the same steps with the fused ops (asserted in the traced
graph) and under `kernels.Disabled()` (asserted absent), traced and eagerly,
on two matrices of one shape, a tall one (Newton-Schulz transposes it) and
a conv kernel, with Nesterov on and off, decoupled weight decay on (one
variable excluded) and off, both momentum forms, a clip scale, and the
same-shape batches (batch_shapes).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers.rules import muon
from learner.optimizers.var_grad import VarGrad
from params import NestedMap

SHAPES = {'a': (8, 12), 'b': (8, 12), 'tall': (20, 5), 'k': (3, 3, 4, 6)}
OPS = ('TfLearnerMultiMuonMomentum', 'TfLearnerMultiApplyMuon')


@pytest.fixture(autouse=True)
def fused_on(monkeypatch):
  monkeypatch.delenv('TF_LEARNER_FUSED_KERNELS', raising=False)
  if kernels.Unavailable():
    pytest.skip(kernels.Unavailable())


def _Params(**kw):
  return muon.Muon.Params().Set(name='muon', weight_decay_exclude=['tall'],
                                **kw)


def _Inputs(i, scaled):
  rng = np.random.RandomState(10 + i)
  grads = {k: tf.constant(rng.normal(size=s).astype(np.float32))
           for k, s in SHAPES.items()}
  scale = tf.constant(0.37 + 0.1 * i) if scaled else None
  return grads, tf.constant(0.02 * (1 + i)), scale


def _Run(params, fused, traced, scaled, steps=3):
  """(state after `steps` updates, op types of the traced step or None)."""
  with kernels.Active() if fused else kernels.Disabled():
    rng = np.random.RandomState(0)
    variables = {k: tf.Variable(rng.normal(size=s).astype(np.float32),
                                name=k) for k, s in SHAPES.items()}
    opt = params.Copy().Instantiate()
    opt.Bind(list(variables.values()))

    def Step(grads, lr, scale):
      vgs = NestedMap({k: VarGrad(variables[k], grads[k]) for k in SHAPES})
      if scale is None:
        opt.Apply(lr, vgs)
      else:
        opt.ApplyScaled(lr, vgs, scale)

    ops = None
    if traced:
      Step = tf.function(Step)  # pylint: disable=invalid-name
      graph = Step.get_concrete_function(*_Inputs(0, scaled)).graph
      ops = {op.type for op in graph.get_operations()}
    for i in range(steps):
      Step(*_Inputs(i, scaled))
  state = {k: v.numpy() for k, v in variables.items()}
  state.update({k + '/m': opt.GetSlots(v)['m'].numpy()
                for k, v in variables.items()})
  return state, ops


def _AssertSame(fused, plain):
  assert sorted(fused) == sorted(plain)
  for k in plain:
    np.testing.assert_array_equal(fused[k], plain[k], err_msg=k)
  start = np.random.RandomState(0)
  for k, s in SHAPES.items():  # The steps moved every variable.
    assert not np.array_equal(fused[k], start.normal(size=s)), k


@pytest.mark.parametrize('form', muon.MOMENTUM_FORMS)
@pytest.mark.parametrize('wd', [0.0, 0.1])
@pytest.mark.parametrize('nesterov', [True, False])
def test_fused_muon_equals_pure_tf_traced_with_clip_scale(nesterov, wd, form):
  params = _Params(nesterov=nesterov, decoupled_weight_decay=wd,
                   momentum_form=form)
  fused, ops_f = _Run(params, True, traced=True, scaled=True)
  plain, ops_p = _Run(params, False, traced=True, scaled=True)
  assert set(OPS) <= ops_f and not set(OPS) & ops_p
  _AssertSame(fused, plain)


@pytest.mark.parametrize('scaled', [False, True])
@pytest.mark.parametrize('wd', [0.0, 0.1])
@pytest.mark.parametrize('nesterov', [True, False])
def test_fused_muon_equals_pure_tf_eagerly(nesterov, wd, scaled):
  params = _Params(nesterov=nesterov, decoupled_weight_decay=wd)
  _AssertSame(_Run(params, True, traced=False, scaled=scaled)[0],
              _Run(params, False, traced=False, scaled=scaled)[0])


@pytest.fixture
def no_arithmetic_optimizer():
  before = tf.config.optimizer.get_experimental_options()
  tf.config.optimizer.set_experimental_options(
      {'arithmetic_optimization': False})
  yield
  tf.config.optimizer.set_experimental_options(
      {'arithmetic_optimization': before.get('arithmetic_optimization',
                                             True)})


def test_fused_muon_equals_pure_tf_traced_without_arithmetic_optimizer(
    no_arithmetic_optimizer):
  # Without Nesterov, grappler's arithmetic optimizer computes the clipped
  # momentum term ((1 - beta) f) g in a traced step; with it off, (1 -
  # beta) (g f), as eagerly. The fused op follows either.
  del no_arithmetic_optimizer
  params = _Params(nesterov=False)
  _AssertSame(_Run(params, True, traced=True, scaled=True)[0],
              _Run(params, False, traced=True, scaled=True)[0])


@pytest.mark.parametrize('wd', [0.0, 0.1])
@pytest.mark.parametrize('nesterov', [True, False])
def test_fused_muon_batched_by_shape_equals_pure_tf(nesterov, wd):
  # The pure-TF batched path subtracts the decay in the same delta,
  # w - (lr s O + lr wd w): the apply op's merged_decay.
  params = _Params(nesterov=nesterov, decoupled_weight_decay=wd,
                   batch_shapes=True)
  fused, ops_f = _Run(params, True, traced=True, scaled=True)
  plain, _ = _Run(params, False, traced=True, scaled=True)
  assert set(OPS) <= ops_f
  _AssertSame(fused, plain)


def test_first_muon_step_by_hand():
  # Fused. One update of w = [[3, 4]] (fan_in 1, fan_out 2: s = sqrt(2))
  # with g = [[3, 4]], beta 0.5, Nesterov, optax form (t = 1):
  # m = 0.5 g = [1.5, 2]; u = 0.5 m / (1 - 0.25) + 0.5 g / (1 - 0.5) =
  # g / 3 + g = 4/3 g, ||u|| = 20/3. NS on the one singular value:
  # sigma = ||u|| / (||u|| + 1e-8), then five times sigma <- a sigma +
  # b sigma^3 + c sigma^5 (K. Jordan's a, b, c); O = sigma [0.6, 0.8];
  # w <- w - 0.1 sqrt(2) O.
  w = tf.Variable([[3.0, 4.0]], name='w')
  opt = _Params(beta=0.5).Instantiate()
  opt.Bind([w])
  assert opt.FusedApplyReason([VarGrad(w, tf.ones([1, 2]))]) is None
  opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.constant(
      [[3.0, 4.0]]))))
  sigma = (20 / 3) / (20 / 3 + 1e-8)
  for _ in range(5):
    sigma = 3.4445 * sigma - 4.7750 * sigma**3 + 2.0315 * sigma**5
  want = np.array([[3.0, 4.0]]) - 0.1 * np.sqrt(2.0) * sigma * np.array(
      [[0.6, 0.8]])
  np.testing.assert_allclose(w.numpy(), want, rtol=1e-5)
  np.testing.assert_array_equal(opt.GetSlots(w)['m'].numpy(), [[1.5, 2.0]])


def test_a_subclass_that_changes_the_direction_keeps_the_pure_tf_path():

  class Other(muon.Muon):

    def _Direction(self, s, g, m_new):
      return g

  opt = Other.Params().Set(name='o').Instantiate()
  w = tf.Variable(tf.ones([2, 3]))
  opt.Bind([w])
  reason = opt.FusedApplyReason([VarGrad(w, tf.ones([2, 3]))])
  assert reason == 'Other overrides _Direction of Muon'


def test_apply_op_refuses_rates_of_another_length():
  from learner.optimizers.kernels import multi_tensor  # pylint: disable=g-import-not-at-top
  w = tf.Variable(tf.ones([2, 3]))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r'rates has shape \[2\], expected \[1\]'):
    multi_tensor.ApplyMuon([w], [tf.ones([2, 3])], tf.constant([0.1, 0.2]),
                           tf.constant(0.0), [False], False)
