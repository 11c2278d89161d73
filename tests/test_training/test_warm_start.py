"""Warm start (init_from_checkpoint): another run's checkpoint by variable
name, with rules; its refusals (no match, a shape, a damaged names file)."""

import numpy as np
import pytest
import tensorflow as tf

from params import BaseLayer
from learner.training.services import checkpointer
from learner.training.services import warm_start


# The model of test_trainer_checkpointer.py: task/step, task/enc/w,
# task/heads_0/w, task/heads_1/w, each w = [1, 1].
class _Enc(BaseLayer):

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [2], init=1.0)


class _Model(BaseLayer):

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('step', [], init=0, dtype=tf.int64, trainable=False)
    self.CreateChild('enc', _Enc.Params())
    self.CreateChildren('heads', [_Enc.Params(), _Enc.Params()])


def _Build(name='task'):
  return _Model(_Model.Params().Set(name=name))


def _SaveSteps(tmp_path, steps):
  """Saves ckpt-<s> under tmp_path/ckpt with enc/w = [s, s] for each s."""
  m = _Build()
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=m),
                                 str(tmp_path / 'ckpt'), max_to_keep=5)
  for s in steps:
    m.enc.vars.w.assign([float(s), float(s)])
    ck.Save(s)


def _Vars(m):
  return {v.name[:-2]: v for v in tf.nest.flatten(m.vars)}


def test_init_from_checkpoint_by_name_with_rules(tmp_path):
  src = _Build('old')
  src.enc.vars.w.assign([5.0, 6.0])
  src.heads[1].vars.w.assign([7.0, 8.0])
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=src),
                                 str(tmp_path / 'ckpt'),
                                 variable_names=checkpointer
                                 .VariableCheckpointKeys(src))
  ck.Save(1)
  dst = _Build('new')
  got = warm_start.InitFromCheckpoint(
      str(tmp_path), _Vars(dst),
      rules=[(r'^old/enc/', 'new/heads_0/'), (r'^old/heads_1/', 'new/enc/')])
  assert got == {'new/heads_0/w': 'old/enc/w', 'new/enc/w': 'old/heads_1/w'}
  np.testing.assert_array_equal(dst.heads[0].vars.w.numpy(), [5.0, 6.0])
  np.testing.assert_array_equal(dst.enc.vars.w.numpy(), [7.0, 8.0])
  np.testing.assert_array_equal(dst.heads[1].vars.w.numpy(), [1.0, 1.0])


def test_by_name_keys_the_variables_as_the_checkpoint_names_them():
  m = _Build()
  got = warm_start.ByName(tf.nest.flatten(m.vars))
  assert sorted(got) == ['task/enc/w', 'task/heads_0/w', 'task/heads_1/w',
                         'task/step']
  assert got['task/heads_1/w'] is m.heads[1].vars.w

def test_init_from_checkpoint_without_names_file_uses_key_paths(tmp_path):
  src = _Build()
  src.enc.vars.w.assign([2.0, 3.0])
  path = tf.train.Checkpoint(task=src).save(str(tmp_path / 'c'))
  dst = _Build()
  got = warm_start.InitFromCheckpoint(path, {'task/enc/w': dst.enc.vars.w})
  assert got == {'task/enc/w': 'task/enc/w'}
  np.testing.assert_array_equal(dst.enc.vars.w.numpy(), [2.0, 3.0])


def test_init_from_checkpoint_no_match_names_both_sides(tmp_path):
  path = tf.train.Checkpoint(task=_Build('old')).save(str(tmp_path / 'c'))
  with pytest.raises(ValueError, match="no variable.*'new/enc/w'"):
    warm_start.InitFromCheckpoint(path, _Vars(_Build('new')))


def test_init_from_checkpoint_shape_mismatch_names_the_variable(tmp_path):
  path = tf.train.Checkpoint(task=_Build()).save(str(tmp_path / 'c'))
  other = tf.Variable([1.0, 2.0, 3.0], name='task/enc/w')
  with pytest.raises(ValueError, match=r"'task/enc/w'.*shape \[2\].*\[3\]"):
    warm_start.InitFromCheckpoint(path, {'task/enc/w': other})


def test_truncated_variable_names_file_is_an_error_naming_it(tmp_path):
  src = _Build()
  ck = checkpointer.Checkpointer(
      tf.train.Checkpoint(task=src), str(tmp_path / 'ckpt'),
      variable_names=checkpointer.VariableCheckpointKeys(src))
  ck.Save(1)
  names = tmp_path / 'ckpt' / checkpointer.VARIABLE_NAMES_FILE
  names.write_text(names.read_text()[:20])
  with pytest.raises(checkpointer.CheckpointError) as e:
    warm_start.InitFromCheckpoint(str(tmp_path), _Vars(_Build()))
  assert str(names) in str(e.value) and 'JSONDecodeError' in str(e.value)


def test_init_from_a_directory_with_a_garbled_state_file_finds_the_newest(
    tmp_path):
  _SaveSteps(tmp_path, [3, 6])
  (tmp_path / 'ckpt' / 'checkpoint').write_bytes(b'\xff garbage')
  dst = _Build()
  got = warm_start.InitFromCheckpoint(str(tmp_path),
                                      {'task/enc/w': dst.enc.vars.w})
  assert got == {'task/enc/w': 'task/enc/w'}
  np.testing.assert_array_equal(dst.enc.vars.w.numpy(), [6.0, 6.0])
