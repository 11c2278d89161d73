"""8-bit blockwise optimizer state: each slot as int8 codes + a scale per block.

`BaseOptimizer.slot_dtype=tf.int8` (with `slot_block_size`, B = 256 by
default) stores every slot of a rule x (n elements, flattened, the last
block zero-padded to a multiple of B) as

  N_b = max_{i in b} |x_i|                        (float32 `absmax`, [ceil(n/B)])
  c_i = argmin_j |Q_j - x_i / N_b|                (int8 `codes`, [n]: j - 128)
  x~_i = Q[c_i] * N_b                             (the value `_Step` reads)

with Q the 256 sorted values of the dynamic (tree) quantization map:
signed for momenta (values in [-0.993, 1]), unsigned for slots that are
never negative (second moments, accumulators: the rule's
`NONNEGATIVE_SLOTS`; values in [0, 1], twice the resolution near 0). The
map spends its bits like a float: 7 decades of exponent (1e-6 .. 1)
with fewer fraction bits at small magnitudes, so small second moments are
kept where a linear absmax code (steps of N_b / 127) rounds them to 0.
Each update dequantizes the slot, runs the rule's `_Step` in the
variable's dtype and requantizes the new slot (nearest code, ties to the
larger one): per element 1 byte plus 4 / B bytes of scale (1.016 bytes
at B = 256, 0.254x of float32).

Source: Dettmers, Lewis, Shleifer & Zettlemoyer, "8-bit Optimizers via
Block-wise Quantization", ICLR 2022; the map is bitsandbytes'
`functional.create_dynamic_map(signed)` (max_exponent_bits 7, 8 bits),
computed here in float64 and rounded to float32 (within one float32 ulp
of bitsandbytes', which builds it with torch.linspace in float32; checked
against recorded bitsandbytes 0.50.2 output in
tests/test_optimizers/test_quantized_state.py).

The nearest code is found by a branch-free binary search over the
midpoints between neighbouring codes (8 gathers, O(n) memory: no [n, 256]
distance matrix), which compiles under XLA.
"""

import math

import numpy as np
import tensorflow as tf

DEFAULT_BLOCK_SIZE = 256


def DynamicMap(signed):
  """bitsandbytes' dynamic quantization map: 256 sorted float32 values.

  Args:
    signed: True for the signed map (values -0.99297 .. 1.0, 0 included),
      False for the unsigned one (0 .. 1.0).

  Returns:
    numpy float32 array of shape [256], ascending.
  """
  data = []
  for i in range(7):  # max_exponent_bits 7; non-sign bits 7.
    items = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
    bounds = np.linspace(0.1, 1.0, items)
    means = (bounds[:-1] + bounds[1:]) / 2.0
    values = (10.0 ** (i - 6)) * means
    data.extend(values.tolist())
    if signed:
      data.extend((-values).tolist())
  data.extend([0.0, 1.0])
  assert len(data) == 256
  return np.array(sorted(data), np.float64).astype(np.float32)


def _Thresholds(signed):
  """[256] float32: -inf, then the midpoints between neighbouring codes."""
  q = DynamicMap(signed).astype(np.float64)
  mids = ((q[:-1] + q[1:]) / 2.0).astype(np.float32)
  return np.concatenate([[-np.inf], mids]).astype(np.float32)


def NumBlocks(num_elements, block_size):
  """ceil(num_elements / block_size), at least 1 (Python int)."""
  return max(1, int(math.ceil(num_elements / float(block_size))))


def Quantize(x, signed, block_size):
  """(codes, absmax) of `x` (module formula).

  Args:
    x: float tensor of any shape (n elements, n static); cast to float32.
    signed: the map (True: signed, False: unsigned; negative values then
      get code 0, the value 0).
    block_size: B, a Python int > 0.

  Returns:
    codes: int8 tensor [n] (index into the sorted map, minus 128);
    absmax: float32 tensor [ceil(n / B)] (0 for an all-zero block).
  """
  flat = tf.reshape(tf.cast(x, tf.float32), [-1])
  n = int(flat.shape[0])
  nb = NumBlocks(n, block_size)
  blocks = tf.reshape(tf.pad(flat, [[0, nb * block_size - n]]),
                      [nb, block_size])
  absmax = tf.reduce_max(tf.abs(blocks), axis=1)
  safe = tf.where(absmax > 0, absmax, tf.ones_like(absmax))
  normed = tf.reshape(blocks / safe[:, None], [-1])[:n]
  thresholds = tf.constant(_Thresholds(signed))
  index = tf.zeros([n], tf.int32)
  for bit in (128, 64, 32, 16, 8, 4, 2, 1):
    cand = index + bit
    index = tf.where(normed >= tf.gather(thresholds, cand), cand, index)
  return tf.cast(index - 128, tf.int8), absmax


