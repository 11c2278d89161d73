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
                   <tempdir>/tf_learner_kernels_<uid> (made 0700; used only
                   if it is this user's own and writable by no one else,
                   else the pure-TF path with one line: a library there
                   could have been planted). When a build cannot
                   create its lock file there (say $TF_LEARNER_KERNEL_CACHE
                   is read-only or under a regular file), one stderr line
                   says so and the temporary directory is used; if that
                   fails too, the pure-TF path (one line, no traceback).
  flags            CXX_FLAGS, plus -mno-avx512fp16 when the compiler takes
                   it (probed once, before a build; see _ExtraFlags for why
                   it is needed on Sapphire Rapids and why the numbers do
                   not change).
  files            beside the library <lib>.so: <lib>.so.sha256 (its size
                   and sha256, written after a successful build and checked
                   before every load, so a truncated or overwritten library
                   is rebuilt under the lock instead of crashing the process
                   with a bus error), <lib>.so.log (the build command and
                   the compiler's whole output), <lib>.so.failed (a build
                   or load that failed, with the reason) and <lib>.so.lock.
  failures         said in ONE stderr line, by the process that met them:
                   the reason, the log, "steps take the pure-TF path", and
                   how to retry. <lib>.so.failed keeps later processes from
                   building again (they say nothing); delete it or set
                   TF_LEARNER_KERNEL_REBUILD=1 to try again. The compiler is
                   part of the key, so a fixed $CXX or a newly installed g++
                   builds without that.
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
                   multi_tensor_common.h.)

