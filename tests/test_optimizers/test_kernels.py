"""The fused multi-tensor kernels (issue 16) against the pure-TF path.

Every test runs the same problem twice: once as traced normally (the fused
ops, asserted present in the graph so no test passes vacuously) and once
under `kernels.Disabled()` (the pure-TF path), and compares the results
bitwise (np.testing.assert_array_equal): the kernels follow TF's own order
of operations. Norms are sums in another order (float64), so they are
checked against numpy in float64 instead.
"""

import multiprocessing
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner import gradient_pipeline as pipeline
from learner import optimizers
from learner.learner import Learner
from learner.optimizers import kernels
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.optimizers.kernels import loader
from learner.optimizers.var_grad import VarGrad
from params import NestedMap

@pytest.fixture(autouse=True)
def fused_on(monkeypatch):
  """The default (loader.Enabled with the switch unset): the fused path on."""
  monkeypatch.delenv(loader.ENV_SWITCH, raising=False)


def test_fused_path_is_on_unless_switched_off(monkeypatch):
  assert loader.Enabled()
  for off in ('0', 'false', 'OFF', ' 0 '):
    monkeypatch.setenv(loader.ENV_SWITCH, off)
    assert not loader.Enabled(), off
    assert 'switched off' in kernels.Unsupported([tf.Variable(1.0)],
                                                 [tf.constant(1.0)])
    with kernels.Active():
      assert loader.Enabled()
    assert not loader.Enabled()
  for on in ('1', 'true', 'on', 'yes'):
    monkeypatch.setenv(loader.ENV_SWITCH, on)
    assert loader.Enabled(), on
  monkeypatch.delenv(loader.ENV_SWITCH)
  with kernels.Disabled():
    assert not loader.Enabled()
  assert loader.Enabled()


SHAPES = {'w': (64, 33), 'b': (33,), 'k': (3, 3, 4, 8), 'big': (40000,)}


def _Values(seed, scale=1.0):
  rng = np.random.default_rng(seed)
  return {k: (rng.standard_normal(s) * scale).astype(np.float32)
          for k, s in SHAPES.items()}


def _GradSteps(num):
  return [_Values(100 + i) for i in range(num)]


def _Ops(fn, *args):
  """Op types in the graph of tf.function `fn` traced with `args`."""
  graph = fn.get_concrete_function(*args).graph
  types = set()
  for op in graph.get_operations():
    types.add(op.type)
  for f in graph.as_graph_def().library.function:
    types.update(n.op for n in f.node_def)
  return types


def _RunOptimizer(opt_params, grads_per_step, scales, fused, sparse=False):
  """Applies `grads_per_step` with ApplyScaled in a tf.function.

  Returns ({name: weights}, {slot name: value}, op types of the graph).
  """
  with tf.name_scope('fused' if fused else 'plain'):
    variables = {k: tf.Variable(v, name=k) for k, v in _Values(0).items()}
  opt = opt_params.Copy().Set(name='opt').Instantiate()
  opt.Bind(list(variables.values()))

  def _Grad(k, g):
    if sparse and k == 'w':
      rows = tf.constant([0, 5, 5, 7])
      return tf.IndexedSlices(tf.gather(g, rows), rows, g.shape)
    return g

  @tf.function
  def Step(grads, scale):
    vgs = NestedMap({k: VarGrad(variables[k], _Grad(k, grads[k]))
                     for k in SHAPES})
    if scale is None:
      opt.Apply(tf.constant(0.05), vgs)
    else:
      opt.ApplyScaled(tf.constant(0.05), vgs, scale)

  def _All():
    grads0 = {k: tf.constant(v) for k, v in grads_per_step[0].items()}
    ops = _Ops(Step, grads0, scales[0])
    for g, s in zip(grads_per_step, scales):
      Step({k: tf.constant(v) for k, v in g.items()}, s)
    return ops

  if fused:
    ops = _All()
  else:
    with kernels.Disabled():
      ops = _All()
  slots = {'%s/%s' % (k, n): s.numpy() for k, v in variables.items()
           for n, s in opt.GetSlots(v).items()}
  return {k: v.numpy() for k, v in variables.items()}, slots, ops


