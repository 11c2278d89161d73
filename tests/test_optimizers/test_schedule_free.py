"""Schedule-free SGD and AdamW (issue 24.2): the numbers and the eval weights.

* optax 0.2.8's `contrib.schedule_free_{sgd,adamw}` recorded in
  tests/data/optax_schedule_free.json (tools/record_optax_schedule_free.py):
  the weights y and the eval weights x after each of 10 steps, on a matrix,
  a vector and a conv kernel, clipping on and off, float32 and float64.
* warmup_form='reference': a numpy transcription of the authors' PyTorch
  step (facebookresearch/schedule_free, SGDScheduleFree / AdamWScheduleFree:
  lerp y toward z, add the gradient with lr * (b1 (1 - c) - 1), z -= lr g).
* the eval weights through Ema's protocol, by hand; refusals; text form.
"""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner import optimizers
from learner.learner import Learner
from learner.optimizers.wrappers import accumulation
from learner.optimizers import get_optimizer_fn
from learner.optimizers import get_optimizer_wrapper_fn
from learner.optimizers.rules import schedule_free
from learner.optimizers.var_grad import VarGrad
from learner.training.jobs import eval_restore
from params import NestedMap
from schedules import ConstantOne
import optax_references as ox

_CASES = ox.Load('schedule_free')['cases']


def _Rtol(case):
  """1e-6 (the acceptance); float64 without clipping: 1e-12.

  Our rules compute float64 weights in float64 (the rates recorded are
  powers of two, exact as the float32 rate the learner hands over), so
  they agree with optax to rounding. With clipping the learner's clip
  factor is a float32 scalar (~3e-8 relative), which float64 cases then
  carry: 6e-9 is seen there.
  """
  return 1e-12 if case['dtype'] == 'float64' and not case['clip'] else 1e-6


def _FactoryName(rule):
  return 'schedule_free_adamw' if 'adamw' in rule else 'schedule_free_sgd'


def _RunWithEvalWeights(opt_params, case, mode='function'):
  """(y, x) after each step: our rule in a Learner on the case's gradients."""
  dtype = tf.as_dtype(case['dtype'])
  shape = tuple(case['shape'])
  w = tf.Variable(np.asarray(case['init'], dtype.as_numpy_dtype).reshape(
      shape), name='w')
  lrn = Learner.Params().Set(
      name='loss', learning_rate=case['lr'], lr_schedule=ConstantOne.Params(),
      optimizer=opt_params.Copy(),
      clip_gradient_norm_to_value=case['clip'] or 0.0).Instantiate()
  vmap = NestedMap(w=w)
  lrn.Bind(vmap)
  g = tf.Variable(tf.zeros(shape, dtype), trainable=False)

  def Step():
    with learner_lib.GradientTape():
      loss = tf.reduce_sum(w * g)
    return lrn.Apply({'loss': (loss, 1.0)}, vmap)[0]

  if mode != 'eager':
    Step = tf.function(Step, jit_compile=(mode == 'xla'))
  ys, xs = [], []
  for grad in case['grads']:
    g.assign(np.asarray(grad, dtype.as_numpy_dtype).reshape(shape))
    Step()
    ys.append(w.numpy().astype(np.float64))
    xs.append(lrn.optimizer.GetAverage(w).numpy().astype(np.float64))
  return np.stack(ys), np.stack(xs)


@pytest.mark.parametrize('case', _CASES, ids=[ox.CaseId(c) for c in _CASES])
def test_weights_and_eval_weights_match_optax(case):
  p = get_optimizer_fn(_FactoryName(case['rule']), **case['kwargs']).Params()
  ys, xs = _RunWithEvalWeights(p, case)
  ox.AssertMatches(ys, case, rtol=_Rtol(case))
  ox.AssertMatches(xs, case, rtol=_Rtol(case), key='extra')


@pytest.mark.parametrize('mode', ['eager', 'xla'])
def test_eager_and_xla_match_optax_with_warmup_and_decay(mode):
  for rule in ('schedule_free_sgd_warmup_wd', 'schedule_free_adamw_warmup_wd'):
    case = ox.Select({'cases': _CASES}, rule, shape_name='matrix',
                     dtype='float32', clip=1.0)[0]
    p = get_optimizer_fn(_FactoryName(rule), **case['kwargs']).Params()
    ys, xs = _RunWithEvalWeights(p, case, mode)
    ox.AssertMatches(ys, case)
    ox.AssertMatches(xs, case, key='extra')


# ---- warmup_form='reference': the authors' PyTorch step, in numpy ------------


