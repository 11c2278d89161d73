"""`python -m learner.launcher`: start N trainer workers on this machine.

The launcher itself is `learner/training/launcher.py`; this module only keeps
the documented command working.
"""

import sys

from learner.training.launcher import main

if __name__ == '__main__':
  sys.exit(main())
