"""learner.run: MoXing-style model_fn / input_fn / optimizer_fn entry point."""

import io

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