def _AssertSame(a, b):
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_fused_path_is_active_on_this_machine():
  # g++ and the TF headers are here: the library builds (or is cached) and
  # loads, and nothing sends the step to the pure-TF path.
  assert kernels.Unavailable() is None
  assert kernels.Library() is not None
  assert kernels.Unsupported([tf.Variable(1.0)], [tf.constant(1.0)]) is None
  with kernels.Disabled():
    assert 'TF_LEARNER_FUSED_KERNELS=0' in kernels.Unsupported()
  assert loader.CachePath().exists()


def test_sum_squares_matches_numpy_float64_and_flags_non_finite():
  vals = _Values(3, scale=3.0)
  half, total, finite = kernels.HalfSumSquares(
      [tf.constant(v) for v in vals.values()] + [None])
  expected = [0.5 * np.sum(v.astype(np.float64) ** 2) for v in vals.values()]
  np.testing.assert_allclose([float(h) for h in half[:-1]], expected,
                             rtol=1e-6)
  assert float(half[-1]) == 0.0
  np.testing.assert_allclose(float(total), sum(expected), rtol=1e-6)
  assert bool(finite)
  for bad in (np.nan, np.inf, 3e19):  # 3e19^2 overflows float32, as in TF.
    x = vals['big'].copy()
    x[12345] = bad
    _, _, finite = kernels.HalfSumSquares([tf.constant(vals['w']),
                                           tf.constant(x)])
    plain = tf.math.is_finite(tf.add_n([tf.nn.l2_loss(vals['w']),
                                        tf.nn.l2_loss(x)]))
    assert not bool(finite) and not bool(plain)


def test_norms_stage_uses_one_fused_op_and_matches_numpy():
  vals = _Values(4)
  variables = [tf.Variable(v) for v in vals.values()]

  @tf.function
  def F(grads):
    norms, metrics = pipeline.Norms(variables, grads, tf.constant(0.5),
                                    True, False)
    return norms.norm, metrics[pipeline.VAR_NORM]

  grads = [tf.constant(v) for v in _Values(5).values()]
  assert 'TfLearnerMultiSumSquares' in _Ops(F, grads)
  assert 'L2Loss' not in _Ops(F, grads)
  norm, var_norm = F(grads)
  g64 = [v.astype(np.float64) for v in _Values(5).values()]
  np.testing.assert_allclose(
      float(norm), 0.5 * np.sqrt(sum(np.sum(g ** 2) for g in g64)), rtol=1e-6)
  np.testing.assert_allclose(
      float(var_norm),
      np.sqrt(sum(np.sum(v.astype(np.float64) ** 2) for v in vals.values())),
      rtol=1e-6)


_RULES = {
    'sgd': (optimizers.SGD.Params(), 'TfLearnerMultiApplySGD'),
    'momentum_folded': (optimizers.Momentum.Params(),
                        'TfLearnerMultiApplyMomentum'),
    'momentum_unfolded': (optimizers.Momentum.Params().Set(
        fold_grad_scale=False), 'TfLearnerMultiApplyMomentum'),
    'momentum_nesterov': (optimizers.Momentum.Params().Set(
        use_nesterov=True), 'TfLearnerMultiApplyMomentum'),
    'momentum_decay': (optimizers.Momentum.Params().Set(
        decoupled_weight_decay=0.1, weight_decay_exclude=['b']),
                       'TfLearnerMultiApplyMomentum'),
    'adam': (optimizers.Adam.Params(), 'TfLearnerMultiApplyAdam'),
    'adamw': (optimizers.AdamW.Params().Set(weight_decay_exclude=['k']),
              'TfLearnerMultiApplyAdam'),
    'sgd_decay': (optimizers.SGD.Params().Set(decoupled_weight_decay=0.3),
                  'TfLearnerMultiApplySGD'),
}


@pytest.mark.parametrize('rule', sorted(_RULES))
@pytest.mark.parametrize('scaled', [True, False])
def test_fused_apply_equals_pure_tf_bitwise(rule, scaled):
  params, op = _RULES[rule]
  grads = _GradSteps(4)
  # Changing clip scales, as a clipped run gives them (folded into the
  # Momentum slot's scale state s, multiplied in elsewhere).
  scales = ([tf.constant(s) for s in (0.7, 1.0, 0.31, 0.05)] if scaled else
            [None] * 4)
  w_f, s_f, ops_f = _RunOptimizer(params, grads, scales, fused=True)
  w_p, s_p, ops_p = _RunOptimizer(params, grads, scales, fused=False)
  assert op in ops_f and op not in ops_p
  _AssertSame(w_f, w_p)
  _AssertSame(s_f, s_p)


