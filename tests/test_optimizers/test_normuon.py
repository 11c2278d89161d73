"""NorMuon (learner/optimizers/rules/normuon.py; Li et al. 2025).

Numbers: pytorch-optimizer 4.1.0's `NorMuon` (tests/data/torch_normuon.json,
recorded by tools/record_torch_normuon.py: 20 steps on a [4, 3] matrix, a
wide [3, 5] matrix and a [3, 3, 2, 4] conv kernel; the defaults,
nesterov off with weight decay, match_rms, the Moonlight factor and the
Polar Express table; clip by global norm 1.0 off and on; float32 and
float64; Newton-Schulz in the parameter's dtype, not bfloat16). Here also:
the vector refusal, value checks, factory, text, checkpoint, XLA and two
replicas.
"""

import numpy as np
import pytest
import tensorflow as tf

import optax_references as refs
from learner import optimizers
from learner.learner import Learner
from learner.optimizers import factory
from learner.optimizers.rules import muon
from learner.optimizers.rules.normuon import NorMuon
from learner.optimizers.var_grad import VarGrad
from learner.training.cluster import distribution
from params import NestedMap
import mirrored_check  # pylint: disable=g-bad-import-order

_DATA = refs.Load('normuon', prefix='torch')
# pytorch-optimizer's keyword -> our params.
_KWARGS = {
    'normuon': {},
    'normuon_plain': {'nesterov': False, 'decoupled_weight_decay': 0.1},
    'normuon_rms': {'update_scale': 'match_rms'},
    'normuon_moon': {'rate_scaling': 'moonlight'},
    'normuon_pe': {'ns_coeffs': 'polar_express'},
}
# Measured, max over steps of max |ours - torch| / max |torch|: float32
# <= 9.4e-7 (normuon_plain; the rest <= 7e-7), float64 <= 5.8e-8 (the Polar
# Express rows, whose first a = 8.2 amplifies it; the rest <= 1e-8): ours adds
# epsilon 1e-8 to ||u||, torch clamps
# it at 1e-7, and the rate arrives as float32 (2e-8 of a step).
RTOL = {'float32': 1e-6, 'float64': 1e-7}


def _Params(rule):
  return NorMuon.Params().Set(**_KWARGS[rule])


@pytest.mark.parametrize('case', _DATA['cases'], ids=refs.CaseId)
def test_twenty_steps_match_pytorch_optimizer(case):
  ours = refs.RunOurs(_Params(case['rule']), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=RTOL[case['dtype']])


def test_defaults_are_pytorch_optimizers():
  p = NorMuon.Params()
  assert (p.beta, p.beta2, p.nesterov, p.momentum_form, p.row_epsilon,
          p.update_scale, p.rate_scaling, p.ns_steps, p.ns_coeffs) == (
              0.95, 0.95, True, 'reference', 1e-10, 'preserve_norm',
              'width', 5, None)
  assert refs.Select(_DATA, 'normuon', shape_name='matrix', clip=None,
                     dtype='float32')[0]['kwargs'] == {}


def _NumpyNorMuon(w, grads, lr, beta=0.95, beta2=0.95, eps=1e-10):
  """Algorithm 1's step with preserve_norm, float64, our [in, out] layout."""
  m = np.zeros_like(w)
  v = np.zeros(w.shape[-1])
  out = []
  for g in grads:
    m = beta * m + (1 - beta) * g
    o = muon.NewtonSchulz(tf.constant(beta * m + (1 - beta) * g), 5,
                          'jordan', 1e-8).numpy()
    v = beta2 * v + (1 - beta2) * (o ** 2).mean(axis=0)
    n = o / (np.sqrt(v) + eps)
    scale = np.sqrt(max(1., w.shape[1] / w.shape[0]))
    w = w - lr * scale * n * np.linalg.norm(o) / (np.linalg.norm(n) + eps)
    out.append(w)
  return np.stack(out)


def test_each_neuron_is_normalised_by_its_own_second_moment():
  # A numpy transcription of the formula (module docstring) on the wide
  # case; after step 1, v = 0.05 mean(O^2) per column, so every column of
  # N has RMS 1/sqrt(0.05) over its fan_in: the update's columns have
  # equal norms (O's did not).
  case = refs.Select(_DATA, 'normuon', shape_name='wide', clip=None,
                     dtype='float64')[0]
  init = np.asarray(case['init']).reshape(case['shape'])
  grads = refs.Expected(case, 'grads')
  ours = refs.RunOurs(_Params('normuon'), case)
  # The rate arrives as float32 (0.02 -> 0.0199999996): 2e-8 of a step.
  assert refs.RelativeError(ours, _NumpyNorMuon(init, grads, 0.02)) < 1e-8
  step = init - ours[0]
  col = np.linalg.norm(step, axis=0)
  np.testing.assert_allclose(col, col[0], rtol=1e-6)


