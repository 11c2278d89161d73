"""Every job evaluates Lookahead's slow weights and SWA's average.

y = w*x + b with two learners (tests/test_training/readonly_experiments.py):
'lw' trains w with momentum (raw weights), 'lb' trains b with Lookahead
(k 7, alpha 0.5, given as params) or SWA (samples after global steps 10, 20
and 30, given through optimizer_fn). train_and_eval's evaluations,
--mode=eval, --mode=evaler and --mode=export must all use raw w and b's
kept copy, read by hand from the checkpoint; SWA's copy is checked against
the mean of the raw b of the three checkpoints. A run resumed at step 20
ends bit-identical to the uninterrupted one (the evaluations' swaps
included).
"""

import io
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from params import registry
from learner import optimizers
from learner.optimizers.wrappers import ema
from learner.optimizers.wrappers import lookahead
from learner.optimizers.wrappers import swa
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import export as export_lib
from learner.training.jobs import trainer as trainer_lib
import readonly_experiments  # pylint: disable=unused-import

_LOOKAHEAD = 'readonly_experiments.TwoLearnersLookahead'
_SWA = 'readonly_experiments.TwoLearnersSwaFn'
_W = 'task/_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE'
_B = 'task/_private_vars/b/.ATTRIBUTES/VARIABLE_VALUE'
_B_COPY = ('task/_private_children/lb/_private_children/optimizer/_averages/'
           'regression_b/.ATTRIBUTES/VARIABLE_VALUE')
_LABEL = {_LOOKAHEAD: 'Lookahead slow copies', _SWA: 'SWA averages'}


def _Trainer(logdir, key, mode, max_steps=None):
  p = registry.GetParams(key)
  if max_steps is not None:
    p.task.train.max_steps = max_steps
  out = io.StringIO()
  t = trainer_lib.Trainer(p, str(logdir), mode=mode, stream=out)
  return t, t.Run(), out.getvalue()


def _Read(prefix, key):
  return float(tf.train.load_checkpoint(prefix).get_tensor(key))


def _Expected(prefix, key):
  """{'w', 'b', 'loss'} by hand: raw w, b's kept copy, the eval set's MSE."""
  w, b = _Read(prefix, _W), _Read(prefix, _B_COPY)
  sq = [(w * batch['x'].numpy().astype(np.float64) + b -
         batch['y'].numpy()) ** 2 for batch in
        registry.GetParams(key).eval_input.Instantiate().GetDataset()]
  return {'w': w, 'b': b, 'loss': float(np.concatenate(sq).mean())}


def _AssertValues(got, want):
  for k in ('w', 'b', 'loss'):
    np.testing.assert_allclose(got[k], want[k], rtol=1e-5, err_msg=k)


@pytest.fixture(scope='module', params=[_LOOKAHEAD, _SWA],
                ids=['lookahead', 'swa'])
def trained(request, tmp_path_factory):
  """(key, logdir, trainer, final metrics, output) of a 30-step run."""
  logdir = tmp_path_factory.mktemp('averaging') / 'run'
  t, final, out = _Trainer(logdir, request.param, 'train_and_eval')
  return request.param, logdir, t, final, out


def test_kept_copies_by_hand(trained):
  key, logdir, t, _, _ = trained
  ckpt = lambda step: str(logdir / 'ckpt' / ('ckpt-%d' % step))
  opt = t.task.learners[1].optimizer
  b = t.task.vars.b
  assert float(opt.GetAverage(b).numpy()) == _Read(ckpt(30), _B_COPY)
  if key == _SWA:
    assert isinstance(opt, swa.SWA) and int(opt.num_averaged.numpy()) == 3
    raw = [_Read(ckpt(s), _B) for s in (10, 20, 30)]
    for n, step in enumerate((10, 20, 30)):
      np.testing.assert_allclose(_Read(ckpt(step), _B_COPY),
                                 np.mean(raw[:n + 1]), rtol=1e-6)
  else:
    assert isinstance(opt, lookahead.Lookahead)
    assert int(opt.num_updates.numpy()) == 30  # Last sync: update 28.
  for step in (10, 20, 30):  # The copy lags the raw b at every checkpoint.
    if key == _SWA and step == 10:
      continue  # One sample: the average is that b.
    assert abs(_Read(ckpt(step), _B_COPY) - _Read(ckpt(step), _B)) > 1e-4
  # 'lw' keeps no copy: its w is evaluated raw.
  assert not any('_averages/regression_w' in k for k in
                 tf.train.load_checkpoint(ckpt(30)).get_variable_to_shape_map())


