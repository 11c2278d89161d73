"""Tests of learner/optimizers/wrappers/swa.py (Izmailov et al. 2018).

The reference is written here in numpy with the semantics of PyTorch's
torch.optim.swa_utils.AveragedModel (n_averaged; the first sample copied,
then avg + (w - avg) / (n + 1)) sampled at TF Addons' SWA steps (update i,
0-based, with i >= start and (i - start) % freq == 0), and it is checked
against the plain mean of the sampled weights.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.optimizers.wrappers import swa
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
from params import Params


class RefSWA:
  """numpy SWA around momentum (m <- 0.9 m + g; w <- w - lr m)."""

  def __init__(self, w, start, freq):
    self.w = np.array(w, np.float64)
    self.m = np.zeros_like(self.w)
    self.avg = self.w.copy()
    self.start, self.freq = start, freq
    self.i = 0
    self.n = 0
    self.samples = []

  def Step(self, g, lr):
    self.m = 0.9 * self.m + g
    self.w = self.w - lr * self.m
    if self.i >= self.start and (self.i - self.start) % self.freq == 0:
      # AveragedModel.update_parameters: copy first, then the running mean.
      self.avg = (self.w.copy() if self.n == 0 else
                  self.avg + (self.w - self.avg) / (self.n + 1))
      self.n += 1
      self.samples.append(self.w.copy())
    elif self.n == 0:
      self.avg = self.w.copy()  # Ours: no sample yet, avg follows w.
    self.i += 1


def _Swa(**kw):
  return swa.SWA.Params().Set(
      name='swa', optimizer=optimizers.Momentum.Params().Set(alpha=0.9),
      **kw).Instantiate()


def _Problem(dtype=np.float32, steps=12):
  rng = np.random.RandomState(3)
  init = rng.randn(4, 3)
  grads = rng.randn(steps, 4, 3)
  return init.astype(dtype), grads.astype(dtype)


@pytest.mark.parametrize('mode', ['eager', 'function', 'xla'])
@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('start,freq', [(0, 1), (3, 4), (2, 3), (20, 1)])
def test_average_matches_numpy_swa_and_the_mean_of_the_samples(
    start, freq, dtype, mode):
  init, grads = _Problem(dtype)
  w = tf.Variable(init, name='w')
  opt = _Swa(swa_start=start, swa_freq=freq).Bind([w])
  ref = RefSWA(init, start, freq)

  def Step(g):
    opt.Apply(0.1, NestedMap(w=VarGrad(w, g)))

  if mode != 'eager':
    Step = tf.function(Step, jit_compile=(mode == 'xla'))
  for g in grads:
    Step(tf.constant(g))
    ref.Step(g.astype(np.float64), np.float64(np.float32(0.1)))
    np.testing.assert_allclose(w.numpy(), ref.w, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(opt.GetAverage(w).numpy(), ref.avg,
                               rtol=1e-6, atol=1e-6)
  assert int(opt.num_averaged.numpy()) == ref.n
  # Samples taken at updates start, start + freq, ... (0-based) of 12.
  assert ref.n == len(range(start, 12, freq))
  if ref.n:
    np.testing.assert_allclose(opt.GetAverage(w).numpy(),
                               np.mean(ref.samples, axis=0), rtol=1e-6,
                               atol=1e-6)
  else:  # Before swa_start the average is the weights.
    np.testing.assert_array_equal(opt.GetAverage(w).numpy(), w.numpy())


def test_c_swa_by_hand_swap_and_checkpoint(tmp_path):
  # SGD lr 1, g = 1: w 10 -> 9, 8, 7, 6, 5. swa_start 1, swa_freq 2: samples
  # after updates 1 and 3 (w 8 and 6): avg 10 -> 9 (follows) -> 8 -> 8 -> 7.
  w = tf.Variable(10.0, name='w')
  opt = swa.SWA.Params().Set(name='swa', optimizer=optimizers.SGD.Params(),
                             swa_start=1, swa_freq=2).Instantiate().Bind([w])
  step = lambda o, v: o.Apply(1.0, NestedMap(w=VarGrad(v, tf.constant(1.0))))
  got = []
  for _ in range(4):
    step(opt, w)
    got.append(float(opt.GetAverage(w).numpy()))
  assert got == [9.0, 8.0, 8.0, 7.0]
  assert int(opt.num_averaged.numpy()) == 2
  with opt.SwapAverages():
    assert float(w.numpy()) == 7.0
  assert float(w.numpy()) == 6.0
  path = tf.train.Checkpoint(opt=opt, w=w).save(str(tmp_path / 'ckpt'))
  w2 = tf.Variable(0.0, name='w')
  opt2 = swa.SWA.Params().Set(name='swa', optimizer=optimizers.SGD.Params(),
                              swa_start=1, swa_freq=2).Instantiate().Bind([w2])
  tf.train.Checkpoint(opt=opt2, w=w2).restore(path).assert_consumed()
  assert int(opt2.num_averaged.numpy()) == 2
  step(opt2, w2)  # Update 4: not sampled.
  step(opt2, w2)  # Update 5, w 4: (8 + 6 + 4) / 3 = 6.
  assert float(opt2.GetAverage(w2).numpy()) == 6.0


def test_swa_is_an_eval_average_found_in_the_tree():
  p = optimizers.Lars.Params().Set(
      name='opt', optimizer=swa.SWA.Params().Set(
          optimizer=optimizers.Momentum.Params()))
  assert p.cls.EvalAverageClasses(p) == [swa.SWA]
  w = tf.Variable([1.0, 2.0], name='enc/w')
  opt = p.Instantiate().Bind([w])
  assert opt.EvalAverages() == [opt.optimizer]


def test_factory_name_aliases_and_text_round_trip():
  fn = get_optimizer_wrapper_fn(
      'swa', get_optimizer_fn('momentum', learning_rate=0.05), swa_start=100,
      swa_freq=10)
  assert fn.Params() == swa.SWA.Params().Set(
      swa_start=100, swa_freq=10, optimizer=optimizers.Momentum.Params())
  tfa_names = get_optimizer_wrapper_fn(
      'swa', get_optimizer_fn('sgd'), start_averaging=5, average_period=2)
  assert (tfa_names.Params().swa_start, tfa_names.Params().swa_freq) == (5, 2)
  p = Params()
  p.Define('optimizer_fn', fn, '')
  q = Params()
  q.Define('optimizer_fn', None, '')
  q.FromText(p.ToText())
  assert q.optimizer_fn == fn and q.optimizer_fn.learning_rate == 0.05
  sp = swa.SWA.Params().Set(swa_start=7, swa_freq=3,
                            optimizer=optimizers.SGD.Params())
  text = sp.ToText()
  assert 'swa_start : 7' in text and 'swa_freq : 3' in text
  fresh = swa.SWA.Params()
  fresh.FromText(text)
  assert fresh == sp, sp.TextDiff(fresh)


@pytest.mark.parametrize('key,value,fix', [
    ('swa_start', -1, 'Set swa_start to an int >= 0, e.g. 1000'),
    ('swa_start', 1.5, 'Set swa_start to an int >= 0, e.g. 1000'),
    ('swa_start', True, 'Set swa_start to an int >= 0, e.g. 1000'),
    ('swa_freq', 0, 'Set swa_freq to an int >= 1, e.g. 100'),
    ('swa_freq', 2.0, 'Set swa_freq to an int >= 1, e.g. 100'),
])
def test_bad_values_are_refused_naming_key_value_and_fix(key, value, fix):
  p = swa.SWA.Params().Set(optimizer=optimizers.SGD.Params(),
                           **{key: value})
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  msg = str(e.value)
  assert '%s=%r' % (key, value) in msg and fix in msg and '\n' not in msg
