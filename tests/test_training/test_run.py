"""learner.run: MoXing-style model_fn / input_fn / optimizer_fn entry point."""

import io
import os

import numpy as np
import pytest
import tensorflow as tf

import learner


def _Data():
  rng = np.random.RandomState(0)
  x = rng.uniform(-1, 1, size=[256, 1]).astype(np.float32)
  y = (3.0 * x - 1.0).astype(np.float32)
  return x, y


def _Fns():
  x, y = _Data()
  w = tf.Variable(0.0, name='fn_model/w')
  b = tf.Variable(0.0, name='fn_model/b')
  made = {}

  def input_fn(mode):
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if mode == learner.ModeKeys.TRAIN:
      return ds.shuffle(256, seed=1).repeat().batch(32)
    return ds.batch(128)

  def model_fn(inputs, mode):
    del mode
    xb, yb = inputs
    if 'v' not in made:  # variables made on the first call
      made['v'] = tf.Variable(1.0, name='fn_model/scale')
    pred = made['v'] * (w * xb[:, 0] + b)
    loss = tf.reduce_mean(tf.square(pred - yb[:, 0]))
    return learner.ModelSpec(loss=loss, log_info={
        'abs_err': tf.reduce_mean(tf.abs(pred - yb[:, 0]))})

  return model_fn, input_fn


def test_run_trains_then_evaluates_without_optimizer(tmp_path):
  model_fn, input_fn = _Fns()
  r = learner.run(model_fn=model_fn, input_fn=input_fn,
                  optimizer_fn=learner.get_optimizer_fn(
                      'momentum', learning_rate=0.05, momentum=0.9),
                  run_mode=learner.ModeKeys.TRAIN, log_dir=str(tmp_path),
                  max_number_of_steps=200, stream=io.StringIO())
  assert r['global_step'] == 200
  assert r['train/loss'] < 1e-3, r
  # EVAL ignores optimizer_fn (even a wrong one) and restores the weights.
  model_fn2, input_fn2 = _Fns()
  out = io.StringIO()
  r2 = learner.run(model_fn=model_fn2, input_fn=input_fn2,
                   optimizer_fn=tf.keras.optimizers.Adam(0.1),
                   run_mode=learner.ModeKeys.EVAL, log_dir=str(tmp_path),
                   stream=out)
  assert r2['global_step'] == 200
  assert r2['loss'] < 1e-3 and r2['abs_err'] < 0.03, r2


def test_run_with_a_keras_optimizer_callable(tmp_path):
  model_fn, input_fn = _Fns()
  r = learner.run(model_fn=model_fn, input_fn=input_fn,
                  optimizer_fn=lambda: tf.keras.optimizers.Adam(0.05),
                  run_mode=learner.ModeKeys.TRAIN_AND_EVAL,
                  log_dir=str(tmp_path), max_number_of_steps=150,
                  stream=io.StringIO())
  assert r['loss'] < 0.05, r


def test_c_not_callable_optimizer_instance_is_a_type_error_with_the_fix(
    tmp_path):
  model_fn, input_fn = _Fns()
  with pytest.raises(TypeError, match=r'optimizer_fn=lambda: '):
    learner.run(model_fn=model_fn, input_fn=input_fn,
                optimizer_fn=tf.keras.optimizers.Adam(0.1),
                run_mode=learner.ModeKeys.TRAIN, log_dir=str(tmp_path))
  assert not (tmp_path / 'params.txt').exists()


def test_train_without_optimizer_fn_is_an_error(tmp_path):
  model_fn, input_fn = _Fns()
  with pytest.raises(ValueError, match='optimizer_fn'):
    learner.run(model_fn=model_fn, input_fn=input_fn,
                run_mode=learner.ModeKeys.TRAIN, log_dir=str(tmp_path))


def test_bad_run_mode_and_bad_model_fn(tmp_path):
  model_fn, input_fn = _Fns()
  with pytest.raises(ValueError, match="'predict'"):
    learner.run(model_fn=model_fn, input_fn=input_fn, run_mode='predict',
                log_dir=str(tmp_path))
  with pytest.raises(TypeError, match='ModelSpec'):
    learner.run(model_fn=lambda inputs, mode: 1.0, input_fn=input_fn,
                optimizer_fn=learner.get_optimizer_fn('sgd',
                                                      learning_rate=0.1),
                log_dir=str(tmp_path))


def test_log_info_named_loss_and_missing_log_dir_are_refused(tmp_path):
  model_fn, input_fn = _Fns()
  sgd = learner.get_optimizer_fn('sgd', learning_rate=0.1)
  with pytest.raises(ValueError, match='log_dir'):
    learner.run(model_fn=model_fn, input_fn=input_fn, optimizer_fn=sgd)

  def bad_model_fn(inputs, mode):
    spec = model_fn(inputs, mode)
    return learner.ModelSpec(loss=spec.loss, log_info={'loss': spec.loss})

  with pytest.raises(ValueError, match="log_info.*'loss'"):
    learner.run(model_fn=bad_model_fn, input_fn=input_fn, optimizer_fn=sgd,
                log_dir=str(tmp_path))


def _Tree(logdir):
  out = {}
  for root, _, files in os.walk(str(logdir)):
    for name in files:
      with open(os.path.join(root, name), 'rb') as f:
        out[os.path.relpath(os.path.join(root, name), str(logdir))] = f.read()
  return out


def test_train_eval_and_rerun_print_no_params_warning(tmp_path):
  # The README's pair (TRAIN, then EVAL without optimizer_fn), then the
  # whole script again: no job warns about params, the rerun writes nothing.
  sgd = learner.get_optimizer_fn('momentum', learning_rate=0.05, momentum=0.9)
  outs = []
  for mode in ('train', 'eval', 'train', 'eval'):
    model_fn, input_fn = _Fns()
    out = io.StringIO()
    learner.run(model_fn=model_fn, input_fn=input_fn,
                optimizer_fn=sgd if mode == 'train' else None,
                run_mode=mode, log_dir=str(tmp_path),
                max_number_of_steps=40, stream=out)
    outs.append(out.getvalue())
    if len(outs) == 2:
      before = _Tree(tmp_path)
  assert not any('WARNING' in o or '--params_override' in o for o in outs)
  assert 'is finished (global step 40' in outs[2]
  # Only the second eval job's own TensorBoard file is new.
  after = _Tree(tmp_path)
  new = sorted(set(after) - set(before))
  assert len(new) == 1 and new[0].startswith('eval_job/events'), new
  assert {k: after[k] for k in before} == before
  # A resume with other arguments is told so in learner.run's terms.
  model_fn, input_fn = _Fns()
  out = io.StringIO()
  learner.run(model_fn=model_fn, input_fn=input_fn, optimizer_fn=sgd,
              log_dir=str(tmp_path), max_number_of_steps=50, stream=out)
  text = out.getvalue()
  assert '- task.train.max_steps : 40' in text
  assert 'call learner.run with the arguments' in text
  assert '--params' not in text