def _ReferenceStep(state, g, lr, kind, b1, warmup, r, power, wd, b2=0.999,
                   eps=1e-8):
  """One step of schedulefree's SGD/AdamWScheduleFree.step, transcribed.

  state: dict y, z (arrays), v (AdamW), k (int), lr_max, weight_sum.
  """
  k = state['k']
  sched = (k + 1) / warmup if k < warmup else 1.0
  lr = lr * sched
  state['lr_max'] = lr_max = max(lr, state['lr_max'])
  weight = ((k + 1) ** r) * (lr_max ** power)
  state['weight_sum'] += weight
  ckp1 = weight / state['weight_sum'] if state['weight_sum'] else 0.
  if kind == 'adamw':
    state['v'] = b2 * state['v'] + (1 - b2) * g * g
    denom = np.sqrt(state['v'] / (1 - b2 ** (k + 1))) + eps
    g = g / denom
  y, z = state['y'], state['z']
  if wd:
    g = g + wd * y
  y = y + ckp1 * (z - y)                       # y.lerp_(z, ckp1)
  y = y + lr * (b1 * (1 - ckp1) - 1) * g       # y.add_(g, alpha=...)
  z = z - lr * g                               # z.sub_(g, alpha=lr)
  state.update(y=y, z=z, k=k + 1)
  return y, (y - (1 - b1) * z) / b1            # (y, x): eval() lerps back


@pytest.mark.parametrize('kind', ['sgd', 'adamw'])
def test_reference_warmup_form_matches_the_authors_step(kind):
  # warmup 3 over 6 steps, r = 1, weight_lr_power 2, weight decay 0.1.
  rng = np.random.RandomState(5)
  init = rng.randn(3, 2)
  grads = rng.randn(6, 3, 2)
  b1, lr = 0.8, 0.25
  common = dict(warmup_steps=3, warmup_form='reference', r=1.0,
                weight_lr_power=2.0, decoupled_weight_decay=0.1)
  if kind == 'sgd':
    p = optimizers.ScheduleFreeSGD.Params().Set(momentum=b1, **common)
  else:
    p = optimizers.ScheduleFreeAdamW.Params().Set(beta1=b1, **common)
  w = tf.Variable(init, name='w')
  opt = p.Set(name='sf').Instantiate().Bind([w])
  state = dict(y=init.copy(), z=init.copy(), v=np.zeros_like(init), k=0,
               lr_max=-1.0, weight_sum=0.0)
  for g in grads:
    opt.Apply(lr, NestedMap(w=VarGrad(w, tf.constant(g))))
    y, x = _ReferenceStep(state, g, lr, kind, b1, 3, 1.0, 2.0, 0.1)
    np.testing.assert_allclose(w.numpy(), y, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(opt.GetAverage(w).numpy(), x, rtol=1e-12,
                               atol=1e-14)


def test_the_two_warmup_forms_differ_only_during_warmup():
  # optax form: step 1 of warmup 2 moves z by lr * 0 / 2 = 0; the reference
  # form by lr * 1 / 2. Hand values, SGD b1 0.5, lr 1, g 1, w 0:
  #   optax:     z = 0,    c = 1, x = 0,    y = 0
  #   reference: z = -0.5, c = 1, x = -0.5, y = -0.5
  got = {}
  for form in schedule_free.WARMUP_FORMS:
    w = tf.Variable(0.0, name='w')
    opt = optimizers.ScheduleFreeSGD.Params().Set(
        name='sf', momentum=0.5, warmup_steps=2,
        warmup_form=form).Instantiate().Bind([w])
    opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0))))
    got[form] = (float(w.numpy()), float(opt.GetAverage(w).numpy()))
  assert got == {'optax': (0.0, 0.0), 'reference': (-0.5, -0.5)}


# ---- the eval weights: Ema's protocol ----------------------------------------


def _TwoSteps(p=None):
  """SGD b1 0.5, lr 1, g 1 twice from w 1 (no warmup, weight lr_max^2):
  step 1: z 0, c 1, x 0, y 0; step 2: z -1, c 1/2, x -0.5,
  y 0.5 * -0.5 + 0.5 * -1 = -0.75."""
  p = p or optimizers.ScheduleFreeSGD.Params().Set(name='sf', momentum=0.5)
  w = tf.Variable(1.0, name='w')
  opt = p.Instantiate().Bind([w])
  for _ in range(2):
    opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0))))
  return opt, w


def test_eval_weights_by_hand_and_swapped_in_for_evaluation():
  opt, w = _TwoSteps()
  assert opt.EvalAverages() == [opt]
  assert float(w.numpy()) == -0.75
  assert float(opt.GetAverage(w).numpy()) == -0.5
  with opt.SwapAverages():
    assert float(w.numpy()) == -0.5
  assert float(w.numpy()) == -0.75
  assert float(opt.GetAverage(w).numpy()) == -0.5