@pytest.mark.parametrize('params,present,absent', [
    # Adam's default is dense (TF1's AdamOptimizer): an IndexedSlices with a
    # duplicate row is densified (rows summed) and goes through the fused op.
    (optimizers.Adam.Params(), 'TfLearnerMultiApplyAdam', 'ResourceApplyAdam'),
    # Momentum's default is a lazy sparse update: the pure-TF path runs.
    (optimizers.Momentum.Params(), 'ResourceSparseApplyMomentum',
     'TfLearnerMultiApplyMomentum'),
])
def test_sparse_gradients_fused_when_densified_else_pure_tf(params, present,
                                                            absent):
  grads, scales = _GradSteps(2), [tf.constant(0.5)] * 2
  w_f, s_f, ops_f = _RunOptimizer(params, grads, scales, fused=True,
                                  sparse=True)
  w_p, s_p, _ = _RunOptimizer(params, grads, scales, fused=False,
                              sparse=True)
  assert present in ops_f and absent not in ops_f
  _AssertSame(w_f, w_p)
  _AssertSame(s_f, s_p)


def test_under_xla_the_pure_tf_path_runs_with_the_same_numbers():
  vals, g = _Values(0), _Values(9)
  out = []
  for jit in (True, False):
    variables = {k: tf.Variable(v, name=k) for k, v in vals.items()}
    opt = optimizers.Momentum.Params().Set(name='m').Instantiate()
    opt.Bind(list(variables.values()))

    def Step():
      opt.ApplyScaled(tf.constant(0.05), NestedMap(
          {k: VarGrad(variables[k], tf.constant(g[k])) for k in SHAPES}),
                      tf.constant(0.5))
      return tf.constant(0)

    fn = tf.function(Step, jit_compile=jit)
    fn()  # A custom op under jit_compile would fail to compile.
    out.append({k: v.numpy() for k, v in variables.items()})
  for k in SHAPES:
    np.testing.assert_allclose(out[0][k], out[1][k], rtol=1e-6, atol=1e-7)


def test_checkpoint_written_by_one_path_restores_into_the_other(tmp_path):
  grads = _GradSteps(3)
  ref, _, _ = _RunOptimizer(optimizers.Adam.Params(), grads, [None] * 3,
                            fused=False)
  for first_fused in (True, False):
    variables = {k: tf.Variable(v, name=k) for k, v in _Values(0).items()}
    opt = optimizers.Adam.Params().Set(name='opt').Instantiate()
    opt.Bind(list(variables.values()))

    def Step(g, variables=variables, opt=opt):
      opt.Apply(tf.constant(0.05), NestedMap(
          {k: VarGrad(variables[k], tf.constant(g[k])) for k in SHAPES}))

    with (kernels.Disabled() if not first_fused else _Nothing()):
      Step(grads[0])
      Step(grads[1])
    ckpt = tf.train.Checkpoint(v=variables, opt=opt)
    path = ckpt.save(str(tmp_path / ('c%d' % first_fused)))
    variables2 = {k: tf.Variable(tf.zeros_like(v), name=k) for k, v in
                  variables.items()}
    opt2 = optimizers.Adam.Params().Set(name='opt').Instantiate()
    opt2.Bind(list(variables2.values()))
    tf.train.Checkpoint(v=variables2, opt=opt2).restore(path).assert_consumed()
    with (kernels.Disabled() if first_fused else _Nothing()):
      Step(grads[2], variables2, opt2)
    assert int(opt2.num_updates.numpy()) == 3
    _AssertSame({k: v.numpy() for k, v in variables2.items()}, ref)


class _Nothing:

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False


