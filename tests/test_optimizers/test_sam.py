"""Sam (issue 24, item 4): sharpness-aware minimization and the second pass.

References: optax.contrib.sam on quadratic losses (tests/data/optax_sam.json,
tools/record_optax_sam.py); numpy for ASAM and for a task under
MirroredStrategy (tests/conftest.py gives two logical CPUs).
"""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from configs import model_tasks
from learner import optimizers
from learner.learner import Learner
from learner.optimizers import factory
from learner.optimizers.wrappers.sam import Sam
from learner.training.cluster import distribution
from params import NestedMap
from schedules import ConstantOne

import optax_references as optax_refs

_DATA = optax_refs.Load('sam')
_CASES = _DATA['cases']


def _OptimizerParams(case):
  kw = case['kwargs']
  inner = (optimizers.SGD.Params() if kw['momentum'] == 0.0 else
           optimizers.Momentum.Params().Set(alpha=kw['momentum']))
  return Sam.Params().Set(rho=kw['rho'], optimizer=inner)


def _RunQuadratic(opt_params, case, mode='function', with_fprop=True):
  """Our weights after each step on the case's quadratic loss.

  L(w) = 0.5 * sum(d w^2) + 0.5 * (u . w)^2 + b . w (tools/record_optax_sam.py),
  the learner clipping the second gradient as the case says.
  """
  dtype = tf.as_dtype(case['dtype'])
  np_dtype = dtype.as_numpy_dtype
  shape = tuple(case['shape'])
  w = tf.Variable(np.asarray(case['init'], np_dtype).reshape(shape),
                  name='w')
  d, u, b = [tf.constant(np.asarray(case[k], np_dtype))
             for k in ('quad_d', 'quad_u', 'quad_b')]
  vmap = NestedMap(w=w)
  lrn = Learner.Params().Set(
      name='loss', learning_rate=case['lr'], lr_schedule=ConstantOne.Params(),
      optimizer=opt_params.Copy(),
      clip_gradient_norm_to_value=case['clip'] or 0.0).Instantiate()
  lrn.Bind(vmap)

  def FProp():
    flat = tf.reshape(tf.convert_to_tensor(w), [-1])
    loss = (0.5 * tf.reduce_sum(d * flat * flat) +
            0.5 * tf.square(tf.reduce_sum(u * flat)) + tf.reduce_sum(b * flat))
    return {'loss': (loss, 1.0)}

  def Step():
    with learner_lib.GradientTape():
      metrics = FProp()
    return lrn.Apply(metrics, vmap,
                     fprop_fn=FProp if with_fprop else None)[0]

  if mode != 'eager':
    Step = tf.function(Step, jit_compile=(mode == 'xla'))
  out = []
  for _ in case['params']:
    Step()
    out.append(w.numpy().astype(np.float64))
  return np.stack(out)


@pytest.mark.parametrize('case', _CASES, ids=optax_refs.CaseId)
def test_sam_matches_optax_contrib_sam_for_10_steps(case):
  # Float64 too within 1e-6: the rate arrives as float32 (0.1 -> 0.1 + 1.5e-9),
  # a relative change of 1.5e-8 per step.
  ours = _RunQuadratic(_OptimizerParams(case), case)
  optax_refs.AssertMatches(ours, case, rtol=1e-6)


def test_recorded_cases_are_not_the_inner_optimizer_alone():
  # The record is SAM, not SGD: rho = 0.05 moves the weights by more than
  # 1e-3 (relative) over 10 steps, 1000x the tolerance above; the clipped
  # cases really clip (their trajectory differs from the unclipped one).
  case = optax_refs.Select(_DATA, 'sam_sgd', shape_name='matrix',
                           dtype='float64', clip=None)[0]
  plain = _RunQuadratic(optimizers.SGD.Params(), case, with_fprop=False)
  assert optax_refs.RelativeError(plain, optax_refs.Expected(case)) > 1e-3
  clipped = optax_refs.Select(_DATA, 'sam_sgd', shape_name='matrix',
                              dtype='float64', clip=1.0)[0]
  assert optax_refs.RelativeError(optax_refs.Expected(clipped),
                                  optax_refs.Expected(case)) > 1e-3