def test_swap_inside_tf_function_is_refused():
  opt, _ = _TwoSteps()

  @tf.function
  def Swap():
    with opt.SwapAverages():
      pass

  with pytest.raises(RuntimeError, match='outside tf.function'):
    Swap()


def test_before_the_first_update_nothing_is_swapped_and_z_x_start_there():
  # A warm start assigns the weights after Bind: z and x start from them.
  w = tf.Variable(1.0, name='w')
  opt = optimizers.ScheduleFreeSGD.Params().Set(
      name='sf', momentum=0.5).Instantiate().Bind([w])
  w.assign(3.0)
  with opt.SwapAverages():
    assert float(w.numpy()) == 3.0
  opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(1.0))))
  # z = 3 - 1 = 2, c = 1: x = 2, y = 2.
  assert float(w.numpy()) == 2.0
  assert float(opt.GetAverage(w).numpy()) == 2.0


def test_checkpoint_key_gives_the_eval_weights_without_building_it(tmp_path):
  opt, w = _TwoSteps()
  path = tf.train.Checkpoint(opt=opt).save(str(tmp_path / 'ckpt'))
  keys = tf.train.load_checkpoint(path).get_variable_to_shape_map()
  suffix = optimizers.ScheduleFreeSGD.AverageCheckpointKeySuffix(w)
  assert [k for k in keys if k.endswith(suffix)] == [
      'opt/_slots/w/x/.ATTRIBUTES/VARIABLE_VALUE']
  fresh = tf.Variable(0.0, name='w')

  class _Task:

    def ModelVars(self):
      return NestedMap(w=fresh)

  classes = optimizers.ScheduleFreeSGD.EvalAverageClasses(opt.params)
  assert eval_restore.LoadEmaAverages(path, _Task(), classes) == 1
  assert float(fresh.numpy()) == -0.5


def test_found_under_accumulation_by_params_and_when_built():
  p = accumulation.GradientAccumulation.Params().Set(
      name='acc', num_batches=1, optimizer=optimizers.ScheduleFreeAdamW.Params())
  assert p.cls.EvalAverageClasses(p) == [optimizers.ScheduleFreeAdamW]
  fn = get_optimizer_wrapper_fn(
      'batch_gradients', get_optimizer_fn('schedule_free_sgd', b1=0.5),
      num_batches=1)
  opt, w = _TwoSteps(fn.Params().Set(name='acc'))
  assert opt.EvalAverages() == [opt.optimizer]
  assert float(opt.optimizer.GetAverage(w).numpy()) == -0.5


def test_a_skipped_update_leaves_y_z_x_and_the_average_weight():
  # A NaN gradient is skipped by the learner: nothing moves, c's sum neither.
  case = dict(dtype='float32', shape=[2], init=[1.0, 2.0], lr=0.5, clip=None,
              grads=[[1.0, 1.0], [np.nan, 1.0], [1.0, -1.0]])
  p = optimizers.ScheduleFreeSGD.Params().Set(momentum=0.5)
  ys, xs = _RunWithEvalWeights(p, case, mode='eager')
  ref = _RunWithEvalWeights(p, dict(case, grads=[case['grads'][0],
                                                 case['grads'][2]]),
                            mode='eager')
  np.testing.assert_array_equal(ys[[0, 2]], ref[0])
  np.testing.assert_array_equal(xs[[0, 2]], ref[1])


def test_weight_decay_exclude_leaves_the_excluded_variable_undecayed():
  # One step from w = b = 1, g = 0, lr 1, wd 0.5 (c = 1, so y = x = z):
  # w: z = 1 - 1 * 0.5 * 1 = 0.5; b (excluded): z = 1.
  w, b = tf.Variable(1.0, name='w'), tf.Variable(1.0, name='b')
  opt = optimizers.ScheduleFreeSGD.Params().Set(
      name='sf', decoupled_weight_decay=0.5,
      weight_decay_exclude=['^b$']).Instantiate().Bind([w, b])
  opt.Apply(1.0, NestedMap(w=VarGrad(w, tf.constant(0.0)),
                           b=VarGrad(b, tf.constant(0.0))))
  assert (float(w.numpy()), float(b.numpy())) == (0.5, 1.0)


