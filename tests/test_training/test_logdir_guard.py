"""Busy and foreign logdirs, full disks (issue 21, items 5 and 6).

* A logdir of another experiment (its params.txt names another task class)
  is refused in one line by every mode, before anything is written, whether
  or not that run finished: the md5 of every file is unchanged.
* One live train job per logdir: a second one is refused in one line; the
  lock (a flock on the directory) goes with the process, even on kill -9.
* A full disk or a file-size limit (RLIMIT_FSIZE) at a save is one line
  naming the checkpoint directory and the last good checkpoint, which stays
  byte-identical and resumable.

regression.LinearRegression (fast); the other experiment is
diabetes.LinearAdamL2 (another task class).
"""

import contextlib
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from learner.training.services import logdir as logdir_lib
import trainer_helpers

_KEY = 'regression.LinearRegression'
_OTHER = 'diabetes.LinearAdamL2'
_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONUNBUFFERED='1',
            CUDA_VISIBLE_DEVICES='')
_TIMEOUT = 300


def _Md5s(logdir):
  return {k: hashlib.md5(v).hexdigest()
          for k, v in trainer_helpers.Files(logdir).items()}


def _Train(logdir, max_steps, *extra, env=_ENV, preexec_fn=None):
  """`python -m learner.trainer` on regression; (exit code, stdout, stderr)."""
  proc = subprocess.run(
      [sys.executable, '-m', 'learner.trainer', '--model=' + _KEY,
       '--logdir=%s' % logdir, '--params_override=task.train.max_steps : %d; '
       'task.train.save_interval_steps : 10' % max_steps] + list(extra),
      env=env, capture_output=True, text=True, timeout=_TIMEOUT,
      preexec_fn=preexec_fn)
  return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope='module')
def finished(tmp_path_factory):
  """A finished regression run: 20 steps, ckpt-10 and ckpt-20."""
  logdir = tmp_path_factory.mktemp('finished')
  code, _, err = _Train(logdir, 20)
  assert code == 0, err[-2000:]
  return logdir


# ---- another experiment's logdir ------------------------------------------


@pytest.mark.parametrize('mode', ['train', 'train_and_eval', 'eval', 'evaler',
                                  'export'])
@pytest.mark.parametrize('run_finished', [True, False])
def test_another_experiments_logdir_is_one_line_and_no_file_changes(
    finished, tmp_path, capsys, mode, run_finished):
  logdir = tmp_path / 'run'
  shutil.copytree(str(finished), str(logdir))
  if not run_finished:  # As a run stopped before its end leaves it.
    os.remove(str(logdir / 'metrics.json'))
  before = _Md5s(logdir)
  code, out, err = trainer_helpers.RunMain(
      ['--model=' + _OTHER, '--logdir=%s' % logdir, '--mode=' + mode] +
      (['--evaler_timeout_secs=0.5'] if mode == 'evaler' else []), capsys)
  assert code == 2
  lines = (out + err).strip().splitlines()
  assert len(lines) == 1, lines
  assert lines[0] == (
      "ERROR: %s is a run of another experiment (task.cls : "
      "Class('configs.model_tasks.LinearRegressionTask'); this one is "
      "Class('configs.model_tasks.LinearModelTask')). Choose another --logdir "
      "for this experiment." % (logdir / 'params.txt'))
  assert _Md5s(logdir) == before  # Every file, and no new one.


# ---- one live train job per logdir ------------------------------------------


def test_the_lock_refuses_a_second_holder_and_is_released_on_exit(tmp_path):
  with logdir_lib.TrainLock(str(tmp_path)):
    with pytest.raises(logdir_lib.LogdirInUseError,
                       match=r'^%s is in use by another live train job .*'
                       r'nothing was written.*another --logdir\.$' %
                       str(tmp_path)):
      logdir_lib.TrainLock(str(tmp_path)).__enter__()
  with logdir_lib.TrainLock(str(tmp_path)):  # Released: taken again.
    pass
  assert os.listdir(str(tmp_path)) == []  # The lock writes no file.


def test_a_lock_of_a_process_killed_with_9_is_gone(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, '-c',
       'import sys, time; from learner.training.services import logdir\n'
       'with logdir.TrainLock(sys.argv[1]):\n'
       '  print("locked", flush=True); time.sleep(600)', str(tmp_path)],
      env=_ENV, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'locked'
    with pytest.raises(logdir_lib.LogdirInUseError):
      logdir_lib.TrainLock(str(tmp_path)).__enter__()
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  assert holder.returncode == -signal.SIGKILL
  with logdir_lib.TrainLock(str(tmp_path)):
    pass


