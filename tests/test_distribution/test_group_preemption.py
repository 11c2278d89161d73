"""Preemption of one worker stops the whole group at one step (issue 41.2).

Slow: two-worker trainer groups (regression.DistributedLinearRegression) on
127.0.0.1, each launch with a deadline and every process stopped by pid in
a `finally`. One logdir goes through 2 preemptions: each launch (the same
command every time) gets SIGTERM on worker 1 after a random delay (fixed
seed) once its training is under way; then a launch whose grace period is
too short (SIGKILL to both 50 ms after the SIGTERM); then a last launch
that finishes. An uninterrupted group on another logdir is the reference.
"""

import os
import random
import re
import signal
import sys
import time

import pytest

from learner.training.cluster import launcher

pytestmark = pytest.mark.slow

_MODEL = 'regression.DistributedLinearRegression'
_MAX_STEPS = 2000
# Save and summary steps of the model: 100 and 10 (a train loop ends every
# 10 steps), so the group agrees on a stop every 10 steps.
_OVERRIDE = 'task.train.max_steps : %d' % _MAX_STEPS
# 2 preempted launches, each a start-up of two TensorFlow processes (most of
# the test's time): a fresh start, and a resume that is preempted again (a
# third launch, one more resume preempted, ran until 2026-12-07: it checked
# nothing the second does not).
_PREEMPTIONS = 2
_SEED = 72  # Delays 0.04, 0.36 s: the stop steps vary, the test repeats.
_MAX_DELAY_SECS = 0.6  # At <= 400 steps/s, 2 stops stay below 2000.
_DEADLINE_SECS = 180
_STOPPED = re.compile(r'^Stopped by SIGTERM to worker 1 of the group at '
                      r'global step (\d+); checkpoint (\S+) saved\. Run the '
                      r'same command again on every worker to resume\.$',
                      re.M)
_DIGEST = re.compile(r'^Final weights: sha256 ([0-9a-f]{64})$', re.M)


def _Command(logdir):
  return [sys.executable, '-m', 'learner.trainer', '--model=' + _MODEL,
          '--logdir=' + logdir, '--strategy=multi_worker',
          '--params_override=' + _OVERRIDE]


def _Read(path):
  try:
    with open(path, errors='replace') as f:
      return f.read()
  except OSError:
    return ''


def _Tail(text, n=30):
  lines = [l for l in text.splitlines()
           if not l.startswith(('I0000', 'W0000', 'WARNING: All log'))]
  return '\n'.join(lines[-n:])


