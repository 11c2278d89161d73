"""`python -m learner.launcher`: start N trainer workers on this machine.

The launcher itself is `learner/training/launcher.py`; this module only keeps
the documented command working and is the `tf-learner-launch` console
script.
"""

import sys

from learner.training.launcher import main


def Main():
  """Console entry point: runs the launcher on sys.argv and exits."""
  sys.exit(main())


if __name__ == '__main__':
  Main()
