"""DAdaptAdamW and Prodigy (learner/optimizers/rules/d_adaptation.py).

Numbers: optax.contrib.dadapt_adamw / prodigy (tests/data/
optax_lr_free_d.json, tools/record_optax_lr_free_d.py), on one tensor and
on a tree of two (d reads sums over both), and the authors' torch
packages (tests/data/torch_lr_free.json, tools/record_torch_lr_free.py);
a first step by hand. Both rules are not elementwise: ZeRO-1 is refused.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import get_optimizer_fn
from learner import optimizers
from learner.learner import Learner
from learner.optimizers import factory
from learner.optimizers.rules.d_adaptation import DAdaptAdamW
from learner.optimizers.rules.d_adaptation import Prodigy
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import NestedMap
import optax_references as refs
import mirrored_check  # pylint: disable=g-bad-import-order

_DATA = refs.Load('lr_free_d')
_TORCH = refs.Load('lr_free', prefix='torch')
_KEYS = {'eps': 'epsilon', 'estim_lr0': 'd0', 'estim_lr_coef': 'd_coef',
         'weight_decay': 'decoupled_weight_decay', 'beta3': 'beta3',
         'safeguard_warmup': 'safeguard_warmup'}
_RULES = ('prodigy', 'prodigy_alt', 'dadapt_adamw', 'dadapt_adamw_alt')


def _OurParams(case):
  cls = Prodigy if case['rule'].startswith('prodigy') else DAdaptAdamW
  p = cls.Params()
  for k, v in case['kwargs'].items():
    if k == 'betas':
      p.Set(beta1=v[0], beta2=v[1])
    else:
      p.Set(**{_KEYS[k]: v})
  return p


def _Tolerance(case):
  # float32: measured 0 (the same operations in the same order); float64
  # without clip: 0 to 1e-17; with clip the learner's clip scale is
  # float32 (measured up to 4.3e-11).
  if case['dtype'] == 'float32':
    return 1e-6
  return 1e-9 if case['clip'] else 1e-15


@pytest.mark.parametrize(
    'case', [c for c in _DATA['cases'] if c['rule'] in _RULES],
    ids=refs.CaseId)
def test_twenty_steps_match_optax(case):
  ours = refs.RunOurs(_OurParams(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=_Tolerance(case))
  # The weights moved (by 1e-5 to 1e-1: d grows slowly on random
  # gradients), so float64's 1e-15 pins the displacement to 1e-10.
  init = np.reshape(case['init'], case['shape'])
  assert np.abs(ours[-1] - init).max() > 1e-6


def RunTree(p, case):
  """Our two variables after each step (Apply, no learner), float64."""
  dtype = tf.as_dtype(case['dtype'])
  ws = [tf.Variable(np.asarray(x, dtype.as_numpy_dtype).reshape(s),
                    name='w%d' % i)
        for i, (x, s) in enumerate(zip(case['init'], case['shapes']))]
  opt = p.Copy().Set(name='opt').Instantiate().Bind(ws)
  out = []
  for grads in case['grads']:
    opt.Apply(tf.constant(case['lr']), NestedMap(
        {'w%d' % i: VarGrad(w, tf.constant(np.reshape(g, w.shape), dtype))
         for i, (w, g) in enumerate(zip(ws, grads))}))
    out.append(np.concatenate([w.numpy().ravel() for w in ws]))
  return np.stack(out).astype(np.float64), opt


def TreeExpected(case):
  return np.stack([np.concatenate(step) for step in case['params']])


@pytest.mark.parametrize(
    'case', [c for c in _DATA['tree_cases'] if c['rule'] in _RULES],
    ids=lambda c: '%s-tree-%s' % (c['rule'], c['dtype']))
def test_two_variables_share_one_d_as_optax(case):
  ours, opt = RunTree(_OurParams(case), case)
  want = TreeExpected(case)
  err = refs.RelativeError(ours, want)
  assert err <= (1e-6 if case['dtype'] == 'float32' else 1e-14), err
  # One d for both (each variable alone would give other numbers); the
  # steady gradients grow it.
  assert float(opt.d.numpy()) > 3 * opt.params.d0  # d grew (measured 3.8 to 1e3 x)


@pytest.mark.parametrize('case', _TORCH['cases'], ids=refs.CaseId)
def test_twenty_steps_match_the_authors_torch_code(case):
  cls = {'Prodigy': Prodigy, 'DAdaptAdamW': DAdaptAdamW}[case['cls']]
  ours = refs.RunOurs(cls.Params().Set(**case['ours']), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  # torch computes d in Python float64 from float32 sums (.item()): in
  # float32 the numbers differ by rounding only (measured below 1e-6).
  refs.AssertMatches(ours, case,
                     rtol=1e-6 if case['dtype'] == 'float32' else 1e-12)


def test_torch_defaults_differ_from_optax_by_the_bias_correction():
  # prodigyopt's and DAdaptAdam's default use_bias_correction=False: our
  # default (optax's, bias corrected) gives other numbers.
  case = refs.Select(_TORCH, 'prodigyopt_defaults', dtype='float64',
                     shape_name='matrix')[0]
  ours = refs.RunOurs(Prodigy.Params(), case)
  init = np.reshape(case['init'], case['shape'])
  assert refs.RelativeError(ours - init, refs.Expected(case) - init) > 0.1


def test_dadapt_first_step_by_hand():
  # s = 0 before step 1: A = 0, r = 0, d stays d0; dlr = d0 lr bc1,
  # bc1 = sqrt(1 - b2) / (1 - b1); m = (1 - b1) dlr g, v = (1 - b2) g^2.
  w0, g = np.array([1.0, -2.0]), np.array([0.5, -4.0])
  w = tf.Variable(w0, name='w')
  opt = DAdaptAdamW.Params().Set(name='o', epsilon=1e-3).Instantiate()
  opt.Bind([w]).Apply(tf.constant(1.0), NestedMap(w=VarGrad(w, g)))
  dlr = 1e-6 * np.sqrt(1 - 0.999) / (1 - 0.9)
  m, v = 0.1 * dlr * g, 0.001 * g * g
  np.testing.assert_allclose(w.numpy(), w0 - m / (np.sqrt(v) + 1e-3),
                             rtol=1e-14)
  assert float(opt.d.numpy()) == pytest.approx(1e-6, rel=1e-15)


def test_zero_gradients_keep_d_instead_of_nan():
  w = tf.Variable(np.ones(3), name='w')
  opt = Prodigy.Params().Set(name='o').Instantiate().Bind([w])
  opt.Apply(tf.constant(1.0), NestedMap(w=VarGrad(w, tf.zeros(3, tf.float64))))
  assert float(opt.d.numpy()) == 1e-6
  np.testing.assert_array_equal(w.numpy(), np.ones(3))


def test_decay_exclusion_leaves_the_excluded_variable_undecayed():
  # Zero gradients: only the decay wd dlr w could move the weights; dlr =
  # d0 lr bc1 > 0 on the first step.
  a, b = (tf.Variable(np.ones(2), name=n) for n in ('a', 'bias'))
  opt = DAdaptAdamW.Params().Set(
      name='o', decoupled_weight_decay=1000.,
      weight_decay_exclude=['bias']).Instantiate().Bind([a, b])
  z = tf.zeros(2, tf.float64)
  opt.Apply(tf.constant(1.0), NestedMap(a=VarGrad(a, z), b=VarGrad(b, z)))
  dlr = 1e-6 * np.sqrt(1 - 0.999) / (1 - 0.9)
  np.testing.assert_allclose(a.numpy(), 1. - 1000. * dlr, rtol=1e-12)
  np.testing.assert_array_equal(b.numpy(), np.ones(2))


@pytest.mark.parametrize('rule', ['prodigy_alt', 'dadapt_adamw_alt'])
def test_xla_and_tf_function_equal_eager(rule):
  case = refs.Select(_DATA, rule, shape_name='conv', dtype='float32',
                     clip=1.0)[0]
  eager = refs.RunOurs(_OurParams(case), case, mode='eager')
  xla = refs.RunOurs(_OurParams(case), case, mode='xla')
  np.testing.assert_allclose(xla, eager, rtol=1e-6, atol=1e-7)
  refs.AssertMatches(xla, case, rtol=1e-6)


def test_float32_slots_through_the_upcast_path_equal_the_plain_run():
  case = refs.Select(_DATA, 'prodigy_alt', shape_name='matrix',
                     dtype='float32', clip=None)[0]
  plain = refs.RunOurs(_OurParams(case), case)
  upcast = refs.RunOurs(_OurParams(case).Set(slot_dtype=tf.float32), case)
  np.testing.assert_array_equal(plain, upcast)


@pytest.mark.parametrize('cls', [Prodigy, DAdaptAdamW])
def test_mirrored_replicas_apply_as_a_single_device_run(cls):
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  strategy = distribution.CreateStrategy('mirrored')
  init = np.arange(6, dtype=np.float32).reshape(2, 3) / 3. - 1.
  grads = [tf.constant([[0.5, -1.0, 0.25], [1.0, 0.0, -0.5]]),
           tf.constant([[0.5, -2.0, 0.75], [1.0, 1.0, -0.5]])]
  p = cls.Params().Set(name='opt', decoupled_weight_decay=0.1)
  opt, _, ref, w_ref = mirrored_check.MirroredEqualsOneDevice(
      strategy, p, init, grads + grads, lr=1.0)
  for d in strategy.experimental_local_results(opt.d):
    assert float(d.numpy()) == float(ref.d.numpy()) > 1e-6
  assert not np.allclose(w_ref.numpy(), init)


def test_zero1_is_refused_with_the_reason():
  for cls in (Prodigy, DAdaptAdamW):
    p = Learner.Params().Set(name='loss', learning_rate=1.0,
                             optimizer=cls.Params(),
                             shard_optimizer_state=True)
    with pytest.raises(ValueError, match=(
        '(Prodigy|DAdaptAdamW): it declares neither ELEMENTWISE nor '
        'WHOLE_TENSOR')):
      p.Instantiate()


def test_defaults_are_optax_contrib_defaults():
  p = Prodigy.Params()
  assert (p.beta1, p.beta2, p.beta3, p.epsilon, p.d0, p.d_coef,
          p.decoupled_weight_decay, p.safeguard_warmup,
          p.bias_correction) == (0.9, 0.999, None, 1e-8, 1e-6, 1.0, 0.0,
                                 False, True)
  q = DAdaptAdamW.Params()
  assert (q.beta1, q.beta2, q.epsilon, q.d0, q.decoupled_weight_decay,
          q.bias_correction) == (0.9, 0.999, 1e-8, 1e-6, 0.0, True)
  assert refs.Select(_DATA, 'prodigy')[0]['kwargs'] == {}
  assert len(_DATA['cases'][0]['grads']) == 20


def test_factory_names_and_optax_keywords():
  q, _ = factory.OptimizerParamsFromFn(get_optimizer_fn(
      'prodigy', beta_1=0.8, eps=1e-3, estim_lr0=1e-4, estim_lr_coef=0.5,
      weight_decay=0.1))
  assert q.cls is Prodigy and (q.beta1, q.epsilon, q.d0, q.d_coef,
                               q.decoupled_weight_decay) == (
                                   0.8, 1e-3, 1e-4, 0.5, 0.1)
  q, _ = factory.OptimizerParamsFromFn(get_optimizer_fn(
      'dadapt_adamw', beta_2=0.99, weight_decay=0.1))
  assert q.cls is DAdaptAdamW and (q.beta2, q.decoupled_weight_decay) == (
      0.99, 0.1)
  assert optimizers.Prodigy is Prodigy
  assert not Prodigy.ELEMENTWISE and not DAdaptAdamW.ELEMENTWISE


@pytest.mark.parametrize('cls, key, value', [
    (DAdaptAdamW, 'beta1', 1.0), (DAdaptAdamW, 'beta2', 1.0),
    (DAdaptAdamW, 'epsilon', 0.0), (DAdaptAdamW, 'd0', 0.0),
    (DAdaptAdamW, 'd0', float('nan')), (DAdaptAdamW, 'bias_correction', 1),
    (Prodigy, 'beta3', 1.0), (Prodigy, 'd_coef', 0.0),
    (Prodigy, 'safeguard_warmup', 'yes'), (Prodigy, 'beta2', True)])
def test_bad_values_are_refused_in_one_line_naming_the_key(cls, key, value):
  with pytest.raises(ValueError) as e:
    cls.Params().Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()