def _CheckpointsIn(logdir):
  d = os.path.join(str(logdir), 'ckpt')
  return sorted(int(f[len('ckpt-'):-len('.index')]) for f in
                (os.listdir(d) if os.path.isdir(d) else ())
                if f.startswith('ckpt-') and f.endswith('.index'))


def _NewestReadable(logdir):
  """The step of the newest checkpoint a resume can use.

  The newest one the checkpoint state lists whose files read back. A
  SIGKILL can land between a save's index file and the rename of its
  data shard, or before the state file names it; the resume then skips
  that one (with a warning), and so does this.
  """
  d = os.path.join(str(logdir), 'ckpt')
  state = tf.train.get_checkpoint_state(d)
  for path in reversed(list(state.all_model_checkpoint_paths)):
    try:
      tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError):
      continue
    return int(path.rsplit('-', 1)[1])
  raise AssertionError('no readable checkpoint in %s' % d)


def test_a_second_live_trainer_is_refused_and_a_killed_one_blocks_nothing(
    tmp_path, capsys):
  logdir = tmp_path / 'run'
  first = subprocess.Popen(
      [sys.executable, '-m', 'learner.trainer', '--model=' + _KEY,
       '--logdir=%s' % logdir, '--params_override=task.train.max_steps : '
       '10000000; task.train.save_interval_steps : 10'],
      env=_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    start = time.time()
    while not _CheckpointsIn(logdir):  # It trains and saves.
      assert first.poll() is None, first.stderr.read()[-2000:]
      assert time.time() - start < _TIMEOUT
      time.sleep(0.2)
    code, out, err = trainer_helpers.RunMain(
        ['--model=' + _KEY, '--logdir=%s' % logdir, '--seed=7'], capsys)
    assert code == 2
    assert (out + err).strip().splitlines() == [
        'ERROR: %s is in use by another live train job (it holds the '
        'logdir\'s lock); nothing was written. Wait for that job to end or '
        'stop it, or choose another --logdir.' % logdir]
  finally:
    first.kill()  # SIGKILL: no clean-up of any kind.
    first.wait()
  resume_at = _NewestReadable(logdir)
  code, out, err = trainer_helpers.RunMain(
      ['--model=' + _KEY, '--logdir=%s' % logdir,
       '--max_steps=%d' % (resume_at + 10)], capsys)
  assert code == 0, err
  assert 'Resumed from %s at global step %d.' % (
      os.path.join(str(logdir), 'ckpt', 'ckpt-%d' % resume_at),
      resume_at) in out
  assert _CheckpointsIn(logdir)[-1] == resume_at + 10


# ---- a full disk at a save ----------------------------------------------------


def _FileSizeLimit(num_bytes):
  def _Set():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a kill.
    resource.setrlimit(resource.RLIMIT_FSIZE, (num_bytes, num_bytes))
  return _Set


def _CkptMd5s(logdir):
  return {k: v for k, v in _Md5s(logdir).items() if k.startswith('ckpt')}


def _CheckFullDiskLine(err, logdir, cause, what):
  assert 'Traceback' not in err, err[-3000:]
  errors = [l for l in err.splitlines() if l.startswith('ERROR:')]
  assert len(errors) == 1, err[-3000:]
  assert errors[0].startswith('ERROR: %s failed (%s): its disk is full or a '
                              'file-size limit was reached. ' % (what, cause))
  assert errors[0].endswith(
      'The last good checkpoint, %s, is intact: free space on that disk (or '
      'raise the limit), then run the same command again to resume from '
      'it.' % os.path.join(str(logdir), 'ckpt', 'ckpt-20')), errors[0]


def test_a_file_size_limit_at_a_save_is_one_line_and_the_run_resumes(
    finished, tmp_path):
  logdir = tmp_path / 'run'
  shutil.copytree(str(finished), str(logdir))
  before = _CkptMd5s(logdir)
  # Checkpoints of this run are ~188 kB (the input iterator's state): a
  # 100 kB limit lets the run start and fails the save of ckpt-30.
  assert os.path.getsize(str(logdir / 'ckpt' /
                             'ckpt-20.data-00000-of-00001')) > 100000
  code, _, err = _Train(logdir, 40, preexec_fn=_FileSizeLimit(100000))
  assert code == 2, err[-3000:]
  _CheckFullDiskLine(err, logdir, 'OutOfRangeError: File too large',
                     'Saving checkpoint ckpt-30 in %s' % (logdir / 'ckpt'))
  assert _CkptMd5s(logdir) == before  # No ckpt-30 file, no _temp left.
  code, out, err = _Train(logdir, 40)
  assert code == 0, err[-3000:]
  assert 'Resumed from %s at global step 20.' % (
      logdir / 'ckpt' / 'ckpt-20') in out
  assert 'Final metrics (global step 40)' in out
  assert _CheckpointsIn(logdir) == [20, 30, 40]


@contextlib.contextmanager
def _Tmpfs(path, size):
  """A tmpfs of `size` at `path`, or a skip where mount is not allowed."""
  os.makedirs(str(path))
  probe = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%s' % size,
                          'tmpfs', str(path)], capture_output=True)
  if probe.returncode != 0:
    pytest.skip('mount -t tmpfs is not allowed here: %s' %
                probe.stderr.decode().strip())
  try:
    yield path
  finally:
    subprocess.run(['umount', str(path)], check=False)


