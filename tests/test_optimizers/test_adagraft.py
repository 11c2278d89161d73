"""AdaGraft (learner/optimizers/wrappers/composite.py).

Numbers: Lingvo 0.14.2 itself (tests/data/lingvo_0_14_2_adagraft.json,
recorded by tools/record_lingvo_adagraft.py: Lingvo's AdaGraft around its
Adam and Momentum, and around its Adagrad and SGD with a direction rate of
its own, in Lingvo's learner; 20 steps on a vector, a matrix and a conv
kernel, clip by global norm 1.0 off and on, float32) and a step by hand.
Here also: the refusal of use_global_norm (Lingvo's never moves the
weights: recorded), the factory-free construction checks, XLA, the text
round trip (the checkpoint: test_optimizer_restore.py).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.optimizers.var_grad import VarGrad
from learner.optimizers.wrappers.composite import AdaGraft
from params import NestedMap
import optax_references as refs

_DATA = refs.Load('0_14_2_adagraft', prefix='lingvo')

# Measured (max over steps of max |ours - Lingvo| / max |Lingvo|): 6.0e-7
# (float32 rounding of the inner steps, the norms and their ratio).
RTOL = 1e-5


def _Inner(entry):
  cls, kw = entry
  return getattr(optimizers, cls).Params().Set(**kw)


def _Params(case):
  kw = case['kwargs']
  return AdaGraft.Params().Set(
      magnitude_optimizer=_Inner(kw['magnitude']),
      direction_optimizer=_Inner(kw['direction']),
      direction_optimizer_lr=kw['direction_optimizer_lr'])


@pytest.mark.parametrize('case', _DATA['cases'], ids=refs.CaseId)
def test_twenty_steps_match_lingvo(case):
  ours = refs.RunOurs(_Params(case), case)
  err = refs.RelativeError(ours, refs.Expected(case))
  print('%s: max relative error %.3g' % (refs.CaseId(case), err))
  refs.AssertMatches(ours, case, rtol=RTOL)
  assert np.abs(ours[-1] - refs.Expected(case)[0]).max() > 1e-2  # moved


def test_xla_equals_the_recording():
  case = refs.Select(_DATA, 'adagraft_adam_momentum', shape_name='conv',
                     clip=1.0)[0]
  refs.AssertMatches(refs.RunOurs(_Params(case), case, mode='xla'), case,
                     rtol=RTOL)


def test_one_step_by_hand_sgd_direction_adagrad_magnitude():
  # Adagrad (a0 = 1): m = -lr g / sqrt(1 + g^2); SGD: d = -lr_d g.
  # Grafted: |m| / |d| * d.
  g = np.array([[3.0, 4.0]], np.float32)
  w = tf.Variable(np.zeros((1, 2), np.float32), name='w')
  p = AdaGraft.Params().Set(
      name='graft', magnitude_optimizer=optimizers.Adagrad.Params(),
      direction_optimizer=optimizers.SGD.Params(),
      direction_optimizer_lr=0.5)
  opt = p.Instantiate().Bind([w])
  opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.constant(g))))
  m = -0.1 * g / np.sqrt(1. + g * g)
  want = np.linalg.norm(m) * (-g / 5.0)
  np.testing.assert_allclose(w.numpy(), want, rtol=1e-6)
  # Both inner optimizers stepped once, with their own state.
  assert int(opt.magnitude_optimizer.num_updates.numpy()) == 1
  assert int(opt.direction_optimizer.num_updates.numpy()) == 1
  np.testing.assert_allclose(
      opt.magnitude_optimizer.GetSlots(w)['accumulator'].numpy(), 1. + g * g)


def test_a_zero_direction_leaves_the_weights():
  w = tf.Variable(np.ones((2,), np.float32), name='w')
  p = AdaGraft.Params().Set(
      name='graft', magnitude_optimizer=optimizers.Adam.Params(),
      direction_optimizer=optimizers.SGD.Params())
  opt = p.Instantiate().Bind([w])
  opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, tf.zeros([2]))))
  np.testing.assert_array_equal(w.numpy(), [1., 1.])


def test_global_norm_is_refused_because_lingvos_never_moves():
  assert _DATA['global_norm']['max_change'] == 0.0  # Lingvo 0.14.2
  p = AdaGraft.Params().Set(
      use_global_norm=True, magnitude_optimizer=optimizers.Adam.Params(),
      direction_optimizer=optimizers.SGD.Params())
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  msg = str(e.value)
  assert 'use_global_norm' in msg and 'never moves' in msg
  assert '\n' not in msg


@pytest.mark.parametrize('key, value', [
    ('magnitude_optimizer', None), ('direction_optimizer', 'sgd'),
    ('direction_optimizer_lr', 0.0), ('direction_optimizer_lr', True),
    ('decoupled_weight_decay', 0.1)])
def test_bad_values_are_refused_in_one_line_naming_the_key(key, value):
  p = AdaGraft.Params().Set(magnitude_optimizer=optimizers.Adam.Params(),
                            direction_optimizer=optimizers.SGD.Params())
  with pytest.raises(ValueError) as e:
    p.Set(**{key: value}).Instantiate()
  msg = str(e.value)
  assert key in msg and '\n' not in msg.strip()


def test_defaults_text_round_trip_and_inner_optimizers():
  p = AdaGraft.Params()
  assert (p.magnitude_optimizer, p.direction_optimizer,
          p.direction_optimizer_lr, p.use_global_norm, p.diagnostic) == (
              None, None, None, False, False)
  p.Set(magnitude_optimizer=optimizers.Adam.Params().Set(beta1=0.5),
        direction_optimizer=optimizers.Momentum.Params(),
        direction_optimizer_lr=0.25)
  q = AdaGraft.Params()
  q.FromText(p.ToText())
  assert q.ToText() == p.ToText()
  assert q.magnitude_optimizer.beta1 == 0.5
  assert AdaGraft.InnerOptimizerParams(p) == [p.magnitude_optimizer,
                                              p.direction_optimizer]
