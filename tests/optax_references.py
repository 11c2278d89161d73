"""Reads the optax reference files and runs our optimizers on their cases.

The files (tests/data/optax_<topic>.json) are written by
tools/record_optax_<topic>.py with tools/optax_reference.py (the format is
in its docstring); this module only reads them, so the tests need neither
jax nor optax.

`RunOurs(optimizer_params, case)` feeds the case's recorded gradients to a
`Learner` (loss sum(w * g_t), whose gradient is exactly g_t) with the
case's constant rate and, when the case has one, global-norm clipping
(`clip_gradient_norm_to_value`, as optax.clip_by_global_norm), and returns
the weights after each step.
"""

import json
import os

import numpy as np
import tensorflow as tf

import learner as learner_lib
from learner.learner import Learner
from params import BaseLayer
from schedules import ConstantOne

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data')


def Load(topic, prefix='optax'):
  """The parsed tests/data/<prefix>_<topic>.json (dict with 'cases'; the
  torch recorders write the same format under prefix 'torch')."""
  with open(os.path.join(DATA, '%s_%s.json' % (prefix, topic))) as f:
    return json.load(f)


def Select(data, rule, **where):
  """The cases of `rule` whose fields equal `where` (a non-empty list)."""
  out = [c for c in data['cases'] if c['rule'] == rule and
         all(c[k] == v for k, v in where.items())]
  assert out, 'no recorded case %s %s' % (rule, where)
  return out


def CaseId(case):
  """A short readable id, e.g. 'nadam-matrix-float32-clip'."""
  return '%s-%s-%s%s' % (case['rule'], case['shape_name'], case['dtype'],
                         '-clip' if case['clip'] else '')


class _Weights(BaseLayer):
  """One variable 'w' of a given initial value."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'task'
    p.Define('init', None, 'The initial value (ndarray).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self.CreateVariable('w', list(p.init.shape), init=p.init,
                        dtype=p.dtype)


def RunOurs(optimizer_params, case, mode='function', learner_kw=None,
            on_step=None):
  """Our weights after each of the case's steps.

  Args:
    optimizer_params: the optimizer's params (a copy is used).
    case: one recorded case (dict).
    mode: 'eager', 'function' (tf.function) or 'xla' (jit_compile=True).
    learner_kw: extra Learner params (dict), e.g. another clipping mode.
    on_step: optional fn(learner, w) called eagerly after each step (e.g.
      to read the eval weights: learner.optimizer.GetAverage(w)).

  Returns:
    float64 ndarray (STEPS, *shape).
  """
  dtype = tf.as_dtype(case['dtype'])
  shape = tuple(case['shape'])
  init = np.asarray(case['init'], dtype.as_numpy_dtype).reshape(shape)
  task = _Weights.Params().Set(init=init, dtype=dtype).Instantiate()
  p = Learner.Params().Set(
      name='loss', learning_rate=case['lr'],
      lr_schedule=ConstantOne.Params(),
      optimizer=optimizer_params.Copy(),
      clip_gradient_norm_to_value=case['clip'] or 0.0)
  if learner_kw:
    p.Set(**learner_kw)
  lrn = p.Instantiate()
  lrn.Bind(task.vars)
  g = tf.Variable(tf.zeros(shape, dtype), trainable=False)

  def Step():
    with learner_lib.GradientTape():
      loss = tf.reduce_sum(task.theta.w * g)
    return lrn.Apply({'loss': (loss, 1.0)}, task.vars)[0]

  if mode != 'eager':
    Step = tf.function(Step, jit_compile=(mode == 'xla'))
  out = []
  for grad in case['grads']:
    g.assign(np.asarray(grad, dtype.as_numpy_dtype).reshape(shape))
    Step()
    out.append(task.vars.w.numpy().astype(np.float64))
    if on_step is not None:
      on_step(lrn, task.vars.w)
  return np.stack(out)


def Expected(case, key='params'):
  """The recorded trajectory (STEPS, *shape) float64 ndarray."""
  return np.asarray(case[key], np.float64).reshape(
      (-1,) + tuple(case['shape']))


def RelativeError(ours, ref):
  """max |ours - ref| over max |ref| (per step: the worst step), a float."""
  ours = np.asarray(ours, np.float64).reshape(np.shape(ref))
  err = np.abs(ours - ref).reshape(len(ref), -1).max(axis=1)
  scale = np.abs(ref).reshape(len(ref), -1).max(axis=1)
  return float(np.max(err / np.maximum(scale, 1e-30)))


def AssertMatches(ours, case, rtol=1e-6, key='params'):
  """Asserts ours equals the record within `rtol` (see `RelativeError`).

  The error of each step is taken relative to the largest weight of that
  step (the tensor's scale), so an entry passing through 0 does not make
  the ratio infinite.
  """
  err = RelativeError(ours, Expected(case, key))
  assert err <= rtol, '%s: relative error %.3g > %.3g' % (
      CaseId(case), err, rtol)
