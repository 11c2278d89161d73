"""How the fused kernels' loader builds, remembers and refuses (issue 36).

The loader (learner/optimizers/kernels/loader.py) compiles the kernels on
first use into a cache. These tests run it in subprocesses with their own
$TF_LEARNER_KERNEL_CACHE: a failed build must be said in one stderr line
and not retried by the next process, a damaged cached library must never be
loaded (a truncated one killed the process with a bus error), an unwritable
cache must not end in a traceback, and the loader's flags must compile on
every x86-64 CPU class. Fake compilers (small Python scripts) stand in for
g++ where the test is about the loader and not the compile: they either
fail with compiler-like output or copy the library this session built.
"""

import hashlib
import os
import pathlib
import platform
import subprocess
import sys
import textwrap

import pytest

from learner.optimizers.kernels import loader

_REPO = pathlib.Path(__file__).resolve().parents[2]

# Prints the loader's verdict; the kernel lines go to stderr.
_SCRIPT = textwrap.dedent('''\
    from learner.optimizers.kernels import loader
    print('UNAVAILABLE=%s' % loader.Unavailable())
    ''')


def _Run(cache, cxx=None, rebuild=False, **extra_env):
  """Runs _SCRIPT in a fresh process; (returncode, kernel lines, stdout)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', **extra_env)
  env[loader.ENV_CACHE] = str(cache)
  env.pop(loader.ENV_REBUILD, None)
  env.pop('CXX', None)
  if cxx is not None:
    env['CXX'] = str(cxx)
  if rebuild:
    env[loader.ENV_REBUILD] = '1'
  out = subprocess.run([sys.executable, '-c', _SCRIPT], cwd=str(_REPO),
                       env=env, capture_output=True, text=True, timeout=300,
                       check=False)
  lines = [l for l in out.stderr.splitlines()
           if l.startswith('tf_learner kernels:') or
           l.startswith('Compiling the fused optimizer kernels')]
  return out.returncode, lines, out.stdout


def _FakeCompiler(tmp_path, body):
  """An executable Python script taking a compiler's argv.

  It accepts the -mno-avx512fp16 probe (no -o) and runs `body` for a build
  (argv has -o); every build appends one 'x' to tmp_path/'count'.
  """
  fake = tmp_path / 'fake_cxx'
  fake.write_text(textwrap.dedent('''\
      #!%s
      import shutil, sys
      if '-o' not in sys.argv:
        sys.exit(0)
      out = sys.argv[sys.argv.index('-o') + 1]
      open(%r, 'a').write('x')
      ''') % (sys.executable, str(tmp_path / 'count')) + textwrap.dedent(body))
  fake.chmod(0o755)
  return fake


def _Count(tmp_path):
  path = tmp_path / 'count'
  return path.read_text() if path.exists() else ''


def _RealLibrary():
  """The library this session built (tests/conftest.py), as bytes."""
  assert loader.Unavailable() is None, loader.Unavailable()
  return loader.CachePath().read_bytes()


@pytest.mark.parametrize('how', ['cxx_missing', 'none_on_path'])
def test_no_compiler_is_said_once_and_the_next_run_is_silent(tmp_path, how):
  # Issue 36: with CXX=/nonexistent/c++ every run printed "Compiling ..."
  # and then fell back silently; the next run said "Compiling" again.
  cache = tmp_path / 'cache'
  if how == 'cxx_missing':
    kw = dict(cxx='/nonexistent/c++')
    reason = ('running the C++ compiler /nonexistent/c++ failed: not found '
              'or not executable (set $CXX to a C++ compiler)')
  else:  # No $CXX, and a PATH on which there is no g++ or c++.
    (tmp_path / 'bin').mkdir()
    kw = dict(PATH=str(tmp_path / 'bin'))
    reason = 'no C++ compiler (g++, c++ or $CXX) on PATH'
  code, lines, stdout = _Run(cache, **kw)
  assert code == 0
  [marker] = cache.glob('*.so.failed')
  assert marker.read_text() == reason + '\n'
  assert lines == [
      'tf_learner kernels: %s; steps take the pure-TF path (slower; the '
      'same results to float32 rounding). Not retried: delete %s or set '
      'TF_LEARNER_KERNEL_REBUILD=1 to try again.' % (reason, marker)]
  assert 'UNAVAILABLE=%s' % reason in stdout
  # The second run finds the marker: nothing said, nothing built.
  code, lines, stdout = _Run(cache, **kw)
  assert (code, lines) == (0, [])
  assert 'UNAVAILABLE=%s' % reason in stdout
  # Nothing was compiled: no log, no library (the lock is the first run's).
  assert {p.name for p in cache.iterdir()} <= {marker.name,
                                               marker.stem + '.lock'}


def test_failed_build_is_remembered_with_its_output_in_the_log(tmp_path):
  # Issue 36: a build that failed (g++ 12 on Sapphire Rapids) printed four
  # lines of compiler errors and was retried by every process (10-20 s).
  fake = _FakeCompiler(tmp_path, '''\
      for i in range(40):
        sys.stderr.write('In file included from header_%d.h:1:\\n' % i)
      sys.stderr.write("PacketMathFP16.h:748:48: error: expected initializer"
                       " before '<' token\\n")
      sys.exit(1)
      ''')
  cache = tmp_path / 'cache'
  code, lines, stdout = _Run(cache, cxx=fake)
  assert code == 0
  [lib_log] = cache.glob('*.so.log')
  lib = lib_log.with_suffix('')
  marker = lib.with_name(lib.name + '.failed')
  reason = ("compiling with %s failed (exit 1): PacketMathFP16.h:748:48: "
            "error: expected initializer before '<' token" % fake)
  assert lines == [
      'Compiling the fused optimizer kernels (multi_tensor_ops.cc, '
      'multi_tensor_rules.cc, once per TensorFlow version and machine, '
      'about 20 s) into %s.' % lib,
      'tf_learner kernels: %s (full output in %s); steps take the pure-TF '
      'path (slower; the same results to float32 rounding). Not retried: '
      'delete %s or set TF_LEARNER_KERNEL_REBUILD=1 to try again.' % (
          reason, lib_log, marker)]
  assert 'UNAVAILABLE=%s' % reason in stdout
  log = lib_log.read_text().splitlines()
  assert log[0].startswith('$ %s -shared' % fake)
  assert len(log) == 1 + 40 + 1 and log[40] == 'In file included from header_39.h:1:'
  assert marker.read_text() == reason + '\n'
  assert not lib.exists() and _Count(tmp_path) == 'x'
  # Later processes neither build nor say anything.
  code, lines, stdout = _Run(cache, cxx=fake)
  assert (code, lines, _Count(tmp_path)) == (0, [], 'x')
  assert 'UNAVAILABLE=%s' % reason in stdout
  # TF_LEARNER_KERNEL_REBUILD=1 tries again (and fails again here).
  code, lines, _ = _Run(cache, cxx=fake, rebuild=True)
  assert (code, len(lines), _Count(tmp_path)) == (0, 2, 'xx')
  assert lines[0].startswith('Compiling the fused optimizer kernels')


def test_damaged_cached_library_is_rebuilt_and_never_loaded(tmp_path):
  # Issue 36: a truncated library killed every run with a bus error (exit
  # -7) and garbage bytes fell back silently; nothing named the file. One
  # cache goes through both damages in turn (each run a new process, as
  # before; the build they share is made once: two processes fewer).
  real = _RealLibrary()
  (tmp_path / 'real.so').write_bytes(real)
  fake = _FakeCompiler(tmp_path, '''\
      shutil.copyfile(%r, out)
      ''' % str(tmp_path / 'real.so'))
  cache = tmp_path / 'cache'
  code, lines, stdout = _Run(cache, cxx=fake)
  assert (code, len(lines), _Count(tmp_path)) == (0, 1, 'x')
  assert 'UNAVAILABLE=None' in stdout
  [lib] = cache.glob('*.so')
  stamp = lib.with_name(lib.name + '.sha256')
  assert stamp.read_text().split()[0] == str(len(real))
  damaged = {'truncated': real[:len(real) // 2],
             'garbage': bytes((b * 7 + 13) % 256 for b in real)}
  for builds, (damage, data) in enumerate(damaged.items(), start=2):
    lib.write_bytes(data)
    code, lines, stdout = _Run(cache, cxx=fake)
    assert code == 0, damage  # Not -7 (SIGBUS).
    assert lines == [
        'tf_learner kernels: the cached library %s is damaged (its size or '
        'sha256 does not match %s); rebuilding it.' % (lib, stamp.name),
        'Compiling the fused optimizer kernels (multi_tensor_ops.cc, '
        'multi_tensor_rules.cc, once per TensorFlow version and machine, '
        'about 20 s) into %s.' % lib], damage
    assert 'UNAVAILABLE=None' in stdout, damage
    assert lib.read_bytes() == real and _Count(tmp_path) == 'x' * builds
  # Intact again: the next run loads it without a word.
  code, lines, stdout = _Run(cache, cxx=fake)
  assert (code, lines, _Count(tmp_path)) == (0, [], 'xxx')


def test_unwritable_kernel_cache_falls_back_to_the_temp_dir(tmp_path):
  # Issue 36: an unwritable $TF_LEARNER_KERNEL_CACHE ended every run with a
  # traceback on its .so.lock. The tests run as root, which chmod does not
  # stop, so the cache lies under a regular FILE: no user can create it.
  (tmp_path / 'file').write_text('')
  cache = tmp_path / 'file' / 'cache'
  (tmp_path / 'tmp').mkdir()
  fake = _FakeCompiler(tmp_path, '''\
      shutil.copyfile(%r, out)
      ''' % str(loader.CachePath()))
  _RealLibrary()
  code, lines, stdout = _Run(cache, cxx=fake, TMPDIR=str(tmp_path / 'tmp'))
  assert code == 0
  fallback = tmp_path / 'tmp' / ('tf_learner_kernels_%d' % os.getuid())
  [lib] = fallback.glob('*.so')
  assert lines == [
      'tf_learner kernels: cannot write the kernel cache '
      '$TF_LEARNER_KERNEL_CACHE=%s (NotADirectoryError: [Errno 20] Not a '
      "directory: '%s'); using %s instead. Set TF_LEARNER_KERNEL_CACHE to a "
      'writable directory.' % (cache, cache, fallback),
      'Compiling the fused optimizer kernels (multi_tensor_ops.cc, '
      'multi_tensor_rules.cc, once per TensorFlow version and machine, '
      'about 20 s) into %s.' % lib]
  assert 'UNAVAILABLE=None' in stdout


@pytest.mark.parametrize('plant', ['other_owner', 'world_writable',
                                   'symlink'])
def test_a_temp_cache_dir_another_user_could_write_is_never_loaded(
    tmp_path, plant):
  # Found by the fresh-user trial: the fallback <tmp>/tf_learner_kernels_<uid>
  # has a fixed name on shared ground, so another local user could make it
  # first and plant a library (with its stamp) that this process would load
  # and run. Here a planted 'library' of garbage bytes with a matching stamp:
  # loading it would fail or crash; the loader must not even try, nor build.
  (tmp_path / 'file').write_text('')
  cache = tmp_path / 'file' / 'cache'  # Unwritable even for root.
  tmp = tmp_path / 'tmp'
  tmp.mkdir()
  planted = tmp / ('tf_learner_kernels_%d' % os.getuid())
  if plant == 'symlink':
    (tmp_path / 'elsewhere').mkdir(mode=0o700)
    planted.symlink_to(tmp_path / 'elsewhere')
  else:
    planted.mkdir()
    if plant == 'other_owner':
      os.chown(planted, 65534, 65534)  # nobody: the tests run as root.
    os.chmod(planted, 0o777 if plant == 'world_writable' else 0o755)
  lib = planted / loader.CachePath().name
  lib.write_bytes(b'\x7fELF planted')
  (planted / (lib.name + '.sha256')).write_text(
      '%d %s' % (len(b'\x7fELF planted'),
                 hashlib.sha256(b'\x7fELF planted').hexdigest()))
  fake = _FakeCompiler(tmp_path, 'sys.exit(1)\n')
  code, lines, stdout = _Run(cache, cxx=fake, TMPDIR=str(tmp))
  assert code == 0
  assert _Count(tmp_path) == ''  # Nothing built either.
  assert len(lines) == 1, lines
  assert 'is not a private directory of this user' in lines[0], lines
  assert str(planted) in lines[0] and 'pure-TF path' in lines[0], lines
  assert 'UNAVAILABLE=cannot write the kernel cache' in stdout, stdout


def test_the_temp_cache_dir_is_made_private(tmp_path, monkeypatch):
  monkeypatch.setattr(loader.tempfile, 'gettempdir', lambda: str(tmp_path))
  path = loader._TempCacheDir()  # pylint: disable=protected-access
  st = os.lstat(path)
  assert (st.st_uid, st.st_mode & 0o777) == (os.getuid(), 0o700)
  assert loader._TempCacheDir() == path  # pylint: disable=protected-access


def test_no_writable_cache_at_all_takes_the_pure_tf_path(
    tmp_path, monkeypatch, capfd):
  (tmp_path / 'file').write_text('')
  monkeypatch.setenv(loader.ENV_CACHE, str(tmp_path / 'file' / 'cache'))
  monkeypatch.setattr(loader, '_TempCacheDir',
                      lambda: tmp_path / 'file' / 'tmp')
  lib, reason = loader._Load.__wrapped__()  # pylint: disable=protected-access
  assert lib is None
  assert reason == ('cannot write the kernel cache %s (NotADirectoryError: '
                    "[Errno 20] Not a directory: '%s')" % (
                        tmp_path / 'file' / 'tmp', tmp_path / 'file' / 'tmp'))
  err = capfd.readouterr().err.splitlines()
  assert len(err) == 2
  assert err[0].startswith('tf_learner kernels: cannot write the kernel '
                           'cache $TF_LEARNER_KERNEL_CACHE=')
  assert err[1] == ('tf_learner kernels: %s either; steps take the pure-TF '
                    'path (slower; the same results to float32 rounding).'
                    % reason)


def _MarchKnown(compiler, march):
  out = subprocess.run([compiler, '-march=' + march, '-fsyntax-only', '-x',
                        'c++', os.devnull], capture_output=True, check=False)
  return out.returncode == 0


@pytest.mark.parametrize(
    'march', ['sapphirerapids', 'skylake-avx512', 'x86-64-v3', 'x86-64-v2'])
def test_loader_flags_compile_for_every_x86_64_cpu_class(tmp_path, march):
  # Issue 36: with -march=native on a CPU with AVX512-FP16 (Sapphire
  # Rapids), TF 2.21's Eigen did not compile with g++ 12. The loader's own
  # command, only -march swapped, compiles for the CPU classes of CI and
  # users, whatever CPU runs this (-fsyntax-only: no code). Its sources go
  # in as one translation unit that includes each of them, so TensorFlow's
  # headers (most of the time) are parsed once per -march, not once per
  # source: ~8 s of CPU instead of ~13 s. Each source on its own is built
  # for this CPU once per session (tests/conftest.py).
  if platform.machine().lower() not in ('x86_64', 'amd64'):
    pytest.skip('not an x86-64 machine: %s' % platform.machine())
  compiler = loader._Compiler()  # pylint: disable=protected-access
  if not compiler:
    pytest.skip('no C++ compiler')
  if not _MarchKnown(compiler, march):
    pytest.skip('%s does not know -march=%s' % (compiler, march))
  cmd = loader._Command(compiler, tmp_path / 'lib.so',  # pylint: disable=protected-access
                        loader._ExtraFlags(compiler))  # pylint: disable=protected-access
  assert cmd.count('-march=native') == 1
  sources = [str(s) for s in loader.SOURCES]
  assert all(s in cmd for s in sources), cmd
  unit = tmp_path / 'all_sources.cc'
  unit.write_text(''.join('#include "%s"\n' % s for s in sources))
  cmd = ([compiler, '-fsyntax-only'] +
         ['-march=' + march if a == '-march=native' else a
          for a in cmd[1:] if a not in sources] + [str(unit)])
  out = subprocess.run(cmd, capture_output=True, text=True, timeout=590,
                       check=False)
  errors = [l for l in out.stderr.splitlines() if 'error' in l]
  assert out.returncode == 0, '\n'.join(errors[:5] or [out.stderr[-2000:]])


def test_under_a_strategy_the_library_is_never_built(tmp_path):
  # Found by the issue 41 trial: each cluster node's first multi-worker run
  # compiled the kernels (~20 s) that no step under a strategy can use.
  script = textwrap.dedent('''\
      import tensorflow as tf
      from learner.optimizers.kernels import loader, multi_tensor
      with tf.distribute.MirroredStrategy(['/cpu:0']).scope():
        print('REASON=%s' % multi_tensor.Unsupported())
      print('LOADED=%d' % loader._Load.cache_info().currsize)
      ''')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  env[loader.ENV_CACHE] = str(tmp_path / 'cache')
  out = subprocess.run([sys.executable, '-c', script], cwd=str(_REPO),
                       env=env, capture_output=True, text=True, timeout=300,
                       check=False)
  assert out.returncode == 0, out.stderr
  assert 'REASON=a tf.distribute strategy is active' in out.stdout
  assert 'LOADED=0' in out.stdout
  assert 'Compiling' not in out.stderr
  assert not (tmp_path / 'cache').exists()
