"""Tests of learner/optimizers/rules/ (one module per family) against numpy references and the O cases."""

import numpy as np
import pytest
import tensorflow as tf

import optimizer_references as refs
from learner import optimizers
from learner.optimizers.var_grad import VarGrad
from params import NestedMap

RTOL, ATOL = 1e-5, 1e-7


def _Build(p, values):
  """Returns (optimizer, [variables]) bound to fresh variables."""
  variables = [tf.Variable(np.asarray(v, np.float32), name='v%d' % i)
               for i, v in enumerate(values)]
  opt = p.Copy().Set(name='opt').Instantiate()
  opt.Bind(variables)
  return opt, variables


def _Step(opt, variables, grads, lr):
  opt.Apply(tf.constant(lr, tf.float32), NestedMap(
      {'v%d' % i: VarGrad(v, g) for i, (v, g) in enumerate(zip(variables,
                                                                 grads))}))


def _ScalarCase(p, steps, lr=0.1):
  """The cases' default: a = b = 0, loss 3a + b, values after `steps`."""
  opt, (a, b) = _Build(p, [0.0, 0.0])
  for _ in range(steps):
    _Step(opt, [a, b], [tf.constant(3.0), tf.constant(1.0)], lr)
  return np.array([a.numpy(), b.numpy()])


def test_o1_sgd_one_step():
  np.testing.assert_allclose(_ScalarCase(optimizers.SGD.Params(), 1),
                             [-0.3, -0.1], rtol=RTOL)


def test_o2_adam_eps_1e6_one_and_two_steps():
  p = optimizers.Adam.Params().Set(beta1=0.9, beta2=0.999, epsilon=1e-6)
  np.testing.assert_allclose(_ScalarCase(p, 1), [-0.099999, -0.0999968],
                             rtol=RTOL)
  np.testing.assert_allclose(_ScalarCase(p, 2), [-0.1999982, -0.1999946],
                             rtol=RTOL)


def test_o2_adam_beta2_0997_eps_1e9_steps_are_lr():
  p = optimizers.Adam.Params().Set(beta1=0.9, beta2=0.997, epsilon=1e-9)
  np.testing.assert_allclose(_ScalarCase(p, 1), [-0.1, -0.1], rtol=RTOL)
  np.testing.assert_allclose(_ScalarCase(p, 2), [-0.2, -0.2], rtol=RTOL)


def test_o3_momentum_lingvo_semantics():
  # v = 3, then 0.9*3 + 3 = 5.7: a = -0.3 - 0.57 = -0.87.
  p = optimizers.Momentum.Params().Set(alpha=0.9)
  np.testing.assert_allclose(_ScalarCase(p, 1), [-0.3, -0.1], rtol=RTOL)
  np.testing.assert_allclose(_ScalarCase(p, 2), [-0.87, -0.29], rtol=RTOL)


def test_momentum_rate_drop_takes_effect_at_once():
  # Lingvo/TF1 form: w -= lr * v, so with lr 0 the second step moves nothing
  # although the velocity is 5.7 (Keras' form would keep moving).
  opt, (a,) = _Build(optimizers.Momentum.Params().Set(alpha=0.9), [0.0])
  _Step(opt, [a], [tf.constant(3.0)], 0.1)
  _Step(opt, [a], [tf.constant(3.0)], 0.0)
  np.testing.assert_allclose(a.numpy(), -0.3, rtol=RTOL)
  np.testing.assert_allclose(opt.GetSlots(a)['momentum'].numpy(), 5.7,
                             rtol=RTOL)


# ---- numpy references -------------------------------------------------------