No compiler, a failed build, a failed load or an unwritable cache leave
`Library()` None and `Unavailable()` saying why; callers then take the
pure-TF path, which gives the same results to float32 rounding
(multi_tensor.py).
"""

import contextlib
import functools
import hashlib
import os
import pathlib
import platform
import shutil
import stat
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
# 1: try a build again although <lib>.failed remembers that it failed.
ENV_REBUILD = 'TF_LEARNER_KERNEL_REBUILD'
# No fused multiply-add: the kernels then round exactly as TF's own
# (see the head of multi_tensor_ops.cc).
CXX_FLAGS = ('-shared', '-fPIC', '-O3', '-march=native', '-ffp-contract=off',
             '-fno-math-errno', '-w')
BUILD_TIMEOUT_S = 900
# What every line about a missing library says: the pure-TF path's updates
# are TF's own, the fused norm sums in float64 (README, fused kernels).
FALLBACK = ('steps take the pure-TF path (slower; the same results to '
            'float32 rounding)')


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
  """Path of the library file for this TensorFlow, source, compiler and CPU.

  In $TF_LEARNER_KERNEL_CACHE, else the default cache directory (or the
  temporary one when the default is not writable). When the build cannot
  write there, `Library()` uses <tempdir>/tf_learner_kernels_<uid> instead
  and says so in one line.
  """
  return _CacheDir() / _LibName(_Compiler())


@functools.lru_cache(maxsize=None)
def _Load():
  """(library or None, reason or None), computed once per process.

  Never raises for a missing compiler, a failed build, a damaged cached
  library or an unwritable cache: each is a reason, said on stderr in at
  most one line (and a remembered failure in none).
  """
  compiler = _Compiler()
  try:
    path = CachePath()
  except _Unsafe as e:
    _Say('%s; %s.' % (e, FALLBACK))
    return None, str(e)
  try:
    return _LoadAt(compiler, path)
  except _Unwritable as e:
    first = e
  try:
    fallback = _TempCacheDir() / path.name
  except _Unsafe as e:
    reason = 'cannot write the kernel cache %s (%s), and %s' % (
        first.where, first, e)
    _Say('%s; %s.' % (reason, FALLBACK))
    return None, reason
  except OSError:  # No usable temporary directory at all.
    fallback = None
  if fallback is None or fallback.parent == path.parent:
    reason = 'cannot write the kernel cache %s (%s)' % (first.where, first)
    _Say('%s; %s. %s' % (reason, FALLBACK, first.fix))
    return None, reason
  _Say('cannot write the kernel cache %s (%s); using %s instead. %s'
       % (first.where, first, fallback.parent, first.fix))
  try:
    return _LoadAt(compiler, fallback)
  except _Unwritable as e:
    reason = 'cannot write the kernel cache %s (%s)' % (fallback.parent, e)
    _Say('%s either; %s.' % (reason, FALLBACK))
    return None, reason


class _Unwritable(Exception):
  """The cache directory cannot hold the lock file (or the build's files)."""

  def __init__(self, directory, error):
    super().__init__('%s: %s' % (type(error).__name__, error))
    self.where = str(directory)
    if os.environ.get(ENV_CACHE) and (pathlib.Path(os.environ[ENV_CACHE]) ==
                                      pathlib.Path(directory)):
      self.where = '$%s=%s' % (ENV_CACHE, directory)
    self.fix = 'Set %s to a writable directory.' % ENV_CACHE


def _LoadAt(compiler, path):
  """_Load in one cache directory; raises _Unwritable if it must build there.

  Order: a remembered failure (`<lib>.failed`, skipped by
  $TF_LEARNER_KERNEL_REBUILD=1) is returned silently; an intact library
  (its size and sha256 match `<lib>.sha256`) is loaded; anything else is
  built under the lock, once.
  """
  remembered = _Remembered(path)
  if remembered:
    return None, remembered
  if not _Intact(path):
    if not compiler:
      return None, _Fail(path, 'no C++ compiler (g++, c++ or $CXX) on PATH',
                         log=None)
    error = _BuildLocked(compiler, path, _ExtraFlags(compiler))
    if error:
      return None, error
  try:
    return tf.load_op_library(str(path)), None
  except (tf.errors.NotFoundError, OSError) as e:
    return None, _Fail(path, 'loading %s failed: %s' % (
        path, str(e).splitlines()[0] if str(e) else type(e).__name__),
                       log=None)


def _Compiler():
  """$CXX, else g++ or c++ found on PATH (full path), else None."""
  return os.environ.get('CXX') or shutil.which('g++') or shutil.which('c++')


def _LibName(compiler):
  return 'multi_tensor_ops-tf%s-%s.so' % (tf.__version__, _Key(compiler))


@functools.lru_cache(maxsize=None)
def _ExtraFlags(compiler):
  """Flags added to CXX_FLAGS when `compiler` accepts them (probed once).

  -mno-avx512fp16: TF 2.21's bundled Eigen (Eigen/src/Core/arch/AVX512/
  PacketMathFP16.h) does not compile with g++ 12 when -march=native turns
  on __AVX512FP16__ (Sapphire Rapids and newer: "expected initializer
  before '<' token"), and the whole build failed there. The flag only turns
  off the float16 vector instructions. The numbers stay bit-identical: the
  kernels compute in float32 and float64 only (no Eigen::half, no
  _Float16: `grep -i -e half -e fp16 -e float16` in the sources finds
  only the "half" of half sums of squares), so no float16 packet code is
  instantiated, and with -ffp-contract=off every add, multiply,
  divide and sqrt is one correctly rounded IEEE operation at any vector
  width; on a CPU without AVX512-FP16 the flag changes no instruction.
  g++ before 12 (and other compilers) reject the flag; then it is left out,
  which is right, as they cannot turn the instructions on either.
  """
  try:
    out = subprocess.run([compiler, '-mno-avx512fp16', '-fsyntax-only',
                          '-x', 'c++', os.devnull], capture_output=True,
                         timeout=60, check=False)
  except (OSError, subprocess.TimeoutExpired):
    return ()  # The build then says why the compiler does not run.
  return ('-mno-avx512fp16',) if out.returncode == 0 else ()


def _Command(compiler, output, extra_flags=()):
  """The build's argv: CXX_FLAGS + extra_flags, the sources, TF's flags."""
  return ([compiler] + list(CXX_FLAGS) + list(extra_flags) +
          [str(s) for s in SOURCES] + ['-o', str(output)] +
          tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())


def _Key(compiler):
  """Hash of the sources and headers, flags, compiler and CPU flags.

  The compiler is part of it, so a failure remembered for one compiler
  (say a $CXX that does not exist) does not stop a build with another.
  """
  h = hashlib.sha256()
  for path in SOURCES + HEADERS:
    h.update(path.name.encode())
    h.update(path.read_bytes())
  h.update(' '.join(CXX_FLAGS + tuple(tf.sysconfig.get_compile_flags()) +
                    tuple(tf.sysconfig.get_link_flags())).encode())
  h.update(('compiler=%s' % (compiler or '')).encode())
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
  return _TempCacheDir()


class _Unsafe(OSError):
  """The temp-dir cache could be written by another user: never loaded."""


def _TempCacheDir():
  """<tempdir>/tf_learner_kernels_<uid>, made private to this user.

  The directory is shared ground (/tmp): another local user could create it
  first and plant a library there that this process would then load and
  run. So it is created with mode 0700 and used only when it is a real
  directory (not a symlink) owned by this user and writable by nobody else.

  Raises:
    OSError: there is no temporary directory.
    _Unsafe: the directory exists but fails that check.
  """
  uid = os.getuid() if hasattr(os, 'getuid') else 0
  path = pathlib.Path(tempfile.gettempdir()) / ('tf_learner_kernels_%d' % uid)
  try:
    path.mkdir(mode=0o700)
  except FileExistsError:
    pass
  if hasattr(os, 'getuid'):
    st = os.lstat(path)
    if (not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or
        st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
      raise _Unsafe(
          '%s is not a private directory of this user (a symlink, another '
          'owner, or writable by others); a library there could be anyone\'s, '
          'so it is not loaded. Remove it, or set %s to a directory of your '
          'own' % (path, ENV_CACHE))
  return path


def _Sidecar(path, suffix):
  return path.with_name(path.name + suffix)


def _Stamp(path):
  """'<size> <sha256>' of the file at `path` (OSError if unreadable)."""
  data = path.read_bytes()
  return '%d %s' % (len(data), hashlib.sha256(data).hexdigest())


def _Intact(path):
  """True if `path` exists and its size and sha256 match <lib>.sha256.

  Checked before tf.load_op_library, which maps the file: a truncated
  library killed the process with a bus error, garbage bytes failed to
  load. Without a stamp (another program's file) the library is rebuilt.
  """
  try:
    expected = _Sidecar(path, '.sha256').read_text(encoding='utf-8').strip()
    return _Stamp(path) == expected
  except OSError:
    return False


def _Rebuild():
  return os.environ.get(ENV_REBUILD, '').strip().lower() in ('1', 'true',
                                                             'on')


def _Remembered(path):
  """The reason in <lib>.failed, or None (also under ENV_REBUILD=1)."""
  if _Rebuild():
    return None
  try:
    text = _Sidecar(path, '.failed').read_text(encoding='utf-8').strip()
  except OSError:
    return None
  return text.splitlines()[0] if text else 'an earlier build failed'


def _Fail(path, reason, log):
  """Remembers `reason` in <lib>.failed and says it in one stderr line.

  Returns `reason`. Later processes find the marker and neither build nor
  say anything (`_Remembered`).
  """
  marker = _Sidecar(path, '.failed')
  try:
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(reason + '\n', encoding='utf-8')
    retry = ('Not retried: delete %s or set %s=1 to try again.' %
             (marker, ENV_REBUILD))
  except OSError:
    retry = '(Could not write %s; tried again by every process.)' % marker
  _Say('%s%s; %s. %s'
       % (reason, '' if log is None else ' (full output in %s)' % log,
          FALLBACK, retry))
  return reason


def _Say(text):
  """One line on stderr, shown at every verbosity (not logged)."""
  sys.stderr.write('tf_learner kernels: %s\n' % text)
  sys.stderr.flush()


def _BuildLocked(compiler, path, extra_flags=()):
  """Builds `path` under its lock unless another process just did (or failed).

  Returns None when `path` is intact, else the reason it is not; a new
  failure is remembered (`_Fail`). Raises _Unwritable when the directory
  cannot be made or the lock file cannot be created in it.
  """
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(str(path) + '.lock', 'a', encoding='utf-8')  # pylint: disable=consider-using-with
  except OSError as e:
    raise _Unwritable(path.parent, e) from e
  with lock:
    try:
      import fcntl  # pylint: disable=g-import-not-at-top
      fcntl.flock(lock, fcntl.LOCK_EX)
    except ImportError:  # Not POSIX: the rename below still keeps it whole.
      pass
    if _Intact(path):
      return None
    remembered = _Remembered(path)
    if remembered:
      return remembered
    if path.exists():
      _Say('the cached library %s is damaged (its size or sha256 does not '
           'match %s); rebuilding it.' % (path, _Sidecar(path, '.sha256').name))
    return _Build(compiler, path, extra_flags)


def _SayCompiling(path):
  """One stderr line before the first-use compile (about 20 s of CPU).

  Shown at every verbosity, so the pause is explained: written to stderr,
  not logged (the commands log INFO lines only when asked).
  """
  sys.stderr.write('Compiling the fused optimizer kernels (%s, once per '
                   'TensorFlow version and machine, about 20 s) into %s.\n'
                   % (', '.join(s.name for s in SOURCES), path))
  sys.stderr.flush()


def _Build(compiler, path, extra_flags=()):
  """Compiles into a temporary file, stamps it and renames it into place.

  Returns None on success, else the reason (remembered with `_Fail`). The
  command and the compiler's whole output go to <lib>.log, not to the
  terminal. Raises _Unwritable if the log cannot be written.
  """
  if not shutil.which(compiler):
    # Said without "Compiling": nothing compiles.
    return _Fail(path, 'running the C++ compiler %s failed: not found or '
                 'not executable (set $CXX to a C++ compiler)' % compiler,
                 log=None)
  tmp = path.with_name('%s.%d.tmp' % (path.name, os.getpid()))
  log = _Sidecar(path, '.log')
  cmd = _Command(compiler, tmp, extra_flags)
  try:
    log.write_text('$ %s\n' % ' '.join(cmd), encoding='utf-8')
  except OSError as e:
    raise _Unwritable(path.parent, e) from e
  _SayCompiling(path)
  try:
    out = subprocess.run(cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True,
                         timeout=BUILD_TIMEOUT_S, check=False)
    output, status = out.stdout, 'exit %d' % out.returncode
  except subprocess.TimeoutExpired as e:
    output, status = e.output or '', 'timed out after %d s' % BUILD_TIMEOUT_S
    if isinstance(output, bytes):
      output = output.decode('utf-8', 'replace')
  except OSError as e:
    output, status = '', '%s: %s' % (type(e).__name__, e)
  try:
    with open(log, 'a', encoding='utf-8') as f:
      f.write(output)
  except OSError:
    pass
  if status != 'exit 0':
    errors = [l for l in output.splitlines() if 'error' in l]
    first = (errors or output.strip().splitlines() or [''])[0]
    if len(first) > 300:
      first = '...' + first[-300:]
    return _Fail(path, 'compiling with %s failed (%s)%s' % (
        compiler, status, ': ' + first if first else ''), log=log)
  try:
    stamp = _Stamp(tmp)
    stamp_tmp = _Sidecar(tmp, '.sha256')
    stamp_tmp.write_text(stamp + '\n', encoding='utf-8')
    os.replace(tmp, path)
    os.replace(stamp_tmp, _Sidecar(path, '.sha256'))
  except OSError as e:
    return _Fail(path, 'installing the built library %s failed (%s: %s)' % (
        path, type(e).__name__, e), log=log)
  try:
    _Sidecar(path, '.failed').unlink()
  except OSError:
    pass
  return None
