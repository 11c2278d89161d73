"""The evaler beside a busy trainer and on damaged logdirs (issue 21, 6, 8).

Every checkpoint is accounted for (evaluated, or reported as deleted by the
trainer's rotation before its turn, with the fix); an unreadable one is
skipped in one line naming it and never tried again; a logdir that does
not exist yet is waited for, saying so and the timeout; SIGINT and SIGTERM
stop it in one line, as the trainer (exit 130 / 143). On
regression.LinearRegression (fast).
"""

import io
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from params import registry
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import trainer as trainer_lib

_KEY = 'regression.LinearRegression'
_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONUNBUFFERED='1',
            CUDA_VISIBLE_DEVICES='')
_TIMEOUT = 300


def _Params(max_steps=40, interval=10, keep=10):
  p = registry.GetParams(_KEY)
  p.task.train.Set(max_steps=max_steps, save_interval_steps=interval,
                   save_max_to_keep=keep, summary_interval_steps=10,
                   log_interval_steps=10)
  return p


def _Evaler(logdir, p, timeout=0.5):
  out = io.StringIO()
  ev = evaler_lib.Evaler(p, str(logdir), timeout_secs=timeout, poll_secs=0,
                         stream=out)
  return ev, ev.Run(), out.getvalue()


def _Skipped(record, reason):
  return [e['global_step'] for e in record.get('skipped', [])
          if e['reason'] == reason]


