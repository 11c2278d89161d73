"""Builds and loads the multi-tensor kernels (SOURCES: one library).

Compiled on first use, not at install: `pip install -e '.[cpu,test]'`
builds in an isolated environment that has no TensorFlow (its headers and
libtensorflow_framework come with the installed wheel), and a build at
install would tie the package to the TensorFlow present then. On first use
the sources (SOURCES, with the header they share, HEADERS) are compiled
with g++ (or $CXX) against the installed TensorFlow (`tf.sysconfig` flags)
into one library in a cache directory, keyed by the TensorFlow version and
a hash of every source and header, the flags, the compiler and the CPU, so a
new TensorFlow or an edited kernel rebuilds and everything else reuses the
library (about 20 s of CPU once per machine and TensorFlow version).

  cache directory  $TF_LEARNER_KERNEL_CACHE, else $XDG_CACHE_HOME (or
                   ~/.cache)/tf_learner/kernels; if that is not writable,
                   <tempdir>/tf_learner_kernels_<uid>.
  concurrency      an exclusive lock file per key (fcntl.flock) around the
                   build, and the library written under a temporary name
                   and renamed into place: concurrent processes (pytest-xdist
                   workers, several trainers) build once and never load a
                   half-written file.
  switch           ON by default: TF_LEARNER_FUSED_KERNELS=0 keeps every
                   step on the pure-TF path (`Disabled()` within a block),
                   1 or unset lets a step take the fused path where it can
                   (`Active()`). (Session 3 shipped it off: the fused step
                   measured slower than the pure-TF one on the resnet50 set;
                   the cause was the ops' thread split, see ForEachChunk in
                   multi_tensor_ops.cc.)

No compiler, a failed build or a failed load leave `Library()` None and
`Unavailable()` saying why; callers then take the pure-TF path.
"""

import contextlib
import functools
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile

from absl import logging
import tensorflow as tf

_HERE = pathlib.Path(__file__).parent
# multi_tensor_ops.cc: norms, SGD / Momentum / Adam, accumulation (issue 16);
# multi_tensor_rules.cc: the newer rules (issue 27). Both into one library.
SOURCES = (_HERE / 'multi_tensor_ops.cc', _HERE / 'multi_tensor_rules.cc')
HEADERS = (_HERE / 'multi_tensor_common.h',)
ENV_SWITCH = 'TF_LEARNER_FUSED_KERNELS'
ENV_CACHE = 'TF_LEARNER_KERNEL_CACHE'
# No fused multiply-add: the kernels then round exactly as TF's own
# (see the head of multi_tensor_ops.cc).
CXX_FLAGS = ('-shared', '-fPIC', '-O3', '-march=native', '-ffp-contract=off',
             '-fno-math-errno', '-w')
BUILD_TIMEOUT_S = 900


def Enabled():
  """False when $TF_LEARNER_FUSED_KERNELS is 0/false/off (read at every call).

  Unset means on. Any other value than 0/1, true/false, on/off counts as on
  and is logged once.
  """
  value = os.environ.get(ENV_SWITCH, '1').strip().lower()
  if value not in ('0', 'false', 'off', '1', 'true', 'on', ''):
    _WarnSwitch(value)
  return value not in ('0', 'false', 'off')


@functools.lru_cache(maxsize=None)
def _WarnSwitch(value):
  logging.warning('tf_learner kernels: $%s=%r is not 0 or 1; the fused path '
                  'stays on (set %s=0 to turn it off).', ENV_SWITCH, value,
                  ENV_SWITCH)


@contextlib.contextmanager
def _Switched(value):
  """Sets $TF_LEARNER_FUSED_KERNELS to `value` within the block, then back."""
  old = os.environ.get(ENV_SWITCH)
  os.environ[ENV_SWITCH] = value
  try:
    yield
  finally:
    if old is None:
      del os.environ[ENV_SWITCH]
    else:
      os.environ[ENV_SWITCH] = old


def Active():
  """Within the block, steps traced or run take the fused path if they can.

  Sets $TF_LEARNER_FUSED_KERNELS=1 and restores it after; the path is fixed
  when a step is traced, so trace (or run eagerly) inside the block.
  """
  return _Switched('1')


