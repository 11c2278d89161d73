"""The Learner's step under XLA (jit_compile=True): same numbers, no copies.

Issue 16.4: under jit_compile the step runs the pure-TF path. It must give
the numbers of the plain tf.function step and of numpy, skip a non-finite
step the same way, and add no full-size copy of a weight to the compiled
step (a metric's read of the weights still pending while the update writes
them in place makes XLA copy every weight first: a read and a write of all
of them per step).
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.learner import Learner
from learner.optimizers import kernels
from learner.optimizers.wrappers import accumulation
from params import NestedMap
from schedules import ConstantOne

# Shapes no other array of the step has, so the HLO check can find them.
_SHAPES = [(37, 53), (53,)]
_LR = 0.1
_CLIP = 1.0
_STEPS = 3


def _Values():
  rng = np.random.RandomState(0)
  weights = [(0.5 * rng.randn(*s)).astype(np.float32) for s in _SHAPES]
  grads = [rng.randn(*s).astype(np.float32) for s in _SHAPES]
  return weights, grads


class _Step(object):
  """A Learner over two variables; the loss sum(g * w) has the gradient g,
  held in variables (so a test can make it NaN between steps)."""

  def __init__(self, optimizer_params, jit_compile, **learner_kw):
    weights, grads = _Values()
    self.vars = [tf.Variable(w, name='w%d' % i)
                 for i, w in enumerate(weights)]
    self.grads = [tf.Variable(g, trainable=False) for g in grads]
    self.vmap = NestedMap(w0=self.vars[0], w1=self.vars[1])
    self.learner = Learner.Params().Set(
        name='loss', learning_rate=_LR, clip_gradient_norm_to_value=_CLIP,
        optimizer=optimizer_params, lr_schedule=ConstantOne.Params(),
        **learner_kw).Instantiate()
    self.learner.Bind(self.vmap)
    self.fn = tf.function(self._Traced, jit_compile=jit_compile)

  def _Traced(self):
    loss = tf.add_n([tf.reduce_sum(tf.stop_gradient(g.read_value()) * v)
                     for v, g in zip(self.vars, self.grads)])
    _, _, metrics = self.learner.Apply({'loss': (loss, tf.constant(1.0))},
                                       self.vmap)
    return {k: v for k, (v, _) in metrics.items()}

  def __call__(self):
    with kernels.Disabled():
      return {k: float(v) for k, v in self.fn().items()}

  def Weights(self):
    return [v.numpy() for v in self.vars]

  def Slots(self):
    opt = self.learner.optimizer
    return [s.numpy() for v in self.vars
            for _, s in sorted(opt.GetSlots(v).items())]

  def OptimizedHlo(self):
    with kernels.Disabled():
      return self.fn.experimental_get_compiler_ir()(stage='optimized_hlo')


def _Norm(arrays):
  return np.sqrt(sum(np.sum(np.square(a.astype(np.float64)))
                     for a in arrays))


def _Reference(optimizer, steps):
  """numpy weights and var_norm/all per step; the clip scale c is fixed
  (the gradient is): Momentum v = 0.9 v + c g, w -= lr v (TF1 form); Adam
  in TF's form with beta1 0.9, beta2 0.999, epsilon 1e-6."""
  weights, grads = _Values()
  w = [x.astype(np.float64) for x in weights]
  g = [x.astype(np.float64) * (_CLIP / max(_Norm(grads), _CLIP))
       for x in grads]
  s1 = [np.zeros_like(x) for x in w]
  s2 = [np.zeros_like(x) for x in w]
  var_norms = []
  for t in range(1, steps + 1):
    var_norms.append(_Norm(w))
    for i in range(len(w)):
      if optimizer == 'momentum':
        s1[i] = 0.9 * s1[i] + g[i]
        w[i] = w[i] - _LR * s1[i]
      else:
        s1[i] = 0.9 * s1[i] + 0.1 * g[i]
        s2[i] = 0.999 * s2[i] + 0.001 * g[i] * g[i]
        lr_t = _LR * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        w[i] = w[i] - lr_t * s1[i] / (np.sqrt(s2[i]) + 1e-6)
  return w, var_norms