def test_a_vector_is_refused_at_bind():
  w = tf.Variable(tf.zeros([4, 3]), name='body/w')
  b = tf.Variable(tf.zeros([3]), name='body/b')
  with pytest.raises(ValueError) as e:
    NorMuon.Params().Set(name='normuon').Instantiate().Bind([w, b])
  assert "'body/b'" in str(e.value) and '\n' not in str(e.value)


@pytest.mark.parametrize('key,value,needle', [
    ('beta2', 1.0, 'beta2'),
    ('beta2', -0.1, 'beta2'),
    ('row_epsilon', -1e-10, 'row_epsilon'),
    ('update_scale', 'rms', "update_scale='rms'"),
    ('ns_coeffs', 'polar', "ns_coeffs='polar'"),
    ('beta', 1.0, 'beta'),
])
def test_bad_params_are_refused_in_one_line(key, value, needle):
  with pytest.raises(ValueError) as e:
    NorMuon.Params().Set(name='n', **{key: value}).Instantiate()
  assert needle in str(e.value) and '\n' not in str(e.value)


def test_factory_name_and_keywords():
  fn = factory.get_optimizer_fn('normuon', learning_rate=0.02, momentum=0.9,
                                weight_decay=0.01, eps=1e-8)
  assert fn.Params() == NorMuon.Params().Set(
      beta=0.9, decoupled_weight_decay=0.01, row_epsilon=1e-8)
  assert isinstance(fn(), optimizers.NorMuon)


def test_params_round_trip_through_text():
  p = NorMuon.Params().Set(beta2=0.9, row_epsilon=1e-9,
                           update_scale='match_rms', ns_coeffs='polar_express',
                           ns_safety=0.02)
  text = p.ToText()
  again = NorMuon.Params().FromText(text)
  assert again == p and again.ToText() == text
  assert isinstance(again.Instantiate(), NorMuon)


def _Run(steps, restore_from=None, save_to=None):
  rng = np.random.RandomState(1)
  w = tf.Variable(rng.randn(4, 3).astype(np.float32), name='w')
  k = tf.Variable(rng.randn(3, 2, 4).astype(np.float32), name='k')
  grads = [[rng.randn(4, 3), rng.randn(3, 2, 4)] for _ in range(4)]
  opt = NorMuon.Params().Set(name='opt').Instantiate().Bind([w, k])
  ckpt = tf.train.Checkpoint(opt=opt, w=[w, k])
  first = 0
  if restore_from:
    ckpt.restore(restore_from).assert_consumed()
    first = int(opt.num_updates.numpy())
  for t in range(first, first + steps):
    opt.Apply(0.1, NestedMap(
        w=VarGrad(w, tf.constant(grads[t][0], tf.float32)),
        k=VarGrad(k, tf.constant(grads[t][1], tf.float32))))
  path = ckpt.save(save_to) if save_to else None
  return [w.numpy(), k.numpy(), opt.GetSlots(w)['m'].numpy(),
          opt.GetSlots(k)['v'].numpy()], path


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path):
  uninterrupted, _ = _Run(4)
  _, path = _Run(2, save_to=str(tmp_path / 'ckpt'))
  resumed, _ = _Run(2, restore_from=path)
  assert resumed[3].shape == (4,)  # v: one entry per output neuron.
  for a, b in zip(resumed, uninterrupted):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('mode', ['eager', 'xla'])
def test_eager_and_xla_match_pytorch_optimizer(mode):
  case = refs.Select(_DATA, 'normuon_plain', shape_name='conv', clip=1.0,
                     dtype='float32')[0]
  ours = refs.RunOurs(_Params('normuon_plain'), case, mode=mode)
  refs.AssertMatches(ours, case, rtol=RTOL['float32'])


def test_mirrored_replicas_apply_as_a_single_device_run():
  if len(tf.config.list_logical_devices('CPU')) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  strategy = distribution.CreateStrategy('mirrored')
  init = np.arange(6, dtype=np.float32).reshape(2, 3) / 3. - 1.
  grads = [tf.constant([[0.5, -1.0, 0.25], [1.0, 0.0, -0.5]]),
           tf.constant([[-0.5, 2.0, 0.75], [0.0, 1.0, 0.5]])]
  p = NorMuon.Params().Set(name='opt', decoupled_weight_decay=0.1)
  opt, w, ref, w_ref = mirrored_check.MirroredEqualsOneDevice(
      strategy, p, init, grads)
  for value in strategy.experimental_local_results(opt.GetSlots(w)['v']):
    np.testing.assert_allclose(value.numpy(),
                               ref.GetSlots(w_ref)['v'].numpy(), rtol=1e-6)
  assert not np.allclose(w_ref.numpy(), init)


def test_learner_splits_vectors_to_adamw_with_two_learners():
  base = Learner.Params().Set(loss_name='loss', learning_rate=1e-3)
  m, a = NorMuon.TwoLearners(base, '/w$')
  assert m.optimizer.cls is NorMuon and a.optimizer.cls is optimizers.AdamW
