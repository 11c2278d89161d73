"""Checkpointer: rolling saves, fallback on unreadable checkpoints, and the
faults of issue 12 (state file, foreign model, damaged files, dir).

Warm start (init_from_checkpoint) is tested in test_warm_start.py."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from params import BaseLayer
from learner.training.services import checkpointer
from learner.training.services import skipped_steps


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


# ---- faults: the state file, foreign checkpoints, damaged files, the dir ----


def _Restorer(tmp_path, read_only=False):
  m = _Build()
  out = []
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=m),
                                 str(tmp_path / 'ckpt'), report=out.append,
                                 read_only=read_only)
  return m, ck, out


def test_missing_state_file_resumes_from_newest_complete_checkpoint(tmp_path):
  # ckpt-3 and ckpt-6 are complete; ckpt-9 has an index but no data (a save
  # killed half-way), so the newest complete one is ckpt-6, w = [6, 6].
  _SaveSteps(tmp_path, [3, 6])
  os.remove(tmp_path / 'ckpt' / 'checkpoint')
  with open(tmp_path / 'ckpt' / 'ckpt-9.index', 'wb') as f:
    f.write(b'partial')
  m, ck, out = _Restorer(tmp_path)
  assert ck.Restore().endswith('ckpt-6')
  np.testing.assert_array_equal(m.enc.vars.w.numpy(), [6.0, 6.0])
  assert len(out) == 1 and 'checkpoint is missing' in out[0]
  assert 'found 2 complete checkpoint(s)' in out[0] and 'ckpt-6' in out[0]
  # The state file is rewritten, so the manager rotates both again.
  assert tf.train.latest_checkpoint(str(tmp_path / 'ckpt')).endswith('ckpt-6')
  assert checkpointer.CompleteCheckpoints(str(tmp_path / 'ckpt')) == [
      str(tmp_path / 'ckpt' / 'ckpt-3'), str(tmp_path / 'ckpt' / 'ckpt-6')]
  # A second start before any save resumes from it too (the rewritten state
  # once had no timestamps, so the manager listed nothing and a restart
  # began again at step 0), and the manager rotates both.
  m, ck, out = _Restorer(tmp_path)
  assert ck.Restore().endswith('ckpt-6') and out == []
  np.testing.assert_array_equal(m.enc.vars.w.numpy(), [6.0, 6.0])
  assert [os.path.basename(p) for p in ck._manager.checkpoints] == [
      'ckpt-3', 'ckpt-6']


def _StaleStateFile(tmp_path):
  """ckpt-3, 6, 9 saved; the state file put back to what it was after
  ckpt-6 (a save killed after ckpt-9's files, before the state file)."""
  _SaveSteps(tmp_path, [3, 6])
  with open(tmp_path / 'ckpt' / 'checkpoint', 'rb') as f:
    after_6 = f.read()
  _SaveSteps(tmp_path, [9])
  with open(tmp_path / 'ckpt' / 'checkpoint', 'wb') as f:
    f.write(after_6)


def test_complete_checkpoint_newer_than_the_state_file_is_resumed_from(
    tmp_path):
  # Seen on a 2-worker group killed 50 ms after a SIGTERM: ckpt-200 was
  # complete, the state file still named ckpt-160, and the next launch lost
  # 40 steps. The newer complete checkpoint wins, reported in one line; the
  # state file lists it after the ones it listed (rotation unchanged).
  _StaleStateFile(tmp_path)
  m, ck, out = _Restorer(tmp_path)
  assert ck.latest_checkpoint.endswith('ckpt-9')
  assert ck.Restore().endswith('ckpt-9')
  np.testing.assert_array_equal(m.enc.vars.w.numpy(), [9.0, 9.0])
  assert len(out) == 1, out
  assert 'names ckpt-6, but ckpt-9 beside it is complete' in out[0]
  assert '(state file updated)' in out[0]
  directory = str(tmp_path / 'ckpt')
  state = tf.train.get_checkpoint_state(directory)
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
      'ckpt-3', 'ckpt-6', 'ckpt-9']
  assert checkpointer.NewestCheckpoint(directory).endswith('ckpt-9')
  # A second start finds the state file up to date: no warning.
  _, ck, out = _Restorer(tmp_path)
  assert ck.Restore().endswith('ckpt-9') and out == []


def test_read_only_job_resumes_from_the_newer_checkpoint_leaving_the_state(
    tmp_path):
  _StaleStateFile(tmp_path)
  with open(tmp_path / 'ckpt' / 'checkpoint', 'rb') as f:
    stale = f.read()
  directory = str(tmp_path / 'ckpt')
  assert checkpointer.NewestCheckpoint(directory).endswith('ckpt-9')
  m, ck, out = _Restorer(tmp_path, read_only=True)
  assert ck.Restore().endswith('ckpt-9')
  np.testing.assert_array_equal(m.enc.vars.w.numpy(), [9.0, 9.0])
  assert len(out) == 1 and '(state file updated)' not in out[0]
  with open(tmp_path / 'ckpt' / 'checkpoint', 'rb') as f:
    assert f.read() == stale