_OPTIMIZERS = {
    'momentum': lambda: optimizers.Momentum.Params().Set(alpha=0.9),
    'adam': lambda: optimizers.Adam.Params(),
}


@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
def test_xla_step_gives_the_numbers_of_the_plain_step_and_of_numpy(optimizer):
  xla = _Step(_OPTIMIZERS[optimizer](), jit_compile=True)
  plain = _Step(_OPTIMIZERS[optimizer](), jit_compile=False)
  want_w, want_var_norms = _Reference(optimizer, _STEPS)
  for t in range(_STEPS):
    mx, mp = xla(), plain()
    assert mx.keys() == mp.keys()
    for k in mx:
      np.testing.assert_allclose(mx[k], mp[k], rtol=1e-6, err_msg=k)
    np.testing.assert_allclose(mx['var_norm/all'], want_var_norms[t],
                               rtol=1e-6)
    np.testing.assert_allclose(mx['grad_norm/all'], _Norm(_Values()[1]),
                               rtol=1e-6)
  for a, b, want in zip(xla.Weights(), plain.Weights(), want_w):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
  for a, b in zip(xla.Slots(), plain.Slots()):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
def test_xla_step_skips_a_nan_gradient_and_still_reports_the_weights(
    optimizer):
  step = _Step(_OPTIMIZERS[optimizer](), jit_compile=True,
               l2_regularizer_weight=0.0)
  step()
  before_w, before_s = step.Weights(), step.Slots()
  step.grads[1].assign(np.full(_SHAPES[1], np.nan, np.float32))
  m = step()
  assert m['has_nan_or_inf'] == 1.0
  assert m['num_skipped_steps'] == 1.0 and m['num_updates'] == 1.0
  np.testing.assert_allclose(m['var_norm/all'], _Norm(before_w), rtol=1e-6)
  assert m['l2_loss'] == 0.0
  for a, b in zip(step.Weights() + step.Slots(), before_w + before_s):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
@pytest.mark.parametrize('kw', [
    {}, {'l2_regularizer_weight': 1e-4, 'l1_regularizer_weight': 1e-5},
    {'per_variable_norm_metrics': True}])
def test_xla_step_with_its_metrics_copies_no_weight(optimizer, kw):
  # The metrics read the weights (var_norm/*, l1/l2_loss); they go through
  # the update's cond, so XLA needs no copy of a weight to write it in place.
  step = _Step(_OPTIMIZERS[optimizer](), jit_compile=True, **kw)
  hlo = step.OptimizedHlo()
  shapes = '|'.join(r'f32\[%s\]' % ','.join(str(d) for d in s)
                    for s in _SHAPES)
  copies = re.findall(r'= (?:%s)\S* copy\(' % shapes, hlo)
  assert not copies, copies
  assert re.search(r'conditional\(', hlo)  # The step still skips by a cond.


@pytest.mark.parametrize('shape', [(5,), (32,), (33,), (37, 53), (4, 8, 32)])
@pytest.mark.parametrize('square', [True, False])
def test_block_sum_under_xla_matches_numpy(shape, square):
  # kernels.BlockSum is what the norms and l1/l2_loss use under XLA: the
  # same value as L2Loss / sum|x| (float64 numpy), to float32 rounding.
  x = np.random.RandomState(1).randn(*shape).astype(np.float32)
  fn = tf.function(lambda t: kernels.BlockSum(t, square=square),
                   jit_compile=True)
  x64 = x.astype(np.float64)
  want = 0.5 * np.sum(x64 * x64) if square else np.sum(np.abs(x64))
  np.testing.assert_allclose(float(fn(tf.constant(x))), want, rtol=1e-6)
  if square:
    np.testing.assert_allclose(float(fn(tf.constant(x))),
                               float(tf.nn.l2_loss(x)), rtol=1e-6)