def Disabled():
  """Within the block, steps traced or run take the pure-TF path.

  Sets $TF_LEARNER_FUSED_KERNELS=0 and restores it after; the path is fixed
  when a step is traced, so trace (or run eagerly) inside the block.
  """
  return _Switched('0')


def Library():
  """The loaded op library (tf.load_op_library's module), or None."""
  return _Load()[0]


def Unavailable():
  """None when the library is loaded, else the reason (a sentence)."""
  return _Load()[1]


def CachePath():
  """Path of the library file for this TensorFlow, source and machine."""
  return _CacheDir() / ('multi_tensor_ops-tf%s-%s.so' %
                        (tf.__version__, _Key()))


@functools.lru_cache(maxsize=None)
def _Load():
  """(library or None, reason or None), computed once per process."""
  compiler = os.environ.get('CXX') or shutil.which('g++') or shutil.which(
      'c++')
  path = CachePath()
  if not path.exists():
    if not compiler:
      return None, 'no C++ compiler (g++, c++ or $CXX) on PATH'
    error = _BuildLocked(compiler, path)
    if error:
      return None, error
  try:
    return tf.load_op_library(str(path)), None
  except (tf.errors.NotFoundError, OSError) as e:
    return None, 'loading %s failed: %s' % (path, str(e).splitlines()[0])


def _Command(compiler, output):
  return ([compiler] + list(CXX_FLAGS) + [str(s) for s in SOURCES] +
          ['-o', str(output)] +
          tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())


def _Key():
  """Hash of the sources and headers, compile flags and CPU flags."""
  h = hashlib.sha256()
  for path in SOURCES + HEADERS:
    h.update(path.name.encode())
    h.update(path.read_bytes())
  h.update(' '.join(CXX_FLAGS + tuple(tf.sysconfig.get_compile_flags()) +
                    tuple(tf.sysconfig.get_link_flags())).encode())
  h.update(platform.machine().encode())
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      h.update(next((l for l in f if l.startswith('flags')), '').encode())
  except OSError:
    h.update(platform.processor().encode())
  return h.hexdigest()[:16]


def _CacheDir():
  if os.environ.get(ENV_CACHE):
    return pathlib.Path(os.environ[ENV_CACHE])
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  path = pathlib.Path(base) / 'tf_learner' / 'kernels'
  try:
    path.mkdir(parents=True, exist_ok=True)
    if os.access(path, os.W_OK):
      return path
  except OSError:
    pass
  uid = os.getuid() if hasattr(os, 'getuid') else 0
  return pathlib.Path(tempfile.gettempdir()) / ('tf_learner_kernels_%d' % uid)


def _BuildLocked(compiler, path):
  """Builds `path` under its lock unless another process just did."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(str(path) + '.lock', 'w', encoding='utf-8') as lock:
    try:
      import fcntl  # pylint: disable=g-import-not-at-top
      fcntl.flock(lock, fcntl.LOCK_EX)
    except ImportError:  # Not POSIX: the rename below still keeps it whole.
      pass
    if path.exists():
      return None
    return _Build(compiler, path)


def _SayCompiling(path):
  """One stderr line before the first-use compile (about 20 s of CPU).

  Shown at every verbosity, so the pause is explained: written to stderr,
  not logged (the commands log INFO lines only when asked).
  """
  sys.stderr.write('Compiling the fused optimizer kernels (%s, once per '
                   'TensorFlow version and machine, about 20 s) into %s.\n'
                   % (', '.join(s.name for s in SOURCES), path))
  sys.stderr.flush()


def _Build(compiler, path):
  """Compiles into a temporary file and renames it; returns an error or None."""
  tmp = path.with_name('%s.%d.tmp' % (path.name, os.getpid()))
  cmd = _Command(compiler, tmp)
  _SayCompiling(path)
  try:
    out = subprocess.run(cmd, capture_output=True, text=True,
                         timeout=BUILD_TIMEOUT_S, check=False)
  except (OSError, subprocess.TimeoutExpired) as e:
    return 'compiling with %s failed: %s' % (compiler, e)
  if out.returncode != 0:
    tail = '\n'.join(out.stderr.strip().splitlines()[-5:])
    logging.warning('tf_learner kernels: compile failed:\n%s', tail)
    return 'compiling with %s failed (exit %d): %s' % (
        compiler, out.returncode, tail.splitlines()[-1] if tail else '')
  os.replace(tmp, path)
  return None
