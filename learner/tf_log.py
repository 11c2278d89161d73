"""TensorFlow's C++ log level for our commands, set before TensorFlow loads.

TensorFlow's C++ runtime prints INFO and WARNING lines at start-up
(cpu_feature_guard, oneDNN, the coordination service of a multi-worker
run). It reads its level from the TF_CPP_MIN_LOG_LEVEL environment variable
once, when the library loads, so a flag parsed later cannot change it: the
entry modules (learner/trainer.py, learner/launcher.py) call
`QuietTensorFlow(sys.argv)` before anything imports TensorFlow.

The level in force, first found wins:
  1. the command's `--tf_log_level=N` flag (0 shows everything, 1 hides
     INFO, 2 also WARNING, 3 also ERROR: only FATAL lines print);
  2. TF_CPP_MIN_LOG_LEVEL already set in the environment (the user's own);
  3. QUIET_LEVEL.

This module sits directly in learner/ because that package is the only one
that imports no TensorFlow when imported (its __init__ is lazy, PEP 562);
learner.training, schedules and params all load TensorFlow.

TF_CPP_MIN_LOG_LEVEL alone is not enough on every CPU. Where TensorFlow
turns oneDNN on by default (x86 CPUs with AVX512 VNNI/BF16 and newer), the
library logs `port.cc] oneDNN custom operations are on ...` through absl
while it loads, before absl honours any level, so the line (with absl's
`WARNING: All log messages before absl::InitializeLog() ...` preamble)
prints twice per process whatever the level. `QuietImport()` therefore
holds the process's standard error (file descriptor 2) in a temporary file
while TensorFlow loads and then writes back every line except absl-format
log lines below the level in force. oneDNN itself is left as TensorFlow
chose it (TF_ENABLE_ONEDNN_OPTS is the user's to set).
"""

import contextlib
import os
import re
import signal
import sys
import tempfile
import threading

# Hides TF's C++ INFO, WARNING and ERROR lines; FATAL ones still print. An
# error that stops a run reaches Python as an exception, which our commands
# report in one line; TF's ERROR lines about it (a dozen for a multi-worker
# start-up or peer failure) only repeat it.
QUIET_LEVEL = '3'
FLAG = 'tf_log_level'
ENV = 'TF_CPP_MIN_LOG_LEVEL'

# absl's log line prefix: severity letter, MMDD, time (before absl starts,
# '00:00:<seconds since the epoch>'), thread id, file:line].
_ABSL_LINE = re.compile(rb'^([IWEF])\d{4} [\d:.]+ +\d+ [^\]]*\] ')
_ABSL_PREAMBLE = (b'WARNING: All log messages before absl::InitializeLog() '
                  b'is called are written to STDERR')
# TF_CPP_MIN_LOG_LEVEL: the lowest severity shown at each level.
_SEVERITY_RANK = {b'I': 0, b'W': 1, b'E': 2, b'F': 3}


def FlagValue(argv, name=FLAG):
  """The value of `--name=V`, `-name=V` or `--name V` in argv, else None.

  Scanning stops at a bare `--` (what follows belongs to another program,
  e.g. the launcher's worker arguments). The last occurrence wins, as in
  absl and argparse.

  Args:
    argv: list of str (sys.argv or a slice of it).
    name: the flag's name without dashes.

  Returns:
    str or None.
  """
  value = None
  args = list(argv)
  for i, arg in enumerate(args):
    if arg == '--':
      break
    for dashes in ('--', '-'):
      flag = dashes + name
      if arg.startswith(flag + '='):
        value = arg[len(flag) + 1:]
      elif arg == flag and i + 1 < len(args):
        value = args[i + 1]
  return value


def QuietTensorFlow(argv, environ=None):
  """Sets TF_CPP_MIN_LOG_LEVEL in `environ`; call before importing TF.

  Args:
    argv: the command line (sys.argv); its `--tf_log_level` wins.
    environ: mapping to set; default os.environ.

  Returns:
    str, the level now in force.
  """
  environ = os.environ if environ is None else environ
  level = FlagValue(argv[1:] if argv else [])
  if level is not None:
    environ[ENV] = level
  return environ.setdefault(ENV, QUIET_LEVEL)


