"""Under XLA, the slots a rule takes from the weights at its first update.

MADGRAD and COCOB keep x0, the weights at the first update; schedule-free
SGD/AdamW start z and x there. Each `_Step` writes it once, as
`tf.where(s.first, w, slot)`: the fused kernels and the graph path run it
as a select at no cost, but XLA:CPU (TF 2.21) emits it as a full pass on
every update: MADGRAD's and COCOB's x0 is read with the weights and written
back unchanged (12 bytes per parameter per step, a fifth of MADGRAD's
step), and schedule-free's z and x fusions each read the weights again
(8 bytes). benchmarks/README.md ("The newer rules under XLA") has the
per-fusion bytes of each rule.

`TakeFirstSlots` takes them instead in one conditional per update, before
the step: branch 0 (every update but the first) does nothing and keeps
every slot in place (XLA:CPU copies a buffer passed through any other
branch: openxla/xla#46314; accumulation.CondAsCall), branch 1 assigns the
weights to the rule's FIRST_UPDATE_SLOTS. The step then runs with
`first` False, so each select folds to the slot, which at the first
update holds the weights: `_Step`'s numbers, bit for bit (the slot holds
the weights exactly: only with slots in the variable's dtype).
"""

import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers.kernels import low_precision


def TakeFirstSlots(rule, update, vgs):
  """Assigns the weights to `rule`'s FIRST_UPDATE_SLOTS at its first update.

  Only under XLA, for slots in the variables' dtype (`slot_dtype` None),
  no float32 master and no ZeRO-1 sharding; otherwise nothing is done and
  the step's select takes them (the same numbers).

  Args:
    rule: a BaseOptimizer whose `_Scalars` has `first` (bool scalar: this
      is the first update) and whose `_Step` sets each slot named in its
      FIRST_UPDATE_SLOTS to the weights when `first` is true.
    update: the update's NestedMap (`_BeginUpdate`).
    vgs: the VarGrads with a gradient (non-empty), applied per variable.

  Returns:
    True when the slots were taken here (the caller then runs `_Step`
    with `first` False), else False.
  """
  names = type(rule).FIRST_UPDATE_SLOTS
  p = rule.params
  if (not names or not kernels.InXla() or p.slot_dtype is not None or
      rule.state_sharding is not None or
      any(low_precision.HasMaster(rule, vg.var) for vg in vgs)):
    return False
  first = rule._Scalars(update, vgs[0].var.dtype).first  # pylint: disable=protected-access

  def Take():
    for vg in vgs:
      slots = rule.GetSlots(vg.var)
      w = vg.var.read_value()
      for name in names:
        slots[name].assign(w, read_value=False)
    return tf.constant(0)

  tf.switch_case(tf.cast(first, tf.int32), [lambda: tf.constant(0), Take])
  return True