def test_train_and_eval_and_mode_eval_use_the_kept_copy(trained):
  key, logdir, _, final, out = trained
  want = _Expected(str(logdir / 'ckpt' / 'ckpt-30'), key)
  assert 'Evaluating on the %s of the weights.' % _LABEL[key] in out
  _AssertValues(final, want)
  _, r, out2 = _Trainer(logdir, key, 'eval')
  assert r['global_step'] == 30
  assert '%s of the weights (1 variables restored' % _LABEL[key] in out2
  for k in ('w', 'b', 'loss'):
    assert r[k] == final[k], k


def test_evaler_and_export_use_the_kept_copy(trained, tmp_path):
  key, logdir, _, _, _ = trained
  copy = tmp_path / 'run'
  shutil.copytree(logdir, copy)
  out = io.StringIO()
  record = evaler_lib.Evaler(registry.GetParams(key), str(copy),
                             timeout_secs=0.5, poll_secs=0,
                             stream=out).Run()
  assert [e['global_step'] for e in record['evaluations']] == [10, 20, 30]
  for e in record['evaluations']:
    _AssertValues(e['metrics'], _Expected(e['checkpoint'], key))
  assert '%s of 1 variables' % _LABEL[key] in out.getvalue()
  out = io.StringIO()
  export_dir = export_lib.Export(registry.GetParams(key), str(copy),
                                 stream=out)
  assert export_dir == os.path.join(str(copy), 'export', '30')
  assert '(%s of 1 variables)' % _LABEL[key] in out.getvalue()
  want = _Expected(str(copy / 'ckpt' / 'ckpt-30'), key)
  x = np.array([0.0, 1.0, -2.5], np.float32)
  y = tf.saved_model.load(export_dir).signatures['serving_default'](
      x=tf.constant(x))['y'].numpy()
  np.testing.assert_allclose(y, want['w'] * x + want['b'], rtol=1e-5)


def test_resumed_at_step_20_ends_bit_identical(trained, tmp_path):
  key, logdir, _, _, _ = trained
  resumed = tmp_path / 'resumed'
  _Trainer(resumed, key, 'train', max_steps=20)
  _, _, out = _Trainer(resumed, key, 'train')
  assert 'Resumed from' in out and 'global step 20' in out
  a = tf.train.load_checkpoint(str(resumed / 'ckpt' / 'ckpt-30'))
  b = tf.train.load_checkpoint(str(logdir / 'ckpt' / 'ckpt-30'))
  # Not compared: the iterator's serialized state, the object graph and
  # save_counter (the resumed run saved fewer checkpoints).
  skip = ('ITERATOR', '_CHECKPOINTABLE_OBJECT_GRAPH', 'save_counter')
  keys = sorted(k for k in a.get_variable_to_shape_map()
                if not any(s in k for s in skip))
  assert keys == sorted(k for k in b.get_variable_to_shape_map()
                        if not any(s in k for s in skip))
  assert _B_COPY in keys
  for k in keys:
    np.testing.assert_array_equal(a.get_tensor(k), b.get_tensor(k),
                                  err_msg=k)


def test_an_swa_around_an_ema_is_evaluated_on_the_outer_swa_average(
    tmp_path):
  # train_and_eval swaps the innermost copy in first and the outermost last,
  # and --mode=eval reads the outermost's key: both give SWA's average.
  p = registry.GetParams('regression.LinearRegression')
  p.task.train.Set(max_steps=20, save_interval_steps=20,
                   summary_interval_steps=10, log_interval_steps=10)
  p.task.eval.interval_steps = 20
  lp = p.task.train.learner
  lp.Set(optimizer_fn=None, learning_rate=0.05, optimizer=swa.SWA.Params().Set(
      swa_start=4, swa_freq=5, optimizer=ema.Ema.Params().Set(
          decay=0.9, optimizer=optimizers.Momentum.Params())))
  t = trainer_lib.Trainer(p, str(tmp_path), mode='train_and_eval',
                          stream=io.StringIO())
  final = t.Run()
  outer = t.task.learner.optimizer
  inner = outer.optimizer
  assert outer.EvalAverages() == [outer, inner]
  w = t.task.vars.w
  swa_w = float(outer.GetAverage(w).numpy())
  ema_w = float(inner.GetAverage(w).numpy())
  assert min(abs(swa_w - ema_w), abs(swa_w - float(w.numpy()))) > 1e-4
  np.testing.assert_allclose(final['w'], swa_w, rtol=1e-6)
  out = io.StringIO()
  r = trainer_lib.Trainer(p, str(tmp_path), mode='eval', stream=out).Run()
  assert r['w'] == final['w']
  assert ('Evaluating on the SWA averages and EMA averages of the weights '
          '(2 variables restored') in out.getvalue()