_CASES = [
    ('sgd', optimizers.SGD.Params(), refs.RefSGD),
    ('momentum', optimizers.Momentum.Params().Set(alpha=0.8), refs.RefMomentum),
    ('nesterov', optimizers.Momentum.Params().Set(alpha=0.9,
                                                  use_nesterov=True),
     refs.RefMomentum),
    ('adam', optimizers.Adam.Params().Set(beta1=0.8, beta2=0.99,
                                          epsilon=1e-3), refs.RefAdam),
    ('adamw', optimizers.AdamW.Params().Set(decoupled_weight_decay=0.1),
     refs.RefAdam),
    ('adagrad', optimizers.Adagrad.Params(), refs.RefAdagrad),
    ('rmsprop', optimizers.RMSProp.Params(), refs.RefRMSProp),
    ('rmsprop_centered', optimizers.RMSProp.Params().Set(
        centered=True, momentum=0.5, epsilon=1e-3), refs.RefRMSProp),
    ('adadelta', optimizers.AdaDelta.Params().Set(epsilon=1e-3),
     refs.RefAdaDelta),
    ('adafactor_factored', optimizers.Adafactor.Params().Set(
        min_dim_size_to_factor=2, clipping_threshold=0.5),
     refs.RefAdafactor),
    ('adafactor_beta1_unfactored', optimizers.Adafactor.Params().Set(
        beta1=0.9, factored=False, multiply_by_parameter_scale=False),
     refs.RefAdafactor),
    ('lamb', optimizers.LAMB.Params().Set(weight_decay=0.01), refs.RefLAMB),
    ('lion', optimizers.Lion.Params().Set(decoupled_weight_decay=0.1),
     refs.RefLion),
    ('ademamix', optimizers.AdEMAMix.Params().Set(
        beta3=0.99, alpha=8.0, epsilon=1e-3, decoupled_weight_decay=0.1),
     refs.RefAdEMAMix),
    ('simplified_ademamix', optimizers.SimplifiedAdEMAMix.Params().Set(
        beta1=0.9, alpha=2.0, epsilon=1e-3, decoupled_weight_decay=0.1),
     refs.RefSimplifiedAdEMAMix),
    # The (2, 3) matrix gets L_0, L_1 (a QR refresh at update 2); the (3,)
    # vector is Adam after the skipped first update. epsilon 0.1: the
    # sparse cases' gradients have rows of zeros, whose rounding noise
    # (~1e-8 in the rotated m and sqrt(v), different in eager and XLA) eps
    # 1e-8 would turn into O(1) steps (1e-3: 2e-6 apart, over RTOL).
    ('soap', optimizers.SOAP.Params().Set(
        precondition_frequency=2, epsilon=0.1, decoupled_weight_decay=0.1),
     refs.RefSOAP),
    # Roots after every update, used from the second (start 1, warm-up
    # weight 1 from update 3); the (3,) vector is diagonal AdaGrad.
    # matrix_epsilon 0.1: the 3 x 3 statistics of one (2, 3) gradient have
    # rank 2, and a null eigenvalue near 1e-6 would magnify its rounding.
    ('distributed_shampoo', optimizers.DistributedShampoo.Params().Set(
        start_preconditioning_steps=1, preconditioning_compute_steps=1,
        matrix_epsilon=0.1), refs.RefDistributedShampoo),
    ('nadam', optimizers.Nadam.Params().Set(decoupled_weight_decay=0.1),
     refs.RefNadam),
    ('nadam_dozat', optimizers.Nadam.Params().Set(
        momentum_schedule='dozat', epsilon=1e-3), refs.RefNadam),
    # rho_t <= t: 3 steps stay below the threshold (momentum SGD); the
    # rectified steps are checked against optax (test_adam_family).
    ('radam', optimizers.RAdam.Params().Set(beta2=0.9, threshold=4.0,
                                            use_nesterov=True),
     refs.RefRAdam),
    ('adamax', optimizers.Adamax.Params().Set(epsilon=1e-3), refs.RefAdamax),
    ('adamax_keras', optimizers.Adamax.Params().Set(
        epsilon_form='keras', epsilon=1e-3, decoupled_weight_decay=0.1),
     refs.RefAdamax),
    ('amsgrad', optimizers.AMSGrad.Params().Set(bias_correction_nu=False),
     refs.RefAMSGrad),
    ('adopt', optimizers.ADOPT.Params().Set(clip_exponent=0.5, beta2=0.9),
     refs.RefADOPT),
    ('cocob', optimizers.COCOB.Params().Set(alpha=10.0, epsilon=1e-6),
     refs.RefCOCOB),
    ('madgrad', optimizers.MADGRAD.Params().Set(
        momentum=0.5, epsilon=1e-4, decoupled_weight_decay=0.1),
     refs.RefMADGRAD),
    # Tree-wide d (their references step all variables: `step_all`).
    ('dadapt_adamw', optimizers.DAdaptAdamW.Params().Set(
        d0=1e-2, epsilon=1e-3, decoupled_weight_decay=0.1),
     refs.RefDAdaptAdamW),
    ('prodigy', optimizers.Prodigy.Params().Set(
        d0=1e-2, epsilon=1e-3, decoupled_weight_decay=0.1),
     refs.RefProdigy),
    ('schedule_free_sgd', optimizers.ScheduleFreeSGD.Params().Set(
        momentum=0.8, warmup_steps=2, decoupled_weight_decay=0.1),
     refs.RefScheduleFree),
    ('schedule_free_adamw', optimizers.ScheduleFreeAdamW.Params().Set(
        warmup_steps=2, warmup_form='reference', r=1.0,
        decoupled_weight_decay=0.1), refs.RefScheduleFree),
    # The base's masks (learner/optimizers/cautious.py) on three rules:
    # Momentum's velocity and Adam's m disagree with g in some entries.
    ('momentum_cautious', optimizers.Momentum.Params().Set(
        alpha=0.9, cautious=True), refs.Cautious(refs.RefMomentum)),
    ('adamw_cautious_cwd', optimizers.AdamW.Params().Set(
        beta1=0.8, epsilon=1e-3, decoupled_weight_decay=0.5, cautious=True,
        cautious_weight_decay=True), refs.Cautious(refs.RefAdam)),
    ('lion_cwd', optimizers.Lion.Params().Set(
        decoupled_weight_decay=0.5, cautious_weight_decay=True),
     refs.Cautious(refs.RefLion)),
]
# The same rules through the low-precision-slot path (`_Step`, read /
# upcast / store) with float32 slots: it must give the kernels' numbers.
# The Adam family gets the path from its `_Step` (issue 37) too.
_CASES += [
    (name + '_upcast', p.Copy().Set(slot_dtype=tf.float32), ref)
    for name, p, ref in _CASES
    if name in ('sgd', 'momentum', 'nesterov', 'adam', 'adamw', 'adagrad',
                'ademamix', 'nadam', 'radam', 'adamax_keras', 'amsgrad',
                'adopt', 'simplified_ademamix', 'cocob', 'madgrad',
                'dadapt_adamw', 'prodigy')]