def test_beside_a_running_trainer_all_30_checkpoints_of_a_run_keeping_3(
    tmp_path):
  # The trainer saves every step and keeps 3; the evaler starts before the
  # logdir exists. Each of steps 1..30 is evaluated or reported rotated.
  logdir = tmp_path / 'run'
  trainer = subprocess.Popen(
      [sys.executable, '-m', 'learner.trainer', '--model=' + _KEY,
       '--logdir=%s' % logdir, '--params_override=task.train.max_steps : 30; '
       'task.train.save_interval_steps : 1; task.train.save_max_to_keep : 3'],
      env=_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    ev, record, out = _Evaler(logdir, _Params(max_steps=30, interval=1,
                                              keep=3), timeout=_TIMEOUT)
    _, err = trainer.communicate(timeout=_TIMEOUT)
    assert trainer.returncode == 0, err[-2000:]
  finally:
    if trainer.poll() is None:
      trainer.kill()
      trainer.wait()
  lines = out.splitlines()
  assert lines[0].startswith('Evaler: waiting for checkpoints in %s (the '
                             'logdir does not exist yet' % (logdir / 'ckpt'))
  evaluated = [e['global_step'] for e in record['evaluations']]
  rotated = _Skipped(record, 'rotated')
  assert ev.evaluated_steps == evaluated and evaluated[-1] == 30
  assert sorted(evaluated + rotated) == list(range(1, 31))  # Each once.
  assert record['stopped'] == 'evaluated the final checkpoint (global step 30)'
  reported = [l for l in lines if 'before their turn' in l]
  assert sum(int(l.split()[1]) for l in reported) == len(rotated)
  for l in reported:
    assert l.endswith('raise save_max_to_keep or save_interval_steps (now '
                      '1).') and 'save_max_to_keep (3)' in l, l
  assert lines[-1].startswith(
      'Evaler stopped: evaluated the final checkpoint (global step 30); %d '
      'checkpoint(s) evaluated now, %d in all' % (len(evaluated),
                                                 len(evaluated)))
  print('evaluated %s; rotated %s' % (evaluated, rotated))
  if rotated:
    assert ', %d skipped (rotated: global step ' % len(rotated) in lines[-1]


def _Truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


@pytest.mark.parametrize('bad,suffix,error', [
    (20, '.data-00000-of-00001', 'IndexError: Read less bytes than requested'),
    (40, '.data-00000-of-00001', 'IndexError: Read less bytes than requested'),
    (20, '.index', 'OpError: not an sstable (bad magic number)')])
def test_an_unreadable_checkpoint_is_skipped_in_one_line_and_not_retried(
    tmp_path, bad, suffix, error):
  trainer_lib.Trainer(_Params(), str(tmp_path), stream=io.StringIO()).Run()
  bad_path = os.path.join(str(tmp_path), 'ckpt', 'ckpt-%d' % bad)
  _Truncate(bad_path + suffix)
  ev, record, out = _Evaler(tmp_path, _Params())
  assert ev.evaluated_steps == [s for s in (10, 20, 30, 40) if s != bad]
  assert _Skipped(record, 'unreadable') == [bad]
  said = [l for l in out.splitlines() if 'cannot be read' in l]
  assert len(said) == 1 and said[0].startswith(
      'Evaler: checkpoint %s (global step %d) cannot be read (%s' % (
          bad_path, bad, error)), out
  assert said[0].endswith('skipped, and not tried again by a restarted '
                          'evaler.')
  assert record['stopped'] == (
      'evaluated the final checkpoint (global step 40)' if bad != 40 else
      'reached the final checkpoint (global step 40) (unreadable: skipped)')
  # A restart: nothing evaluated or tried again, no loop.
  ev, record, out = _Evaler(tmp_path, _Params())
  assert ev.evaluated_steps == [] and 'cannot be read' not in out
  assert _Skipped(record, 'unreadable') == [bad]
  assert len(record['evaluations']) == 3
  assert 'the final checkpoint (global step 40) was already' in (
      record['stopped'])


def test_a_run_that_kept_3_of_6_reports_the_3_rotated_with_the_fix(tmp_path):
  # Started after the run: ckpt-10..30 are gone (keep 3).
  trainer_lib.Trainer(_Params(max_steps=60, keep=3), str(tmp_path),
                      stream=io.StringIO()).Run()
  ev, record, out = _Evaler(tmp_path, _Params(max_steps=60, keep=3))
  assert ev.evaluated_steps == [40, 50, 60]
  assert _Skipped(record, 'rotated') == [10, 20, 30]
  assert ('Evaler: 3 checkpoint(s) (global step 10, 20, 30) were deleted by '
          'the trainer\'s rolling task.train.save_max_to_keep (3) before '
          'their turn; not evaluated. To evaluate every checkpoint, raise '
          'save_max_to_keep or save_interval_steps (now 10).') in out
  assert ('3 checkpoint(s) evaluated now, 3 in all, 3 skipped (rotated: '
          'global step 10, 20, 30)') in out


def test_it_says_what_it_waits_for_and_its_timeout(tmp_path):
  _, record, out = _Evaler(tmp_path / 'missing', _Params(), timeout=0.5)
  assert out.splitlines()[0] == (
      'Evaler: waiting for checkpoints in %s (the logdir does not exist yet: '
      'waiting for its trainer), up to the final one (global step 40); it '
      'stops after 0.5 s without a new one (--evaler_timeout_secs, default '
      '3600). Ctrl-C stops it.' % (tmp_path / 'missing' / 'ckpt'))
  assert record['stopped'].startswith('timeout')
  assert not os.path.exists(tmp_path / 'missing')


def _EvalerProcess(logdir, ignore_sigint=False):
  return subprocess.Popen(
      [sys.executable, '-m', 'learner.trainer', '--model=' + _KEY,
       '--mode=evaler', '--logdir=%s' % logdir],
      env=_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      # As a shell starts a background job: SIGINT ignored.
      preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
      if ignore_sigint else None)


@pytest.mark.parametrize('signum,background', [
    (signal.SIGINT, True), (signal.SIGTERM, False)])
def test_a_signal_stops_the_waiting_evaler_in_one_line(tmp_path, signum,
                                                       background):
  proc = _EvalerProcess(tmp_path / 'run', ignore_sigint=background)
  try:
    first = proc.stdout.readline()  # Its default timeout is said at start.
    assert first.startswith('Evaler: waiting for checkpoints in %s' % (
        tmp_path / 'run' / 'ckpt'))
    assert 'it stops after 3600 s without a new one' in first
    sent = time.time()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  assert time.time() - sent < 10
  assert proc.returncode == 128 + signum, err[-2000:]
  assert 'Traceback' not in err and 'KeyboardInterrupt' not in err
  assert [l for l in err.splitlines() if l.startswith('Evaler')] == [
      'Evaler stopped by %s; 0 checkpoint(s) evaluated now, 0 in all '
      '(nothing written). Run the same command again to go on.' %
      signal.Signals(signum).name]
  assert out == ''
  assert not os.path.exists(tmp_path / 'run')


def _DamageValuesKeepGraph(prefix):
  """Flips bytes 64..16 before the object graph in `prefix`'s data shard.

  TF writes the object graph (key '_CHECKPOINTABLE_OBJECT_GRAPH') at the
  end of the shard, after the values, with its length and checksum just
  before it; the bytes before those are the task's variables (the input
  iterator's large state comes first). So the graph still reads and the
  restore fails on a value's checksum (DataLossError), after TF built its
  restore coordinator: as when the trainer's rotation deletes a
  checkpoint's files while an evaler beside it reads them.
  """
  reader = tf.train.load_checkpoint(prefix)
  graph = len(reader.get_tensor('_CHECKPOINTABLE_OBJECT_GRAPH'))
  path = prefix + '.data-00000-of-00001'
  with open(path, 'r+b') as f:
    data = bytearray(f.read())
    end = len(data) - graph
    data[end - 64:end - 16] = bytes(
        b ^ 0xff for b in data[end - 64:end - 16])
    f.seek(0)
    f.write(data)


def test_a_restore_that_fails_part_way_prints_no_tf_warnings_at_exit(
    tmp_path):
  # Issue: an evaler beside the trainer printed, at exit, 32 TF lines
  # 'Value in checkpoint could not be found in the restored object:
  # ...optimizer._slots...' (one per value not restored, for each
  # checkpoint whose files went away while it was read). Now only its own
  # one line about the checkpoint, and nothing on stderr.
  trainer_lib.Trainer(_Params(), str(tmp_path), stream=io.StringIO()).Run()
  bad = os.path.join(str(tmp_path), 'ckpt', 'ckpt-20')
  _DamageValuesKeepGraph(bad)
  proc = subprocess.run(
      [sys.executable, '-m', 'learner.trainer', '--model=' + _KEY,
       '--mode=evaler', '--logdir=%s' % tmp_path, '--evaler_timeout_secs=5',
       '--params_override=task.train.max_steps : 40; '
       'task.train.save_interval_steps : 10; task.train.save_max_to_keep : '
       '10'], env=_ENV, capture_output=True, text=True, timeout=_TIMEOUT)
  assert proc.returncode == 0, proc.stderr[-2000:]
  said = [l for l in proc.stdout.splitlines() if 'cannot be read' in l]
  assert len(said) == 1 and said[0].startswith(
      'Evaler: checkpoint %s (global step 20) cannot be read (DataLossError: '
      % bad), proc.stdout
  assert ('Evaler stopped: evaluated the final checkpoint (global step 40); '
          '3 checkpoint(s) evaluated now') in proc.stdout
  assert proc.stderr == '', proc.stderr[:3000]