def test_incomplete_newer_checkpoint_does_not_override_the_state_file(
    tmp_path):
  # ckpt-9 without its data shard is not complete: the state file's ckpt-6.
  _StaleStateFile(tmp_path)
  for f in glob.glob(str(tmp_path / 'ckpt' / 'ckpt-9.data-*')):
    os.remove(f)
  _, ck, out = _Restorer(tmp_path)
  assert ck.Restore().endswith('ckpt-6') and out == []


@pytest.mark.parametrize('content', [b'\x00\xff garbage {{', b''])
def test_garbled_or_empty_state_file_is_reported_and_bypassed(tmp_path,
                                                              content):
  _SaveSteps(tmp_path, [3, 6])
  with open(tmp_path / 'ckpt' / 'checkpoint', 'wb') as f:
    f.write(content)
  m, ck, out = _Restorer(tmp_path, read_only=True)
  assert ck.latest_checkpoint.endswith('ckpt-6')
  assert ck.Restore().endswith('ckpt-6')
  np.testing.assert_array_equal(m.enc.vars.w.numpy(), [6.0, 6.0])
  assert len(out) == 1 and 'checkpoint is unreadable' in out[0]
  # read_only (an eval job): the trainer's state file is left as it was.
  with open(tmp_path / 'ckpt' / 'checkpoint', 'rb') as f:
    assert f.read() == content


class _Other(BaseLayer):

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('v', [3], init=2.0)


def test_checkpoint_of_another_model_is_refused_naming_what_is_missing(
    tmp_path):
  _SaveSteps(tmp_path, [3])
  other = _Other(_Other.Params().Set(name='task'))
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=other),
                                 str(tmp_path / 'ckpt'))
  with pytest.raises(checkpointer.CheckpointError) as e:
    ck.Restore(expect_partial=True)
  msg = str(e.value)
  assert "lacks 1 variable(s) of this model: ['task/v']" in msg
  assert 'choose another --logdir' in msg and 'elete' not in msg
  assert '\n' not in msg
  np.testing.assert_array_equal(other.vars.v.numpy(), [2.0, 2.0, 2.0])


def test_no_readable_checkpoint_advises_another_logdir_never_deleting(
    tmp_path):
  _SaveSteps(tmp_path, [3])
  for f in os.listdir(tmp_path / 'ckpt'):
    if f.startswith('ckpt-3.'):
      with open(tmp_path / 'ckpt' / f, 'wb') as fh:
        fh.write(b'x')
  with pytest.raises(checkpointer.NoReadableCheckpointError) as e:
    _Restorer(tmp_path)[1].Restore()
  assert 'choose another --logdir' in str(e.value)
  assert 'elete' not in str(e.value)


def test_truncated_best_json_is_an_error_naming_the_file(tmp_path):
  m = _Build()
  ckpt = tf.train.Checkpoint(task=m)
  best = checkpointer.BestCheckpoint(ckpt, str(tmp_path / 'best'), 'max')
  assert best.MaybeSave(4, 0.75, 'accuracy')
  path = tmp_path / 'best' / 'best.json'
  text = path.read_text()
  path.write_text(text[:len(text) // 2])
  with pytest.raises(checkpointer.CheckpointError) as e:
    checkpointer.BestCheckpoint(ckpt, str(tmp_path / 'best'), 'max')
  msg = str(e.value)
  assert str(path) in msg and 'JSONDecodeError' in msg
  assert msg.count('ckpt-4') == 1 and '\n' not in msg
  # A record whose value is not a number is refused the same way.
  path.write_text('{"metric": "accuracy", "value": "high", "step": 4}')
  with pytest.raises(checkpointer.CheckpointError, match='ValueError'):
    checkpointer.BestCheckpoint(ckpt, str(tmp_path / 'best'), 'max')


def test_prepare_removes_unfinished_saves_and_keeps_checkpoints(tmp_path):
  _SaveSteps(tmp_path, [3])
  temp = tmp_path / 'ckpt' / 'ckpt-7_temp'
  temp.mkdir()
  (temp / 'part-00000-of-00001.data-00000-of-00001').write_bytes(b'half')
  _, ck, out = _Restorer(tmp_path)
  ck.PrepareForTraining()
  assert not temp.exists()
  assert out == ['Removed 1 unfinished save(s) (ckpt-7_temp) left in %s.'
                 % (tmp_path / 'ckpt')]
  assert sorted(os.listdir(tmp_path / 'ckpt')) == [
      'checkpoint', 'ckpt-3.data-00000-of-00001', 'ckpt-3.index']


def test_unwritable_checkpoint_directory_fails_before_training(tmp_path):
  # A file where the directory should be: nothing can be written there.
  (tmp_path / 'ckpt').write_text('not a directory')
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=_Build()),
                                 str(tmp_path / 'ckpt'))
  with pytest.raises(checkpointer.CheckpointError) as e:
    ck.PrepareForTraining()
  assert 'cannot be written' in str(e.value)
  assert str(tmp_path / 'ckpt') in str(e.value)