@pytest.mark.parametrize('mode', ['eager', 'xla'])
def test_sam_eager_and_under_xla_match_optax(mode):
  for clip in (None, 1.0):
    case = optax_refs.Select(_DATA, 'sam_momentum', shape_name='conv',
                             dtype='float32', clip=clip)[0]
    ours = _RunQuadratic(_OptimizerParams(case), case, mode=mode)
    optax_refs.AssertMatches(ours, case, rtol=1e-6)


def _NumpyAsamStep(w, d, rho, eta, lr):
  """One ASAM + SGD step on L = 0.5 sum(d w^2) (gradient d * w)."""
  g = d * w
  t = np.abs(w) + eta
  e = rho * t * t * g / np.linalg.norm(t * g)
  return w - lr * d * (w + e)


def test_asam_matches_numpy_two_variables_one_norm():
  # Kwon et al. 2021, eq. 11: e = rho T^2 g / ||T g||, T = |w| + eta, the
  # norm over both variables together.
  w0 = np.array([1.0, -2.0, 0.5])
  w1 = np.array([[0.3, -0.7]])
  d0, d1 = np.array([1.0, 2.0, 3.0]), np.array([[0.5, 4.0]])
  v0 = tf.Variable(w0, name='a')
  v1 = tf.Variable(w1, name='b')
  vmap = NestedMap(a=v0, b=v1)
  lrn = Learner.Params().Set(
      name='loss', learning_rate=0.125, lr_schedule=ConstantOne.Params(),
      optimizer=Sam.Params().Set(rho=0.2, adaptive=True, adaptive_eta=0.01,
                                 optimizer=optimizers.SGD.Params())
  ).Instantiate()
  lrn.Bind(vmap)

  def FProp():
    loss = (0.5 * tf.reduce_sum(d0 * tf.square(v0)) +
            0.5 * tf.reduce_sum(d1 * tf.square(v1)))
    return {'loss': (loss, 1.0)}

  with learner_lib.GradientTape():
    metrics = FProp()
  lrn.Apply(metrics, vmap, fprop_fn=FProp)
  both = np.concatenate([w0, w1.ravel()])
  want = _NumpyAsamStep(both, np.concatenate([d0, d1.ravel()]), 0.2, 0.01,
                        0.125)  # 0.125: exact in the learner's float32 rate
  got = np.concatenate([v0.numpy(), v1.numpy().ravel()])
  np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_zero_or_non_finite_gradient_perturbs_nothing():
  v = tf.Variable([1.0, 2.0], name='v')
  sam = Sam.Params().Set(name='sam', optimizer=optimizers.SGD.Params()
                         ).Instantiate().Bind([v])
  for g in ([0.0, 0.0], [np.nan, 1.0], [np.inf, 1.0]):
    (var, e), = sam.Perturbation(NestedMap(v=optimizers.VarGrad(
        v, tf.constant(g))))
    assert var is v
    np.testing.assert_array_equal(e.numpy(), [0.0, 0.0])


# ---- refusals ----------------------------------------------------------------


@pytest.mark.parametrize('key,value', [
    ('rho', 0.0), ('rho', -0.1), ('rho', float('nan')), ('rho', True),
    ('adaptive_eta', -0.01), ('adaptive_eta', float('inf')),
    ('adaptive', 'yes')])
def test_bad_params_are_refused_in_one_line_naming_the_key(key, value):
  p = Sam.Params().Set(optimizer=optimizers.SGD.Params(), **{key: value})
  with pytest.raises(ValueError, match=key) as e:
    p.Instantiate()
  assert '\n' not in str(e.value)


def test_accumulation_around_sam_is_refused_by_name():
  fn = factory.get_optimizer_wrapper_fn(
      'batch_gradients', factory.get_optimizer_wrapper_fn(
          'sam', factory.get_optimizer_fn('sgd', learning_rate=0.1)),
      num_batches=2)
  with pytest.raises(ValueError, match='gradient accumulation around Sam') \
      as e:
    Learner.Params().Set(name='loss', optimizer_fn=fn).Instantiate()
  assert '\n' not in str(e.value) and 'batch_gradients' in str(e.value)