def _RunLearner(fused, grads, opt_params, accumulate=0, **kw):
  """A Learner over SHAPES with loss sum(c * w): the gradient is c."""
  variables = NestedMap({k: tf.Variable(v, name=k)
                         for k, v in _Values(0).items()})
  if accumulate:
    opt_params = GradientAccumulation.Params().Set(
        optimizer=opt_params, num_batches=accumulate)
  p = Learner.Params().Set(name='loss', learning_rate=0.05,
                           optimizer=opt_params, **kw)
  lrn = p.Instantiate()
  lrn.Bind(variables)

  @tf.function
  def Step(coef, weight):
    loss = tf.add_n([tf.reduce_sum(coef[k] * variables[k]) for k in SHAPES])
    return lrn.Apply({'loss': (loss, weight)}, variables)[2]

  metrics = []
  with (_Nothing() if fused else kernels.Disabled()):
    for g in grads:
      m = Step({k: tf.constant(v) for k, v in g.items()}, tf.constant(2.0))
      metrics.append({k: float(v[0]) for k, v in m.items()})
    ops = _Ops(Step, {k: tf.constant(v) for k, v in grads[0].items()},
               tf.constant(2.0))
  slots = {}
  inner = lrn.optimizer.optimizer if accumulate else lrn.optimizer
  for k, v in variables.items():
    for n, s in inner.GetSlots(v).items():
      slots[k + '/' + n] = s.numpy()
  return {k: v.numpy() for k, v in variables.items()}, slots, metrics, ops


def test_learner_skips_a_non_finite_step_on_both_paths():
  grads = _GradSteps(3)
  grads[1]['b'][3] = np.nan
  runs = [_RunLearner(f, grads, optimizers.Momentum.Params(),
                      clip_gradient_norm_to_value=1e9) for f in (True, False)]
  (w_f, s_f, m_f, ops_f), (w_p, s_p, m_p, _) = runs
  assert {'TfLearnerMultiSumSquares', 'TfLearnerMultiApplyMomentum'} <= ops_f
  _AssertSame(w_f, w_p)
  _AssertSame(s_f, s_p)
  assert [m['has_nan_or_inf'] for m in m_f] == [0.0, 1.0, 0.0]
  assert [m['num_skipped_steps'] for m in m_f] == [0.0, 1.0, 1.0]
  assert [m['num_updates'] for m in m_f] == [1.0, 1.0, 2.0]


def test_learner_with_active_clipping_agrees_to_float32_rounding():
  # The clip scale comes from the norm, summed in another order on the
  # fused path, so the weights may differ by the rounding of that scale.
  grads = _GradSteps(3)
  (w_f, s_f, m_f, _), (w_p, s_p, m_p, _) = [
      _RunLearner(f, grads, optimizers.Adam.Params(),
                  clip_gradient_norm_to_value=1.0) for f in (True, False)]
  for k in w_f:
    np.testing.assert_allclose(w_f[k], w_p[k], rtol=1e-6, atol=1e-7)
  for f, p in zip(m_f, m_p):
    np.testing.assert_allclose(f['grad_norm/all'], p['grad_norm/all'],
                               rtol=1e-6)
    assert f['grad_scale_all'] < 0.01


def test_accumulation_drops_a_non_finite_micro_batch_on_both_paths():
  grads = _GradSteps(6)
  grads[2]['k'][0, 0, 0, 0] = np.inf
  runs = [_RunLearner(f, grads, optimizers.Momentum.Params(), accumulate=3)
          for f in (True, False)]
  (w_f, s_f, m_f, ops_f), (w_p, s_p, m_p, ops_p) = runs
  assert {'TfLearnerMultiAccumulate', 'TfLearnerMultiZero'} <= ops_f
  assert not {'TfLearnerMultiAccumulate', 'TfLearnerMultiZero'} & ops_p
  _AssertSame(w_f, w_p)
  _AssertSame(s_f, s_p)
  assert m_f[-1]['num_dropped_microbatches'] == 1.0
  assert [m['num_updates'] for m in m_f] == [m['num_updates'] for m in m_p]


def test_accumulate_op_adds_weight_times_grad_or_nothing():
  acc = tf.Variable([1.0, 2.0, 3.0])
  g = tf.constant([0.5, -1.0, 4.0])
  assert bool(kernels.Accumulate([acc], [g], tf.constant(3.0)))
  np.testing.assert_array_equal(acc.numpy(), [2.5, -1.0, 15.0])
  bad = tf.constant([0.5, np.nan, 4.0])
  assert not bool(kernels.Accumulate([acc], [bad], tf.constant(3.0)))
  np.testing.assert_array_equal(acc.numpy(), [2.5, -1.0, 15.0])


