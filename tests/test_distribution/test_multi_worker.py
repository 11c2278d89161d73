"""Multi-process distribution tests (issue 7): slow, bounded, loopback only.

Four process launches in all, each with a deadline and every process
stopped by pid in a `finally`:
  1. one pair of `mw_worker.py` workers (MultiWorkerMirroredStrategy) runs
     every scenario of scenarios.py; one `mw_worker.py mirrored` process
     runs them under MirroredStrategy on 2 logical CPUs (a subprocess, so a
     hang in a collective fails the test at the deadline instead of blocking
     the session). Several tests read their results.
  2. a pair of trainer workers (regression.DistributedLinearRegression)
     of which one is killed after the first checkpoint;
  3. the same pair restarted, which resumes and finishes;
  4. the same pair once more on the finished run, which writes nothing.
Ports are picked free on 127.0.0.1 at run time (learner.launcher).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from learner.training.cluster import launcher

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenarios  # pylint: disable=g-import-not-at-top,wrong-import-position

pytestmark = pytest.mark.slow

_HERE = os.path.dirname(os.path.abspath(__file__))
_WORKER = os.path.join(_HERE, 'mw_worker.py')
_SPLITS = [2, 6]  # As in mw_worker.py.
_DEADLINE_SECS = 240


def _Tail(path, n=40):
  try:
    with open(path) as f:
      lines = [l for l in f.read().splitlines()
               if not l.startswith(('I0000', 'W0000', 'WARNING: All log'))]
  except OSError:
    return '<no log>'
  return '\n'.join(lines[-n:])


def _RunScenarioWorkers(kind, num, out_dir):
  """Starts `num` mw_worker.py processes; returns their result dicts."""
  logs = [os.path.join(out_dir, '%s_%d.log' % (kind, i)) for i in range(num)]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  env.pop('TF_CONFIG', None)
  procs = launcher.StartWorkers(
      [sys.executable, _WORKER, kind, out_dir], num, env=env,
      log_paths=logs)
  try:
    code, failed = launcher.WaitForWorkers(procs, _DEADLINE_SECS)
  finally:
    launcher.StopProcesses(procs)
  if code != 0:
    which = failed if failed is not None else 0
    return {'error': 'worker %s exit code %d (%s)\n%s' % (
        failed, code, 'deadline' if failed is None else 'failed',
        _Tail(logs[which]))}
  results = []
  for i in range(num):
    with open(os.path.join(out_dir, 'result_%d.json' % i)) as f:
      results.append(json.load(f))
  return {'results': results}


@pytest.fixture(scope='module')
def multi_worker(tmp_path_factory):
  return _RunScenarioWorkers('multi_worker', 2,
                             str(tmp_path_factory.mktemp('mw')))


@pytest.fixture(scope='module')
def mirrored(tmp_path_factory):
  # A single process (mw_worker.py drops the TF_CONFIG StartWorkers sets).
  return _RunScenarioWorkers('mirrored', 1,
                             str(tmp_path_factory.mktemp('mirrored')))


@pytest.fixture(scope='module')
def numpy_reference():
  return scenarios.NumpyReference(_SPLITS)


def _Results(run):
  if 'error' in run:
    pytest.fail(run['error'])
  return run['results']


def _AssertWeights(got, want, key):
  for name in ('w', 'b'):
    np.testing.assert_allclose(
        np.asarray(got[key][name], np.float64), want[key][name], rtol=1e-5,
        atol=1e-7, err_msg='%s/%s' % (key, name))


@pytest.mark.parametrize('run', ['mirrored', 'multi_worker'])
def test_distributed_sgd_equals_single_process_on_the_global_batch(
    request, run, numpy_reference):
  # 3 SGD steps (lr 0.1) on global batches of 8 split over 2 replicas as 2
  # and 6 examples: the weighted all-reduce (sum n*g / sum n) gives the
  # exact global mean despite the unequal sizes (a plain mean of the two
  # replicas' gradients would not). Reference: numpy on the whole batch.
  results = _Results(request.getfixturevalue(run))
  for r in results:
    assert r['num_replicas'] == 2
    _AssertWeights(r, numpy_reference, 'sgd_unequal')


def test_single_process_learner_is_the_numpy_reference(numpy_reference):
  # The same problems through our Learner in this process, no strategy: the
  # single-process training the distributed runs are compared with.
  ref = scenarios.Reference(_SPLITS)
  for key in ('sgd_unequal', 'accum_sync'):
    _AssertWeights(ref, numpy_reference, key)


def test_multi_worker_replicas_end_bit_identical(multi_worker):
  r0, r1 = _Results(multi_worker)
  assert r0['is_chief'] and not r1['is_chief']
  for key in ('sgd_unequal', 'accum_sync', 'accum_nosync'):
    assert r0[key] == r1[key], key


@pytest.mark.parametrize('run', ['mirrored', 'multi_worker'])
@pytest.mark.parametrize('key', ['accum_sync', 'accum_nosync'])
def test_accumulation_under_strategy_matches_single_process(
    request, run, key, numpy_reference):
  # batch_gradients(num_batches=4) around Momentum(0.9), 8 micro-steps with
  # 2 and 6 examples per replica: 2 updates with sum(n g) / sum(n) over
  # the window and both replicas.
  for r in _Results(request.getfixturevalue(run)):
    _AssertWeights(r, numpy_reference, key)


@pytest.mark.parametrize('run', ['mirrored', 'multi_worker'])
def test_sync_on_apply_communicates_only_on_the_applying_micro_step(
    request, run):
  for r in _Results(request.getfixturevalue(run)):
    unconditional, conditional = r['layout_sync']
    # No collective runs on every micro-step ...
    assert unconditional == 0, r['layout_sync']
    # ... the only ones sit in one branch of a conditional (the micro-step
    # that completes the window), and its other branch has none.
    assert conditional, r['layout_sync']
    for _, counts in conditional:
      assert 0 in counts and any(counts), r['layout_sync']


@pytest.mark.parametrize('run', ['mirrored', 'multi_worker'])
def test_sync_every_micro_step_has_an_unconditional_collective(request, run):
  # The contrast that makes the test above mean something:
  # sync_on_apply=False all-reduces every micro-batch.
  for r in _Results(request.getfixturevalue(run)):
    unconditional, _ = r['layout_nosync']
    assert unconditional >= 1, r['layout_nosync']


# ---- the trainer: the seeds' experiment, a dead worker, resume ------------

_MODEL = 'regression.DistributedLinearRegression'
_MAX_STEPS = 400
_SAVE_EVERY = 100
_OVERRIDE = ('task.train.max_steps : %d\ntask.train.save_interval_steps : %d'
             % (_MAX_STEPS, _SAVE_EVERY))


def _TrainerCommand(logdir):
  return [sys.executable, '-m', 'learner.trainer', '--model=' + _MODEL,
          '--logdir=' + logdir, '--strategy=multi_worker',
          '--params_override=' + _OVERRIDE]


def _Checkpoint(logdir):
  return tf.train.latest_checkpoint(os.path.join(logdir, 'ckpt'))


def _CheckpointWeights(path):
  reader = tf.train.load_checkpoint(path)
  out = {}
  for key in reader.get_variable_to_shape_map():
    m = re.match(r'task/(?:_private_vars/)?(w|b)/\.ATTRIBUTES/'
                 r'VARIABLE_VALUE$', key)
    if m:
      out[m.group(1)] = reader.get_tensor(key)
  return out


def _FinalMetrics(log_path):
  with open(log_path) as f:
    for line in f:
      if line.startswith('Final metrics'):
        return json.loads(line.split(': ', 1)[1])
  return None


@pytest.fixture(scope='module')
def killed_and_resumed(tmp_path_factory):
  """Runs launch 2 (kill worker 1 after a checkpoint) and launch 3."""
  root = str(tmp_path_factory.mktemp('trainer'))
  logdir = os.path.join(root, 'logdir')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  out = {'logdir': logdir, 'secs': {}}
  start = time.monotonic()
  logs = [os.path.join(root, 'killed_%d.log' % i) for i in range(2)]
  procs = launcher.StartWorkers(_TrainerCommand(logdir), 2, env=env,
                                log_paths=logs)
  try:
    end = time.monotonic() + _DEADLINE_SECS
    while _Checkpoint(logdir) is None:
      if time.monotonic() > end or any(p.poll() is not None for p in procs):
        out['error'] = 'no checkpoint before the kill:\n%s\n%s' % (
            _Tail(logs[0]), _Tail(logs[1]))
        return out
      time.sleep(0.05)
    os.kill(procs[1].pid, signal.SIGKILL)
    killed_at = time.monotonic()
    out['secs']['to_first_checkpoint'] = killed_at - start
    try:
      procs[0].wait(timeout=150)
    except Exception:  # pylint: disable=broad-except
      pass
    out['survivor_code'] = procs[0].poll()
    out['survivor_secs'] = time.monotonic() - killed_at
    out['survivor_log'] = _Tail(logs[0], 200)
  finally:
    launcher.StopProcesses(procs)
  out['checkpoint_after_kill'] = _Checkpoint(logdir)
  logs = [os.path.join(root, 'resumed_%d.log' % i) for i in range(2)]
  restart = time.monotonic()
  procs = launcher.StartWorkers(_TrainerCommand(logdir), 2, env=env,
                                log_paths=logs)
  try:
    code, failed = launcher.WaitForWorkers(procs, _DEADLINE_SECS)
  finally:
    launcher.StopProcesses(procs)
  out['resumed_code'] = code
  out['secs']['restarted_run'] = time.monotonic() - restart
  out['resumed_logs'] = [_Tail(l, 200) for l in logs]
  out['resumed_final'] = [_FinalMetrics(l) for l in logs]
  if code != 0:
    out['error'] = 'restarted worker %s exit code %d:\n%s' % (
        failed, code, out['resumed_logs'][failed or 0])
  return out


def test_killed_worker_makes_the_survivor_fail_clearly_within_2_minutes(
    killed_and_resumed):
  out = killed_and_resumed
  if 'survivor_code' not in out:
    pytest.fail(out['error'])
  assert out['survivor_code'] not in (None, 0), out['survivor_log']
  assert out['survivor_secs'] < 120, out['secs']
  print('kill test seconds: %s, survivor %.1f' % (out['secs'],
                                                 out['survivor_secs']))
  assert 'PeerFailureError' in out['survivor_log'], out['survivor_log']
  assert 'Restart the whole group' in out['survivor_log']


def test_restarted_group_resumes_and_ends_as_an_uninterrupted_run(
    killed_and_resumed, tmp_path):
  out = killed_and_resumed
  if 'error' in out:
    pytest.fail(out['error'])
  step_at_kill = int(out['checkpoint_after_kill'].rsplit('-', 1)[1])
  assert 0 < step_at_kill < _MAX_STEPS
  for log in out['resumed_logs']:
    assert 'Resumed from' in log and 'global step %d' % step_at_kill in log
  # Both workers end with bit-identical weights (the last step's metrics).
  f0, f1 = out['resumed_final']
  assert f0['global_step'] == f1['global_step'] == _MAX_STEPS
  assert (f0['train/w'], f0['train/b']) == (f1['train/w'], f1['train/b'])
  final = _CheckpointWeights(_Checkpoint(out['logdir']))
  # The seeds' example reaches w ~ 5, b ~ 2.
  assert abs(final['w'] - 5.0) < 0.05 and abs(final['b'] - 2.0) < 0.05
  # Uninterrupted single-process run on the same global batches, in its own
  # process like the workers, so no state of this test process (strategies,
  # logical devices, seeds set by earlier tests) can reach the reference.
  ref_dir = str(tmp_path / 'uninterrupted')
  proc = subprocess.run(
      [sys.executable, '-m', 'learner.trainer', '--model=' + _MODEL,
       '--logdir=' + ref_dir, '--params_override=' + _OVERRIDE],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'), capture_output=True,
      text=True, timeout=_DEADLINE_SECS)
  assert proc.returncode == 0, proc.stderr[-3000:]
  ref = _CheckpointWeights(_Checkpoint(ref_dir))
  for name in ('w', 'b'):
    np.testing.assert_allclose(final[name], ref[name], rtol=1e-5, atol=1e-7,
                               err_msg=name)


def test_a_rerun_of_the_finished_group_keeps_its_files(killed_and_resumed):
  # Launch 4: the finished run again. Both workers print the stored metrics
  # and write nothing: metrics.json and params.txt stay byte-identical.
  out = killed_and_resumed
  if 'error' in out:
    pytest.fail(out['error'])
  logdir = out['logdir']
  files = {}
  for name in ('metrics.json', 'params.txt'):
    with open(os.path.join(logdir, name), 'rb') as f:
      files[name] = f.read()
  logs = [os.path.join(os.path.dirname(logdir), 'rerun_%d.log' % i)
          for i in range(2)]
  procs = launcher.StartWorkers(_TrainerCommand(logdir), 2,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
                                log_paths=logs)
  try:
    code, failed = launcher.WaitForWorkers(procs, _DEADLINE_SECS)
  finally:
    launcher.StopProcesses(procs)
  assert code == 0, _Tail(logs[failed or 0])
  for log in logs:
    text = _Tail(log, 200)
    assert 'is finished (global step %d' % _MAX_STEPS in text, text
    assert 'WARNING: these params differ' not in text
  assert _FinalMetrics(logs[0]) == json.loads(files['metrics.json'])
  for name, data in files.items():
    with open(os.path.join(logdir, name), 'rb') as f:
      assert f.read() == data, name