@pytest.mark.skipif(os.geteuid() == 0, reason='root writes to read-only dirs')
def test_read_only_checkpoint_directory_fails_before_training(tmp_path):
  (tmp_path / 'ckpt').mkdir()
  os.chmod(tmp_path / 'ckpt', 0o500)
  try:
    ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=_Build()),
                                   str(tmp_path / 'ckpt'))
    with pytest.raises(checkpointer.CheckpointError,
                       match='cannot be written'):
      ck.PrepareForTraining()
  finally:
    os.chmod(tmp_path / 'ckpt', 0o700)


def test_save_refuses_non_finite_weights_and_keeps_the_last_checkpoint(
    tmp_path):
  m = _Build()
  ck = checkpointer.Checkpointer(tf.train.Checkpoint(task=m),
                                 str(tmp_path / 'ckpt'),
                                 model_variables=tf.nest.flatten(m.vars))
  first = ck.Save(3)
  m.heads[1].vars.w.assign([1.0, float('inf')])
  with pytest.raises(skipped_steps.NonFiniteTrainingError) as e:
    ck.Save(6)
  assert "['task/heads_1/w']" in str(e.value) and first in str(e.value)
  assert ck.latest_checkpoint == first
  assert not glob.glob(str(tmp_path / 'ckpt' / 'ckpt-6*'))


def test_garbled_state_file_without_checkpoints_is_moved_aside(tmp_path):
  (tmp_path / 'ckpt').mkdir()
  (tmp_path / 'ckpt' / 'checkpoint').write_bytes(b'\xff\xfe')
  _, ck, out = _Restorer(tmp_path)
  assert ck.Restore() is None
  assert (tmp_path / 'ckpt' / 'checkpoint.unreadable').read_bytes() == (
      b'\xff\xfe')
  assert len(out) == 1 and 'moved it to checkpoint.unreadable' in out[0]


def _IteratorCheckpoint(m, with_iterator, take=0):
  it = iter(tf.data.Dataset.range(10))
  for _ in range(take):
    next(it)
  objects = {'task': m, 'iterator': it} if with_iterator else {'task': m}
  return tf.train.Checkpoint(**objects), it


def test_optional_object_may_be_absent_from_or_extra_in_the_checkpoint(
    tmp_path):
  m = _Build()
  m.enc.vars.w.assign([3.0, 4.0])
  ckpt, _ = _IteratorCheckpoint(m, False)
  no_it = checkpointer.Checkpointer(ckpt, str(tmp_path / 'a')).Save(5)
  ckpt, _ = _IteratorCheckpoint(m, True, take=3)
  with_it = checkpointer.Checkpointer(ckpt, str(tmp_path / 'b')).Save(5)
  assert checkpointer.SavedRootObjects(no_it) == {'task', 'save_counter'}
  assert checkpointer.SavedRootObjects(with_it) == {'task', 'iterator',
                                                    'save_counter'}
  # Built with an iterator, restored from a checkpoint without one: the
  # weights are restored, the iterator is left at its start.
  m2 = _Build()
  ckpt, it = _IteratorCheckpoint(m2, True)
  ck = checkpointer.Checkpointer(ckpt, str(tmp_path / 'a'))
  with pytest.raises(checkpointer.CheckpointMismatchError):
    ck.Restore()  # Strict without `optional`.
  assert ck.Restore(optional=('iterator',)) == no_it
  assert ck.restored_objects == {'absent': ['iterator'], 'not_built': []}
  np.testing.assert_array_equal(m2.enc.vars.w.numpy(), [3.0, 4.0])
  assert int(next(it)) == 0
  # Built without one, restored from a checkpoint with one.
  m3 = _Build()
  ckpt, _ = _IteratorCheckpoint(m3, False)
  ck = checkpointer.Checkpointer(ckpt, str(tmp_path / 'b'))
  assert ck.Restore(optional=('iterator',)) == with_it
  assert ck.restored_objects == {'absent': [], 'not_built': ['iterator']}
  np.testing.assert_array_equal(m3.enc.vars.w.numpy(), [3.0, 4.0])
  # Both kinds: the saved iterator is restored (3 elements taken).
  ckpt, it = _IteratorCheckpoint(_Build(), True)
  ck = checkpointer.Checkpointer(ckpt, str(tmp_path / 'b'))
  assert ck.Restore(optional=('iterator',)) == with_it
  assert ck.restored_objects == {'absent': [], 'not_built': []}
  assert int(next(it)) == 3


def test_optional_objects_do_not_hide_a_checkpoint_of_another_model(
    tmp_path):
  ckpt, _ = _IteratorCheckpoint(_Build(), False)
  checkpointer.Checkpointer(ckpt, str(tmp_path / 'ckpt')).Save(1)

  class _Other(_Model):

    def __init__(self, params):
      super().__init__(params)
      self.CreateVariable('extra', [3], init=0.0)

  ckpt, _ = _IteratorCheckpoint(_Other(_Other.Params().Set(name='task')),
                                True)
  with pytest.raises(checkpointer.CheckpointMismatchError,
                     match=r'lacks 1 variable.*task/extra'):
    checkpointer.Checkpointer(ckpt, str(tmp_path / 'ckpt')).Restore(
        optional=('iterator',))