_IDS = [c[0] for c in _CASES]

# Rules for matrices only (the cases above include a vector): checked
# against references in their own test modules (test_muon.py,
# test_normuon.py), and here under tf.function and XLA.
_MATRIX_CASES = [
    ('muon', optimizers.Muon.Params().Set(decoupled_weight_decay=0.1), None),
    ('muon_polar_express', optimizers.Muon.Params().Set(
        ns_coeffs='polar_express', ns_safety=0.02), None),
    ('normuon', optimizers.NorMuon.Params().Set(decoupled_weight_decay=0.1),
     None),
]

# Rules whose step reads global norms over all variables (DoG, DoWG): the
# reference takes every variable at once (`step_all`).
_GLOBAL_CASES = [
    ('dog', optimizers.DoG.Params().Set(
        init_step='distance', init_step_value=0.5,
        decoupled_weight_decay=0.1), refs.RefDistanceOverGradients),
    ('dog_heuristic', optimizers.DoG.Params().Set(init_step_value=0.1),
     refs.RefDistanceOverGradients),
    ('dog_learning_rate', optimizers.DoG.Params().Set(
        init_step='learning_rate', init_step_value=0.3),
     refs.RefDistanceOverGradients),
    ('dowg', optimizers.DoWG.Params().Set(init_estim_sq_dist=0.2),
     lambda p: refs.RefDistanceOverGradients(p, dowg=True)),
]


def _Data(seed=0, steps=3):
  rng = np.random.RandomState(seed)
  values = [rng.randn(2, 3).astype(np.float32),
            rng.randn(3).astype(np.float32)]
  grads = [[rng.randn(*v.shape).astype(np.float32) for v in values]
           for _ in range(steps)]
  return values, grads


@pytest.mark.parametrize('name,p,ref_cls', _CASES, ids=_IDS)
def test_one_and_three_steps_match_numpy_reference(name, p, ref_cls):
  del name
  values, grads = _Data()
  opt, variables = _Build(p, values)
  ref = ref_cls(opt.params)
  ws = [v.copy() for v in values]
  slots = [ref.slots(w) for w in ws]
  lrs = [0.1, 0.05, 0.2]
  for t in range(1, 4):
    _Step(opt, variables, [tf.constant(g) for g in grads[t - 1]], lrs[t - 1])
    if hasattr(ref, 'step_all'):  # A rule whose step reads all variables.
      ws = ref.step_all(t, lrs[t - 1], ws, grads[t - 1], slots)
    else:
      ws = [ref.step(t, lrs[t - 1], w, g, s)
            for w, g, s in zip(ws, grads[t - 1], slots)]
    if t in (1, 3):
      for var, w, s in zip(variables, ws, slots):
        np.testing.assert_allclose(var.numpy(), w, rtol=RTOL, atol=ATOL,
                                   err_msg='step %d' % t)
        got = opt.GetSlots(var)
        assert sorted(got) == sorted(s)
        for k in s:
          np.testing.assert_allclose(got[k].numpy(), s[k], rtol=RTOL,
                                     atol=ATOL, err_msg='slot %s' % k)
  assert int(opt.num_updates.numpy()) == 3


