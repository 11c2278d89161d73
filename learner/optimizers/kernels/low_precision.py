"""Low-precision optimizer state: slots stored in bfloat16, math upcast.

`BaseOptimizer.slot_dtype` (e.g. tf.bfloat16) stores every slot in that
dtype; each update reads a slot, upcasts it to the variable's dtype, runs
the rule's `_Step` (its formula, on values) and stores
the new slot rounded back: to nearest by default, or stochastically
(`slot_stochastic_rounding`, bfloat16 only): x is rounded up with
probability equal to its distance from the value below, so the rounding
error is zero on average and small steps (Adam's v <- 0.999 v + ...: a
change of 0.1%, under bfloat16's half spacing of 0.2-0.4%) are not lost.

Low-precision weights (`BaseOptimizer.master_weights`, issue 38.3): a
bfloat16 (or float16) variable gets a float32 master copy, the slot
'master'; the rule's update runs on the master (the gradient upcast, the
other slots float32) and the variable is assigned the master rounded to
nearest (or stochastically, `master_stochastic_rounding`, the same bit
trick). Without the master an update smaller than half of bfloat16's
spacing at the weight (2^-9 relative) is rounded away: w = 1.0 never
moves under steps of 1e-3. Source: Micikevicius et al., "Mixed Precision
Training", ICLR 2018 (float32 master weights); Keras's mixed_bfloat16
keeps float32 variables instead (tensorflow#58138).

Sources: Gupta, Agrawal, Gopalakrishnan & Narayanan, "Deep Learning with
Limited Numerical Precision", ICML 2015 (stochastic rounding); Kalamkar et
al., "A Study of BFLOAT16 for Deep Learning Training", 2019; Zamirai et
al., "Revisiting BFloat16 Training", 2020 (bfloat16 state needs stochastic
rounding or compensation). The bit trick (add 16 random low bits to the
float32 pattern, truncate) is the usual one for float32 -> bfloat16.

`slot_dtype=tf.int8` is 8-bit blockwise state instead (int8 codes and a
float32 scale per block of `slot_block_size` elements, dequantized for the
step and requantized after it): kernels/quantized_state.py. `ReadSlot`
and `StoreSlot` below are the one place both storages are read and
written.
"""

import zlib

import tensorflow as tf

from params import VariableName
from params import checks
from learner.optimizers.kernels import quantized_state

DEFAULT_BLOCK_SIZE = quantized_state.DEFAULT_BLOCK_SIZE
SLOT_DTYPES = (tf.bfloat16, tf.float16, tf.float32, tf.float64)
# slot_dtype=tf.int8: 8-bit blockwise state (kernels/quantized_state.py).
QUANTIZED_DTYPE = tf.int8


def IsQuantized(slot_dtype):
  """True when `slot_dtype` (a param value) selects 8-bit blockwise state."""
  return slot_dtype is not None and tf.as_dtype(slot_dtype) == QUANTIZED_DTYPE

# master_weights: the slot holding a 16-bit variable's float32 master copy.
MASTER_SLOT = 'master'
MASTER_DTYPE = tf.float32
MASTER_REASON = ('master_weights=True (the fused kernels update the '
                 'variables in place; a float32 master is updated per '
                 'variable)')
_MASTERED_DTYPES = (tf.bfloat16, tf.float16)


def DefineMasterParams(p):
  """Defines BaseOptimizer's master_weights params on `p` (in place)."""
  p.Define(
      'master_weights', False,
      'True: each bfloat16/float16 variable gets a float32 master copy, the '
      'slot \'master\' (made from the variable\'s value at Bind, '
      'checkpointed); the rule updates the master in float32 (gradient '
      'upcast; its other slots float32 too, or slot_dtype) and the variable '
      'gets the master rounded to nearest, so updates smaller than '
      'bfloat16\'s spacing add up. float32/float64 variables are updated as '
      'without it (their own master); refused at Bind when no bound '
      'variable is 16-bit. Per-variable path (no fused op), sparse '
      'gradients densified. Update rules only (not wrappers).')
  p.Define(
      'master_stochastic_rounding', False,
      'With master_weights=True: round the master to a bfloat16 variable '
      'stochastically (unbiased; seeded by num_updates and the variable\'s '
      'name) instead of to nearest (kernels/low_precision.py).')
  return p


