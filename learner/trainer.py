"""`python -m learner.trainer`: the trainer's command line.

The trainer itself is `learner/training/jobs/trainer.py`; this module only keeps
the documented command working, is the `tf-learner-train` console script
and quiets TensorFlow's C++ start-up lines before TensorFlow loads
(`--tf_log_level=0` shows them; see learner/tf_log.py).
"""

import signal
import sys

from learner import tf_log

tf_log.QuietTensorFlow(sys.argv)
# A background job of a non-interactive shell (`cmd &` in a script, CI) starts
# with SIGINT ignored, and Python then raises no KeyboardInterrupt: Ctrl-C or
# `kill -INT` would be lost until training installs its own handler. The
# trainer stops on SIGINT however it was started, so take it back now.
signal.signal(signal.SIGINT, signal.default_int_handler)

try:
  # Loading TensorFlow takes seconds; Ctrl-C then gets one line, not the
  # traceback of an interrupted import (training has not started, so
  # nothing was written).
  # pylint: disable=wrong-import-position
  # An interrupt is held until the import ends: inside numpy's C
  # extensions it would surface as an unrelated ImportError.
  with tf_log.InterruptAfterImport(), tf_log.QuietImport():
    from learner.training.jobs.cli import Main  # noqa: E402
except KeyboardInterrupt:
  sys.stderr.write('Interrupted while starting, before training: nothing '
                   'was written.\n')
  sys.exit(130)

if __name__ == '__main__':
  Main()