@pytest.mark.parametrize('name,p,ref_cls', _GLOBAL_CASES,
                         ids=[c[0] for c in _GLOBAL_CASES])
def test_global_norm_rules_match_numpy_reference_over_two_variables(
    name, p, ref_cls):
  del name
  values, grads = _Data()
  opt, variables = _Build(p, values)
  ref = ref_cls(opt.params)
  ws = [v.copy() for v in values]
  lrs = [0.1, 0.05, 0.2]
  for t in range(1, 4):
    _Step(opt, variables, [tf.constant(g) for g in grads[t - 1]], lrs[t - 1])
    ws = ref.step_all(t, lrs[t - 1], ws, grads[t - 1])
    for var, w, w0 in zip(variables, ws, values):
      np.testing.assert_allclose(var.numpy(), w, rtol=RTOL, atol=ATOL,
                                 err_msg='step %d' % t)
      np.testing.assert_array_equal(opt.GetSlots(var)['x0'].numpy(), w0)
    assert np.abs(ws[0] - values[0]).max() > 1e-3  # The weights moved.
  assert int(opt.num_updates.numpy()) == 3


# ---- sparse gradients ---------------------------------------------------------

# Optimizers whose lazy sparse update keeps absent rows (var and slots).
_LAZY = {'sgd', 'momentum', 'nesterov', 'adam', 'adamw', 'adagrad', 'rmsprop',
         'rmsprop_centered', 'adadelta', 'ademamix',
         'simplified_ademamix'}


def _Sparse(values, indices, rows):
  return tf.IndexedSlices(tf.constant(values, tf.float32),
                          tf.constant(indices, tf.int64),
                          tf.constant([rows, 2], tf.int64))


def _Snapshot(opt, var):
  return {'var': var.numpy().copy(),
          **{k: s.numpy().copy() for k, s in opt.GetSlots(var).items()}}


@pytest.mark.parametrize('name,p,ref_cls', _CASES, ids=_IDS)
def test_sparse_gradients_agree_with_dense_and_lazy_differs_where_it_should(
    name, p, ref_cls):
  del ref_cls
  init = np.arange(8, dtype=np.float32).reshape(4, 2) / 4. - 1.
  first = tf.constant(np.full((4, 2), 0.5, np.float32))
  # Row 0 twice (merged: 0.25 + 0.5), row 2 once; rows 1 and 3 absent.
  sparse = _Sparse([[0.25, -0.5], [1.0, 2.0], [0.5, 0.5]], [0, 2, 0], 4)
  dense = tf.convert_to_tensor(sparse)
  np.testing.assert_allclose(dense.numpy()[0], [0.75, 0.0])
  runs = {}
  for mode in ('dense', 'sparse', 'lazy'):
    q = p.Copy().Set(lazy_sparse_updates=(mode == 'lazy'))
    opt, (var,) = _Build(q, [init])
    _Step(opt, [var], [first], 0.1)
    before = _Snapshot(opt, var)
    _Step(opt, [var], [dense if mode == 'dense' else sparse], 0.1)
    runs[mode] = (before, _Snapshot(opt, var))
  before, dense_after = runs['dense']
  for k in dense_after:
    np.testing.assert_allclose(runs['sparse'][1][k], dense_after[k],
                               rtol=RTOL, atol=ATOL, err_msg=k)
  lazy_after = runs['lazy'][1]
  for k in dense_after:
    if name in _LAZY:
      # Present rows as dense; absent rows exactly as before the step.
      np.testing.assert_allclose(lazy_after[k][[0, 2]],
                                 dense_after[k][[0, 2]], rtol=RTOL,
                                 atol=ATOL, err_msg=k)
      np.testing.assert_array_equal(lazy_after[k][[1, 3]],
                                    before[k][[1, 3]], err_msg=k)
    else:
      # No lazy form: densified, identical to dense.
      np.testing.assert_allclose(lazy_after[k], dense_after[k], rtol=RTOL,
                                 atol=ATOL, err_msg=k)
  moved = {'momentum': 'var', 'adam': 'var', 'adamw': 'var', 'rmsprop': 'ms',
           'adadelta': 'accum', 'ademamix': 'var',
           'simplified_ademamix': 'var'}
  if name in moved:
    # The dense form moves absent rows (a slot decays, or the velocity
    # keeps moving the weights), so lazy really differs there.
    k = moved[name]
    assert not np.array_equal(dense_after[k][[1, 3]], lazy_after[k][[1, 3]])