def test_zero_op_sets_every_element_to_positive_zero_in_place():
  accs = [tf.Variable(v) for v in _Values(5).values()]
  handles = [a.handle for a in accs]
  assert kernels.Zero(accs) is True
  for a, h in zip(accs, handles):
    v = a.numpy()
    np.testing.assert_array_equal(v, np.zeros_like(v))
    assert not np.signbit(v).any()
    assert a.handle is h
  with kernels.Disabled():
    assert kernels.Zero(accs) is None


def test_sgd_op_without_a_scale_grad_attr_loads_and_steps():
  # The shared apply base reads scale_grad only for ops registered with it.
  w = tf.Variable([1.0, -2.0, 4.0])

  @tf.function
  def Step():
    kernels.ApplySGD([w], [tf.constant([0.5, 1.0, -2.0])], tf.constant(0.5),
                     tf.constant(0.25), [True])

  graph = Step.get_concrete_function().graph
  ops = [o for o in graph.get_operations()
         if o.type == 'TfLearnerMultiApplySGD']
  assert len(ops) == 1
  assert 'decay' in ops[0].node_def.attr
  assert 'scale_grad' not in ops[0].node_def.attr
  Step()
  # w - g * 0.5 - 0.25 * w, by hand (exact in float32).
  np.testing.assert_array_equal(w.numpy(), [0.5, -2.0, 4.0])


@pytest.mark.parametrize('group', [0, 1])
def test_momentum_shape_mismatch_names_the_slot_group(group):
  shapes = [[3], [3]]
  shapes[group] = [4]
  w, a = tf.Variable(tf.zeros(shapes[0])), tf.Variable(tf.zeros(shapes[1]))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match='tensor 0 \\(slot group %d\\)' % group):
    kernels.ApplyMomentum([w], [a], [tf.ones([3])], tf.constant(0.1),
                          tf.constant(0.9), None, tf.constant(0.0), [False],
                          False)


def test_without_a_compiler_the_loader_says_why(monkeypatch, tmp_path):
  monkeypatch.setenv('TF_LEARNER_KERNEL_CACHE', str(tmp_path))
  monkeypatch.delenv('CXX', raising=False)
  monkeypatch.setattr(loader.shutil, 'which', lambda name: None)
  lib, reason = loader._Load.__wrapped__()  # pylint: disable=protected-access
  assert lib is None and 'no C++ compiler' in reason
  monkeypatch.setenv('CXX', str(tmp_path / 'no-such-g++'))
  lib, reason = loader._Load.__wrapped__()  # pylint: disable=protected-access
  assert lib is None and 'failed' in reason


def _BuildInChild(fake, target, out):
  out.put(loader._BuildLocked(fake, target))  # pylint: disable=protected-access


def test_concurrent_builds_compile_once(tmp_path):
  # Two processes build into an empty cache with a fake compiler that
  # counts its runs and is slow: the lock makes the second one wait, find
  # the library and not compile. (Forked: the children only lock, run the
  # fake compiler and rename.)
  fake = tmp_path / 'fake_cxx'
  fake.write_text(textwrap.dedent('''\
      #!%s
      import sys, time
      open(%r, 'a').write('x')
      time.sleep(1.0)
      open(sys.argv[sys.argv.index('-o') + 1], 'w').write('lib')
      ''' % (sys.executable, str(tmp_path / 'count'))))
  fake.chmod(0o755)
  target = tmp_path / 'cache' / 'lib.so'
  ctx = multiprocessing.get_context('fork')
  out = ctx.Queue()
  procs = [ctx.Process(target=_BuildInChild, args=(str(fake), target, out))
           for _ in range(2)]
  for p in procs:
    p.start()
  results = [out.get(timeout=120) for _ in procs]
  for p in procs:
    p.join(timeout=60)
  assert results == [None, None]
  assert (tmp_path / 'count').read_text() == 'x'
  assert target.read_text() == 'lib'