def _Launch(logdir, logs, signal_after=None, kill_after=None):
  """Runs one group; returns (exit codes, logs' text, secs signal->exit).

  signal_after: None (run to the end) or seconds after worker 1's first
  progress line at which it gets SIGTERM; kill_after: then seconds after
  which every worker gets SIGKILL (a grace period too short to save).
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  procs = launcher.StartWorkers(_Command(logdir), 2, env=env, log_paths=logs)
  end = time.monotonic() + _DEADLINE_SECS
  secs = None
  try:
    if signal_after is not None:
      # Training is under way (the signal handlers are in place) once a
      # progress line ('step N/2000 ...', every 50 steps) is printed.
      while not re.search(r'^step \d+/', _Read(logs[1]), re.M):
        if time.monotonic() > end or procs[1].poll() is not None:
          break
        time.sleep(0.02)
      time.sleep(signal_after)
      os.kill(procs[1].pid, signal.SIGTERM)
      signalled = time.monotonic()
      if kill_after is not None:
        time.sleep(kill_after)
        for p in procs:
          os.kill(p.pid, signal.SIGKILL)
    codes = [p.wait(timeout=max(1.0, end - time.monotonic())) for p in procs]
    if signal_after is not None:
      secs = time.monotonic() - signalled
  finally:
    launcher.StopProcesses(procs)
  return codes, [_Read(l) for l in logs], secs


def _Checkpoints(logdir):
  ckpt_dir = os.path.join(logdir, 'ckpt')
  return sorted(int(m.group(1)) for m in (
      re.match(r'ckpt-(\d+)\.index$', f) for f in os.listdir(ckpt_dir)) if m)


@pytest.fixture(scope='module')
def preempted(tmp_path_factory):
  """The 2 preempted launches, the one killed at once, the last, the reference."""
  root = str(tmp_path_factory.mktemp('preempt'))
  logdir = os.path.join(root, 'logdir')
  rng = random.Random(_SEED)
  rounds = []
  for r in range(_PREEMPTIONS):
    logs = [os.path.join(root, 'preempt%d_%d.log' % (r, i)) for i in range(2)]
    codes, texts, secs = _Launch(logdir, logs,
                                 signal_after=rng.uniform(0, _MAX_DELAY_SECS))
    rounds.append({'codes': codes, 'logs': texts, 'secs': secs,
                   'checkpoints': _Checkpoints(logdir)})
  logs = [os.path.join(root, 'killed_%d.log' % i) for i in range(2)]
  before = _Checkpoints(logdir)
  codes, texts, _ = _Launch(logdir, logs, signal_after=0.0, kill_after=0.05)
  killed = {'codes': codes, 'logs': texts, 'before': before,
            'after': _Checkpoints(logdir)}
  logs = [os.path.join(root, 'last_%d.log' % i) for i in range(2)]
  last = _Launch(logdir, logs)
  ref_dir = os.path.join(root, 'uninterrupted')
  logs = [os.path.join(root, 'ref_%d.log' % i) for i in range(2)]
  reference = _Launch(ref_dir, logs)
  return {'rounds': rounds, 'killed': killed, 'last': last,
          'reference': reference, 'logdir': logdir}


def _StopSteps(texts):
  """The stop step each worker printed (None if it printed no stop line)."""
  out = []
  for text in texts:
    m = _STOPPED.search(text)
    out.append(int(m.group(1)) if m else None)
  return out


def test_sigterm_to_worker_1_stops_every_worker_at_one_saved_step(preempted):
  # Each of the 2 launches: both workers exit 143 (128 + SIGTERM, the
  # documented "preempted, restart me" status), both name the same step,
  # and the chief's newest checkpoint is of exactly that step.
  previous = 0
  steps = []
  for r, run in enumerate(preempted['rounds']):
    where = 'launch %d:\n%s\n---\n%s' % (r, _Tail(run['logs'][0]),
                                         _Tail(run['logs'][1]))
    assert run['codes'] == [143, 143], where
    stop = _StopSteps(run['logs'])
    assert stop[0] is not None and stop[0] == stop[1], where
    step = stop[0]
    assert previous < step < _MAX_STEPS and step % 10 == 0, where
    assert run['checkpoints'][-1] == step, (run['checkpoints'], where)
    # Both name the chief's checkpoint (not worker 1's temporary copy).
    for text in run['logs']:
      assert _STOPPED.search(text).group(2) == os.path.join(
          preempted['logdir'], 'ckpt', 'ckpt-%d' % step), where
    if r:  # The same command resumed from the previous stop.
      assert ('at global step %d.' % previous) in run['logs'][0], where
    assert run['secs'] < 60, where
    steps.append(step)
    previous = step
  print('stop steps %s; seconds from SIGTERM to both exits %s' % (
      steps, ['%.1f' % run['secs'] for run in preempted['rounds']]))


def test_grace_too_short_keeps_the_last_complete_checkpoint(preempted):
  # SIGKILL 50 ms after the SIGTERM: nothing of that launch may damage the
  # checkpoints; whatever it saved or not, the next launch resumes from a
  # complete one (the end-to-end test below shows nothing is lost).
  killed = preempted['killed']
  assert killed['codes'] != [0, 0]
  assert killed['after'][-1] >= killed['before'][-1]
  last_codes, last_logs, _ = preempted['last']
  assert 'Resumed from' in last_logs[0], _Tail(last_logs[0])
  resumed = int(re.search(r'Resumed from \S+ at global step (\d+)\.',
                          last_logs[0]).group(1))
  assert resumed == killed['after'][-1]


def test_preempted_group_ends_bit_identical_to_an_uninterrupted_run(
    preempted):
  codes, texts, _ = preempted['last']
  assert codes == [0, 0], _Tail(texts[0]) + '\n---\n' + _Tail(texts[1])
  ref_codes, ref_texts, _ = preempted['reference']
  assert ref_codes == [0, 0], _Tail(ref_texts[0])
  digests = [_DIGEST.search(t).group(1) for t in texts + ref_texts]
  # Both workers of the 4-launch run and of the uninterrupted run: one
  # sha256 of every model variable's bytes.
  assert len(set(digests)) == 1, digests
  assert ('Final metrics (global step %d)' % _MAX_STEPS) in texts[0]
