"""`python -m learner.launcher`: start N trainer workers on this machine.

The launcher itself is `learner/training/cluster/launcher.py`; this module only keeps
the documented command working, is the `tf-learner-launch` console script
and quiets TensorFlow's C++ start-up lines in its workers, through the
environment, before TensorFlow loads (`--tf_log_level=0` shows them; see
learner/tf_log.py). The launcher itself does not import TensorFlow
(learner/training/__init__.py loads its names lazily).
"""

import sys

from learner import tf_log

tf_log.QuietTensorFlow(sys.argv)

# pylint: disable=wrong-import-position
with tf_log.QuietImport():
  from learner.training.cluster.launcher import main  # noqa: E402


def Main():
  """Console entry point: runs the launcher on sys.argv and exits."""
  sys.exit(main())


if __name__ == '__main__':
  Main()
