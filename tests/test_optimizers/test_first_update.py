"""Under XLA, the slots taken from the weights at the first update
(learner/optimizers/kernels/first_update.py): MADGRAD's and COCOB's x0,
schedule-free's z and x.

They are taken in one conditional before the step instead of by a select
in every step; the numbers must be the select's, bit for bit, and the
select must be gone from the compiled step.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.optimizers.kernels import first_update
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
import optax_references as refs

# (rule class, its learning rate): each with slots set at the first update.
_RULES = [(optimizers.MADGRAD, 0.01), (optimizers.COCOB, 1.0),
          (optimizers.ScheduleFreeSGD, 0.1),
          (optimizers.ScheduleFreeAdamW, 0.01)]
_IDS = [cls.__name__ for cls, _ in _RULES]


def _Case(lr):
  rng = np.random.default_rng(7)
  return dict(dtype='float32', shape=[5, 3], lr=lr, clip=1.0,
              init=rng.normal(0, 0.5, 15).tolist(),
              grads=[rng.normal(0, 1, 15).tolist() for _ in range(4)])


def _Trajectory(cls, case):
  """Weights and every slot after each of the case's steps, under XLA."""
  slots = []

  def Record(lrn, w):
    slots.append({k: v.numpy() for k, v in
                  lrn.optimizer.GetSlots(w).items()})

  ws = refs.RunOurs(cls.Params(), case, mode='xla', on_step=Record)
  return ws, slots


@pytest.mark.parametrize('cls, lr', _RULES, ids=_IDS)
def test_slots_taken_in_a_cond_give_the_selects_numbers_bit_for_bit(
    cls, lr, monkeypatch):
  case = _Case(lr)
  assert cls.FIRST_UPDATE_SLOTS
  ws, slots = _Trajectory(cls, case)
  monkeypatch.setattr(cls, 'FIRST_UPDATE_SLOTS', ())  # The select path.
  ws_select, slots_select = _Trajectory(cls, case)
  np.testing.assert_array_equal(ws, ws_select)
  for taken, selected in zip(slots, slots_select):
    assert sorted(taken) == sorted(selected)
    for name in taken:
      np.testing.assert_array_equal(taken[name], selected[name], name)
  if 'x0' in slots[0]:  # x0 is the initial weights from the first step on.
    init = np.asarray(case['init'], np.float32).reshape(case['shape'])
    for step in slots:
      np.testing.assert_array_equal(step['x0'], init)


def _CompiledStep(cls):
  w = tf.Variable(tf.ones([64, 48]), name='w')
  opt = cls.Params().Set(name='opt').Instantiate().Bind([w])
  g = tf.Variable(tf.ones([64, 48]), trainable=False)

  @tf.function(jit_compile=True)
  def Step():
    opt.Apply(tf.constant(0.1), NestedMap(w=VarGrad(w, g.read_value())))

  return Step.experimental_get_compiler_ir()(stage='optimized_hlo')


@pytest.mark.parametrize('cls', [optimizers.MADGRAD, optimizers.COCOB],
                         ids=['MADGRAD', 'COCOB'])
def test_x0_is_no_longer_rewritten_on_every_step(cls, monkeypatch):
  # The select where(first, w, x0) is a compare-and-select fusion over the
  # whole tensor in the step; taken in the conditional, the step has none
  # (only the first update's branch copies w into x0).
  def SelectFusions(hlo):
    return re.findall(r'%\w*select\w*(?:\.\d+)? = f32\[64,48\]\S* fusion\(',
                      hlo)
  assert not SelectFusions(_CompiledStep(cls))
  monkeypatch.setattr(cls, 'FIRST_UPDATE_SLOTS', ())
  assert SelectFusions(_CompiledStep(cls))


def test_nothing_is_taken_outside_xla_or_with_low_precision_slots():
  w = tf.Variable(tf.ones([3]), name='w')
  opt = optimizers.MADGRAD.Params().Set(name='opt').Instantiate().Bind([w])
  vgs = [VarGrad(w, tf.ones([3]))]
  update = NestedMap(lr=tf.constant(0.1), grad_scale=None)
  assert not first_update.TakeFirstSlots(opt, update, vgs)  # Eager.
  low = optimizers.MADGRAD.Params().Set(
      name='low', slot_dtype=tf.bfloat16).Instantiate().Bind([w])
  taken = []

  @tf.function(jit_compile=True)
  def Probe():
    taken.append(first_update.TakeFirstSlots(low, update, vgs))
    taken.append(first_update.TakeFirstSlots(opt, update, vgs))
    return tf.constant(0)

  Probe.experimental_get_compiler_ir()()
  assert taken == [False, True]
