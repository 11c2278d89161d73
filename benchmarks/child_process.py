"""Runs a benchmark's measurement in a child process and reads its result.

A benchmark module run with `--child=...` prints one line
`<result_prefix><json>` to stdout; `SpawnChild` runs it from the repository
root (TF's C++ logging quietened) and parses that line.
"""

import json
import os
import subprocess
import sys


def SpawnChild(module, flags, label, result_prefix, timeout_s=900):
  """Runs `python -m module *flags`; returns (result, None) or (None, error).

  Args:
    module: the benchmark module to run, e.g. 'benchmarks.memory'.
    flags: list of command-line flags for the child (including --child=...).
    label: names the child in the error message (its mode or side).
    result_prefix: the prefix of the child's JSON result line.
    timeout_s: seconds before the child is killed (None: no limit); a
      timeout raises subprocess.TimeoutExpired.

  Returns:
    (the decoded JSON of the first line starting with `result_prefix`, None),
    or (None, a message with the child's exit code and the tail of stderr)
    when no such line was printed.
  """
  cmd = [sys.executable, '-m', module] + list(flags)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                        cwd=root, timeout=timeout_s, check=False)
  for line in proc.stdout.splitlines():
    if line.startswith(result_prefix):
      return json.loads(line[len(result_prefix):]), None
  return None, ('%s: child exited %d: %s' %
                (label, proc.returncode, proc.stderr.strip()[-800:]))