def _EntryHlo(fn, shape):
  hlo = tf.function(fn, jit_compile=True).experimental_get_compiler_ir(
      tf.TensorSpec(shape, tf.float32))(stage='optimized_hlo')
  return hlo, hlo[hlo.index('ENTRY'):]


def _WindowedShapes(hlo):
  """The shapes of the arrays a reduce-window reads, in HLO text."""
  shapes = dict(re.findall(r'(%[\w.\-]+) = (f32\[[\d,]*\])', hlo))
  return [shapes.get(x) for x in re.findall(r'reduce-window\((%[\w.\-]+)',
                                            hlo)]


def test_block_sum_reads_its_input_once_under_xla():
  # L2Loss under XLA:CPU is a multiply written to a full-size temporary,
  # then a reduce-window of it; BlockSum's first stage is one fusion of the
  # square and a reduce over 32 rows of [32, 32] blocks, so no full-size
  # array is made and no reduce-window reads one.
  shape = (370, 640)
  full = r'f32\[(?:370,640|236800)\]'
  made = r'= %s\S* (?:fusion|multiply)\(' % full
  hlo, entry = _EntryHlo(lambda t: tf.nn.l2_loss(t), shape)  # pylint: disable=unnecessary-lambda
  assert re.search(made, entry)  # The cause.
  assert 'f32[370,640]' in _WindowedShapes(hlo)
  hlo, entry = _EntryHlo(lambda t: kernels.BlockSum(t), shape)  # pylint: disable=unnecessary-lambda
  assert not re.search(made, entry)
  assert _WindowedShapes(hlo) == ['f32[232,32]']  # Only the block sums.


def _AccumulationStep(optimizer):
  return _Step(accumulation.GradientAccumulation.Params().Set(
      optimizer=_OPTIMIZERS[optimizer](), num_batches=2), jit_compile=True)


@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
def test_xla_accumulation_micro_step_gives_its_metrics(optimizer):
  # Both branches of the micro-step under XLA: the accumulate-only one
  # reports zeros, the applying one the window's numbers (the mean
  # gradient is the fixed one, so its norm is numpy's).
  step = _AccumulationStep(optimizer)
  weights = _Values()[0]
  accumulate, apply = step(), step()
  assert accumulate['num_updates'] == 0.0 and accumulate['grad_norm/all'] == 0
  assert apply['num_updates'] == 1.0
  np.testing.assert_allclose(apply['grad_norm/all'], _Norm(_Values()[1]),
                             rtol=1e-6)
  np.testing.assert_allclose(apply['var_norm/all'], _Norm(weights),
                             rtol=1e-6)


def _Computations(hlo):
  """{name: [instruction lines]} of an HLO module's text."""
  comps = {}
  for block in re.split(r'\n(?=\S)', hlo):
    m = re.match(r'(?:ENTRY )?(%[\w.\-]+) ', block)
    if m:
      comps[m.group(1)] = [l.strip() for l in block.split('\n')[1:]]
  return comps


def _Defs(lines):
  return {l.split(' = ')[0].replace('ROOT ', ''): l for l in lines
          if ' = ' in l}