def _VarNormRun(fused, grads, **kw):
  """var_norm/all per step and the weights before each step (numpy)."""
  variables = NestedMap({k: tf.Variable(v, name=k)
                         for k, v in _Values(0).items()})
  lrn = Learner.Params().Set(name='loss', learning_rate=0.05,
                             optimizer=optimizers.Momentum.Params(),
                             **kw).Instantiate()
  lrn.Bind(variables)

  @tf.function
  def Step(coef):
    loss = tf.add_n([tf.reduce_sum(coef[k] * variables[k]) for k in SHAPES])
    return lrn.Apply({'loss': (loss, tf.constant(1.0))}, variables)[2]

  norms, before = [], []
  with (_Nothing() if fused else kernels.Disabled()):
    for g in grads:
      before.append({k: v.numpy().astype(np.float64)
                     for k, v in variables.items()})
      m = Step({k: tf.constant(v) for k, v in g.items()})
      norms.append(float(m['var_norm/all'][0]))
    graph = Step.get_concrete_function(
        {k: tf.constant(v) for k, v in grads[0].items()}).graph
  return norms, before, graph


def _Nodes(graph, op_type):
  nodes = [op.node_def for op in graph.get_operations() if op.type == op_type]
  for f in graph.as_graph_def().library.function:
    nodes += [n for n in f.node_def if n.op == op_type]
  return nodes


def test_var_norm_is_measured_inside_the_fused_apply_before_the_update():
  # Step 2 is skipped (NaN gradient): the weights do not move and the norm
  # is read in the skip branch.
  grads = _GradSteps(3)
  grads[1]['w'][0, 0] = np.nan
  for fused in (True, False):
    norms, before, graph = _VarNormRun(fused, grads)
    expected = [np.sqrt(sum(np.sum(v ** 2) for v in b.values()))
                for b in before]
    np.testing.assert_allclose(norms, expected, rtol=2e-7)
    assert not np.array_equal(before[1]['w'], before[0]['w'])
    assert all(np.array_equal(before[2][k], before[1][k]) for k in SHAPES)
    applies = _Nodes(graph, 'TfLearnerMultiApplyMomentum')
    sums = _Nodes(graph, 'TfLearnerMultiSumSquares')
    if fused:
      # The gradient norm op reads only the 4 gradients; the apply op
      # measures the weights; the skip branch reads them (one more op).
      assert [n.attr['measure_weights'].b for n in applies] == [True]
      assert sorted(n.attr['N'].i for n in sums) == [4, 4]
    else:
      assert not applies and not sums


def test_apply_op_weight_measure_equals_the_sum_squares_op_bitwise():
  ws = [tf.Variable(v) for v in _Values(7, scale=2.0).values()]
  acc = [tf.Variable(tf.zeros_like(w)) for w in ws]
  gs = [tf.constant(v) for v in _Values(8).values()]
  _, total, _ = kernels.HalfSumSquares([w.read_value() for w in ws])
  measure = kernels.WeightMeasure()
  kernels.ApplyMomentum(ws, acc, gs, tf.constant(0.1), tf.constant(0.9),
                        None, tf.constant(0.0), [False] * len(ws), False,
                        measure)
  assert measure.variables == {id(w) for w in ws}
  assert float(measure.Total()) == float(total)
  assert float(total) != 0.0


def test_the_first_use_compile_says_one_line_on_stderr(tmp_path, capfd):
  # Issue 21: the compile was a silent 18 s pause at the default verbosity.
  fake = tmp_path / 'fake_cxx'
  fake.write_text('#!%s\nimport sys\nopen(sys.argv[sys.argv.index("-o") + 1],'
                  ' "w").write("lib")\n' % sys.executable)
  fake.chmod(0o755)
  target = tmp_path / 'cache' / 'lib.so'
  assert loader._BuildLocked(str(fake), target) is None  # pylint: disable=protected-access
  captured = capfd.readouterr()
  assert captured.out == ''
  assert captured.err == (
      'Compiling the fused optimizer kernels (multi_tensor_ops.cc, '
      'multi_tensor_rules.cc, once per '
      'TensorFlow version and machine, about 20 s) into %s.\n' % target)
  assert target.read_text() == 'lib'
  # Built: a second call finds it and says nothing.
  assert loader._BuildLocked(str(fake), target) is None  # pylint: disable=protected-access
  assert capfd.readouterr().err == ''
