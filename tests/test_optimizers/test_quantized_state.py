"""8-bit blockwise optimizer state: slot_dtype=tf.int8 (issue 38 item 2).

Each slot is int8 codes plus a float32 absmax per block of slot_block_size
elements, with bitsandbytes' dynamic map (learner/optimizers/kernels/
quantized_state.py; Dettmers et al., ICLR 2022). Checked here: the maps and
one quantization against recorded bitsandbytes 0.50.2 output
(tests/data/bnb_blockwise_int8.json, tools/record_bnb_blockwise.py) and a
numpy reference of the same map; slot bytes; training next to float32
state; a bit-identical resume; XLA; the refusals. ZeRO-1 and
MirroredStrategy: tests/test_distribution/test_sharded_state.py.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.optimizers import rules as rules_lib
from learner.optimizers.kernels import quantized_state as qs
from learner.optimizers.var_grad import VarGrad
from params import NestedMap

_DATA = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'data', 'bnb_blockwise_int8.json')


def _Recorded():
  with open(_DATA) as f:
    return json.load(f)


def _NumpyQuantize(x, signed, block):
  """The module formula in numpy float64: nearest code by argmin."""
  q = qs.DynamicMap(signed).astype(np.float64)
  n = x.size
  nb = -(-n // block)
  pad = np.zeros(nb * block)
  pad[:n] = x
  absmax = np.abs(pad.reshape(nb, block)).max(axis=1).astype(np.float32)
  scale = np.repeat(np.where(absmax > 0, absmax, 1.0), block)[:n]
  normed = (x.astype(np.float32) / scale.astype(np.float32)).astype(
      np.float64)
  codes = np.abs(normed[:, None] - q[None, :]).argmin(axis=1)
  deq = q[codes].astype(np.float32) * np.repeat(absmax, block)[:n]
  return codes, absmax, deq


@pytest.mark.parametrize('signed', [True, False])
def test_dynamic_maps_are_bitsandbytes_within_one_ulp(signed):
  ref = np.array(_Recorded()['maps']['signed' if signed else 'unsigned'],
                 np.float32)
  ours = qs.DynamicMap(signed)
  assert ours.shape == (256,) and len(set(ours.tolist())) == 256
  assert np.all(np.diff(ours) > 0)
  assert ours[-1] == 1.0 and 0.0 in ours
  # bitsandbytes builds it in float32 (torch.linspace); we round float64.
  np.testing.assert_array_less(np.abs(ours - ref),
                               2.01 * np.spacing(np.abs(ref)) + 1e-30)
  if signed:
    assert ours[0] == pytest.approx(-0.99296874)
  else:
    assert ours[0] == 0.0 and ours[1] == pytest.approx(3.25e-7)


def test_quantization_matches_recorded_bitsandbytes():
  """Codes and absmax equal bitsandbytes' (default backend: the nearest
  code); its native CPU kernel's binary search is never nearer."""
  rec = _Recorded()
  for case in rec['cases']:
    x = np.array(case['x'], np.float32)
    codes, absmax = qs.Quantize(tf.constant(x), case['signed'],
                                case['block_size'])
    codes = codes.numpy().astype(np.int64) + 128
    np.testing.assert_array_equal(codes, case['codes'], err_msg=case['name'])
    np.testing.assert_array_equal(absmax.numpy(),
                                  np.array(case['absmax'], np.float32))
    deq = qs.Dequantize(tf.constant(codes - 128, tf.int8), absmax,
                        case['signed'], case['block_size']).numpy()
    np.testing.assert_allclose(deq, case['dequantized'], rtol=2.5e-7,
                               atol=1e-37)
    q = np.array(rec['maps']['signed' if case['signed'] else 'unsigned'])
    scale = np.repeat(case['absmax'], case['block_size'])[:x.size]
    err = lambda c: np.abs(x / scale - q[np.array(c)])
    assert np.all(err(codes) <= err(case['codes_native']) + 1e-7)
    # ... and farther for 25-75% of these elements (small values mostly).
    assert np.sum(err(codes) < 0.99 * err(case['codes_native'])) > 200


@pytest.mark.parametrize('signed,block,n', [(True, 256, 1000),
                                            (False, 256, 1000),
                                            (True, 64, 300), (False, 7, 50)])
