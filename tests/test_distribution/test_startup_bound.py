"""Multi-worker start-up is bounded (issue 12, item 5).

A worker that never registers, or two workers given the same task index,
make every started worker fail within `--worker_register_timeout_secs`
with one line naming the missing worker or the duplicate, instead of
hanging (TF's own registration timeout is one hour). The message tests use
errors shaped like the ones TF 2.21 raises (their text copied from real
runs); the slow test starts real trainer processes on 127.0.0.1.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from learner.training.cluster import distribution
from learner.training.cluster import launcher


def _Config(index, ports=(2222, 2223)):
  return {'cluster': {'worker': ['127.0.0.1:%d' % p for p in ports]},
          'task': {'type': 'worker', 'index': index}}


# What worker 0 (the leader) raised when worker 1 never came (TF 2.21).
_BARRIER_TEXT = (
    'Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. This '
    'usually happens because a task triggered the barrier too early or too '
    'slowly. Please look at the task logs (both timed out and first task) to '
    'debug further.\n# of tasks that reached the barrier: 1/2.\nThe first '
    'task at the barrier: /job:worker/replica:0/task:0. Some timed out task '
    'names:\n/job:worker/replica:0/task:1\n\nAdditional GRPC error '
    'information from remote target /job:worker/replica:0/task:0 while '
    'calling /tensorflow.CoordinationService/RegisterTask:\n:UNKNOWN:Error')


def test_leader_names_the_worker_that_did_not_register():
  error = tf.errors.DeadlineExceededError(None, None, _BARRIER_TEXT)
  msg = distribution.StartupErrorMessage(error, _Config(0), 5.0)
  assert '\n' not in msg
  assert msg.startswith('Multi-worker start-up of worker 0 (127.0.0.1:2222)')
  assert 'worker 1 (127.0.0.1:2223) did not register' in msg
  assert 'within 5 s' in msg and '--worker_register_timeout_secs' in msg
  # Worker 0 reached the barrier: it is not named as missing.
  assert 'worker 0 (127.0.0.1:2222), ' not in msg


def test_a_taken_own_port_is_reported_as_a_duplicate_task_index():
  error = tf.errors.UnknownError(None, None, 'Could not start gRPC server')
  msg = distribution.StartupErrorMessage(error, _Config(0), 5.0)
  assert '\n' not in msg
  assert 'same task index 0 (a duplicate)' in msg
  assert 'own index 0..1' in msg


def test_a_worker_whose_leader_never_answers_names_the_leader():
  error = tf.errors.DeadlineExceededError(None, None, 'Deadline Exceeded')
  msg = distribution.StartupErrorMessage(error, _Config(1), 7.0)
  assert msg.startswith('Multi-worker start-up of worker 1 (127.0.0.1:2223)')
  assert 'coordination service on worker 0 (127.0.0.1:2222)' in msg
  assert 'within 7 s' in msg


def test_cluster_listing_an_address_twice_is_refused_before_start_up():
  config = _Config(0, ports=(2222, 2222))
  with pytest.raises(distribution.ClusterStartupError) as e:
    distribution.CheckCluster(config)
  assert '127.0.0.1:2222 twice' in str(e.value)
  assert 'worker 0 and worker 1' in str(e.value)


@pytest.mark.parametrize('index', [2, -1, '0', True])
def test_task_index_outside_the_cluster_is_refused(index):
  with pytest.raises(distribution.ClusterStartupError) as e:
    distribution.CheckCluster(_Config(index))
  assert 'indices 0..1' in str(e.value)


@pytest.mark.parametrize('address', ['127.0.0.1:99999', '127.0.0.1:0',
                                     '127.0.0.1', ':2222', 'host:port'])
def test_address_that_is_not_host_and_valid_port_is_refused(address):
  config = {'cluster': {'worker': ['127.0.0.1:2222', address]},
            'task': {'type': 'worker', 'index': 0}}
  with pytest.raises(distribution.ClusterConfigError) as e:
    distribution.CheckCluster(config)
  assert 'worker 1 the address %r' % address in str(e.value)
  assert '[1, 65535]' in str(e.value)


# A TF_CONFIG no group can start is a bad value: one line, exit 2, no logdir
# (it was exit 1, and a one-worker cluster with port 99999 trained).
_BAD_TF_CONFIGS = [
    (_Config(0, ports=(2222, 2222)), '127.0.0.1:2222 twice'),
    (_Config(2), 'indices 0..1'),
    ({'cluster': {'worker': ['127.0.0.1:99999']},
      'task': {'type': 'worker', 'index': 0}}, "'127.0.0.1:99999'"),
]


@pytest.mark.parametrize('config,names', _BAD_TF_CONFIGS,
                         ids=['duplicate', 'index_outside', 'bad_port'])
def test_bad_tf_config_is_one_error_line_exit_2_and_no_logdir(
    tmp_path, capsys, monkeypatch, config, names):
  from learner.training.jobs import cli as cli_lib  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('TF_CONFIG', json.dumps(config))
  logdir = tmp_path / 'never'
  cli_lib.DefineFlags()
  try:
    cli_lib.FLAGS(['trainer', '--model=regression.DistributedLinearRegression',
                   '--logdir=%s' % logdir, '--strategy=multi_worker'])
    code = cli_lib.main([])
  finally:
    cli_lib.FLAGS.unparse_flags()
  err = capsys.readouterr().err
  assert code == 2, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('ERROR: TF_CONFIG '), err
  assert names in lines[0]
  assert not logdir.exists()


# ---- real workers -----------------------------------------------------------

# Slack for the two workers given index 0 to start up at different times
# on a loaded machine (parallel tests): the second must find the first still
# holding the port.
_REGISTER_SECS = 15
_DEADLINE_SECS = 240  # A hang would last TF's one hour.


def _Start(tf_config, logdir, onednn):
  env = dict(os.environ, TF_CONFIG=json.dumps(tf_config),
             PYTHONUNBUFFERED='1', CUDA_VISIBLE_DEVICES='',
             TF_ENABLE_ONEDNN_OPTS=onednn)
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)  # The trainer's quiet default.
  return subprocess.Popen(
      [sys.executable, '-m', 'learner.trainer',
       '--model=regression.DistributedLinearRegression', '--logdir=' + logdir,
       '--strategy=multi_worker',
       '--worker_register_timeout_secs=%d' % _REGISTER_SECS],
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope='module')
def failed_startups(tmp_path_factory, onednn_module):
  """A lone worker 1 (no leader) and two workers both given index 0.

  With oneDNN forced on (tests/conftest.py, the strict case): the one
  line each worker prints must not depend on the CPU.
  """
  root = tmp_path_factory.mktemp('startup')
  lone = launcher.PickFreePorts(2)
  dup = launcher.PickFreePorts(2)
  runs = {'lone_1': _Config(1, lone), 'dup_a': _Config(0, dup),
          'dup_b': _Config(0, dup)}
  start = time.monotonic()
  procs = {k: _Start(c, str(root / k), onednn_module)
           for k, c in runs.items()}
  out = {'ports': {'lone': lone, 'dup': dup}}
  try:
    for k, p in procs.items():
      stdout, stderr = p.communicate(timeout=_DEADLINE_SECS)
      out[k] = {'code': p.returncode, 'stdout': stdout, 'stderr': stderr,
                'secs': time.monotonic() - start}
  finally:
    launcher.StopProcesses(list(procs.values()))
  return out


def _OneErrorLine(run):
  lines = [l for l in run['stderr'].splitlines() if l.strip()]
  assert len(lines) == 1, run['stderr'][-3000:]
  assert lines[0].startswith('ERROR: Multi-worker start-up of '), lines
  return lines[0]


@pytest.mark.slow
def test_worker_without_its_leader_fails_with_one_line(failed_startups):
  run = failed_startups['lone_1']
  port = failed_startups['ports']['lone'][0]
  assert run['code'] == 1, run
  line = _OneErrorLine(run)
  assert 'coordination service on worker 0 (127.0.0.1:%d)' % port in line
  assert run['secs'] < _DEADLINE_SECS


@pytest.mark.slow
def test_duplicate_task_index_fails_both_workers_naming_it(failed_startups):
  runs = [failed_startups['dup_a'], failed_startups['dup_b']]
  port = failed_startups['ports']['dup'][1]
  assert [r['code'] for r in runs] == [1, 1], runs
  lines = sorted(_OneErrorLine(r) for r in runs)
  # One could not bind worker 0's port: the duplicate; the other, the
  # leader, names worker 1, which nobody started.
  assert any('same task index 0 (a duplicate)' in l for l in lines), lines
  assert any('worker 1 (127.0.0.1:%d) did not register' % port in l
             for l in lines), lines
  print('start-up failures after %s s' % [round(r['secs']) for r in runs])
