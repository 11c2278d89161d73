"""The installed console scripts find the user's package as `python -m` does.

`tf-learner-train` and `tf-learner-plot-schedule` start with their bin/
directory on sys.path, not the current one; they put the current directory
first (`registry.AddWorkingDirectoryToPath`), so `--model=mypkg.exp.Class`
run from the directory holding `mypkg/` works as with `python -m` (issue
21, item 7). The scripts are the ones `pip install -e .` wrote next to this
interpreter; without them the tests skip, saying so.
"""

import os
import subprocess
import sys
import sysconfig

import pytest

from params import registry

_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONUNBUFFERED='1',
            CUDA_VISIBLE_DEVICES='')
_ENV.pop('PYTHONPATH', None)  # Only the current directory may find mypkg.
_DEADLINE_SECS = 240

# A user's experiment in its own package: the project's linear regression
# with 3 steps, registered under the user's module path.
_USER_EXP = '''
from params import registry
from configs import regression


@registry.Register
class Mine(regression.LinearRegression):
  """Three steps of the linear regression, in the user's package."""
  MAX_STEPS = 3
'''


def _Script(name):
  """Path of the installed console script `name`, or skip saying why."""
  for directory in (sysconfig.get_path('scripts'),
                    os.path.dirname(sys.executable)):
    path = os.path.join(directory, name)
    if os.path.isfile(path) and os.access(path, os.X_OK):
      return path
  pytest.skip('console script %s is not installed next to %s (install the '
              'package with pip install -e . to test it)' %
              (name, sys.executable))


@pytest.fixture
def user_dir(tmp_path):
  """A working directory holding the user's package mypkg/ (no __init__)."""
  (tmp_path / 'mypkg').mkdir()
  (tmp_path / 'mypkg' / 'exp.py').write_text(_USER_EXP)
  return tmp_path


def test_add_working_directory_puts_cwd_first_once(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(sys, 'path', ['/somewhere/bin', '/lib/site'])
  assert registry.AddWorkingDirectoryToPath() == str(tmp_path)
  assert sys.path == [str(tmp_path), '/somewhere/bin', '/lib/site']
  registry.AddWorkingDirectoryToPath()  # Twice: nothing more.
  assert sys.path == [str(tmp_path), '/somewhere/bin', '/lib/site']
  monkeypatch.setattr(sys, 'path', ['', '/lib/site'])  # `python -m`'s ''.
  registry.AddWorkingDirectoryToPath()
  assert sys.path == ['', '/lib/site']


def test_tf_learner_train_trains_the_users_package_in_the_cwd(user_dir):
  script = _Script('tf-learner-train')
  logdir = user_dir / 'run'
  proc = subprocess.run(
      [script, '--model=mypkg.exp.Mine', '--logdir=%s' % logdir],
      cwd=str(user_dir), env=_ENV, capture_output=True, text=True,
      timeout=_DEADLINE_SECS)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert (logdir / 'metrics.json').is_file()
  assert '"global_step": 3' in (logdir / 'metrics.json').read_text()


def test_tf_learner_plot_schedule_finds_the_users_package_in_the_cwd(
    user_dir):
  script = _Script('tf-learner-plot-schedule')
  proc = subprocess.run(
      [script, '--model=mypkg.exp.Mine', '--end=10', '--num_points=3'],
      cwd=str(user_dir), env=_ENV, capture_output=True, text=True,
      timeout=_DEADLINE_SECS)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.splitlines()[0] == (
      'ConstantOne (mypkg.exp.Mine learner 0), steps 0..10 (applied updates)')
  assert 'peak: 1 at step 0' in proc.stdout


def test_elsewhere_the_error_says_which_directory_to_run_from(tmp_path):
  script = _Script('tf-learner-plot-schedule')
  proc = subprocess.run([script, '--model=mypkg.exp.Mine'], cwd=str(tmp_path),
                        env=_ENV, capture_output=True, text=True,
                        timeout=_DEADLINE_SECS)
  assert proc.returncode == 1
  assert ("No module 'mypkg.exp' could be imported (neither configs/mypkg/"
          "exp.py nor mypkg.exp on the import path): run from the directory "
          "that contains mypkg/, or add it to PYTHONPATH." in proc.stderr)


def test_tf_learner_launch_workers_find_the_users_package_in_the_cwd(
    user_dir):
  # The workers run `python -m learner.trainer` in the launcher's directory.
  script = _Script('tf-learner-launch')
  proc = subprocess.run(
      [script, '--num_workers=1', '--', '--model=mypkg.exp.Mine',
       '--logdir=%s' % (user_dir / 'run')],
      cwd=str(user_dir), env=_ENV, capture_output=True, text=True,
      timeout=_DEADLINE_SECS)
  assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
  assert ('launcher: 1 worker(s) finished; final global step 3;' in
          proc.stdout + proc.stderr)
