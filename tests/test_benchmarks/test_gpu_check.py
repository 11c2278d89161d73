"""benchmarks/gpu_check.sh skips cleanly here; its table reads the results."""

import os
import shutil
import subprocess

import pytest

from benchmarks import gpu_check

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_SCRIPT = os.path.join(_REPO, 'benchmarks', 'gpu_check.sh')


def _RunScript(path_dirs):
  env = dict(os.environ, PATH=os.pathsep.join(path_dirs))
  return subprocess.run([shutil.which('bash'), _SCRIPT], env=env, capture_output=True,
                        text=True, timeout=60, check=False)


def _Tools(tmp_path):
  """A PATH with only what the script's skip path needs (no nvidia-smi)."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  for tool in ('dirname', 'grep'):
    for d in ('/usr/bin', '/bin'):
      if os.path.exists(os.path.join(d, tool)):
        os.symlink(os.path.join(d, tool), bin_dir / tool)
        break
  return bin_dir


def test_without_nvidia_smi_the_script_skips_and_installs_nothing(tmp_path):
  r = _RunScript([str(_Tools(tmp_path))])
  assert r.returncode == 0, r.stderr
  assert r.stdout == 'no GPU: skipped (nvidia-smi is not installed)\n'
  assert not os.path.exists(os.path.join(_REPO, '.venv-gpu'))


def test_a_driver_with_no_device_skips_too(tmp_path):
  bin_dir = _Tools(tmp_path)
  fake = bin_dir / 'nvidia-smi'
  fake.write_text('#!/bin/sh\necho "No devices were found"\nexit 6\n')
  fake.chmod(0o755)
  r = _RunScript([str(bin_dir)])
  assert r.returncode == 0, r.stderr
  assert r.stdout == 'no GPU: skipped (nvidia-smi -L lists no device)\n'


def test_started_without_a_gpu_the_module_says_what_to_check(capsys):
  assert gpu_check.main(['--out=unused']) == 2
  err = capsys.readouterr().err
  assert err.startswith('ERROR: TensorFlow sees no GPU')
  assert "pip install -e '.[gpu,test]'" in err


def test_the_table_gives_each_part_and_its_figures():
  update_step = {'results': [{'set': 'small', 'optimizer': 'adam', 'rows': {
      'learner': {'median_s': 0.0017125, 'ratio_to_best_peer': 0.625},
      'limit': {}}}]}
  char_lm = {'models': {'lm.CharTransformer': {'results': {
      'keras': {'steady_steps_per_s': 9.16},
      'ours': {'steady_steps_per_s': 9.5}}}}}
  table = gpu_check.Table([('tests', 0), ('update_step', 1)], update_step,
                          char_lm).split('\n')
  assert table == [
      'part          status',
      'tests         ok',
      'update_step   FAILED (exit 1)',
      'update_step   small    adam      learner                  1.71 ms'
      '  x peer  0.62',
      'char_lm       lm.CharTransformer   keras      9.16 steady steps/s',
      'char_lm       lm.CharTransformer   ours       9.50 steady steps/s',
  ]


@pytest.mark.parametrize('fn', [gpu_check.UpdateStepLines,
                                gpu_check.CharLmLines])
def test_a_part_that_wrote_nothing_is_named_not_a_traceback(fn):
  (line,) = fn(None)
  assert '(no results: see ' in line