def test_one_requantization_matches_numpy_and_its_error_bound(signed, block,
                                                              n):
  rng = np.random.RandomState(n + block)
  x = rng.normal(size=n) * 10.0 ** rng.uniform(-7, 1, size=n)
  if not signed:
    x = x * x
  x[:block] = 0.0  # An all-zero block: absmax 0, value 0.
  x = x.astype(np.float32)
  codes, absmax = qs.Quantize(tf.constant(x), signed, block)
  deq = qs.Dequantize(codes, absmax, signed, block).numpy()
  ref_codes, ref_absmax, ref_deq = _NumpyQuantize(x, signed, block)
  assert codes.shape == [n] and codes.dtype == tf.int8
  assert absmax.shape == [-(-n // block)]
  np.testing.assert_array_equal(codes.numpy().astype(np.int64) + 128,
                                ref_codes)
  np.testing.assert_array_equal(absmax.numpy(), ref_absmax)
  np.testing.assert_array_equal(deq, ref_deq)
  assert absmax.numpy()[0] == 0 and np.all(deq[:block] == 0)
  # The error of one requantization: at most half the map's largest gap
  # (1/128 signed near 1, 1/256 unsigned) times the block's absmax.
  scale = np.repeat(ref_absmax, block)[:n]
  half_gap = np.diff(qs.DynamicMap(signed)).max() / 2
  assert np.all(np.abs(deq - x) <= half_gap * scale * (1 + 1e-6) + 1e-38)
  # The dynamic map keeps small values that a linear absmax code (steps of
  # absmax / 127) rounds to zero: values 1e-3 to 4e-3 of their block's max.
  small = (np.abs(x) > scale * 1e-3) & (np.abs(x) < scale / 254)
  assert small.sum() >= 3
  assert np.all(deq[small] != 0)
  np.testing.assert_allclose(deq[small], x[small], rtol=0.2)


_SMALL = [(40, 30), (30,)]


def _Vars(shapes=None):
  rng = np.random.RandomState(0)
  return [tf.Variable(rng.normal(size=s).astype(np.float32), name='w%d' % i)
          for i, s in enumerate(shapes or [(300, 200), (200,), (7, 5)])]


def _Grads(variables, step):
  rng = np.random.RandomState(100 + step)
  return NestedMap({'w%d' % i: VarGrad(v, tf.constant(
      rng.normal(size=v.shape).astype(np.float32)))
                    for i, v in enumerate(variables)})


def _SlotVariableBytes(opt):
  """Bytes of the tf.Variables holding the slots (a QuantizedSlot's codes
  and absmax; a float slot itself)."""
  total = 0
  for var in opt.bound_variables.values():
    for slot in opt.GetSlots(var).values():
      held = slot.variables if isinstance(slot, tf.Module) else [slot]
      assert all(isinstance(v, tf.Variable) for v in held) and held
      total += sum(int(v.shape.num_elements()) * v.dtype.size for v in held)
  return total


@pytest.mark.parametrize('p', [optimizers.Adam.Params(),
                               optimizers.Momentum.Params(),
                               optimizers.Lion.Params()])
def test_slot_bytes_are_at_most_027_of_float32(p):
  f32 = p.Copy().Set(name='opt').Instantiate().Bind(_Vars())
  q8 = p.Copy().Set(name='opt', slot_dtype=tf.int8).Instantiate().Bind(
      _Vars())
  ratio = _SlotVariableBytes(q8) / _SlotVariableBytes(f32)
  num_slots = len(f32.GetSlots(f32.bound_variables['w0']))
  # 60235 elements: 60235 codes + 4 * (235 + 1 + 1) bytes of absmax.
  assert _SlotVariableBytes(q8) == num_slots * (60235 + 4 * 237)
  assert ratio <= 0.27
  assert 0.25 < ratio < 0.255
  for v in q8.bound_variables.values():
    for slot in q8.GetSlots(v).values():
      assert slot.codes.dtype == tf.int8 and slot.absmax.dtype == tf.float32


@pytest.mark.parametrize('p,signed', [
    (optimizers.Adam.Params(), {'m': True, 'v': False}),
    (optimizers.Lion.Params(), {'m': True}),
    (optimizers.Momentum.Params(), {'momentum': True}),
    (optimizers.Adagrad.Params(), {'accumulator': False}),
])
def test_second_moments_take_the_unsigned_map(p, signed):
  opt = p.Copy().Set(name='opt', slot_dtype=tf.int8).Instantiate()
  opt.Bind(_Vars())
  slots = opt.GetSlots(opt.bound_variables['w1'])
  assert {k: s.signed for k, s in slots.items()} == signed


_ELEMENTWISE = [r for r in rules_lib.RULES if r.cls.ELEMENTWISE and
                r.cls.EVAL_WEIGHTS_LABEL is None]


@pytest.mark.parametrize('rule', _ELEMENTWISE, ids=lambda r: r.cls.__name__)
def test_every_elementwise_rule_declares_only_nonnegative_slots(rule):
  """NONNEGATIVE_SLOTS (the unsigned map) holds no negative value after
  steps in float32 state; the rule trains with int8 state."""
  variables = _Vars()[1:]
  opt = rule.cls.Params().Set(name='opt').Instantiate().Bind(variables)
  for step in range(3):
    opt.Apply(0.01, _Grads(variables, step))
  names = set(opt.GetSlots(variables[0]))
  assert set(rule.cls.NONNEGATIVE_SLOTS) & names or not any(
      n in names for n in ('v', 'nu', 'accumulator', 'ms', 'accum', 'u'))
  for v in variables:
    for k, s in opt.GetSlots(v).items():
      if k in rule.cls.NONNEGATIVE_SLOTS:
        assert np.all(s.numpy() >= 0), k
  q8_vars = _Vars()[1:]
  q8 = rule.cls.Params().Set(name='opt', slot_dtype=tf.int8).Instantiate()
  q8.Bind(q8_vars)
  for step in range(3):
    q8.Apply(0.01, _Grads(q8_vars, step))
  for a, b in zip(variables, q8_vars):
    np.testing.assert_allclose(b.numpy(), a.numpy(), atol=0.05)
    assert not np.array_equal(b.numpy(), _Vars()[1].numpy())


def _Train(p, steps, jit=False, variables=None, opt=None, shapes=None):
  """`steps` updates under tf.function on g = w - target + noise (the
  gradient of a noisy quadratic; noise seeded by the step)."""
  variables = variables or _Vars(shapes)
  if opt is None:
    opt = p.Copy().Set(name='opt').Instantiate().Bind(variables)
  targets = [tf.constant(np.full(v.shape, 0.5, np.float32))
             for v in variables]

  @tf.function(jit_compile=jit)
  def Step(noises):
    opt.Apply(tf.constant(0.01), NestedMap({
        'w%d' % i: VarGrad(v, v - t + n)
        for i, (v, t, n) in enumerate(zip(variables, targets, noises))}))

  first = int(opt.num_updates.numpy())
  for step in range(first, first + steps):
    rng = np.random.RandomState(100 + step)
    Step([tf.constant(rng.normal(size=v.shape).astype(np.float32))
          for v in variables])
  return variables, opt


def _State(variables, opt):
  return [v.numpy() for v in variables] + [
      v.numpy() for v in opt.variables]


@pytest.mark.parametrize('p', [
    optimizers.Adam.Params().Set(slot_dtype=tf.int8),
    optimizers.Momentum.Params().Set(slot_dtype=tf.int8, slot_block_size=64),
])
def test_resume_from_a_checkpoint_is_bit_identical(p, tmp_path):
  uninterrupted = _State(*_Train(p, 6, shapes=_SMALL))
  variables, opt = _Train(p, 3, shapes=_SMALL)
  path = tf.train.Checkpoint(opt=opt, w=variables).save(
      str(tmp_path / 'ckpt'))
  keys = [k for k, _ in tf.train.list_variables(path)]
  assert any(k.endswith('/m/codes/.ATTRIBUTES/VARIABLE_VALUE') or
             k.endswith('/momentum/codes/.ATTRIBUTES/VARIABLE_VALUE')
             for k in keys)
  assert any('/absmax/' in k for k in keys)
  fresh = [tf.Variable(tf.zeros_like(v), name=v.name.split(':')[0])
           for v in variables]
  opt2 = p.Copy().Set(name='opt').Instantiate().Bind(fresh)
  tf.train.Checkpoint(opt=opt2, w=fresh).restore(path).assert_consumed()
  resumed = _State(*_Train(p, 3, variables=fresh, opt=opt2))
  assert len(resumed) == len(uninterrupted)
  for a, b in zip(resumed, uninterrupted):
    np.testing.assert_array_equal(a, b)


def test_xla_gives_the_tf_function_numbers():
  p = optimizers.AdamW.Params().Set(slot_dtype=tf.int8,
                                    decoupled_weight_decay=0.1)
  plain = _State(*_Train(p, 4, shapes=_SMALL))
  xla = _State(*_Train(p, 4, jit=True, shapes=_SMALL))
  for a, b in zip(plain, xla):
    if a.dtype == np.int8:  # A code may flip at a midpoint (1 ulp apart).
      assert np.mean(a != b) < 1e-3
    else:
      np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('p', [optimizers.Adam.Params(),
                               optimizers.AdamW.Params().Set(
                                   decoupled_weight_decay=0.1),
                               optimizers.Momentum.Params(),
                               optimizers.Lion.Params()])
def test_int8_state_trains_like_float32_state(p):
  """60 steps on a noisy quadratic: the weights of int8 state stay within
  5% of how far float32 state moved them (Lion: 10%, a sign flips when m
  is near 0), and nearer the target than at the start."""
  start = [v.numpy() for v in _Vars(_SMALL)]
  f32, _ = _Train(p, 60, shapes=_SMALL)
  q8, opt = _Train(p.Copy().Set(slot_dtype=tf.int8, slot_block_size=64), 60,
                   shapes=_SMALL)
  for s, a, b in zip(start, f32, q8):
    moved = np.abs(a.numpy() - s).max()
    assert moved > 0.1
    dev = np.abs(b.numpy() - a.numpy()).max()
    assert 0 < dev <= (0.1 if p.cls is optimizers.Lion else 0.05) * moved
    assert np.abs(b.numpy() - 0.5).mean() < np.abs(s - 0.5).mean()
  assert opt.FusedApplyReason([VarGrad(v, tf.zeros_like(v)) for v in q8]) == (
      'slot_dtype=int8 (8-bit blockwise state: the fused kernels hold slots '
      'in the variable dtype, not codes and scales)')


def test_sparse_gradient_is_densified():
  dense_vars, sparse_vars = _Vars()[2:], _Vars()[2:]
  p = optimizers.Adam.Params().Set(name='opt', slot_dtype=tf.int8,
                                   lazy_sparse_updates=True)
  dense = p.Instantiate().Bind(dense_vars)
  sparse = p.Instantiate().Bind(sparse_vars)
  g = np.zeros([7, 5], np.float32)
  g[[1, 4]] = np.arange(10, dtype=np.float32).reshape(2, 5) - 4.5
  dense.Apply(0.1, NestedMap(w2=VarGrad(dense_vars[0], tf.constant(g))))
  sparse.Apply(0.1, NestedMap(w2=VarGrad(sparse_vars[0], tf.IndexedSlices(
      tf.constant(g[[1, 4]]), tf.constant([1, 4]), tf.constant([7, 5])))))
  np.testing.assert_array_equal(sparse_vars[0].numpy(), dense_vars[0].numpy())
  assert np.abs(sparse_vars[0].numpy() - _Vars()[2].numpy()).max() > 0.09


@pytest.mark.parametrize('p,kw,words', [
    (optimizers.Adam.Params(), dict(slot_block_size=0),
     'slot_block_size=0; expected an int >= 1'),
    (optimizers.Adam.Params(), dict(slot_block_size=True),
     'slot_block_size=True; expected an int >= 1'),
    (optimizers.Adam.Params(), dict(slot_block_size=2.5),
     'slot_block_size=2.5; expected an int >= 1'),
    (optimizers.Adam.Params(), dict(slot_stochastic_rounding=True),
     'stochastic rounding is implemented for tf.bfloat16 slots only'),
    (optimizers.Adafactor.Params(), {},
     'slot_dtype=int8 .8-bit blockwise state. is not supported by Adafactor'),
    (optimizers.LAMB.Params(), {},
     'slot_dtype=int8 .8-bit blockwise state. is not supported by LAMB'),
    (optimizers.Muon.Params(), {},
     'slot_dtype=int8 .8-bit blockwise state. is not supported by Muon'),
    (optimizers.Ema.Params().Set(optimizer=optimizers.Adam.Params()), {},
     'slot_dtype=int8 is not supported by Ema'),
    (optimizers.ScheduleFreeAdamW.Params(), {},
     'slot_dtype=int8 is not supported by ScheduleFreeAdamW'),
])
def test_bad_int8_settings_are_refused_in_one_line(p, kw, words):
  with pytest.raises(ValueError, match=words) as e:
    p.Copy().Set(name='opt', slot_dtype=tf.int8, **kw).Instantiate()
  assert '\n' not in str(e.value)


def test_int8_params_round_trip_as_text():
  p = optimizers.Adam.Params().Set(slot_dtype=tf.int8, slot_block_size=128)
  q = optimizers.Adam.Params()
  q.FromText(p.ToText())
  assert q.slot_dtype == tf.int8 and q.slot_block_size == 128
  assert "slot_dtype : DType('int8')" in p.ToText()
