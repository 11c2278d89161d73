"""Tests of learner/optimizers/wrappers/lookahead.py (Zhang et al. 2019).

Against optax 0.2.8's `lookahead` (tests/data/optax_lookahead.json: fast and
slow weights after each of 10 steps around sgd and adam), a case by hand,
the swap, the checkpoint, the factory and the refused values.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.optimizers.wrappers import lookahead
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
from params import Params
import optax_references as refs

_DATA = refs.Load('lookahead')


def _Inner(rule):
  if rule == 'lookahead_sgd':
    return optimizers.SGD.Params()
  # The recorder's optax.adam(b1=0.9, b2=0.999, eps=1e-12).
  return optimizers.Adam.Params().Set(beta1=0.9, beta2=0.999, epsilon=1e-12)


def _Params(case):
  kw = case['kwargs']
  return lookahead.Lookahead.Params().Set(
      k=kw['sync_period'], alpha=kw['slow_step_size'],
      optimizer=_Inner(case['rule']))


def _RunWithSlow(case, mode='function'):
  slow = []
  fast = refs.RunOurs(
      _Params(case), case, mode,
      on_step=lambda lrn, w: slow.append(
          lrn.optimizer.GetAverage(w).numpy().astype(np.float64)))
  return fast, np.stack(slow)


@pytest.mark.parametrize('case', _DATA['cases'], ids=refs.CaseId)
def test_fast_and_slow_weights_match_optax_over_10_steps(case):
  fast, slow = _RunWithSlow(case)
  refs.AssertMatches(fast, case, rtol=1e-6)
  refs.AssertMatches(slow, case, rtol=1e-6, key='extra')
  # The cases synchronize inside the 10 steps and end out of sync.
  k = case['kwargs']['sync_period']
  np.testing.assert_array_equal(fast[k - 1], slow[k - 1])
  assert np.abs(fast[-1] - slow[-1]).max() > 1e-3


@pytest.mark.parametrize('mode', ['eager', 'xla'])
def test_eager_and_xla_match_optax_too(mode):
  case = refs.Select(_DATA, 'lookahead_adam', shape_name='matrix',
                     dtype='float32', clip=1.0)[0]
  fast, slow = _RunWithSlow(case, mode)
  refs.AssertMatches(fast, case, rtol=1e-6)
  refs.AssertMatches(slow, case, rtol=1e-6, key='extra')


def _Lookahead(**kw):
  return lookahead.Lookahead.Params().Set(
      name='la', optimizer=optimizers.SGD.Params(), **kw).Instantiate()


def test_c_lookahead_by_hand_swap_and_checkpoint(tmp_path):
  # SGD lr 1, g = 1 each step, k = 2, alpha 0.5; w starts at 10:
  # step 1: fast 9, slow 10; step 2: fast 8 -> slow 10 + 0.5 * (8 - 10) = 9,
  # fast <- 9; step 3: fast 8, slow 9.
  w = tf.Variable(10.0, name='w')
  opt = _Lookahead(k=2, alpha=0.5).Bind([w])
  step = lambda: opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0))))
  got = []
  for _ in range(3):
    step()
    got.append((float(w.numpy()), float(opt.GetAverage(w).numpy())))
  assert got == [(9.0, 10.0), (9.0, 9.0), (8.0, 9.0)]
  with opt.SwapAverages():
    assert float(w.numpy()) == 9.0
  assert float(w.numpy()) == 8.0
  path = tf.train.Checkpoint(opt=opt, w=w).save(str(tmp_path / 'ckpt'))
  w2 = tf.Variable(0.0, name='w')
  opt2 = _Lookahead(k=2, alpha=0.5).Bind([w2])
  tf.train.Checkpoint(opt=opt2, w=w2).restore(path).assert_consumed()
  assert float(opt2.GetAverage(w2).numpy()) == 9.0
  # Step 4 synchronizes: fast 7 -> slow 9 + 0.5 * (7 - 9) = 8 = fast.
  opt2.Apply(1.0, NestedMap(w=VarGrad(w2, tf.constant(1.0))))
  assert (float(w2.numpy()), float(opt2.GetAverage(w2).numpy())) == (8.0,
                                                                      8.0)


def test_a_variable_without_gradient_is_synchronized_too():
  # k = 1, alpha 0.5: u (no gradient) stays 2 = slow; w 1 -> 0 -> 0.5.
  w = tf.Variable(1.0, name='w')
  u = tf.Variable(2.0, name='u')
  opt = _Lookahead(k=1, alpha=0.5).Bind([w, u])
  opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0)),
                           u=VarGrad(u, None)))
  assert float(w.numpy()) == 0.5 and float(u.numpy()) == 2.0
  assert float(opt.GetAverage(u).numpy()) == 2.0


def test_lookahead_is_an_eval_average_found_in_the_tree():
  p = optimizers.Lars.Params().Set(
      name='opt', optimizer=lookahead.Lookahead.Params().Set(
          optimizer=optimizers.Momentum.Params()))
  assert p.cls.EvalAverageClasses(p) == [lookahead.Lookahead]
  w = tf.Variable([1.0, 2.0], name='enc/w')
  opt = p.Instantiate().Bind([w])
  assert opt.EvalAverages() == [opt.optimizer]
  assert lookahead.Lookahead.AverageCheckpointKeySuffix(w) == (
      '/_averages/enc_w/.ATTRIBUTES/VARIABLE_VALUE')


def test_factory_name_aliases_and_text_round_trip():
  fn = get_optimizer_wrapper_fn(
      'lookahead', get_optimizer_fn('adam', learning_rate=0.01), k=5,
      alpha=0.5)
  assert fn.Params() == lookahead.Lookahead.Params().Set(
      k=5, alpha=0.5, optimizer=optimizers.Adam.Params())
  assert fn.learning_rate == 0.01
  optax_names = get_optimizer_wrapper_fn(
      'lookahead', get_optimizer_fn('sgd'), sync_period=3,
      slow_step_size=0.8)
  assert optax_names.Params().k == 3 and optax_names.Params().alpha == 0.8
  p = Params()
  p.Define('optimizer_fn', fn, '')
  q = Params()
  q.Define('optimizer_fn', None, '')
  q.FromText(p.ToText())
  assert q.optimizer_fn == fn and q.optimizer_fn.Params() == fn.Params()
  lp = lookahead.Lookahead.Params().Set(
      k=7, alpha=0.25, optimizer=optimizers.Adam.Params().Set(beta1=0.5))
  text = lp.ToText()
  assert 'k : 7' in text and 'alpha : 0.25' in text
  fresh = lookahead.Lookahead.Params()
  fresh.FromText(text)
  assert fresh == lp, lp.TextDiff(fresh)


@pytest.mark.parametrize('key,value,fix', [
    ('k', 0, 'Set k to an int >= 1, e.g. 5'),
    ('k', 2.0, 'Set k to an int >= 1, e.g. 5'),
    ('k', True, 'Set k to an int >= 1, e.g. 5'),
    ('alpha', 1.5, 'Set alpha to a finite number in [0, 1], e.g. 0.5'),
    ('alpha', -0.1, 'Set alpha to a finite number in [0, 1], e.g. 0.5'),
    ('alpha', float('nan'), 'Set alpha to a finite number in [0, 1]'),
])
def test_bad_values_are_refused_naming_key_value_and_fix(key, value, fix):
  p = lookahead.Lookahead.Params().Set(
      optimizer=optimizers.SGD.Params(), **{key: value})
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  msg = str(e.value)
  assert '%s=%r' % (key, value) in msg and fix in msg and '\n' not in msg
  with pytest.raises(ValueError, match='k=0'):
    get_optimizer_wrapper_fn('lookahead', get_optimizer_fn('sgd'), k=0)()