def test_step_gives_the_new_weights_which_the_base_assigns():
  # Schedule-free declares STEP_GIVES_WEIGHTS: _Step returns y_new and the
  # base assigns it (y - (y - y_new) would differ in the last bit). One
  # step from y = z = x = [1, -2], g = [1, 2], lr 1, momentum 0.5 (c = 1):
  # z = y - g = [0, -4] = x, y_new = z.
  w = tf.Variable([1.0, -2.0], name='w')
  opt = optimizers.ScheduleFreeSGD.Params().Set(
      name='sf', momentum=0.5).Instantiate().Bind([w])
  assert type(opt).STEP_GIVES_WEIGHTS and type(opt).DECAY_IN_STEP
  g = tf.constant([1.0, 2.0])
  update = opt._BeginUpdate(tf.constant(1.0), [VarGrad(w, g)], None)  # pylint: disable=protected-access
  s = opt._Scalars(update, tf.float32)  # pylint: disable=protected-access
  slots = {k: v.read_value() for k, v in opt.GetSlots(w).items()}
  y_new, new = opt._Step(s, w, g, slots)  # pylint: disable=protected-access
  np.testing.assert_array_equal(y_new.numpy(), [0.0, -4.0])
  np.testing.assert_array_equal(new['z'].numpy(), [0.0, -4.0])
  np.testing.assert_array_equal(new['x'].numpy(), [0.0, -4.0])
  opt.Apply(tf.constant(1.0), NestedMap(w=VarGrad(w, g)))
  np.testing.assert_array_equal(w.numpy(), [0.0, -4.0])


@pytest.mark.parametrize('cls', [optimizers.ScheduleFreeSGD,
                                 optimizers.ScheduleFreeAdamW])
def test_slot_dtype_is_refused_because_x_is_the_eval_weights(cls):
  with pytest.raises(ValueError) as e:
    cls.Params().Set(name='sf', slot_dtype=tf.bfloat16).Instantiate()
  msg = str(e.value)
  assert 'slot_dtype=bfloat16' in msg and 'eval weights' in msg
  assert 'slot_dtype=None' in msg and '\n' not in msg


# ---- params: refusals, factory, text -----------------------------------------


def test_unknown_warmup_form_is_refused_naming_the_choices():
  with pytest.raises(ValueError) as e:
    optimizers.ScheduleFreeAdamW.Params().Set(
        name='sf', warmup_form='pytorch').Instantiate()
  msg = str(e.value)
  assert "warmup_form='pytorch'" in msg and "'optax', 'reference'" in msg
  assert '\n' not in msg


@pytest.mark.parametrize('cls, key, value', [
    (optimizers.ScheduleFreeSGD, 'momentum', 1.0),
    (optimizers.ScheduleFreeSGD, 'momentum', 0.0),
    (optimizers.ScheduleFreeSGD, 'warmup_steps', -1),
    (optimizers.ScheduleFreeSGD, 'weight_lr_power', -2.0),
    (optimizers.ScheduleFreeSGD, 'r', -1.0),
    (optimizers.ScheduleFreeAdamW, 'beta1', 0.0),
    (optimizers.ScheduleFreeAdamW, 'beta2', 1.0),
    (optimizers.ScheduleFreeAdamW, 'epsilon', 0.0),
    (optimizers.ScheduleFreeAdamW, 'decoupled_weight_decay', -0.1),
])
def test_out_of_range_values_are_refused_naming_key_and_value(cls, key,
                                                              value):
  with pytest.raises(ValueError) as e:
    cls.Params().Set(name='sf', **{key: value}).Instantiate()
  msg = str(e.value)
  assert '%s=%r' % (key, value) in msg and '\n' not in msg, msg
  assert 'Set %s to' % key in msg


def test_factory_keywords_of_optax_and_keras_give_the_params():
  assert get_optimizer_fn(
      'schedule_free_adamw', b1=0.95, b2=0.99, eps=1e-6, weight_decay=0.1,
      warmup_steps=10).Params() == optimizers.ScheduleFreeAdamW.Params().Set(
          beta1=0.95, beta2=0.99, epsilon=1e-6, decoupled_weight_decay=0.1,
          warmup_steps=10)
  assert get_optimizer_fn('schedule_free_sgd', momentum=0.8).Params() == (
      optimizers.ScheduleFreeSGD.Params().Set(momentum=0.8))


@pytest.mark.parametrize('cls', [optimizers.ScheduleFreeSGD,
                                 optimizers.ScheduleFreeAdamW])
def test_params_round_trip_through_text(cls):
  p = cls.Params().Set(warmup_steps=7, warmup_form='reference', r=0.5,
                       weight_lr_power=1.0, decoupled_weight_decay=0.01)
  q = cls.Params().FromText(p.ToText())
  assert q == p and q.ToText() == p.ToText()
  assert q.Instantiate().params.warmup_form == 'reference'
