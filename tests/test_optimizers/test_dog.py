"""DoG and DoWG (learner/optimizers/rules/dog.py).

Their step size reads global norms over all variables, computed once per
update by the shared `_BeginUpdate`; the rest is the base's: the clip
scale, XLA, replicas. Numbers: optax.contrib.dog / dowg
(tests/data/optax_lr_free.json, recorded by tools/record_optax_lr_free.py),
a hand-computed first step and the two-variable numpy reference in
test_optimizers.py. Refused: ZeRO-1 and slot_dtype (global norms).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import get_optimizer_fn
from learner.learner import Learner
from learner.optimizers import factory
from learner.optimizers.rules.dog import DoG
from learner.optimizers.rules.dog import DoWG
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import NestedMap
from schedules import ConstantOne
import lr_free_cases as cases
import optax_references as refs


@pytest.mark.parametrize('case', cases.Cases('dog') + cases.Cases('dowg'),
                         ids=refs.CaseId)
def test_twenty_steps_match_optax(case):
  # Our norms and rate are float64 scalars (optax's: the weights' dtype),
  # the clip scale float32. Measured: float32 <= 2.1e-7; float64 without
  # clip <= 6.9e-16, with clip <= 8.2e-8.
  ours = refs.RunOurs(cases.OurParams(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=cases.Tolerance(case, 1e-14, 2e-7))


def test_defaults_are_optax_contrib_defaults():
  p, q = DoG.Params(), DoWG.Params()
  assert (p.init_step, p.init_step_value, p.epsilon,
          p.decoupled_weight_decay) == ('heuristic', 1e-6, 1e-8, 0.0)
  assert (q.init_estim_sq_dist, q.epsilon) == (None, 1e-4)
  dog = refs.Select(cases.DATA, 'dog')[0]
  assert dog['kwargs'] == dict(init_step='heuristic', init_value=1e-6)
  assert refs.Select(cases.DATA, 'dowg')[0]['kwargs'] == {}
  assert len(dog['grads']) == 20


def _Run(p, values, grads, lr=1.0, scale=None):
  variables = [tf.Variable(v, name='v%d' % i) for i, v in enumerate(values)]
  opt = p.Copy().Set(name='opt').Instantiate().Bind(variables)
  for gs in grads:
    vgs = NestedMap({'v%d' % i: VarGrad(v, tf.constant(g))
                     for i, (v, g) in enumerate(zip(variables, gs))})
    if scale is None:
      opt.Apply(tf.constant(lr), vgs)
    else:
      opt.ApplyScaled(tf.constant(lr), vgs, tf.constant(scale))
  return [v.numpy() for v in variables], opt


def test_first_steps_by_hand_use_the_global_gradient_norm():
  # Two variables, g = ([3], [4]): ||g|| = 5 over both, not per variable.
  # DoG 'distance' 0.5: eta_1 = 0.5 / sqrt(25 + 1e-8), w = w0 - 0.1 eta g.
  values = [np.array([1.0], np.float32), np.array([2.0], np.float32)]
  grads = [[np.array([3.0], np.float32), np.array([4.0], np.float32)]]
  p = DoG.Params().Set(init_step='distance', init_step_value=0.5)
  (a, b), opt = _Run(p, values, grads, lr=0.1)
  eta = 0.5 / np.sqrt(25 + 1e-8)
  np.testing.assert_allclose([a[0], b[0]], [1 - 0.3 * eta, 2 - 0.4 * eta],
                             rtol=1e-7)
  state = {k: v.numpy() for k, v in opt.state.items()}
  assert state == {'max_dist': 0.5, 'sum_sq_grad_norms': 25.0}
  # DoWG, init_estim_sq_dist 0.04, lr 2: eta_1 = 0.04 / (sqrt(0.04 * 25)
  # + 1e-4), w = w0 - 2 eta_1 g.
  q = DoWG.Params().Set(init_estim_sq_dist=0.04)
  (a, b), opt = _Run(q, values, grads, lr=2.0)
  eta = 0.04 / (1.0 + 1e-4)
  np.testing.assert_allclose([a[0], b[0]], [1 - 6 * eta, 2 - 8 * eta],
                             rtol=1e-7)
  # Step 2: the squared distance 25 (2 eta_1)^2 ~ 0.16 > 0.04 becomes the
  # estimate, and weighs the second squared gradient norm.
  (a2, _), opt = _Run(q, values, grads * 2, lr=2.0)
  estim = 100 * eta**2
  np.testing.assert_allclose(opt.state['estim_sq_dist'].numpy(), estim,
                             rtol=1e-6)
  eta2 = estim / (np.sqrt(0.04 * 25 + estim * 25) + 1e-4)
  np.testing.assert_allclose(a2[0], a[0] - 6 * eta2, rtol=1e-6)


def test_x0_is_taken_at_the_first_update_not_at_bind():
  # Weights set after Bind (a restore, an init from a checkpoint) are x0.
  w = tf.Variable([1.0, 1.0], name='w')
  opt = DoG.Params().Set(name='opt').Instantiate().Bind([w])
  w.assign([3.0, 4.0])
  opt.Apply(tf.constant(1.0), NestedMap(w=VarGrad(w, tf.constant([1., 0.]))))
  np.testing.assert_array_equal(opt.GetSlots(w)['x0'].numpy(), [3.0, 4.0])
  # Heuristic r_eps = 1e-6 (1 + ||x0||) = 6e-6; eta_1 = r_eps / ~1.
  np.testing.assert_allclose(opt.state['max_dist'].numpy(), 6e-6, rtol=1e-12)
  np.testing.assert_allclose(w.numpy(), [3.0 - 6e-6, 4.0], rtol=1e-7)


@pytest.mark.parametrize('cls', [DoG, DoWG])
def test_apply_scaled_equals_apply_on_the_scaled_gradient(cls):
  rng = np.random.RandomState(3)
  values = [rng.normal(size=[4, 3]).astype(np.float32),
            rng.normal(size=[3]).astype(np.float32)]
  grads = [[rng.normal(size=v.shape).astype(np.float32) for v in values]
           for _ in range(4)]
  p = cls.Params()
  if cls is DoG:
    p.Set(init_step='distance', init_step_value=0.5)
  scaled, _ = _Run(p, values, grads, scale=0.375)
  plain, _ = _Run(p, values, [[0.375 * g for g in gs] for gs in grads])
  for a, b in zip(scaled, plain):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert np.abs(scaled[0] - values[0]).max() > 1e-2


@pytest.mark.parametrize('rule', ['dog_lr', 'dowg_init'])
def test_xla_equals_eager(rule):
  case = refs.Select(cases.DATA, rule, shape_name='conv', dtype='float32',
                     clip=1.0)[0]
  p = cases.OurParams(case)
  eager = refs.RunOurs(p, case, mode='eager')
  xla = refs.RunOurs(p, case, mode='xla')
  np.testing.assert_allclose(xla, eager, rtol=1e-6, atol=1e-7)
  refs.AssertMatches(xla, case, rtol=1e-6)


@pytest.mark.parametrize('p', [
    DoG.Params().Set(init_step='distance', init_step_value=0.1),
    DoWG.Params().Set(init_estim_sq_dist=0.01)], ids=['dog', 'dowg'])
def test_two_replicas_equal_one_replica_on_the_global_batch(p):
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  two = cases.Train(distribution.CreateStrategy('mirrored'), p, 1.0)
  one = cases.Train(tf.distribute.OneDeviceStrategy('/cpu:0'), p, 1.0)
  assert len(two) == 2 and len(one) == 1
  np.testing.assert_array_equal(two[0], two[1])
  np.testing.assert_allclose(two[0], one[0], rtol=1e-6, atol=1e-7)
  assert np.abs(one[0] - cases.InitialWeights()).max() > 0.05


# Construction: the factory rows and the refusals.


def test_factory_names_and_eps_alias():
  q, lr = factory.OptimizerParamsFromFn(get_optimizer_fn('dog', eps=1e-6))
  assert lr is None and q.cls is DoG and q.epsilon == 1e-6
  q, _ = factory.OptimizerParamsFromFn(get_optimizer_fn('dowg', eps=1e-3))
  assert q.cls is DoWG and q.epsilon == 1e-3


@pytest.mark.parametrize('cls, key, value', [
    (DoG, 'init_step', 'linear'), (DoG, 'init_step_value', 0.0),
    (DoG, 'epsilon', 0.0), (DoG, 'epsilon', float('nan')),
    (DoWG, 'init_estim_sq_dist', 0.0), (DoWG, 'epsilon', -1.0),
    (DoWG, 'init_estim_sq_dist', True)])
def test_bad_values_are_refused_in_one_line_naming_the_key(cls, key, value):
  with pytest.raises(ValueError) as e:
    cls.Params().Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and repr(value) in msg and '\n' not in msg.strip()


@pytest.mark.parametrize('cls', [DoG, DoWG])
def test_slot_dtype_is_refused_naming_the_global_norm(cls):
  with pytest.raises(ValueError) as e:
    cls.Params().Set(slot_dtype=tf.bfloat16).Instantiate()
  msg = str(e.value)
  assert 'slot_dtype=bfloat16' in msg and 'global norms' in msg
  assert '\n' not in msg


@pytest.mark.parametrize('cls', [DoG, DoWG])
def test_sharded_state_is_refused_naming_the_global_norm(cls):
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  strategy = distribution.CreateStrategy('mirrored')
  with strategy.scope(), pytest.raises(ValueError) as e:
    Learner.Params().Set(
        name='loss', learning_rate=1.0, lr_schedule=ConstantOne.Params(),
        optimizer=cls.Params(), shard_optimizer_state=True).Instantiate()
  msg = str(e.value)
  assert 'shard_optimizer_state=True' in msg and cls.__name__ in msg
  assert 'its step reads more than one variable' in msg and '\n' not in msg
  assert len(msg) < 250, msg  # This rule's reason only.


def test_not_elementwise_and_no_lazy_rows():
  assert not DoG.ELEMENTWISE and not DoWG.ELEMENTWISE
  assert not DoG.SUPPORTS_LAZY_SPARSE and not DoWG.SUPPORTS_LAZY_SPARSE