def CheckParams(opt, has_step):
  """`CheckSlotDtype` and `CheckMasterWeights` (BaseOptimizer's __init__)."""
  CheckSlotDtype(opt, has_step)
  CheckMasterWeights(opt, has_step)


def HasMaster(opt, var):
  """True if `var` (a variable or a ZeRO-1 shard) gets a float32 master in
  optimizer `opt`: master_weights=True and a 16-bit float dtype."""
  return bool(opt.params.master_weights and
              tf.as_dtype(var.dtype) in _MASTERED_DTYPES)


def CreateMaster(opt, var):
  """{'master': float32 variable} for `var` if `HasMaster`, else {}.

  Call inside `tf.init_scope` (BaseOptimizer.CreateSlotVariables, under its
  variable creator). The master is `var`'s value upcast; a ZeRO-1 shard
  (not a tf.Variable: its value is not the weights yet) gets zeros, which
  sharded_state fills from the weights at Bind.
  """
  if not HasMaster(opt, var):
    return {}
  if isinstance(var, tf.Variable):
    initial = tf.cast(var.read_value(), MASTER_DTYPE)
  else:
    initial = tf.zeros(var.shape, MASTER_DTYPE)
  name = '%s/%s/%s' % (opt.path, VariableName(var), MASTER_SLOT)
  return {MASTER_SLOT: tf.Variable(initial, name=name, trainable=False)}


def ApplyToMaster(opt, update, var, grad, slots):
  """The update of a 16-bit `var` through its float32 master slot.

  The gradient (bfloat16 or float32; a sparse one densified) is upcast to
  float32; the optimizer's `_ApplyOne` applies decoupled weight decay
  (`weight_decay_exclude` matched against var's name) and the rule's update
  to the master with the other slots (any of its paths: `_Step`, the rule's
  raw TF op); then `var` is assigned the master rounded to its dtype: to
  nearest, or stochastically (`master_stochastic_rounding`, seeded by
  num_updates and the variable's name, so a resumed run rounds alike).
  Source: Micikevicius et al., "Mixed Precision Training", ICLR 2018,
  section 3.1 (a float32 master copy of the weights).

  Args:
    opt: the BaseOptimizer; update: its `_BeginUpdate` NestedMap.
    var: the bfloat16/float16 variable (or ZeRO-1 shard); grad: its
      gradient (Tensor or tf.IndexedSlices); slots: {name: slot}, with
      MASTER_SLOT.

  Returns:
    The op (None eagerly).
  """
  master = slots[MASTER_SLOT]
  rest = {k: v for k, v in slots.items() if k != MASTER_SLOT}
  grad = tf.cast(tf.convert_to_tensor(grad), MASTER_DTYPE)
  op = opt._ApplyOne(update, master, grad, rest,  # pylint: disable=protected-access
                     decay_name=VariableName(var))
  with tf.control_dependencies([op] if op is not None else []):
    return StoreSlot(var, master.read_value(),
                     opt.params.master_stochastic_rounding, opt.num_updates)


def CheckMasterWeights(opt, has_step):
  """Refuses bad master_weights / master_stochastic_rounding at construction.

  Args:
    opt: the optimizer (its params have master_weights and
      master_stochastic_rounding).
    has_step: True if the optimizer updates through a rule's `_Step`.

  Raises:
    ValueError: either param not a bool; master_weights=True on a class
      without `_Step` (a wrapper); stochastic rounding without
      master_weights.
  """
  p = opt.params
  for key in ('master_weights', 'master_stochastic_rounding'):
    if not isinstance(p.Get(key), bool):
      raise ValueError('%s: %s=%r; expected True or False.' %
                       (checks.Where(opt), key, p.Get(key)))
  if p.master_weights and not has_step:
    raise ValueError(
        '%s: master_weights=True is not supported by %s (no _Step: a wrapper '
        'or a rule that writes its own update); set it on the inner update '
        'rule, or set master_weights=False.' %
        (checks.Where(opt), type(opt).__name__))
  if p.master_stochastic_rounding and not p.master_weights:
    raise ValueError(
        '%s: master_stochastic_rounding=True needs master_weights=True (it '
        'rounds the float32 master to the variable); set both or neither.' %
        checks.Where(opt))