def Dequantize(codes, absmax, signed, block_size, shape=None):
  """x~ = Q[codes + 128] * absmax of its block (float32).

  Args:
    codes: int8 tensor [n]; absmax: float32 tensor [ceil(n / B)].
    signed, block_size: as given to `Quantize`.
    shape: the shape to return (default [n]).

  Returns:
    float32 tensor of `shape`.
  """
  n = int(codes.shape[0])
  nb = int(absmax.shape[0])
  values = tf.gather(tf.constant(DynamicMap(signed)),
                     tf.cast(codes, tf.int32) + 128)
  blocks = tf.reshape(tf.pad(values, [[0, nb * block_size - n]]),
                      [nb, block_size]) * absmax[:, None]
  out = tf.reshape(blocks, [-1])[:n]
  return out if shape is None else tf.reshape(out, shape)


def DequantizeScaled(codes, scales, signed):
  """Q[codes + 128] * scales, elementwise (float32; codes int8 [k],
  scales float32 [k], each element's block absmax)."""
  return tf.gather(tf.constant(DynamicMap(signed)),
                   tf.cast(codes, tf.int32) + 128) * scales


class QuantizedSlot(tf.Module):
  """One slot stored as int8 `codes` [n] and float32 `absmax` [ceil(n/B)].

  Both are tf.Variables (checkpointed under `<slot>/codes` and
  `<slot>/absmax`; a restore is bit-identical). What an update reads of a
  slot: `read_value()` (the dequantized float32 value of the slot's
  shape), `shape`, `dtype` (float32, the dtype of that value), `name`.

  Args:
    name: the slot's name ('<optimizer path>/<variable>/<slot>').
    shape: the slot's (the variable's) TensorShape, fully defined.
    initial: the initial value (a tensor of `shape`), quantized.
    signed: the map (False for slots that are never negative).
    block_size: B.
  """

  def __init__(self, name, shape, initial, signed, block_size):
    super().__init__(name='quantized_slot')
    self.slot_name = name
    self.shape = tf.TensorShape(shape)
    self.signed = bool(signed)
    self.block_size = int(block_size)
    codes, absmax = Quantize(initial, self.signed, self.block_size)
    self.codes = tf.Variable(codes, name=name + '/codes', trainable=False)
    self.absmax = tf.Variable(absmax, name=name + '/absmax', trainable=False)

  @property
  def name(self):
    return self.slot_name

  @property
  def dtype(self):
    return tf.float32

  def read_value(self):
    """The dequantized slot: float32 tensor of `shape`."""
    return Dequantize(self.codes.read_value(), self.absmax.read_value(),
                      self.signed, self.block_size, self.shape)

  def Store(self, value):
    """Requantizes `value` (the slot's shape) into codes and absmax.

    Returns:
      The group of both assigns (None eagerly).
    """
    codes, absmax = Quantize(value, self.signed, self.block_size)
    ops = [self.codes.assign(codes, read_value=False),
           self.absmax.assign(absmax, read_value=False)]
    return None if tf.executing_eagerly() else tf.group(ops)

  def NumBytes(self):
    """Bytes held: n (codes) + 4 ceil(n / B) (absmax)."""
    return QuantizedBytes(int(self.codes.shape.num_elements()),
                          self.block_size)


def QuantizedBytes(num_elements, block_size):
  """Bytes of a slot of `num_elements` in 8-bit blockwise form: one int8
  code per element and one float32 absmax per block."""
  return num_elements + 4 * NumBlocks(num_elements, block_size)


def SlotBytes(slot):
  """Bytes of one slot: a QuantizedSlot's codes and scales, or a
  variable's elements times its dtype size."""
  if isinstance(slot, QuantizedSlot):
    return slot.NumBytes()
  return int(slot.shape.num_elements()) * slot.dtype.size
