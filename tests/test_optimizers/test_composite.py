"""Tests of learner/optimizers/wrappers/composite.py."""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers.wrappers import composite
from learner import optimizers
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def _Composite(optimizer_map):
  return composite.Composite.Params().Set(
      name='composite', optimizer_map=optimizer_map).Instantiate()


def test_o9_groups_use_learner_rate_times_multiplier():
  # O9: a = 0 - 0.1 * 10 * 3 = -3.0; b = 0 - 0.1 * 5 * 1 = -0.5.
  a = tf.Variable(0.0, name='a')
  b = tf.Variable(0.0, name='b')
  opt = _Composite({'a$': (optimizers.SGD.Params(), 10.0),
                    'default_optimizer': (optimizers.SGD.Params(), 5.0)})
  opt.Bind([a, b])
  opt.Apply(0.1, NestedMap(a=VarGrad(a, tf.constant(3.0)),
                           b=VarGrad(b, tf.constant(1.0))))
  np.testing.assert_allclose([a.numpy(), b.numpy()], [-3.0, -0.5], rtol=1e-6)
  assert opt.GroupOf(a) is opt.group_0 and opt.GroupOf(b) is opt.default


def test_o9_double_match_names_the_variable_and_both_regexes():
  a = tf.Variable(0.0, name='enc/a')
  opt = _Composite({'enc/': (optimizers.SGD.Params(), 1.0),
                    'a$': (optimizers.SGD.Params(), 1.0)})
  with pytest.raises(ValueError) as e:
    opt.Bind([a])
  msg = str(e.value)
  assert "'enc/a'" in msg and "'enc/'" in msg and "'a$'" in msg


def test_no_match_without_default_names_the_variable():
  v = tf.Variable(0.0, name='other/w')
  opt = _Composite({'enc/': (optimizers.SGD.Params(), 1.0)})
  with pytest.raises(ValueError, match="'other/w' is matched by no"):
    opt.Bind([v])


def test_groups_keep_their_own_slots_and_count_every_update():
  # enc/w with Momentum(alpha 0.5) at rate 1 * 2: v = 1, 1.5: w = -2 - 3 = -5;
  # dec/w with SGD at rate 1: -2.
  enc = tf.Variable(0.0, name='enc/w')
  dec = tf.Variable(0.0, name='dec/w')
  opt = _Composite({'enc/': (optimizers.Momentum.Params().Set(alpha=0.5), 2.),
                    'dec/': (optimizers.SGD.Params(), 1.0)}).Bind([enc, dec])

  @tf.function
  def Step():
    opt.Apply(1.0, NestedMap(enc=VarGrad(enc, tf.constant(1.0)),
                             dec=VarGrad(dec, tf.constant(1.0))))

  Step()
  Step()
  np.testing.assert_allclose([enc.numpy(), dec.numpy()], [-5.0, -2.0])
  np.testing.assert_allclose(
      opt.group_0.GetSlots(enc)['momentum'].numpy(), 1.5)
  assert [int(g.num_updates.numpy()) for _, _, g in opt.groups] == [2, 2]
  assert int(opt.num_updates.numpy()) == 2


@pytest.mark.parametrize('bad,match', [
    ({}, 'optimizer_map is empty'),
    ({'enc/': optimizers.SGD.Params()}, r"optimizer_map\['enc/'\] must be"),
    ({'enc/': (optimizers.SGD.Params(), 'x')}, r"optimizer_map\['enc/'\]"),
    ({'enc/(': (optimizers.SGD.Params(), 1.0)}, "'enc/\\(' is not a valid"),
])
def test_bad_optimizer_map_names_the_entry(bad, match):
  with pytest.raises(ValueError, match=match):
    _Composite(bad)


def test_composite_refuses_accumulation_in_a_group():
  class _Acc(optimizers.SGD):
    IS_ACCUMULATION = True

  with pytest.raises(ValueError, match='outermost wrapper'):
    _Composite({'enc/': (_Acc.Params(), 1.0)})


def test_composite_params_round_trip_through_text():
  p = composite.Composite.Params().Set(optimizer_map={
      'enc/': (optimizers.Momentum.Params().Set(alpha=0.5), 2.0),
      'default_optimizer': (optimizers.Adam.Params().Set(beta1=0.8), 0.5)})
  q = composite.Composite.Params().FromText(p.ToText())
  assert q == p
  assert q.optimizer_map['enc/'][0].alpha == 0.5
  assert q.optimizer_map['default_optimizer'][1] == 0.5