def CheckMastersBound(opt, variables):
  """Refuses master_weights when none of the bound `variables` is 16-bit.

  A float32 variable is its own master: with master_weights=True it is
  updated as without it. If no variable needs a master the setting does
  nothing, which is refused so a run that meant bfloat16 weights (task
  param dtype) is not silently float32. Also refuses stochastic rounding
  onto a float16 variable (implemented for bfloat16 only).

  Raises:
    ValueError: as above, naming the variables and their dtypes.
  """
  p = opt.params
  if not p.master_weights or not variables:
    return
  dtypes = {v.name: v.dtype.name for v in variables}
  if not any(HasMaster(opt, v) for v in variables):
    raise ValueError(
        '%s: master_weights=True but no bound variable is bfloat16 or float16 '
        '(%s): a float32 variable is its own master. Create the weights in '
        'bfloat16 (the task\'s or layer\'s param dtype=tf.bfloat16, with '
        'fprop_dtype=tf.float32) or set master_weights=False.' %
        (checks.Where(opt), dtypes))
  if p.master_stochastic_rounding and any(
      v.dtype == tf.float16 for v in variables):
    raise ValueError(
        '%s: master_stochastic_rounding=True with float16 variables (%s); '
        'stochastic rounding is implemented for bfloat16 only. Use bfloat16 '
        'weights or master_stochastic_rounding=False.' %
        (checks.Where(opt), dtypes))


def CheckSlotDtype(opt, has_step):
  """Refuses a bad slot_dtype / slot_stochastic_rounding at construction.

  Args:
    opt: the optimizer (a layer; its params have slot_dtype and
      slot_stochastic_rounding).
    has_step: True if the optimizer updates through a rule's `_Step`
      (False: a wrapper, or a rule that writes its own update).

  Raises:
    ValueError: slot_dtype not None, one of SLOT_DTYPES or tf.int8; set on
      a class without a `_Step` (`has_step` False); tf.int8 on a rule that
      is not ELEMENTWISE, or slot_block_size not an int > 0; stochastic
      rounding without slot_dtype=tf.bfloat16.
  """
  p = opt.params
  value = p.slot_dtype
  if not isinstance(p.slot_stochastic_rounding, bool):
    raise ValueError(
        '%s: slot_stochastic_rounding=%r; expected True or False.' %
        (checks.Where(opt), p.slot_stochastic_rounding))
  if value is None:
    if p.slot_stochastic_rounding:
      raise ValueError(
          '%s: slot_stochastic_rounding=True needs slot_dtype=tf.bfloat16 '
          '(slots in the variable dtype are not rounded); set both or '
          'neither.' % checks.Where(opt))
    return
  try:
    dtype = tf.as_dtype(value)
  except TypeError:
    dtype = None
  if dtype not in SLOT_DTYPES + (QUANTIZED_DTYPE,):
    raise ValueError(
        '%s: slot_dtype=%r is not a float dtype or tf.int8; use None (the '
        'variable\'s dtype), tf.bfloat16 / tf.float16 / tf.float32 / '
        'tf.float64, or tf.int8 (8-bit blockwise state).' %
        (checks.Where(opt), value))
  if not has_step:
    raise ValueError(
        '%s: slot_dtype=%s is not supported by %s (no _Step: a wrapper or a '
        'rule that writes its own update); set it on an update rule (for a '
        'wrapper: on its inner optimizer), or set slot_dtype=None.' %
        (checks.Where(opt), dtype.name, type(opt).__name__))
  if dtype == QUANTIZED_DTYPE:
    _CheckQuantized(opt)
  if p.slot_stochastic_rounding and dtype != tf.bfloat16:
    raise ValueError(
        '%s: slot_stochastic_rounding=True with slot_dtype=%s; stochastic '
        'rounding is implemented for tf.bfloat16 slots only. Set '
        'slot_dtype=tf.bfloat16 or slot_stochastic_rounding=False.' %
        (checks.Where(opt), dtype.name))


def _CheckQuantized(opt):
  """Refuses slot_dtype=tf.int8 on a rule that is not elementwise or with
  a bad slot_block_size (ValueError, one line naming the fix)."""
  block = opt.params.slot_block_size
  if isinstance(block, bool) or not isinstance(block, int) or block < 1:
    raise ValueError(
        '%s: slot_block_size=%r; expected an int >= 1 (elements per '
        'quantization block of slot_dtype=tf.int8), e.g. 256.' %
        (checks.Where(opt), block))
  if not type(opt).ELEMENTWISE:
    raise ValueError(
        '%s: slot_dtype=int8 (8-bit blockwise state) is not supported by %s: '
        'its step is not elementwise (ELEMENTWISE is False: it reads whole '
        'tensors or sums over variables). Use slot_dtype=tf.bfloat16 or None, or an '
        'elementwise rule (Adam, AdamW, Momentum, Lion, ...).' %
        (checks.Where(opt), type(opt).__name__))


