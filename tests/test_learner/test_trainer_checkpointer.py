"""Checkpointer: rolling saves, fallback on unreadable checkpoints, warm start."""

import os

import numpy as np
import pytest
import tensorflow as tf

from params import BaseLayer
from learner.training import checkpointer


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


def _SaveSteps(tmp_path, steps, keep=5):
  m = _Build()
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=m),
                                 str(tmp_path / 'ckpt'), max_to_keep=keep)
  paths = []
  for s in steps:
    m.enc.vars.w.assign([float(s), float(s)])
    paths.append(ck.Save(s))
  return paths


def test_save_names_checkpoints_by_step_and_restore_takes_newest(tmp_path):
  paths = _SaveSteps(tmp_path, [3, 6])
  assert paths[-1].endswith('ckpt-6')
  m = _Build()
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=m),
                                 str(tmp_path / 'ckpt'))
  assert ck.Restore().endswith('ckpt-6')
  np.testing.assert_array_equal(m.enc.vars.w.numpy(), [6.0, 6.0])


def test_corrupted_newest_checkpoint_is_reported_and_previous_used(
    tmp_path, capsys):
  paths = _SaveSteps(tmp_path, [3, 6])
  data = [f for f in os.listdir(tmp_path / 'ckpt')
          if f.startswith('ckpt-6.data')][0]
  with open(tmp_path / 'ckpt' / data, 'wb') as f:
    f.write(b'garbage')
  m = _Build()
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=m),
                                 str(tmp_path / 'ckpt'))
  assert ck.Restore() == paths[0]
  np.testing.assert_array_equal(m.enc.vars.w.numpy(), [3.0, 3.0])
  assert 'ckpt-6 is unreadable' in capsys.readouterr().out


def test_crash_while_saving_leaves_previous_checkpoint_in_use(tmp_path):
  # A save that died half-way wrote files of ckpt-9 but never updated the
  # state file (CheckpointManager rewrites it atomically after the files).
  _SaveSteps(tmp_path, [3])
  with open(tmp_path / 'ckpt' / 'ckpt-9.index', 'wb') as f:
    f.write(b'partial')
  m = _Build()
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=m),
                                 str(tmp_path / 'ckpt'))
  assert ck.Restore().endswith('ckpt-3')


def test_all_checkpoints_unreadable_raises(tmp_path):
  _SaveSteps(tmp_path, [3])
  for f in os.listdir(tmp_path / 'ckpt'):
    if f.startswith('ckpt-3.'):
      with open(tmp_path / 'ckpt' / f, 'wb') as fh:
        fh.write(b'x')
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=_Build()),
                                 str(tmp_path / 'ckpt'))
  with pytest.raises(RuntimeError, match='No checkpoint'):
    ck.Restore()


def test_variable_checkpoint_keys_match_the_saved_checkpoint(tmp_path):
  m = _Build()
  path = tf.train.Checkpoint(task=m).save(str(tmp_path / 'c'))
  saved = set(tf.train.load_checkpoint(path).get_variable_to_shape_map())
  keys = checkpointer.VariableCheckpointKeys(m)
  assert sorted(keys) == ['task/enc/w', 'task/heads_0/w', 'task/heads_1/w',
                          'task/step']
  assert set(keys.values()) <= saved


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
  got = checkpointer.InitFromCheckpoint(
      str(tmp_path), _Vars(dst),
      rules=[(r'^old/enc/', 'new/heads_0/'), (r'^old/heads_1/', 'new/enc/')])
  assert got == {'new/heads_0/w': 'old/enc/w', 'new/enc/w': 'old/heads_1/w'}
  np.testing.assert_array_equal(dst.heads[0].vars.w.numpy(), [5.0, 6.0])
  np.testing.assert_array_equal(dst.enc.vars.w.numpy(), [7.0, 8.0])
  np.testing.assert_array_equal(dst.heads[1].vars.w.numpy(), [1.0, 1.0])


def test_init_from_checkpoint_without_names_file_uses_key_paths(tmp_path):
  src = _Build()
  src.enc.vars.w.assign([2.0, 3.0])
  path = tf.train.Checkpoint(task=src).save(str(tmp_path / 'c'))
  dst = _Build()
  got = checkpointer.InitFromCheckpoint(path, {'task/enc/w': dst.enc.vars.w})
  assert got == {'task/enc/w': 'task/enc/w'}
  np.testing.assert_array_equal(dst.enc.vars.w.numpy(), [2.0, 3.0])


def test_init_from_checkpoint_no_match_names_both_sides(tmp_path):
  path = tf.train.Checkpoint(task=_Build('old')).save(str(tmp_path / 'c'))
  with pytest.raises(ValueError, match="no variable.*'new/enc/w'"):
    checkpointer.InitFromCheckpoint(path, _Vars(_Build('new')))


def test_best_checkpoint_keeps_the_best_value_and_survives_restart(tmp_path):
  m = _Build()
  ckpt = tf.train.Checkpoint(task=m)
  best = checkpointer.BestCheckpoint(ckpt, str(tmp_path / 'best'), 'max')
  assert best.MaybeSave(1, 0.5, 'accuracy')
  assert not best.MaybeSave(2, 0.4, 'accuracy')
  assert best.MaybeSave(3, 0.9, 'accuracy')
  again = checkpointer.BestCheckpoint(ckpt, str(tmp_path / 'best'), 'max')
  assert again.best['value'] == 0.9 and again.best['step'] == 3
  assert not again.MaybeSave(4, 0.8, 'accuracy')
  assert tf.train.latest_checkpoint(str(tmp_path / 'best')).endswith('-3')
  with pytest.raises(ValueError, match='mode'):
    checkpointer.BestCheckpoint(ckpt, str(tmp_path / 'b2'), 'maximum')


def test_init_from_checkpoint_shape_mismatch_names_the_variable(tmp_path):
  path = tf.train.Checkpoint(task=_Build()).save(str(tmp_path / 'c'))
  other = tf.Variable([1.0, 2.0, 3.0], name='task/enc/w')
  with pytest.raises(ValueError, match=r"'task/enc/w'.*shape \[2\].*\[3\]"):
    checkpointer.InitFromCheckpoint(path, {'task/enc/w': other})