def Shown(line, level):
  """Whether a start-up line of TensorFlow's passes `level`.

  Args:
    line: bytes, one line of standard error without its newline.
    level: str or int, TF_CPP_MIN_LOG_LEVEL ('0' shows everything).

  Returns:
    bool: False for an absl-format log line whose severity is below
    `level` and for absl's "before InitializeLog" preamble when level >= 1;
    True for anything else (a Python warning, a traceback, a FATAL line).
  """
  try:
    level = int(level)
  except (TypeError, ValueError):
    level = 0
  if level <= 0:
    return True
  if line.rstrip() == _ABSL_PREAMBLE:
    return False
  match = _ABSL_LINE.match(line)
  if match is None:
    return True
  return _SEVERITY_RANK[match.group(1)] >= min(level, 3)


@contextlib.contextmanager
def QuietImport(environ=None):
  """Hides TensorFlow's below-level C++ start-up lines while it loads.

  Use around the first import of TensorFlow, after `QuietTensorFlow`:

    with tf_log.QuietImport():
      from learner.training.jobs.cli import Main

  Standard error (file descriptor 2, so C++ and Python writes alike) goes
  to a temporary file for the duration of the block; on leaving it, even
  by an exception or Ctrl-C, the descriptor is restored and every captured
  line that `Shown` passes at the level in force is written back, in
  order. At level 0 everything is written back. Nothing is lost but the
  hidden log lines; output appears only when the import ends.

  Args:
    environ: mapping holding TF_CPP_MIN_LOG_LEVEL; default os.environ.

  Yields:
    None.
  """
  environ = os.environ if environ is None else environ
  level = environ.get(ENV, '0')
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError, AttributeError):
    yield  # No usable descriptor 2 (e.g. closed): nothing to hide.
    return
  with tempfile.TemporaryFile() as held:
    os.dup2(held.fileno(), 2)
    try:
      yield
    finally:
      try:
        sys.stderr.flush()
      except (OSError, ValueError):
        pass
      os.dup2(saved, 2)
      os.close(saved)
      held.seek(0)
      kept = [line for line in held.read().splitlines(keepends=True)
              if Shown(line.rstrip(b'\n'), level)]
      if kept:
        os.write(2, b''.join(kept))


def QuietImportFor(module, console_script=None):
  """`QuietImport` when this process is the command `module`, else nothing.

  A package whose command runs as `python -m <package>.<command>` (or as a
  console script) loads TensorFlow in its own __init__, before the
  command's module runs: that __init__ is the last moment to quiet
  TensorFlow. It imports TensorFlow inside this context:

    with tf_log.QuietImportFor('layers.demo'):
      import tensorflow as tf

  For the command, the level is set as for the trainer (`--tf_log_level=N`
  on its command line, then the user's TF_CPP_MIN_LOG_LEVEL, then
  QUIET_LEVEL; `QuietTensorFlow`) and TensorFlow loads under `QuietImport`.
  Any other importer (a library user, a test) is left alone: no environment
  variable is set and standard error is not held.

  Args:
    module: str, the dotted module of the command, e.g. 'schedules.plot'.
    console_script: str or None, the file name of the command's console
      script, e.g. 'tf-learner-plot-schedule'.

  Returns:
    A context manager to import TensorFlow in.
  """
  argv = getattr(sys, 'orig_argv', sys.argv)
  is_module = argv[1:3] == ['-m', module]
  is_script = (console_script is not None and
               os.path.basename(sys.argv[0]) == console_script)
  if not (is_module or is_script):
    return contextlib.nullcontext()
  QuietTensorFlow([sys.argv[0]] + [
      a for a in argv[1:] if a.startswith(('--%s=' % FLAG, '-%s=' % FLAG))])
  return QuietImport()


@contextlib.contextmanager
def InterruptAfterImport():
  """Holds a Ctrl-C (SIGINT) that arrives inside the block until it ends.

  An interrupt while Python imports C extensions (numpy, TensorFlow) can
  surface as an unrelated ImportError from inside the extension (numpy's
  "PyCapsule_Import could not import module 'datetime'"), not as a
  KeyboardInterrupt. Inside this block SIGINT is only recorded; on leaving
  it the previous handler is put back and, if one arrived, the block ends
  with KeyboardInterrupt, which the caller reports in one line (exit 130).
  Only in the main thread; elsewhere the block runs unchanged.

  Yields:
    None.

  Raises:
    KeyboardInterrupt: on leaving the block, if SIGINT arrived inside it.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  got = []
  previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(1))
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)
  if got:
    raise KeyboardInterrupt()
