"""TensorFlow's start-up lines are hidden whatever the CPU (issue 21, item 1).

learner/tf_log.py: `Shown` decides line by line, `QuietImport` holds file
descriptor 2 while TensorFlow loads. The lines below are copied from a
TF 2.21 start-up on an AVX512 VNNI/BF16 CPU, where oneDNN is on by default
and its line ignores TF_CPP_MIN_LOG_LEVEL.
"""

import os
import subprocess
import sys

import pytest

from learner import tf_log

_PREAMBLE = (b'WARNING: All log messages before absl::InitializeLog() is '
             b'called are written to STDERR')
_ONEDNN = (b'I0000 00:00:1796288039.298548    2194 port.cc:153] oneDNN custom '
           b'operations are on. You may see slightly different numerical '
           b'results due to floating-point round-off errors from different '
           b'computation orders.')
_WARNING = (b'W1203 09:01:02.123456   77 gpu_device.cc:2344] Cannot dlopen '
            b'some GPU libraries.')
_ERROR = b'E1203 09:01:02.123456   77 cuda_dnn.cc:8310] Unable to register.'
_FATAL = b'F1203 09:01:02.123456   77 op.cc:1] Check failed: x'


@pytest.mark.parametrize('level, shown', [
    ('0', [_PREAMBLE, _ONEDNN, _WARNING, _ERROR, _FATAL]),
    ('1', [_WARNING, _ERROR, _FATAL]),
    ('2', [_ERROR, _FATAL]),
    ('3', [_FATAL]),
])
def test_lines_below_the_level_are_hidden_the_rest_shown(level, shown):
  lines = [_PREAMBLE, _ONEDNN, _WARNING, _ERROR, _FATAL]
  assert [l for l in lines if tf_log.Shown(l, level)] == shown


def test_python_output_is_never_hidden():
  for line in (b'Traceback (most recent call last):',
               b'/x/y.py:3: DeprecationWarning: old',
               b'I think so', b''):
    assert tf_log.Shown(line, '3')


def test_quiet_import_writes_back_all_but_the_hidden_lines_in_order():
  # A child process, so file descriptor 2 is the child's own pipe.
  code = (
      'import os, sys\n'
      'from learner import tf_log\n'
      'with tf_log.QuietImport({"TF_CPP_MIN_LOG_LEVEL": "3"}):\n'
      '  os.write(2, %r)\n'
      '  sys.stderr.write("a python line\\n")\n'
      '  os.write(2, %r)\n'
      'os.write(2, b"after\\n")\n' % (
          _PREAMBLE + b'\n' + _ONEDNN + b'\n', b'kept C line\n' + _ONEDNN +
          b'\n'))
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        timeout=120, cwd=_Root())
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == b'a python line\nkept C line\nafter\n'


def test_quiet_import_restores_stderr_when_the_block_raises():
  code = (
      'import os, sys\n'
      'from learner import tf_log\n'
      'try:\n'
      '  with tf_log.QuietImport({"TF_CPP_MIN_LOG_LEVEL": "3"}):\n'
      '    os.write(2, b"held\\n")\n'
      '    raise KeyboardInterrupt\n'
      'except KeyboardInterrupt:\n'
      '  os.write(2, b"interrupted\\n")\n')
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        timeout=120, cwd=_Root())
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == b'held\ninterrupted\n'


def test_importing_tensorflow_under_quiet_import_prints_nothing(onednn):
  env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn,
             TF_CPP_MIN_LOG_LEVEL='3')
  code = ('from learner import tf_log\n'
          'with tf_log.QuietImport():\n'
          '  import tensorflow\n')
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        text=True, timeout=240, env=env, cwd=_Root())
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == ''


def _Root():
  return os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))


def test_an_interrupt_inside_the_import_block_is_held_to_its_end():
  # numpy found by CI: SIGINT inside its C extension import became
  # "ImportError: PyCapsule_Import could not import module 'datetime'".
  import os as _os  # pylint: disable=g-import-not-at-top
  import signal as _signal  # pylint: disable=g-import-not-at-top
  from learner import tf_log  # pylint: disable=g-import-not-at-top
  finished = []
  with pytest.raises(KeyboardInterrupt):
    with tf_log.InterruptAfterImport():
      _os.kill(_os.getpid(), _signal.SIGINT)
      finished.append('the block ran to its end')
  assert finished == ['the block ran to its end']
  assert _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
  with tf_log.InterruptAfterImport():  # No interrupt: nothing raised.
    pass