def test_two_sams_in_one_learner_are_refused():
  p = Sam.Params().Set(optimizer=Sam.Params().Set(
      optimizer=optimizers.SGD.Params()))
  with pytest.raises(ValueError, match='keep one Sam per learner'):
    Learner.Params().Set(name='loss', learning_rate=0.1,
                         optimizer=p).Instantiate()


def test_apply_without_fprop_fn_is_refused_naming_the_fix():
  case = _CASES[0]
  with pytest.raises(ValueError, match='fprop_fn') as e:
    _RunQuadratic(_OptimizerParams(case), case, mode='eager',
                  with_fprop=False)
  assert '\n' not in str(e.value) and "Learner 'loss'" in str(e.value)


# ---- params, factory, checkpoint -------------------------------------------


def test_params_and_factory_round_trip_through_text():
  fn = factory.get_optimizer_wrapper_fn(
      'sam', factory.get_optimizer_fn('momentum', learning_rate=0.1,
                                      momentum=0.9), rho=0.1, adaptive=True)
  assert fn.Params() == Sam.Params().Set(
      rho=0.1, adaptive=True, optimizer=optimizers.Momentum.Params().Set(
          alpha=0.9))
  for p in (Learner.Params().Set(name='loss', optimizer_fn=fn),
            Learner.Params().Set(name='loss', learning_rate=0.1,
                                 optimizer=fn.Params())):
    back = Learner.Params().FromText(p.ToText())
    assert back == p and back.ToText() == p.ToText()
  assert fn.learning_rate == 0.1


def test_unknown_factory_keyword_is_refused():
  with pytest.raises(ValueError, match="unknown keyword argument 'radius'"):
    factory.get_optimizer_wrapper_fn('sam', factory.get_optimizer_fn('sgd'),
                                     radius=0.1)


def test_slots_of_the_inner_optimizer_survive_a_checkpoint(tmp_path):
  case = optax_refs.Select(_DATA, 'sam_momentum', shape_name='vector',
                           dtype='float32', clip=None)[0]
  full = _RunQuadratic(_OptimizerParams(case), case, mode='eager')
  # Resume after 4 of the 10 steps from a checkpoint of the learner.
  dtype = np.float32
  w = tf.Variable(np.asarray(case['init'], dtype), name='w')
  d, u, b = [tf.constant(np.asarray(case[k], dtype))
             for k in ('quad_d', 'quad_u', 'quad_b')]

  def Build():
    lrn = Learner.Params().Set(
        name='loss', learning_rate=case['lr'],
        lr_schedule=ConstantOne.Params(),
        optimizer=_OptimizerParams(case)).Instantiate()
    return lrn.Bind(NestedMap(w=w))

  def FProp():
    loss = (0.5 * tf.reduce_sum(d * w * w) +
            0.5 * tf.square(tf.reduce_sum(u * w)) + tf.reduce_sum(b * w))
    return {'loss': (loss, 1.0)}

  def Steps(lrn, n):
    for _ in range(n):
      with learner_lib.GradientTape():
        metrics = FProp()
      lrn.Apply(metrics, NestedMap(w=w), fprop_fn=FProp)

  first = Build()
  Steps(first, 4)
  path = tf.train.Checkpoint(learner=first, w=w).save(str(tmp_path / 'c'))
  Steps(first, 1)  # moves w and the velocity; the restore puts them back
  second = Build()
  tf.train.Checkpoint(learner=second, w=w).restore(path).assert_consumed()
  Steps(second, 6)
  np.testing.assert_array_equal(w.numpy(), full[-1].astype(dtype))


# ---- the protocol: single pass unchanged, several learners, replicas -------


def _OpTypes(lrn, vmap, fprop, **kw):
  @tf.function
  def Step():
    metrics = fprop()
    lrn.Apply(metrics, vmap, **kw)
  return sorted(op.type for op in Step.get_concrete_function().graph
                .get_operations())


