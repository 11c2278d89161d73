"""Mechanic (learner/optimizers/wrappers/mechanic.py).

Numbers: optax.contrib.mechanize around sgd (with and without momentum)
(tests/data/optax_lr_free_d.json, tools/record_optax_lr_free_d.py), on
one tensor and on a tree of two; the first step by hand.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import get_optimizer_fn
from learner import get_optimizer_wrapper_fn
from learner import optimizers
from learner.optimizers import factory
from learner.optimizers.var_grad import VarGrad
from learner.optimizers.wrappers.mechanic import Mechanic
from learner.training.cluster import distribution
from params import NestedMap
import optax_references as refs
import test_d_adaptation as lr_free
import mirrored_check  # pylint: disable=g-bad-import-order

_DATA = refs.Load('lr_free_d')
_RULES = ('mechanic_momentum', 'mechanic_sgd_alt')


def _OurParams(case):
  inner = (optimizers.Momentum.Params().Set(alpha=0.9)
           if case['rule'] == 'mechanic_momentum' else optimizers.SGD.Params())
  kw = {{'eps': 'epsilon'}.get(k, k): v for k, v in case['kwargs'].items()}
  return Mechanic.Params().Set(optimizer=inner, **kw)


@pytest.mark.parametrize(
    'case', [c for c in _DATA['cases'] if c['rule'] in _RULES],
    ids=refs.CaseId)
def test_twenty_steps_match_optax(case):
  # float32: measured up to 8.7e-7 (u is read back as x_inner - x, and
  # optax applies p + (x_new - p)); float64 without clip 5e-16, with the
  # learner's float32 clip scale 1.3e-9.
  ours = refs.RunOurs(_OurParams(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  if case['dtype'] == 'float32':
    refs.AssertMatches(ours, case, rtol=1e-6)
    return
  # float64: the displacement from the start (1e-7 at the defaults' s_init
  # 1e-6, where rounding the weights (1e-16 of 1) is 1e-9 of it: measured
  # 1.7e-7; 1e-2 in the alt case: measured 5e-14, 1.3e-9 with clip).
  init = np.reshape(case['init'], case['shape'])
  err = refs.RelativeError(ours - init, refs.Expected(case) - init)
  exact = case['rule'] == 'mechanic_sgd_alt' and not case['clip']
  assert err <= (1e-12 if exact else 1e-6), err


@pytest.mark.parametrize(
    'case', [c for c in _DATA['tree_cases'] if c['rule'] in _RULES],
    ids=lambda c: '%s-tree-%s' % (c['rule'], c['dtype']))
def test_two_variables_share_one_scale_as_optax(case):
  ours, opt = lr_free.RunTree(_OurParams(case), case)
  want = lr_free.TreeExpected(case)
  init = np.concatenate([np.ravel(x) for x in case['init']])
  err = refs.RelativeError(ours - init, want - init)
  tol = {'float32': 1e-4, 'float64': 1e-6}[case['dtype']]
  assert err <= tol, err
  assert float(opt.ScaleSum().numpy()) > case['kwargs'].get('s_init', 1e-6)


def test_first_step_is_x_plus_s_init_times_the_inner_update():
  # Step 1: x0 = x, Delta = 0, h = 0: m = eps, v = 0, r = 0, s_i = s_init
  # / n, so x <- x0 + s_init u with u = -lr g (SGD).
  x, g = np.array([1.0, -0.5, 2.0]), np.array([0.3, 1.0, -2.0])
  w = tf.Variable(x, name='w')
  opt = Mechanic.Params().Set(
      name='m', optimizer=optimizers.SGD.Params(), s_init=0.05,
      num_betas=3).Instantiate().Bind([w])
  opt.Apply(tf.constant(0.125), NestedMap(w=VarGrad(w, tf.constant(g))))
  np.testing.assert_allclose(w.numpy(), x - 0.05 * 0.125 * g, rtol=1e-15)
  np.testing.assert_allclose(opt.X0(w).numpy(), x)
  assert float(opt.ScaleSum().numpy()) == pytest.approx(0.05, rel=1e-15)


@pytest.mark.parametrize('mode', ['function', 'xla'])
def test_tf_function_and_xla_equal_eager(mode):
  case = refs.Select(_DATA, 'mechanic_sgd_alt', shape_name='conv',
                     dtype='float32', clip=1.0)[0]
  eager = refs.RunOurs(_OurParams(case), case, mode='eager')
  ours = refs.RunOurs(_OurParams(case), case, mode=mode)
  np.testing.assert_allclose(ours, eager, rtol=1e-6, atol=1e-6)
  refs.AssertMatches(ours, case, rtol=1e-6)


def test_factory_name_and_optax_keyword():
  fn = get_optimizer_wrapper_fn(
      'mechanic', get_optimizer_fn('adam', learning_rate=1e-3), eps=1e-6,
      s_init=1e-4)
  p, lr = factory.OptimizerParamsFromFn(fn)
  assert p.cls is Mechanic and lr == 1e-3
  assert (p.epsilon, p.s_init, p.num_betas) == (1e-6, 1e-4, 6)
  assert p.optimizer.cls is optimizers.Adam


def test_defaults_are_optax_mechanize_defaults():
  p = Mechanic.Params()
  assert (p.weight_decay, p.epsilon, p.s_init, p.num_betas) == (
      1e-2, 1e-8, 1e-6, 6)


@pytest.mark.parametrize('key, value', [
    ('weight_decay', -0.1), ('epsilon', 0.0), ('s_init', 0.0),
    ('num_betas', 0), ('num_betas', 16), ('num_betas', 2.0)])
def test_bad_values_are_refused_in_one_line_naming_the_key(key, value):
  with pytest.raises(ValueError) as e:
    Mechanic.Params().Set(optimizer=optimizers.SGD.Params(),
                          **{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()


def test_mirrored_replicas_apply_as_a_single_device_run():
  # Every replica applies the same (all-reduced) gradient: each copy of the
  # weights, and the scale, must equal the single-device run.
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  strategy = distribution.CreateStrategy('mirrored')
  init = np.arange(6, dtype=np.float32).reshape(2, 3) / 3. - 1.
  grads = [tf.constant([[0.5, -1.0, 0.25], [1.0, 0.0, -0.5]]),
           tf.constant([[0.5, -2.0, 0.75], [1.0, 1.0, -0.5]])]
  p = Mechanic.Params().Set(name='opt', s_init=0.05,
                            optimizer=optimizers.Adam.Params())
  opt, _, ref, w_ref = mirrored_check.MirroredEqualsOneDevice(
      strategy, p, init, grads + grads, lr=0.1)
  for s in strategy.experimental_local_results(opt._s):  # pylint: disable=protected-access
    np.testing.assert_allclose(s.numpy(), ref._s.numpy(), rtol=1e-6)  # pylint: disable=protected-access
  assert not np.allclose(w_ref.numpy(), init)
