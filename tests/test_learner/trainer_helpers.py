"""Helpers shared by the trainer tests (imported by name, as pytest puts
this directory on sys.path)."""

import os

from learner.training import trainer as trainer_lib


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
  trainer_lib.DefineFlags()
  flags = trainer_lib.FLAGS
  try:
    flags(['trainer'] + argv)
    code = trainer_lib.main([])
  finally:
    flags.unparse_flags()
  out = capsys.readouterr()
  return code, out.out, out.err
