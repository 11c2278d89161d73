"""Cautious updates and cautious weight decay (learner/optimizers/cautious.py).

Two options of every update rule (BaseOptimizer's `cautious` and
`cautious_weight_decay`), applied to `_Step`'s delta in the base's one
pure-TF apply path. Numbers: by hand; pytorch-optimizer 4.1's cautious
Lion and heavyball 3.2's AdamW with cautious weight decay
(tests/data/torch_cautious.json, recorded by tools/record_torch_cautious.py);
a numpy reference of the masks (optimizer_references.Cautious, in
test_optimizers.py with tf.function and XLA). Checkpoint resume:
test_optimizer_restore.py; MirroredStrategy: test_optimizer_distribution.py;
ZeRO-1 (cautious weight decay only): sharded_cases.MORE_RULES.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.optimizers import cautious
from learner.optimizers import sharded_state
from learner.optimizers.var_grad import VarGrad
from learner.optimizers.wrappers import ema
from params import NestedMap
import optax_references as refs

with open(os.path.join(refs.DATA, 'torch_cautious.json')) as _f:
  _DATA = json.load(_f)


def _OurParams(case):
  kw = dict(case['kwargs'])
  if case['rule'].startswith('lion'):
    p = optimizers.Lion.Params().Set(beta1=kw['beta1'], beta2=kw['beta2'])
  else:
    p = optimizers.Adam.Params().Set(
        beta1=kw['beta1'], beta2=kw['beta2'], epsilon=kw['eps'],
        epsilon_form='optax')
  return p.Set(decoupled_weight_decay=kw.get('weight_decay', 0.0),
               cautious=kw.get('cautious', False),
               cautious_weight_decay=kw.get('cautious_weight_decay', False))


# (1) the masks by hand.


def test_cautious_mask_and_rescale_by_hand():
  # u * g > 0 at entries 0 and 3: n / (nnz + 1) = 4 / 3.
  p = optimizers.Adam.Params().Set(cautious=True)
  u = tf.constant([1.0, -2.0, 3.0, -4.0])
  g = tf.constant([1.0, 2.0, -3.0, -0.5])
  got = cautious.Masked(p, u, g, None).numpy()
  np.testing.assert_allclose(got, [4. / 3., 0., 0., -16. / 3.], rtol=1e-7)


def test_cautious_weight_decay_only_where_update_and_weight_agree():
  # decay = lr wd w_old = 0.1 * w; kept where u * w >= 0 (u = 0 counts).
  p = optimizers.Adam.Params().Set(decoupled_weight_decay=0.1,
                                   cautious_weight_decay=True)
  u = tf.constant([0.5, -0.5, 0.5, 0.0])
  decay = 0.1 * tf.constant([2.0, 2.0, -2.0, -2.0])
  got = cautious.Masked(p, u, tf.ones([4]), decay).numpy()
  np.testing.assert_allclose(got, [0.7, -0.5, 0.5, -0.2], rtol=1e-6)
  # Both, g = 1: the cautious mask first (u g > 0 at entries 0, 2: u =
  # [2/3, 0, 2/3, 0], 4 / 3), then the decay's mask on that update (kept
  # where u w >= 0: entries 0, 1 and 3).
  both = p.Copy().Set(cautious=True)
  got = cautious.Masked(both, u, tf.ones([4]), decay).numpy()
  np.testing.assert_allclose(
      got, [2. / 3. + 0.2, 0.2, 2. / 3., -0.2], rtol=1e-6)


def test_one_momentum_step_by_hand():
  # Momentum 0.9, lr 0.1: step 1 v = g (all agree: 2 / 3 of n / (nnz + 1)
  # = 2 / 3); step 2 v = 0.9 g1 + g2 = [1.9, -0.1]: entry 1 disagrees
  # with g2 = [1, 0.8]: v * [1, 0] * 2 / 2.
  w = tf.Variable([0.0, 0.0], name='w')
  opt = optimizers.Momentum.Params().Set(
      name='o', alpha=0.9, cautious=True).Instantiate().Bind([w])
  for g in ([1.0, -1.0], [1.0, 0.8]):
    opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.constant(g))))
  step1 = np.array([-0.1, 0.1]) * 2. / 3.
  np.testing.assert_allclose(w.numpy(), step1 - 0.1 * np.array([1.9, 0.0]),
                             rtol=1e-6)


# (2) the recorded PyTorch references.


@pytest.mark.parametrize('case', _DATA['cases'], ids=refs.CaseId)
def test_twenty_steps_match_pytorch(case):
  # Lion: pytorch-optimizer's lr * (sign(c) * mask * n / (nnz + 1)) and our
  # (lr sign(c)) * mask * n / (nnz + 1) are equal (lr = 2^-7): measured 0
  # in float64 (2.4e-10 with the float32 decay rate lr * wd), 4.7e-7 in
  # float32. heavyball's AdamW clamps sqrt(v_hat) at eps where ours adds
  # eps (1e-8): measured 2.5e-8 (float64), 5.3e-7 (float32).
  ours = refs.RunOurs(_OurParams(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=1e-6)


def test_the_masks_change_the_recorded_trajectories():
  # The references differ from the unmasked rules (the tests can fail).
  for rule in ('lion_cautious', 'adamw_cwd'):
    case = refs.Select(_DATA, rule, shape_name='conv', dtype='float64',
                       clip=None)[0]
    plain = _OurParams(case).Set(cautious=False, cautious_weight_decay=False)
    ours = refs.RunOurs(plain, case, mode='eager')
    assert refs.RelativeError(ours, refs.Expected(case)) > 1e-3, rule


@pytest.mark.parametrize('rule', ['lion_cautious_wd', 'adamw_cwd'])
def test_xla_equals_eager_and_the_record(rule):
  case = refs.Select(_DATA, rule, shape_name='conv', dtype='float32',
                     clip=1.0)[0]
  eager = refs.RunOurs(_OurParams(case), case, mode='eager')
  xla = refs.RunOurs(_OurParams(case), case, mode='xla')
  np.testing.assert_allclose(xla, eager, rtol=1e-6, atol=1e-7)
  refs.AssertMatches(xla, case, rtol=1e-6)


# (3) every rule: the masks act on `_Step`'s delta, whatever the rule.


@pytest.mark.parametrize('p', [
    optimizers.Muon.Params(),
    optimizers.Adafactor.Params().Set(beta1=0.9, min_dim_size_to_factor=2),
    optimizers.LAMB.Params(),
], ids=lambda p: p.cls.__name__)
def test_a_whole_tensor_rule_gets_the_masks_on_its_delta(p):
  rng = np.random.RandomState(3)
  w0 = rng.normal(size=(4, 3)).astype(np.float32)
  g = tf.constant(rng.normal(size=(4, 3)).astype(np.float32))
  moved = {}
  for key, q in (('plain', p), ('masked', p.Copy().Set(
      cautious=True, cautious_weight_decay=True,
      decoupled_weight_decay=0.5))):
    w = tf.Variable(w0, name='w')
    opt = q.Copy().Set(name='o').Instantiate().Bind([w])
    opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, g)))
    moved[key] = w0 - w.numpy()
  want = cautious.Masked(p.Copy().Set(
      cautious=True, cautious_weight_decay=True), moved['plain'], g,
                         0.1 * 0.5 * w0).numpy()
  np.testing.assert_allclose(moved['masked'], want, rtol=1e-5, atol=1e-7)
  assert np.sum(moved['masked'] == 0) < np.sum(
      moved['plain'] * g.numpy() <= 0) + 1  # some entries were dropped
  assert np.abs(moved['masked'] - moved['plain']).max() > 1e-3


def test_a_masked_rule_takes_the_pure_tf_path_and_says_why():
  w = tf.Variable([1.0, 2.0], name='w')
  vgs = [VarGrad(w, tf.constant([0.5, -1.0]))]
  opt = optimizers.Lion.Params().Set(
      name='o', cautious=True).Instantiate().Bind([w])
  assert opt.FusedApplyReason(vgs) == (
      'cautious=True (a mask on _Step\'s update; no kernel holds it)')
  opt = optimizers.Adam.Params().Set(
      name='o', decoupled_weight_decay=0.1, cautious=True,
      cautious_weight_decay=True).Instantiate().Bind([w])
  assert 'cautious=True and cautious_weight_decay=True' in (
      opt.FusedApplyReason(vgs))


def test_a_sparse_gradient_is_densified():
  init = np.arange(8, dtype=np.float32).reshape(4, 2) / 4. - 1.
  sparse = tf.IndexedSlices(tf.constant([[0.25, -0.5], [1.0, 2.0]]),
                            tf.constant([0, 2]), tf.constant([4, 2]))
  out = []
  for g in (sparse, tf.convert_to_tensor(sparse)):
    w = tf.Variable(init, name='w')
    opt = optimizers.Adam.Params().Set(
        name='o', lazy_sparse_updates=True, cautious=True,
        decoupled_weight_decay=0.1,
        cautious_weight_decay=True).Instantiate().Bind([w])
    for _ in range(2):
      opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, g)))
    out.append(w.numpy())
  np.testing.assert_array_equal(out[0], out[1])
  assert not np.array_equal(out[0][[1, 3]], init[[1, 3]])  # decayed rows


# (4) construction: params, text, refusals.


def test_params_are_documented_off_by_default_and_round_trip_as_text():
  p = optimizers.Lion.Params()
  assert (p.cautious, p.cautious_weight_decay) == (False, False)
  for key in ('cautious', 'cautious_weight_decay'):
    assert 'Cautious' in p.GetDoc(key)
  q = p.Copy().Set(cautious=True, cautious_weight_decay=True,
                   decoupled_weight_decay=0.1)
  r = optimizers.Lion.Params().FromText(q.ToText())
  assert r == q and r.cautious and r.cautious_weight_decay


@pytest.mark.parametrize('make, key', [
    (lambda: optimizers.Adam.Params().Set(cautious=1), 'cautious'),
    (lambda: optimizers.Adam.Params().Set(cautious_weight_decay='yes'),
     'cautious_weight_decay'),
    (lambda: optimizers.Adam.Params().Set(cautious_weight_decay=True),
     'cautious_weight_decay'),  # no decoupled weight decay to mask
    (lambda: ema.Ema.Params().Set(optimizer=optimizers.SGD.Params(),
                                  cautious=True), 'cautious'),
    (lambda: optimizers.ScheduleFreeAdamW.Params().Set(cautious=True),
     'cautious'),
    (lambda: optimizers.ScheduleFreeAdamW.Params().Set(
        decoupled_weight_decay=0.1, cautious_weight_decay=True),
     'cautious_weight_decay'),
    (lambda: optimizers.SOAP.Params().Set(cautious_weight_decay=True),
     'cautious_weight_decay'),
], ids=['cautious_int', 'cwd_str', 'cwd_without_decay', 'wrapper',
        'schedule_free', 'schedule_free_cwd', 'soap_cwd'])
def test_refusals_are_one_line_naming_the_key(make, key):
  with pytest.raises(ValueError) as e:
    make().Set(name='o').Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip(), msg
  assert 'set ' in msg.lower()  # the fix
  assert '_Step' not in msg  # no internals


def test_soap_cautious_weight_decay_refusal_says_why_and_which_rules():
  with pytest.raises(ValueError) as e:
    optimizers.SOAP.Params().Set(
        name='o', cautious_weight_decay=True).Instantiate()
  assert ('cautious_weight_decay=True is not supported by SOAP (it decays '
          'the weights inside its own step); use a rule such as adamw, lion '
          'or muon, or set cautious_weight_decay=False.') in str(e.value)


def test_zero1_sharding_of_a_cautious_rule_is_refused_in_one_line():
  opt = optimizers.Adam.Params().Set(name='o', cautious=True).Instantiate()
  with pytest.raises(ValueError) as e:
    opt.UseStateSharding(sharded_state.ShardedState(opt, None))
  msg = str(e.value)
  assert 'cautious=True' in msg and 'shard_optimizer_state=False' in msg
  assert '\n' not in msg
  # Cautious weight decay alone is elementwise: accepted.
  opt = optimizers.Adam.Params().Set(
      name='o', decoupled_weight_decay=0.1,
      cautious_weight_decay=True).Instantiate()
  opt.UseStateSharding(sharded_state.ShardedState(opt, None))
