"""Adaptive gradient clipping (Learner.adaptive_clip_ratio, AGC).

Brock et al. 2021, "High-Performance Large-Scale Image Recognition Without
Normalization", section 4.1, unit-wise as optax.adaptive_grad_clip. The
trajectories are optax's (tests/data/optax_agc.json, recorded by
tools/record_optax_agc.py): chain(adaptive_grad_clip(c), sgd / adam), with
and without clip_by_global_norm(1.0) first.
"""

import numpy as np
import pytest
import tensorflow as tf

import learner as learner_lib
from learner import gradient_pipeline as pipeline
from learner.learner import Learner
from learner.optimizers import Adam
from learner.optimizers import SGD
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.training.cluster import distribution
from params import BaseLayer
from schedules import ConstantOne
import optax_references as refs

_DATA = refs.Load('agc')


def _Ours(case):
  """(optimizer params, learner_kw) of a recorded case."""
  kw = case['kwargs']
  learner_kw = dict(adaptive_clip_ratio=kw['clipping'],
                    adaptive_clip_eps=kw['eps'])
  if case['rule'].startswith('agc_adam'):
    return Adam.Params().Set(epsilon=kw['adam_eps']), learner_kw
  return SGD.Params(), learner_kw


@pytest.mark.parametrize('case', _DATA['cases'], ids=refs.CaseId)
def test_matches_optax_adaptive_grad_clip(case):
  opt, kw = _Ours(case)
  ours = refs.RunOurs(opt, case, learner_kw=kw)
  refs.AssertMatches(ours, case, rtol=1e-6)


def _XlaCases():
  return [c for c in _DATA['cases'] if c['dtype'] == 'float32' and
          c['shape_name'] == 'conv']


@pytest.mark.parametrize('case', _XlaCases(), ids=refs.CaseId)
def test_matches_optax_under_xla_and_eagerly(case):
  opt, kw = _Ours(case)
  for mode in ('xla', 'eager'):
    refs.AssertMatches(refs.RunOurs(opt, case, mode, learner_kw=kw), case,
                       rtol=1e-6)


def test_the_recorded_cases_clip_some_units_and_not_others():
  # The references are only a test of AGC if it engages: on the first step
  # of the c=0.5 SGD matrix case (no global clip) compute it by hand.
  case = refs.Select(_DATA, 'agc_sgd_c0.5', shape_name='matrix',
                     dtype='float64', clip=None)[0]
  w0 = np.asarray(case['init']).reshape(4, 3)
  g0 = np.asarray(case['grads'][0]).reshape(4, 3)
  limit = 0.5 * np.maximum(np.linalg.norm(w0, axis=0), 1e-3)
  g_norm = np.linalg.norm(g0, axis=0)
  factor = np.where(g_norm < limit, 1.0, limit / g_norm)
  np.testing.assert_allclose(refs.Expected(case)[0], w0 - 0.1 * g0 * factor,
                             rtol=1e-12)
  assert np.any(factor < 1.0)


