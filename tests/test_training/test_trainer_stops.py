"""Clean stops (issue 15, item 4): SIGINT / SIGTERM during training; kill -9.

`python -m learner.trainer` runs in a subprocess, as a user runs it; the
signal arrives while it trains. It must finish the step it is in, save a
checkpoint of it, print one line and exit with 128 + the signal (130 for
SIGINT, 143 for SIGTERM), leave no data file without its index and no
traceback, and a rerun must end with exactly the weights of a run that was
never stopped. A run killed with -9 at a random step must resume to the
same weights too. The run that was never stopped is trained once for this
module (the `uninterrupted` fixture), alongside the first stopped run.
"""

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from learner.training.services import stops

_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONUNBUFFERED='1',
            CUDA_VISIBLE_DEVICES='')
_DEADLINE_SECS = 400


def _Args(logdir):
  return [sys.executable, '-m', 'learner.trainer',
          '--model=regression.LinearRegression', '--logdir=%s' % logdir,
          '--mode=train_and_eval', '--seed=3',
          '--params_override=task.train.max_steps : 40; '
          'task.train.save_interval_steps : 7; task.eval.interval_steps : 20; '
          'task.train.summary_interval_steps : 5; '
          'task.train.log_interval_steps : 3; task.train.steps_per_loop : 2']


def _Values(prefix):
  r = tf.train.load_checkpoint(prefix)
  return {k: r.get_tensor(k) for k in r.get_variable_to_shape_map()
          if 'save_counter' not in k and 'ITERATOR_STATE' not in k and
          k != '_CHECKPOINTABLE_OBJECT_GRAPH'}


