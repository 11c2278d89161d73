"""Helpers shared by the trainer tests (imported by name, as pytest puts
this directory on sys.path)."""

import json
import os
import subprocess
import sys

from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import cli as cli_lib


def Files(logdir):
  """{relative path: bytes} of every file under logdir."""
  out = {}
  for root, _, names in os.walk(str(logdir)):
    for name in names:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        out[os.path.relpath(path, str(logdir))] = f.read()
  return out


def RunMain(argv, capsys):
  """Runs the trainer's main() on flags `argv`; returns (code, out, err)."""
  cli_lib.DefineFlags()
  flags = cli_lib.FLAGS
  try:
    flags(['trainer'] + argv)
    code = cli_lib.main([])
  finally:
    flags.unparse_flags()
  out = capsys.readouterr()
  return code, out.out, out.err


# Runs `python -m <module>` once per argv inside one interpreter: each run
# executes the module as __main__ (runpy, as `-m` does) with its own
# sys.argv and its own stderr file (fd 2, so C++ lines land there too), and
# records the exit status SystemExit carries, as the process would exit.
_BATCH_CODE = r'''
import json, os, runpy, sys, tempfile, traceback
from absl import flags
module, cases = sys.argv[1], json.loads(sys.argv[2])
results = []
for argv in cases:
  fd, path = tempfile.mkstemp()
  sys.stderr.flush()
  saved = os.dup(2)
  os.dup2(fd, 2)
  try:
    sys.argv = [module] + argv
    runpy.run_module(module, run_name='__main__', alter_sys=True)
    code = 0
  except SystemExit as e:
    if e.code is None or isinstance(e.code, int):
      code = e.code or 0
    else:
      print(e.code, file=sys.stderr)
      code = 1
  except BaseException:
    traceback.print_exc()
    code = 1
  finally:
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
    os.close(fd)
  with open(path) as f:
    results.append({'code': code, 'stderr': f.read()})
  os.remove(path)
  flags.FLAGS.unparse_flags()
print(json.dumps(results))
'''


def RunModuleBatch(module, argvs, env, timeout, prefix=()):
  """Runs `python -m module` on each argv in one new process.

  Starting TensorFlow once instead of once per argv; the first run is
  exactly a fresh `python -m`, the later ones share its loaded modules
  (flags are reset between runs). `prefix`: a command to run the
  interpreter under (e.g. setpriv's, see test_readonly_jobs.py).

  Returns:
    [{'code': exit status, 'stderr': text}] in the order of `argvs`.
  """
  proc = subprocess.run(
      list(prefix) + [sys.executable, '-c', _BATCH_CODE, module,
                      json.dumps(argvs)],
      env=env, capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])