class _Task(BaseLayer):
  """Variables of given initial values (a dict name -> ndarray)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'task'
    p.Define('inits', None, 'dict name -> ndarray')
    return p

  def __init__(self, params):
    super().__init__(params)
    for k, v in sorted(self.params.inits.items()):
      self.CreateVariable(k, list(v.shape), init=v, dtype=tf.float32)


def _Learner(task, **kw):
  p = Learner.Params().Set(name='loss', learning_rate=1.0,
                           lr_schedule=ConstantOne.Params(),
                           optimizer=SGD.Params(), **kw)
  return p.Instantiate().Bind(task.vars)


def _Step(task, lrn, grads):
  """One eager step with loss sum(w * g); returns the eval metrics."""
  with learner_lib.GradientTape():
    loss = tf.add_n([tf.reduce_sum(task.theta[k] * g)
                     for k, g in sorted(grads.items())])
  return lrn.Apply({'loss': (loss, 1.0)}, task.vars)[2]


def test_units_eps_and_metrics_by_hand():
  # w: a zero vector (eps engages) and a (2, 2) matrix with columns of norm
  # 5 and 1. c = 0.1: limits 1e-5 (vector: 0.1 * eps), 0.5 and 0.1.
  inits = {'b': np.zeros([3], np.float32),
           'w': np.array([[3., 1.], [4., 0.]], np.float32)}
  task = _Task.Params().Set(inits=inits).Instantiate()
  lrn = _Learner(task, adaptive_clip_ratio=0.1, adaptive_clip_eps=1e-4)
  grads = {'b': np.array([0., 3e-6, 4e-6], np.float32),   # norm 5e-6: kept
           'w': np.array([[0.3, 0.], [0.4, 2.]], np.float32)}
  # column 0 has norm 0.5, not < 0.5: "clipped" by factor 1; column 1 has
  # norm 2 > 0.1: scaled by 0.05.
  m = _Step(task, lrn, grads)
  np.testing.assert_allclose(task.vars.b.numpy(), -grads['b'], rtol=1e-6)
  np.testing.assert_allclose(
      task.vars.w.numpy(), [[2.7, 1.], [3.6, -0.1]], rtol=1e-6)
  assert m[pipeline.ADAPTIVE_CLIPPED_UNITS][0].numpy() == pytest.approx(2 / 3)
  # grad_norm/all before, grad_norm/clipped after AGC.
  np.testing.assert_allclose(m[pipeline.GRAD_NORM][0].numpy(),
                             np.sqrt(25e-12 + 0.25 + 4.0), rtol=1e-6)
  np.testing.assert_allclose(m[pipeline.GRAD_NORM_CLIPPED][0].numpy(),
                             np.sqrt(25e-12 + 0.25 + 0.01), rtol=1e-6)


def test_conv_kernel_units_are_output_channels_and_rank3_axis0():
  rng = np.random.RandomState(3)
  inits = {'k': rng.normal(size=(2, 2, 3, 4)).astype(np.float32),
           'h': rng.normal(size=(3, 2, 5)).astype(np.float32)}
  task = _Task.Params().Set(inits=inits).Instantiate()
  lrn = _Learner(task, adaptive_clip_ratio=0.05)
  grads = {k: rng.normal(size=v.shape).astype(np.float32)
           for k, v in inits.items()}
  _Step(task, lrn, grads)
  for name, axes in (('k', (0, 1, 2)), ('h', (0,))):
    w, g = inits[name], grads[name]
    limit = 0.05 * np.maximum(
        np.sqrt((w ** 2).sum(axis=axes, keepdims=True)), 1e-3)
    gn = np.sqrt((g ** 2).sum(axis=axes, keepdims=True))
    want = w - g * np.where(gn < limit, 1.0, limit / gn)
    np.testing.assert_allclose(task.vars[name].numpy(), want, rtol=1e-5,
                               atol=1e-6)


def test_sparse_gradient_is_clipped_as_its_dense_gradient():
  table = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.
  results = []
  for sparse in (True, False):
    task = _Task.Params().Set(inits={'e': table}).Instantiate()
    lrn = _Learner(task, adaptive_clip_ratio=0.1)
    with learner_lib.GradientTape():
      ids = tf.constant([1, 3, 1])
      rows = (tf.gather(task.theta.e, ids) if sparse else
              tf.matmul(tf.one_hot(ids, 4), task.theta.e))
      loss = tf.reduce_sum(rows * tf.constant([[1., 2., 3.]]))
    lrn.Apply({'loss': (loss, 1.0)}, task.vars)
    results.append(task.vars.e.numpy())
  np.testing.assert_allclose(results[0], results[1], rtol=1e-6)
  assert not np.allclose(results[0], table - np.array(  # it did clip
      [[0] * 3, [2, 4, 6], [0] * 3, [1, 2, 3]], np.float32))


@pytest.mark.parametrize('key,value', [
    ('adaptive_clip_ratio', -0.1), ('adaptive_clip_ratio', float('nan')),
    ('adaptive_clip_ratio', True), ('adaptive_clip_eps', 0.0),
    ('adaptive_clip_eps', -1e-3), ('adaptive_clip_eps', None)])
def test_bad_values_are_refused_naming_the_key(key, value):
  p = Learner.Params().Set(name='loss', learning_rate=1.0,
                           optimizer=SGD.Params())
  p.Set(**{key: value})
  with pytest.raises(ValueError, match=key) as e:
    p.Instantiate()
  assert '\n' not in str(e.value)


def test_rank_6_variable_is_refused_at_bind():
  task = _Task.Params().Set(
      inits={'x': np.ones([2] * 6, np.float32)}).Instantiate()
  with pytest.raises(ValueError, match=r"adaptive_clip_ratio: variable "
                     r"'task/x' has shape \[2, 2, 2, 2, 2, 2\] \(rank 6\)"):
    _Learner(task, adaptive_clip_ratio=0.1)


def test_off_by_default_and_no_metric():
  task = _Task.Params().Set(
      inits={'w': np.ones([2, 2], np.float32)}).Instantiate()
  m = _Step(task, _Learner(task), {'w': np.full([2, 2], 9., np.float32)})
  assert pipeline.ADAPTIVE_CLIPPED_UNITS not in m
  np.testing.assert_allclose(task.vars.w.numpy(), np.full([2, 2], -8.))


def test_mirrored_strategy_clips_the_all_reduced_gradient():
  # Two replicas (tests/conftest.py), w = [[3, 1], [4, 0]]: limits 0.5 and
  # 0.1 at c = 0.1. The mean gradient [[0, 0], [0, 0.2]] has its column 1
  # halved: w moves by [[0, 0], [0, 0.1]]. Clipping each replica's gradient
  # before the mean would give 0.05 there (and the same column 0).
  strategy = distribution.CreateStrategy('mirrored')
  assert strategy.num_replicas_in_sync == 2
  per_replica = [np.array([[1., 0.], [0., 0.4]], np.float32),
                 np.array([[-1., 0.], [0., 0.]], np.float32)]
  with strategy.scope():
    task = _Task.Params().Set(
        inits={'w': np.array([[3., 1.], [4., 0.]], np.float32)}).Instantiate()
    lrn = _Learner(task, adaptive_clip_ratio=0.1)

  def _Fn(g):
    loss = tf.reduce_sum(g * task.theta.w)
    return lrn.Apply({'loss': (loss, 1.0)}, task.vars)[2]

  @tf.function
  def _Step():
    g = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(per_replica[ctx.replica_id_in_sync_group]))
    return strategy.run(_Fn, args=(g,))

  m = _Step()
  for w in strategy.experimental_local_results(task.vars.w):
    np.testing.assert_allclose(w.numpy(), [[3., 1.], [4., -0.1]], rtol=1e-6)
  clipped = strategy.experimental_local_results(
      m[pipeline.ADAPTIVE_CLIPPED_UNITS][0])
  assert [float(x) for x in clipped] == [0.5, 0.5]


def test_accumulation_clips_the_window_mean_once():
  # The numbers of the MirroredStrategy case, as two micro-batches of one
  # window: the mean gradient [[0, 0], [0, 0.2]] has column 1 halved.
  task = _Task.Params().Set(
      inits={'w': np.array([[3., 1.], [4., 0.]], np.float32)}).Instantiate()
  lrn = Learner.Params().Set(
      name='loss', learning_rate=1.0, lr_schedule=ConstantOne.Params(),
      adaptive_clip_ratio=0.1,
      optimizer=GradientAccumulation.Params().Set(
          num_batches=2, optimizer=SGD.Params())).Instantiate()
  lrn.Bind(task.vars)
  _Step(task, lrn, {'w': np.array([[1., 0.], [0., 0.4]], np.float32)})
  np.testing.assert_array_equal(task.vars.w.numpy(), [[3., 1.], [4., 0.]])
  m = _Step(task, lrn, {'w': np.array([[-1., 0.], [0., 0.]], np.float32)})
  np.testing.assert_allclose(task.vars.w.numpy(), [[3., 1.], [4., -0.1]],
                             rtol=1e-6)
  assert float(m[pipeline.ADAPTIVE_CLIPPED_UNITS][0]) == 0.5
