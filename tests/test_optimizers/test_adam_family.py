"""Issue 24 item 3: Nadam, RAdam, Adamax, AMSGrad, ADOPT (rules/adam_family.py).

Also Adam/AdamW with epsilon_form='optax' (rules/adam.py). Numbers: optax's (tests/data/optax_adam_family.json, recorded by
tools/record_optax_adam_family.py) on every case, Keras 3's Nadam and
Adamax run here in-process, and hand computations.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import optax_references as refs
from learner import optimizers
from learner.optimizers import factory
from learner.optimizers.var_grad import VarGrad
from params import NestedMap

_DATA = refs.Load('adam_family')
_CLASSES = {'nadam': optimizers.Nadam, 'radam': optimizers.RAdam,
            'adamax': optimizers.Adamax, 'amsgrad': optimizers.AMSGrad,
            'adopt': optimizers.ADOPT}
# optax's keyword -> our param.
_KEYS = {'b1': 'beta1', 'b2': 'beta2', 'eps': 'epsilon',
         'nesterov': 'use_nesterov', 'weight_decay': 'decoupled_weight_decay'}
# optax's adam / adamw: our Adam / AdamW with epsilon_form='optax' and
# optax's defaults (eps 1e-8; adamw's weight_decay 1e-4).
_TF_FORM = {
    'adam': lambda: optimizers.Adam.Params().Set(epsilon_form='optax',
                                                 epsilon=1e-8),
    'adamw': lambda: optimizers.AdamW.Params().Set(
        epsilon_form='optax', epsilon=1e-8, decoupled_weight_decay=1e-4),
}


def _Ours(case):
  """Our params for a recorded case (rule 'adopt_alt' -> ADOPT, ...)."""
  name = case['rule'].split('_')[0]
  p = _TF_FORM[name]() if name in _TF_FORM else _CLASSES[name].Params()
  return p.Set(**{_KEYS.get(k, k): v for k, v in case['kwargs'].items()})


def _Cases(**where):
  return [pytest.param(c, id=refs.CaseId(c)) for c in _DATA['cases']
          if all(c[k] == v for k, v in where.items())]


def test_the_file_has_defaults_and_a_non_default_setting_of_each_rule():
  rules = {c['rule'] for c in _DATA['cases']}
  for name in _CLASSES:
    assert {name, name + '_alt'} <= rules
  assert {'adam', 'adamw'} <= rules
  # 3 shapes x 2 dtypes x clip off/on per rule setting.
  assert len(_DATA['cases']) == 12 * len(rules)


@pytest.mark.parametrize('case', _Cases())
def test_ten_steps_match_optax(case):
  # float64 without clipping is exact up to rounding; with clipping the
  # learner's clip scale is float32 (its global norm), ~1e-8 relative. Adam
  # and AdamW round beta1, beta2, epsilon to float32 (common.Cast): ~6e-9.
  ours = refs.RunOurs(_Ours(case), case)
  exact = (case['dtype'] == 'float64' and not case['clip'] and
           case['rule'] not in _TF_FORM)
  refs.AssertMatches(ours, case, rtol=1e-12 if exact else 1e-6)


@pytest.mark.parametrize('case', _Cases(shape_name='conv', dtype='float32',
                                        clip=1.0))
def test_under_xla_match_optax(case):
  refs.AssertMatches(refs.RunOurs(_Ours(case), case, mode='xla'), case)


def _KerasRun(keras_opt, case):
  shape = tuple(case['shape'])
  v = keras.Variable(np.asarray(case['init'], np.float32).reshape(shape))
  out = []
  for g in case['grads']:
    g = tf.constant(np.asarray(g, np.float32).reshape(shape))
    keras_opt.apply_gradients([(g, v)])
    out.append(np.asarray(v.numpy(), np.float64))
  return np.stack(out)


@pytest.mark.parametrize('shape_name', ['matrix', 'vector', 'conv'])
def test_nadam_dozat_schedule_matches_keras_and_constant_matches_optax(
    shape_name):
  case = refs.Select(_DATA, 'nadam', shape_name=shape_name,
                     dtype='float32', clip=None)[0]
  want = _KerasRun(keras.optimizers.Nadam(learning_rate=case['lr']), case)
  dozat = optimizers.Nadam.Params().Set(momentum_schedule='dozat',
                                        epsilon=1e-7)
  assert refs.RelativeError(refs.RunOurs(dozat, case), want) <= 1e-6
  # Keras's schedule is not optax's nadam: the two differ by percents.
  assert refs.RelativeError(refs.Expected(case), want) > 1e-2


@pytest.mark.parametrize('shape_name', ['matrix', 'vector', 'conv'])
def test_adamax_keras_form_matches_keras(shape_name):
  case = refs.Select(_DATA, 'adamax', shape_name=shape_name,
                     dtype='float32', clip=None)[0]
  want = _KerasRun(keras.optimizers.Adamax(learning_rate=case['lr']), case)
  ours = optimizers.Adamax.Params().Set(epsilon_form='keras', epsilon=1e-7)
  assert refs.RelativeError(refs.RunOurs(ours, case), want) <= 1e-6


def _Steps(p, grads, lr=1.0, init=0.0):
  """The weight after each gradient (scalar variable, float64)."""
  w = tf.Variable(init, dtype=tf.float64, name='w')
  opt = p.Copy().Set(name='opt').Instantiate().Bind([w])
  out = []
  for g in grads:
    opt.Apply(lr, NestedMap(w=VarGrad(w, tf.constant(g, tf.float64))))
    out.append(float(w.numpy()))
  return out, opt, w


def test_adamax_epsilon_forms_by_hand():
  # g = 1e-3 then 0, eps = 1e-3, lr 1. optax: u1 = 2e-3, w1 = -(1e-4/0.1)/u1
  # = -0.5; u2 = max(1e-3, 0.999 * 2e-3), m_hat2 = 9e-5 / 0.19.
  # Keras: u1 = 1e-3, w1 = -1e-4 / (0.1 * 2e-3); u2 = 0.999e-3, step 2 =
  # 9e-5 / (0.19 * 1.999e-3).
  p = optimizers.Adamax.Params().Set(epsilon=1e-3)
  got, _, _ = _Steps(p, [1e-3, 0.0])
  np.testing.assert_allclose(got, [-0.5, -0.5 - 9e-5 / 0.19 / 1.998e-3],
                             rtol=1e-12)
  got, _, _ = _Steps(p.Copy().Set(epsilon_form='keras'), [1e-3, 0.0])
  np.testing.assert_allclose(
      got, [-0.5, -0.5 - 9e-5 / (0.19 * 1.999e-3)], rtol=1e-12)


def test_adopt_first_step_only_sets_v_then_clips_at_one():
  # k = 0: w and m stay, v = g^2 = 4. k = 1: n = 6 / sqrt(4) = 3, clipped to
  # 1^0.25 = 1; m = 0.1 * 1; w = -0.1.
  got, opt, w = _Steps(optimizers.ADOPT.Params(), [2.0, 6.0])
  assert got[0] == 0.0
  np.testing.assert_allclose(got[1], -0.1, rtol=1e-12)
  np.testing.assert_allclose(opt.GetSlots(w)['v'].numpy(),
                             0.9999 * 4.0 + 1e-4 * 36.0, rtol=1e-12)
  # Without the clip: n = 3, w = -0.3.
  got, _, _ = _Steps(optimizers.ADOPT.Params().Set(use_clipping=False),
                     [2.0, 6.0])
  np.testing.assert_allclose(got, [0.0, -0.3], rtol=1e-12)


def test_radam_is_momentum_sgd_until_rho_reaches_the_threshold():
  # b2 = 0.999: rho_t = 1, 2.0, 3.0, 4.0, 4.996 for t = 1..5 (< 5), so the
  # first five steps are w -= lr * m_hat; with a constant g, m_hat = g.
  got, _, _ = _Steps(optimizers.RAdam.Params(), [2.0] * 6, lr=0.5)
  np.testing.assert_allclose(got[:5], [-1.0, -2.0, -3.0, -4.0, -5.0],
                             rtol=1e-12)
  # t = 6: rho = 5.99416; the step is r_6 * g / (|g| + eps) ~ r_6 = 0.0339.
  rho_inf, b2t = 1999.0, 0.999 ** 6
  rho = rho_inf - 12 * b2t / (1 - b2t)
  r = np.sqrt((rho - 4) * (rho - 2) * rho_inf /
              ((rho_inf - 4) * (rho_inf - 2) * rho))
  np.testing.assert_allclose(got[5], -5.0 - 0.5 * r * 2.0 / (2.0 + 1e-8),
                             rtol=1e-12)


def test_amsgrad_keeps_the_largest_corrected_v():
  # g = 1 then 0.1: v_hat1 = 1, v_hat2 = (0.999e-3 + 1e-5) / (1 - 0.999^2)
  # ~ 0.5045 < 1, so the denominator stays sqrt(1) + eps.
  got, opt, w = _Steps(optimizers.AMSGrad.Params(), [1.0, 0.1])
  m_hat2 = (0.09 + 0.01) / 0.19
  np.testing.assert_allclose(got, [-1.0 / (1 + 1e-8),
                                   -1.0 / (1 + 1e-8) - m_hat2 / (1 + 1e-8)],
                             rtol=1e-12)
  np.testing.assert_allclose(opt.GetSlots(w)['v_max'].numpy(), 1.0,
                             rtol=1e-12)


@pytest.mark.parametrize('cls,key,value,match', [
    (optimizers.Nadam, 'momentum_schedule', 'keras', "'constant', 'dozat'"),
    (optimizers.Nadam, 'beta1', 1.0, 'beta1=1.0'),
    (optimizers.RAdam, 'threshold', 3.9, 'sqrt of a negative'),
    (optimizers.RAdam, 'use_nesterov', 1, 'True or False'),
    (optimizers.Adamax, 'epsilon_form', 'tf', "'optax', 'keras'"),
    (optimizers.Adamax, 'epsilon', 0.0, 'divides by 0'),
    (optimizers.AMSGrad, 'bias_correction_mu', 'yes', 'True or False'),
    (optimizers.AMSGrad, 'bias_correction_nu', None, 'True or False'),
    (optimizers.AMSGrad, 'beta2', 1.0, 'beta2=1.0'),
    (optimizers.ADOPT, 'clip_exponent', 0.0, 'clip_exponent=0.0'),
    (optimizers.ADOPT, 'use_clipping', 0, 'True or False'),
    (optimizers.Adam, 'epsilon_form', 'keras', "'tf', 'optax'"),
    (optimizers.AdamW, 'epsilon_form', None, "'tf', 'optax'"),
])
def test_bad_values_are_refused_in_one_line_naming_the_key(cls, key, value,
                                                           match):
  with pytest.raises(ValueError, match=match) as e:
    cls.Params().Set(name='opt', **{key: value}).Instantiate()
  msg = str(e.value)
  assert '\n' not in msg and key in msg and repr(value) in msg, msg


@pytest.mark.parametrize('name,kwargs,expected', [
    ('nadam', {'beta_1': 0.8, 'momentum_schedule': 'dozat'},
     optimizers.Nadam.Params().Set(beta1=0.8, momentum_schedule='dozat')),
    ('radam', {'beta_2': 0.99, 'threshold': 4.0},
     optimizers.RAdam.Params().Set(beta2=0.99, threshold=4.0)),
    ('adamax', {'epsilon_form': 'keras', 'epsilon': 1e-7},
     optimizers.Adamax.Params().Set(epsilon_form='keras', epsilon=1e-7)),
    ('amsgrad', {'bias_correction_nu': False},
     optimizers.AMSGrad.Params().Set(bias_correction_nu=False)),
    ('adopt', {'beta_2': 0.999, 'use_nesterov': True},
     optimizers.ADOPT.Params().Set(beta2=0.999, use_nesterov=True)),
])
def test_factory_names_and_keras_keywords(name, kwargs, expected):
  fn = factory.get_optimizer_fn(name, learning_rate=0.01, **kwargs)
  assert fn.Params() == expected
  assert isinstance(fn(), expected.cls)


@pytest.mark.parametrize('p', [
    optimizers.Nadam.Params().Set(momentum_schedule='dozat', beta2=0.99),
    optimizers.RAdam.Params().Set(threshold=4.5, use_nesterov=True),
    optimizers.Adamax.Params().Set(epsilon_form='keras'),
    optimizers.AMSGrad.Params().Set(bias_correction_mu=False),
    optimizers.ADOPT.Params().Set(clip_exponent=0.5, use_clipping=False),
    optimizers.AdamW.Params().Set(epsilon_form='optax'),
], ids=lambda p: p.cls.__name__)
def test_params_text_round_trip(p):
  q = p.cls.Params()
  q.FromText(p.ToText())
  assert q == p
  assert q.ToText() == p.ToText()


@pytest.mark.parametrize('rule', sorted(_CLASSES))
def test_resume_mid_run_is_identical(rule, tmp_path):
  # 4 steps uninterrupted vs 2 steps, checkpoint, fresh build, 2 more.
  p = _CLASSES[rule].Params().Set(name='opt')
  rng = np.random.RandomState(3)
  init = rng.randn(2, 3)
  grads = rng.randn(4, 2, 3)

  def Run(steps, start=0, restore=None, save=None):
    w = tf.Variable(init, name='w')
    opt = p.Instantiate().Bind([w])
    ckpt = tf.train.Checkpoint(opt=opt, w=w)
    if restore:
      ckpt.restore(restore).assert_consumed()
    for g in grads[start:start + steps]:
      opt.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant(g))))
    return w.numpy(), (ckpt.save(save) if save else None)

  whole, _ = Run(4)
  _, path = Run(2, save=str(tmp_path / 'ckpt'))
  resumed, _ = Run(2, start=2, restore=path)
  np.testing.assert_array_equal(resumed, whole)


def test_adam_optax_form_lazy_sparse_rows_equal_dense():
  # Every row present: the lazy path (its own epsilon hat) equals dense.
  # beta1 = beta2 = 0.5 and epsilon = 0.125 are exact in float32 (Adam's
  # constants pass through float32). A constant g gives m_hat = g and
  # v_hat = g^2 at every step, so 2 steps: w = 1 - 2 * 0.5 g / (|g| + eps).
  g = np.array([[0.5, -1.0], [2.0, 0.25]])
  out = []
  for lazy in (False, True):
    w = tf.Variable(np.ones((2, 2)), name='w')
    opt = optimizers.Adam.Params().Set(
        name='opt', epsilon_form='optax', beta1=0.5, beta2=0.5,
        epsilon=0.125, lazy_sparse_updates=lazy).Instantiate().Bind([w])
    for _ in range(2):
      grad = tf.IndexedSlices(tf.constant(g), tf.constant([0, 1]),
                              tf.constant([2, 2]))
      opt.Apply(0.5, NestedMap(w=VarGrad(w, grad)))
    out.append(w.numpy())
  np.testing.assert_allclose(out[1], out[0], rtol=1e-12)
  np.testing.assert_allclose(out[0], 1 - g / (np.abs(g) + 0.125),
                             rtol=1e-12)
  # The TF form adds epsilon before the correction: another number.
  assert not np.allclose(out[0], 1 - g / (np.abs(g) + 0.125 / np.sqrt(0.75)),
                         rtol=1e-3)


@pytest.mark.parametrize('t', [1, 7, 999, 1000, 1001, 5000])
def test_nadam_dozat_product_equals_the_running_product(t):
  # P_t = prod_{i <= t} b1 (1 - 0.5 * 0.96^i), as Keras's u_product; ours
  # keeps no state (the factors are 1 in float64 beyond i = 1000).
  opt = optimizers.Nadam.Params().Set(
      name='opt', momentum_schedule='dozat').Instantiate()
  u = lambda i: 0.9 * (1 - 0.5 * 0.96**i)
  prod = np.prod([u(i) for i in range(1, t + 2)])
  got = [float(x) for x in opt._Schedule(tf.constant(float(t), tf.float64))]  # pylint: disable=protected-access
  np.testing.assert_allclose(got, [u(t), u(t + 1), prod / u(t + 1), prod],
                             rtol=1e-12)