def test_a_single_pass_learner_has_the_same_graph_with_fprop_fn():
  v = tf.Variable([1.0, 2.0], name='v')
  vmap = NestedMap(v=v)
  fprop = lambda: {'loss': (tf.reduce_sum(tf.square(v)), 1.0)}

  def Unused():
    raise AssertionError('a single-pass learner called fprop_fn')

  def Build(opt):
    return Learner.Params().Set(name='loss', learning_rate=0.1,
                                optimizer=opt).Instantiate().Bind(vmap)

  sgd = optimizers.Momentum.Params()
  without = _OpTypes(Build(sgd), vmap, fprop)
  assert _OpTypes(Build(sgd), vmap, fprop, fprop_fn=Unused) == without
  # The same learner with Sam has the second pass: more ops.
  with_sam = _OpTypes(Build(Sam.Params().Set(optimizer=sgd)), vmap, fprop,
                      fprop_fn=fprop)
  assert len(with_sam) > len(without)


_X = np.arange(12, dtype=np.float32) * 0.05  # 3 global batches of 4
_RHO, _LR = 0.1, 0.1


def _NumpySamRegression(steps, sam_vars=('w', 'b'), plain_vars=()):
  """SAM + SGD on y = w x + b, MSE; `plain_vars` get plain SGD (float64).

  The perturbation's norm is over `sam_vars` only; `plain_vars` use the
  gradient at the unperturbed weights.
  """
  x_all = _X.astype(np.float64)
  p = {'w': 0.0, 'b': 0.0}

  def Grad(q, x):
    r = q['w'] * x + q['b'] - (5.0 * x + 2.0)
    return {'w': np.mean(2 * r * x), 'b': np.mean(2 * r)}

  for s in range(steps):
    x = x_all[4 * s:4 * s + 4]
    g = Grad(p, x)
    norm = np.sqrt(sum(g[k] ** 2 for k in sam_vars))
    moved = dict(p, **{k: p[k] + _RHO * g[k] / norm for k in sam_vars})
    g2 = Grad(moved, x)
    p = {k: p[k] - _LR * (g2[k] if k in sam_vars else g[k])
         for k in p if k in sam_vars or k in plain_vars}
  return p


def _RegressionTask(strategy, learners):
  p = model_tasks.LinearRegressionTask.Params().Set(name='reg')
  p.train.learner = learners
  with strategy.scope():
    task = p.Instantiate()
    task.CreateLearners()
  return task


def _SamLearner(name='learner', **kw):
  return Learner.Params().Set(
      name=name, loss_name='loss', learning_rate=_LR,
      lr_schedule=ConstantOne.Params(),
      optimizer=Sam.Params().Set(rho=_RHO, optimizer=optimizers.SGD.Params()),
      **kw)


def _Batches():
  return tf.data.Dataset.from_tensor_slices({'x': _X, 'y': 5.0 * _X + 2.0})


def test_sam_under_mirrored_strategy_equals_one_device_and_numpy():
  mirrored = distribution.CreateStrategy('mirrored')
  assert mirrored.num_replicas_in_sync == 2
  task = _RegressionTask(mirrored, _SamLearner())
  it = iter(distribution.DistributeDataset(mirrored, _Batches, 4))
  task.TrainLoop(it, 3)
  distribution.AssertReplicasIdentical(task.vars.Flatten())
  one = _RegressionTask(tf.distribute.get_strategy(), _SamLearner())
  for batch in _Batches().batch(4):
    one.TrainStep(batch)
  want = _NumpySamRegression(3)
  for k in ('w', 'b'):
    got = mirrored.experimental_local_results(task.vars[k])[0].numpy()
    np.testing.assert_allclose(got, one.vars[k].numpy(), rtol=1e-6)
    np.testing.assert_allclose(got, want[k], rtol=1e-5)