def _RunAndSignal(logdir, signum, at_step):
  """Starts the trainer, sends `signum` after the line of step >= at_step."""
  proc = subprocess.Popen(_Args(logdir), env=_ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  start, sent = time.time(), False
  try:
    for line in proc.stdout:
      if time.time() - start > _DEADLINE_SECS:
        break
      if line.startswith('step ') and int(
          line.split()[1].split('/')[0]) >= at_step:
        os.kill(proc.pid, signum)
        sent = True
        break
    out, err = proc.communicate(timeout=_DEADLINE_SECS)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  assert sent, err[-2000:]
  return proc.returncode, out, err


def _CheckStoppedCleanly(logdir, code, err, signum):
  assert code == 128 + signum, err[-2000:]
  assert 'Traceback' not in err and 'KeyboardInterrupt' not in err, err
  stopped = [l for l in err.splitlines() if l.startswith('Stopped by')]
  assert len(stopped) == 1, err
  name = signal.Signals(signum).name
  step = int(stopped[0].split('global step ')[1].split(';')[0])
  ckpt = os.path.join(str(logdir), 'ckpt', 'ckpt-%d' % step)
  assert stopped[0] == (
      'Stopped by %s at global step %d; checkpoint %s saved. Run the same '
      'command again to resume.' % (name, step, ckpt))
  # Every data file has its index; no unfinished save is left.
  for data in glob.glob(os.path.join(str(logdir), 'ckpt', '*.data-*')):
    assert os.path.exists(data.split('.data-')[0] + '.index'), data
  assert not glob.glob(os.path.join(str(logdir), 'ckpt', '*_temp*'))
  assert tf.train.latest_checkpoint(os.path.join(str(logdir), 'ckpt')) == ckpt
  assert not os.path.exists(os.path.join(str(logdir), 'metrics.json'))
  return step


class _Uninterrupted:
  """The never-stopped run: started on first use, awaited by Logdir()."""

  def __init__(self, logdir):
    self._logdir = logdir
    self._proc = None

  def Start(self):
    if self._proc is None:
      self._proc = subprocess.Popen(
          _Args(self._logdir), env=_ENV, stdout=subprocess.DEVNULL,
          stderr=subprocess.PIPE, text=True)

  def Logdir(self):
    """Waits for the run; returns its logdir after checking it succeeded."""
    self.Start()
    _, err = self._proc.communicate(timeout=_DEADLINE_SECS)
    assert self._proc.returncode == 0, err[-2000:]
    return self._logdir

  def Stop(self):
    if self._proc is not None and self._proc.poll() is None:
      self._proc.kill()
      self._proc.wait()


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  run = _Uninterrupted(tmp_path_factory.mktemp('straight'))
  yield run
  run.Stop()


@pytest.mark.slow
def test_sigint_saves_then_resume_equals_the_uninterrupted_run(
    tmp_path, uninterrupted):
  stopped = tmp_path / 'stopped'
  uninterrupted.Start()  # Trains while this test's run is stopped.
  code, _, err = _RunAndSignal(stopped, signal.SIGINT, at_step=12)
  step = _CheckStoppedCleanly(stopped, code, err, signal.SIGINT)
  assert 12 <= step < 40
  again = subprocess.run(_Args(stopped), env=_ENV, capture_output=True,
                         text=True, timeout=_DEADLINE_SECS)
  assert again.returncode == 0, again.stderr[-2000:]
  assert 'Resumed from %s' % (stopped / 'ckpt' / ('ckpt-%d' % step)) in (
      again.stdout)
  straight = uninterrupted.Logdir()
  with open(straight / 'metrics.json') as f:
    m_ref = json.load(f)
  with open(stopped / 'metrics.json') as f:
    assert json.load(f) == m_ref
  a = _Values(str(straight / 'ckpt' / 'ckpt-40'))
  b = _Values(str(stopped / 'ckpt' / 'ckpt-40'))
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.slow
def test_sigterm_saves_and_exits_143(tmp_path):
  code, _, err = _RunAndSignal(tmp_path, signal.SIGTERM, at_step=6)
  step = _CheckStoppedCleanly(tmp_path, code, err, signal.SIGTERM)
  assert 6 <= step < 40
  # The checkpoint restores: its global step is the step of the line.
  reader = tf.train.load_checkpoint(str(tmp_path / 'ckpt' / (
      'ckpt-%d' % step)))
  keys = [k for k in reader.get_variable_to_shape_map()
          if k.endswith('global_step/.ATTRIBUTES/VARIABLE_VALUE')]
  assert [int(reader.get_tensor(k)) for k in keys] == [step]


@pytest.mark.slow
def test_kill_9_at_a_random_step_then_restart_equals_uninterrupted(
    tmp_path, uninterrupted):
  seed = int(time.time())
  kill_step = random.Random(seed).randint(1, 36)
  print('kill step %d (random seed %d)' % (kill_step, seed))
  killed = tmp_path / 'killed'
  uninterrupted.Start()  # Trains while this test's run is killed.
  victim = subprocess.Popen(_Args(killed), env=_ENV,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
  start = time.time()
  was_killed = False
  try:
    for line in victim.stdout:
      if time.time() - start > _DEADLINE_SECS:
        break
      if line.startswith('step '):
        step = int(line.split()[1].split('/')[0])
        if step >= kill_step:
          os.kill(victim.pid, signal.SIGKILL)
          was_killed = True
          break
  finally:
    if victim.poll() is None and not was_killed:
      os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    victim.stdout.close()
  assert was_killed and victim.returncode == -signal.SIGKILL
  assert not (killed / 'metrics.json').exists()
  restart = subprocess.run(_Args(killed), env=_ENV, capture_output=True,
                           text=True, timeout=_DEADLINE_SECS)
  assert restart.returncode == 0, restart.stderr[-2000:]
  straight = uninterrupted.Logdir()

  with open(straight / 'metrics.json') as f:
    m_ref = json.load(f)
  with open(killed / 'metrics.json') as f:
    m_killed = json.load(f)
  assert m_ref == m_killed
  assert m_ref['global_step'] == 40 and abs(m_ref['w'] - 5.0) < 1.0
  a = _Values(str(straight / 'ckpt' / 'ckpt-40'))
  b = _Values(str(killed / 'ckpt' / 'ckpt-40'))
  assert sorted(a) == sorted(b)
  # Weights, momentum slots, counters and the global step.
  assert any(k.endswith('global_step/.ATTRIBUTES/VARIABLE_VALUE') for k in a)
  assert any('_slots' in k for k in a), sorted(a)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ---- a multi-worker group (issue 41.2): the `group` exchange, no cluster ----


def _Stop(own_signum):
  stop = stops.SignalStop()
  stop.signum = own_signum  # As the handler records it.
  return stop


def test_group_stop_on_a_peer_signal_saves_and_exits_143_naming_it():
  # Worker 0 received nothing; worker 1 of the group got SIGTERM (15):
  # worker 0 saves this step too and stops with 128 + 15.
  asked, saved = [], []
  stop = _Stop(None)
  with pytest.raises(stops.StopRequested) as e:
    stop.StopIfRequested(
        270, lambda: saved.append(270) or '/l/ckpt/ckpt-270',
        group=lambda s: asked.append(s) or [0, signal.SIGTERM])
  assert asked == [0] and saved == [270]
  assert e.value.exit_code == 143
  assert str(e.value) == (
      'Stopped by SIGTERM to worker 1 of the group at global step 270; '
      'checkpoint /l/ckpt/ckpt-270 saved. Run the same command again on '
      'every worker to resume.')


def test_group_stop_takes_the_largest_signal_and_names_every_worker():
  # SIGINT (2) on worker 0, SIGTERM (15) on worker 2: both named, 128 + 15.
  stop = _Stop(signal.SIGINT)
  with pytest.raises(stops.StopRequested) as e:
    stop.StopIfRequested(10, lambda: 'p',
                         group=lambda s: [s, 0, signal.SIGTERM])
  assert e.value.exit_code == 143
  assert 'SIGTERM to worker 0, worker 2 of the group' in str(e.value)


def test_group_without_any_signal_neither_saves_nor_stops():
  asked = []
  stop = _Stop(None)
  stop.StopIfRequested(10, lambda: pytest.fail('saved'),
                       group=lambda s: asked.append(s) or [0, 0])
  assert asked == [0]  # Asked anyway: every worker joins every exchange.
