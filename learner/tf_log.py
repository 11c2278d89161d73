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
"""

import os

# Hides TF's C++ INFO, WARNING and ERROR lines; FATAL ones still print. An
# error that stops a run reaches Python as an exception, which our commands
# report in one line; TF's ERROR lines about it (a dozen for a multi-worker
# start-up or peer failure) only repeat it.
QUIET_LEVEL = '3'
FLAG = 'tf_log_level'
ENV = 'TF_CPP_MIN_LOG_LEVEL'


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