def test_adagrad_negative_initial_accumulator_is_refused():
  with pytest.raises(ValueError, match='initial_accumulator_value'):
    optimizers.Adagrad.Params().Set(
        name='adagrad', initial_accumulator_value=-1.0).Instantiate()


def test_sgd_importable_from_optimizers():
  from learner.optimizers import base as base_optimizer  # pylint: disable=g-import-not-at-top
  assert optimizers.SGD is base_optimizer.SGD


# The rules, and the wrappers that change the variables after the inner
# update (Lookahead synchronizes at the second step; SWA averages both).
_TRACE_CASES = [(name, p) for name, p, _ in
                _CASES + _MATRIX_CASES + _GLOBAL_CASES] + [
    ('lookahead', optimizers.Lookahead.Params().Set(
        k=2, alpha=0.5, optimizer=optimizers.Momentum.Params())),
    ('swa', optimizers.SWA.Params().Set(
        swa_start=0, swa_freq=1, optimizer=optimizers.Adam.Params())),
    # Sam's Apply hands the gradient to its inner optimizer (its second pass
    # is the learner's: tests/test_optimizers/test_sam.py runs it under XLA).
    ('sam', optimizers.Sam.Params().Set(
        optimizer=optimizers.Momentum.Params())),
]


def test_every_optimizer_in_tf_function_and_under_xla_matches_eager():
  # One trace each for all optimizers: lazy sparse gradients (row 0 twice)
  # in a plain tf.function must equal eager; under jit_compile=True they
  # are densified, so they must equal the eager dense run.
  init = np.arange(8, dtype=np.float32).reshape(4, 2) / 4. - 1.
  sparse = lambda: _Sparse([[0.25, -0.5], [1.0, 2.0], [0.5, 0.5]], [0, 2, 0],
                           4)
  built = {}
  for mode in ('eager_lazy', 'eager_dense', 'function_lazy', 'xla_lazy'):
    built[mode] = [
        _Build(p.Copy().Set(lazy_sparse_updates=(mode != 'eager_dense')),
               [init]) for _, p in _TRACE_CASES]

  def Steps(mode):
    for opt, (var,) in built[mode]:
      g = sparse()
      if mode == 'eager_dense':
        g = tf.convert_to_tensor(g)
      _Step(opt, [var], [g], 0.1)

  function = tf.function(lambda: Steps('function_lazy'))
  xla = tf.function(lambda: Steps('xla_lazy'), jit_compile=True)
  for _ in range(2):
    Steps('eager_lazy')
    Steps('eager_dense')
    function()
    xla()
  for i, (name, _) in enumerate(_TRACE_CASES):
    for mode, reference in (('function_lazy', 'eager_lazy'),
                            ('xla_lazy', 'eager_dense')):
      got = built[mode][i][1][0].numpy()
      want = built[reference][i][1][0].numpy()
      np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL,
                                 err_msg='%s %s' % (name, mode))
    assert int(built['xla_lazy'][i][0].num_updates.numpy()) == 2


def test_lamb_exclusions_drop_decay_and_adaptation_by_name():
  # One step, t = 1: m_hat = g, v_hat = g^2, so r = sign(g) / (1 + eps/|g|)
  # ~ sign(g). 'bias' gets no decay and ratio 1: b = 1 - 0.1 * r.
  # 'kernel' keeps both: r_k = r + 0.5 * w, ratio ||w|| / ||r_k||.
  p = optimizers.LAMB.Params().Set(
      weight_decay=0.5, exclude_from_weight_decay=['bias'],
      exclude_from_layer_adaptation=['bias'])
  k = tf.Variable([[3.0], [4.0]], name='dense/kernel')
  b = tf.Variable([1.0, 1.0], name='dense/bias')
  opt = p.Copy().Set(name='lamb').Instantiate().Bind([k, b])
  g_k, g_b = np.array([[1.0], [-2.0]], np.float32), np.array([2.0, -1.0],
                                                             np.float32)
  _Step(opt, [k, b], [tf.constant(g_k), tf.constant(g_b)], 0.1)
  r_b = g_b / (np.abs(g_b) + 1e-6)
  np.testing.assert_allclose(b.numpy(), 1.0 - 0.1 * r_b, rtol=1e-6)
  r_k = g_k / (np.abs(g_k) + 1e-6) + 0.5 * np.array([[3.0], [4.0]])
  ratio = 5.0 / np.linalg.norm(r_k)
  np.testing.assert_allclose(k.numpy(), [[3.0], [4.0]] - 0.1 * ratio * r_k,
                             rtol=1e-6)
