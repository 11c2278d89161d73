"""lm.CharTransformerTask's dropout_prob: on in train steps only, checked."""

import numpy as np
import pytest
import tensorflow as tf

from params import registry
import configs.lm  # pylint: disable=unused-import


def _Task(dropout_prob):
  p = registry.GetParams('lm.CharTransformer').task
  p.Set(model_dim=16, num_layers=1, num_heads=2, hidden_dim=32,
        dropout_prob=dropout_prob)
  task = p.Instantiate()
  task.CreateLearners()
  return task


def _Batch():
  rng = np.random.RandomState(0)
  ids = rng.randint(0, 103, size=[4, 12]).astype(np.int32)
  return {'ids': ids, 'labels': np.roll(ids, -1, axis=1)}


def test_eval_has_no_dropout_and_train_steps_do():
  batch = _Batch()
  plain, dropped = _Task(0.0), _Task(0.5)
  # Same seed, same initial weights: evaluation ignores dropout_prob.
  e0 = plain.EvalStep(batch)['loss'][0].numpy()
  e1 = dropped.EvalStep(batch)['loss'][0].numpy()
  np.testing.assert_allclose(e1, e0, rtol=1e-6)
  np.testing.assert_allclose(dropped.EvalStep(batch)['loss'][0].numpy(), e1,
                             rtol=1e-6)
  # A train step's metrics are computed before its update: without dropout
  # they equal the evaluation's; with p = 0.5 they differ.
  t0 = plain.TrainStep(batch)['metrics']['loss'][0].numpy()
  t1 = dropped.TrainStep(batch)['metrics']['loss'][0].numpy()
  np.testing.assert_allclose(t0, e0, rtol=1e-5)
  assert abs(t1 - e1) > 1e-3, (t1, e1)


def test_dropout_prob_one_is_refused_naming_the_key():
  p = registry.GetParams('lm.CharTransformer').task
  p.dropout_prob = 1.0
  with pytest.raises(ValueError, match='dropout_prob'):
    p.Instantiate()


def _TrainLosses(task, batch, steps):
  return [float(task.TrainStep(batch)['metrics']['loss'][0].numpy())
          for _ in range(steps)]


def test_dropout_masks_are_a_function_of_the_step(tmp_path):
  # Two tasks built alike train alike (the masks are drawn from the global
  # step, params.step_seeds, not from a per-process random state), and a
  # task restored from the other's checkpoint continues as it does: the
  # masks a resume draws are those of the uninterrupted run.
  batch = _Batch()
  a, b = _Task(0.5), _Task(0.5)
  assert _TrainLosses(a, batch, 3) == _TrainLosses(b, batch, 3)
  path = tf.train.Checkpoint(task=a).save(str(tmp_path / 'ckpt'))
  c = _Task(0.5)
  tf.train.Checkpoint(task=c).restore(path).assert_existing_objects_matched()
  assert int(c.global_step.numpy()) == 3
  assert _TrainLosses(a, batch, 2) == _TrainLosses(c, batch, 2)