@pytest.mark.parametrize('eager', [False, True])
def test_sam_learner_beside_a_plain_learner(eager):
  # 'sam' trains w with SAM (norm over w alone), then 'plain' trains b with
  # SGD on the first pass's gradient: eagerly, the task's tape is put back
  # after the second pass.
  learners = [
      _SamLearner('sam', bprop_variable_filter='/w$'),
      Learner.Params().Set(name='plain', loss_name='loss', learning_rate=_LR,
                           lr_schedule=ConstantOne.Params(),
                           bprop_variable_filter='/b$',
                           optimizer=optimizers.SGD.Params())]
  task = _RegressionTask(tf.distribute.get_strategy(), learners)
  tf.config.run_functions_eagerly(eager)
  try:
    for batch in _Batches().batch(4):
      task.TrainStep(batch)
  finally:
    tf.config.run_functions_eagerly(False)
  want = _NumpySamRegression(3, sam_vars=('w',), plain_vars=('b',))
  np.testing.assert_allclose(task.vars.w.numpy(), want['w'], rtol=1e-5)
  np.testing.assert_allclose(task.vars.b.numpy(), want['b'], rtol=1e-5)


def test_a_non_finite_loss_skips_the_step_and_leaves_the_weights_intact():
  # The first gradient is NaN: the perturbation is 0 (nothing NaN is
  # written), the second gradient is NaN too, the guarded update skips.
  w = tf.Variable([1.0, -2.0], name='w')
  vmap = NestedMap(w=w)
  scale = tf.Variable(1.0, trainable=False)
  lrn = _SamLearner('loss').Instantiate().Bind(vmap)
  fprop = lambda: {'loss': (scale * tf.reduce_sum(tf.square(w)), 1.0)}
  step = tf.function(
      lambda: lrn.Apply(fprop(), vmap, fprop_fn=fprop)[2])
  scale.assign(np.nan)
  metrics = step()
  np.testing.assert_array_equal(w.numpy(), [1.0, -2.0])
  assert int(lrn.num_skipped_steps.numpy()) == 1
  assert float(metrics['has_nan_or_inf'][0]) == 1.0
  scale.assign(1.0)
  step()  # g = 2w = [2, -4]; e = 0.1 * g / ||g||; w -= 0.1 * 2 (w + e)
  e = 0.1 * np.array([2.0, -4.0]) / np.sqrt(20.0)
  np.testing.assert_allclose(w.numpy(), np.array([1.0, -2.0]) -
                             0.2 * (np.array([1.0, -2.0]) + e), rtol=1e-6)


def test_sam_as_one_group_of_a_composite_perturbs_only_its_group():
  # Composite: w in Sam(SGD), b in SGD. Only w moves to w + e (the norm
  # over w alone) and b keeps the first pass's gradient: the numbers of
  # the two-learner test above.
  lp = Learner.Params().Set(
      name='learner', loss_name='loss', learning_rate=_LR,
      lr_schedule=ConstantOne.Params(),
      optimizer=optimizers.Composite.Params().Set(optimizer_map={
          '/w$': (Sam.Params().Set(rho=_RHO,
                                   optimizer=optimizers.SGD.Params()), 1.0),
          'default_optimizer': (optimizers.SGD.Params(), 1.0)}))
  task = _RegressionTask(tf.distribute.get_strategy(), lp)
  for batch in _Batches().batch(4):
    task.TrainStep(batch)
  want = _NumpySamRegression(3, sam_vars=('w',), plain_vars=('b',))
  np.testing.assert_allclose(task.vars.w.numpy(), want['w'], rtol=1e-5)
  np.testing.assert_allclose(task.vars.b.numpy(), want['b'], rtol=1e-5)


def test_loss_scale_and_an_ema_around_sam_give_sams_weights():
  # A fixed loss scale of 128 (a power of 2) changes no gradient bit, and
  # Ema(Sam(SGD)) trains as Sam(SGD) while its average follows the weights.
  plain = _RegressionTask(tf.distribute.get_strategy(), _SamLearner())
  lp = _SamLearner(loss_scale=128.0)
  lp.optimizer = optimizers.Ema.Params().Set(decay=0.5,
                                             optimizer=lp.optimizer)
  both = _RegressionTask(tf.distribute.get_strategy(), lp)
  for batch in _Batches().batch(4):
    plain.TrainStep(batch)
    both.TrainStep(batch)
  for k in ('w', 'b'):
    assert both.vars[k].numpy() == plain.vars[k].numpy()
  ema = both.learners[0].optimizer
  avg = ema.GetAverage(both.vars.w).numpy()
  assert 0.0 < avg < both.vars.w.numpy()  # w grows from 0; the average lags