def ReadSlot(slot, dtype):
  """The slot's value upcast (or dequantized) to `dtype` (the variable's),
  for `_Step`."""
  return tf.cast(slot.read_value(), dtype)


def StochasticRoundToBfloat16(x, seed):
  """Rounds float32 `x` to bfloat16 stochastically (unbiased).

  Adds a uniform integer in [0, 2^16) to the float32 bit pattern and clears
  the low 16 bits: the magnitude rounds up with probability equal to the
  dropped fraction of a bfloat16 spacing (sign-magnitude, so the same for
  negative values). Inf stays Inf; values within one spacing of the
  largest finite bfloat16 may round to Inf.

  Args:
    x: float32 tensor (a float64 one is cast to float32 first).
    seed: int32/int64 tensor of shape [2] for tf.random.stateless_uniform
      (the same seed gives the same rounding: replicas stay identical).

  Returns:
    bfloat16 tensor of x's shape.
  """
  x = tf.cast(x, tf.float32)
  noise = tf.random.stateless_uniform(tf.shape(x), seed, minval=0,
                                      maxval=1 << 16, dtype=tf.int32)
  bits = tf.bitwise.bitwise_and(tf.bitcast(x, tf.int32) + noise,
                                tf.constant(-(1 << 16), tf.int32))
  return tf.cast(tf.bitcast(bits, tf.float32), tf.bfloat16)


def StoreSlot(slot, value, stochastic, step):
  """Assigns `value` to `slot`, cast to its dtype (stochastic: see above).

  Args:
    slot: the slot variable.
    value: the new value in the variable's dtype.
    stochastic: bool, slot_stochastic_rounding.
    step: int64 scalar (the optimizer's num_updates): with a per-slot salt
      (crc32 of the slot's name) it seeds the rounding, so a run and its
      resumption from a checkpoint round alike.

  Returns:
    The assign op (None eagerly).
  """
  if isinstance(slot, quantized_state.QuantizedSlot):
    return slot.Store(value)
  if stochastic:
    salt = zlib.crc32(slot.name.encode('utf-8')) & 0x7fffffff
    seed = tf.stack([tf.cast(step, tf.int64), tf.constant(salt, tf.int64)])
    rounded = StochasticRoundToBfloat16(value, seed)
  else:
    rounded = tf.cast(value, slot.dtype)
  op = slot.assign(rounded, read_value=False)
  return None if tf.executing_eagerly() else op


def CreateSlot(name, p, nonnegative, var, init, var_dtype=None):
  """One new slot of `var` (same shape and placement) in `p.slot_dtype`.

  Args:
    name: '<optimizer path>/<variable>/<slot>'.
    p: the optimizer's params (slot_dtype, slot_block_size).
    nonnegative: the rule's NONNEGATIVE_SLOTS (the unsigned map for those).
    var: the variable (or anything with name, dtype and shape).
    init: None for zeros, a number to fill, or a tensor of var's shape.
    var_dtype: the dtype the slot follows instead of var's (a float32
      master's: `master_weights`), or None.

  Returns:
    A tf.Variable of slot_dtype (None: var_dtype or var's dtype), or with
    slot_dtype=tf.int8 a QuantizedSlot of the initial value.
  """
  if IsQuantized(p.slot_dtype):
    return quantized_state.QuantizedSlot(
        name, var.shape, _InitialValue(var, init, tf.float32),
        signed=name.rsplit('/', 1)[-1] not in nonnegative,
        block_size=p.slot_block_size)
  dtype = tf.as_dtype(p.slot_dtype or var_dtype or var.dtype)
  return tf.Variable(_InitialValue(var, init, dtype), name=name,
                     trainable=False)


def _InitialValue(var, init, dtype):
  """A slot's initial value of `var`'s shape in `dtype`."""
  if init is None:
    return tf.zeros(var.shape, dtype)
  if isinstance(init, (int, float)):
    return tf.fill(var.shape, tf.constant(init, dtype))
  return tf.cast(init, dtype)