def test_a_full_disk_is_one_line_and_the_run_resumes_after_space_is_freed(
    finished, tmp_path):
  with _Tmpfs(tmp_path / 'mnt', '800k') as mnt:
    logdir = mnt / 'run'
    shutil.copytree(str(finished), str(logdir))
    before = _CkptMd5s(logdir)
    fill = mnt / 'fill'
    subprocess.run(['dd', 'if=/dev/zero', 'of=%s' % fill, 'bs=4k'],
                   capture_output=True)  # Until the disk is full.
    assert shutil.disk_usage(str(mnt)).free == 0
    code, _, err = _Train(logdir, 30)
    assert code == 2, err[-3000:]
    _CheckFullDiskLine(err, logdir,
                       'ResourceExhaustedError: No space left on device',
                       'Writing to %s' % logdir)
    assert _CkptMd5s(logdir) == before
    os.remove(str(fill))
    code, out, err = _Train(logdir, 30)
    assert code == 0, err[-3000:]
    assert 'Resumed from %s at global step 20.' % (
        logdir / 'ckpt' / 'ckpt-20') in out
    assert _CheckpointsIn(logdir) == [10, 20, 30]


def _AsReadOnlyUser():
  """The command prefix under which chmod a-w stops writes, or None.

  As in test_readonly_jobs.py: root without CAP_DAC_OVERRIDE and
  CAP_DAC_READ_SEARCH (setpriv), since the mode bits do not stop root.
  """
  if os.geteuid() != 0:
    return []
  return (['setpriv', '--bounding-set', '-dac_override,-dac_read_search']
          if shutil.which('setpriv') else None)


def _SetWritable(path, writable):
  for root, dirs, files in os.walk(path):
    for name in dirs + files + ['.']:
      p = os.path.join(root, name)
      mode = os.stat(p).st_mode
      os.chmod(p, (mode | 0o200) if writable else (mode & ~0o222))


def test_a_resume_on_a_read_only_logdir_or_train_dir_is_one_line(
    finished, tmp_path):
  # Issue: the resume stopped with TF's 'PermissionDeniedError ...
  # CreateSummaryFileWriter' traceback. Now one line, exit 2, no file
  # changed, for a read-only logdir and for a read-only train/ alone.
  prefix = _AsReadOnlyUser()
  if prefix is None:
    pytest.skip('running as root without setpriv: chmod would not bind')
  whole, train = tmp_path / 'whole', tmp_path / 'train_only'
  shutil.copytree(finished, whole)
  shutil.copytree(finished, train)
  _SetWritable(whole, False)
  _SetWritable(train / 'train', False)
  before = [_Md5s(whole), _Md5s(train)]
  env = dict(_ENV, PYTHONPATH=os.path.dirname(os.path.dirname(
      os.path.dirname(os.path.abspath(__file__)))))
  resume = ['--model=' + _KEY, '--params_override=task.train.max_steps : '
            '30; task.train.save_interval_steps : 10']
  try:
    results = trainer_helpers.RunModuleBatch(
        'learner.trainer', [resume + ['--logdir=%s' % whole],
                            resume + ['--logdir=%s' % train]],
        env, _TIMEOUT, prefix=prefix)
  finally:
    _SetWritable(whole, True)
    _SetWritable(train, True)
  fix = ('; nothing was changed (its checkpoints, newest ckpt-20, are '
         'untouched). Make it writable to train there, or give another '
         '--logdir (a copy of this one resumes the run); --mode=eval '
         '--eval_dir=<dir> evaluates a read-only logdir.\n')
  assert [r['code'] for r in results] == [2, 2], results
  assert results[0]['stderr'] == (
      'ERROR: --logdir=%s cannot be written by this process: it is '
      'read-only%s' % (whole, fix))
  assert results[1]['stderr'] == (
      'ERROR: --logdir=%s cannot be written by this process: train/ is '
      'read-only%s' % (train, fix))
  assert [_Md5s(whole), _Md5s(train)] == before