def _CopiedValues(hlo, shapes):
  """What each full-size copy in a conditional's branch copies.

  A copy in a branch computation of a value the branch got as its
  parameter (get-tuple-element index i) is traced to element i of the
  operand the caller passed to that branch: 'parameter' (a variable of the
  step: a weight, an optimizer slot or an accumulator), 'select' (a value
  a select made before the cond, as an accumulator's new sum) or that
  value's line. Copies outside a branch are listed as 'outside <line>'.
  """
  comps = _Computations(hlo)
  callers = {}  # branch name -> (caller name, conditional line, position)
  for name, lines in comps.items():
    for l in lines:
      if 'conditional(' not in l:
        continue
      branches = re.search(r'branch_computations=\{([^}]*)\}', l)
      names = (branches.group(1).split(', ') if branches else
               [re.search(r'%s=(%%[\w.\-]+)' % k, l).group(1)
                for k in ('true_computation', 'false_computation')])
      for b, branch in enumerate(names):
        callers[branch] = (name, l, b)
  found = []
  for name, lines in comps.items():
    defs = _Defs(lines)
    for l in lines:
      if not re.search(r'= (?:%s)\S* copy\(' % shapes, l):
        continue
      src = defs.get(re.search(r'copy\((%[\w.\-]+)\)', l).group(1), '')
      gte = re.search(r'get-tuple-element\((%[\w.\-]+)\), index=(\d+)',
                      src)
      if name not in callers or not gte:
        found.append('outside ' + l)
        continue
      caller, cond, b = callers[name]
      operand = re.search(r'conditional\(([^)]*)\)', cond).group(1).split(
          ', ')[b + 1]
      caller_defs = _Defs(comps[caller])
      element = re.search(r'tuple\(([^)]*)\)', caller_defs[operand]).group(
          1).split(', ')[int(gte.group(2))]
      value = caller_defs[re.sub(r'/\*.*\*/', '', element)]
      found.append('parameter' if ' parameter(' in value else
                   'select' if 'op_type="SelectV2"' in value else value)
  return found


@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
def test_xla_accumulation_micro_step_copies_no_weight_slot_or_accumulator(
    optimizer):
  # Issue 27.1. As a tf.cond, the accumulate-only branch copied every
  # weight, slot and accumulator (the values it passes through) on every
  # micro-step. Now CondAsCall is a switch_case with that branch first, and
  # the accumulators are written after the cond (one select), not in it.
  step = _AccumulationStep(optimizer)
  hlo = step.OptimizedHlo()
  shapes = '|'.join(r'f32\[%s\]' % ','.join(str(d) for d in s)
                    for s in _SHAPES)
  assert len(re.findall(r'conditional\(', hlo)) >= 1  # The cond remains.
  copied = _CopiedValues(hlo, shapes)
  assert not copied, copied


@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
def test_xla_accumulation_equals_the_plain_step_bit_for_bit_with_a_drop(
    optimizer):
  # Two windows of 2 plus one micro-step, the third micro-batch NaN (it is
  # dropped): after every micro-step the accumulators and counters under
  # XLA equal the plain tf.function step's bit for bit (both on the pure-TF
  # path; XLA adds by a select after the cond, the plain step by
  # ResourceApplyGradientDescent in a cond), and the weights and slots
  # agree as in the test above (XLA's update rounds differently).
  xla, plain = _AccumulationStep(optimizer), _Step(
      accumulation.GradientAccumulation.Params().Set(
          optimizer=_OPTIMIZERS[optimizer](), num_batches=2),
      jit_compile=False)
  nan = np.full(_SHAPES[0], np.nan, np.float32)
  for t in range(5):
    for step in (xla, plain):
      step.grads[0].assign(nan if t == 2 else _Values()[1][0])
      step()
    for a, b in zip(xla.Weights() + xla.Slots(), plain.Weights() +
                    plain.Slots()):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    opts = [s.learner.optimizer for s in (xla, plain)]
    for v0, v1 in zip(xla.vars, plain.vars):
      np.testing.assert_array_equal(opts[0].GetAccumulator(v0).numpy(),
                                    opts[1].GetAccumulator(v1).numpy())
    for name in ('micro_step', 'num_dropped_microbatches',
                 'accumulated_weight', 'num_updates'):
      assert (getattr(opts[0], name).numpy() ==
              getattr(opts[1], name).numpy()), (t, name)
  assert int(opts[0].num_dropped_microbatches.numpy()) == 1
  assert int(opts[0].num_updates.numpy()) == 2
  assert not np.any(opts[0].GetAccumulator(xla.vars[0]).numpy() == 0)
