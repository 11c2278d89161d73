"""The install scheme in setup.cfg: one TensorFlow build, scripts, license."""

import configparser
import importlib
import os


from packaging.requirements import Requirement

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _Cfg():
  cfg = configparser.ConfigParser()
  cfg.read(os.path.join(_ROOT, 'setup.cfg'))
  return cfg


def _Lines(value):
  return [l.strip() for l in value.splitlines()
          if l.strip() and not l.strip().startswith('#')]


_PLATFORMS = {
    'linux x86_64': {'sys_platform': 'linux', 'platform_machine': 'x86_64'},
    'linux aarch64': {'sys_platform': 'linux', 'platform_machine': 'aarch64'},
    'macos arm64': {'sys_platform': 'darwin', 'platform_machine': 'arm64'},
    'windows': {'sys_platform': 'win32', 'platform_machine': 'AMD64'},
}


def _TensorFlowBuilds(extra, env):
  """The TensorFlow distributions `extra` installs on `env`."""
  names = []
  for line in _Lines(_Cfg()['options.extras_require'][extra]):
    req = Requirement(line)
    if req.marker is None or req.marker.evaluate(env):
      if req.name.startswith('tensorflow'):
        names.append(req.name)
  return names


def test_base_install_has_no_tensorflow_so_an_extra_picks_one_build():
  reqs = _Lines(_Cfg()['options']['install_requires'])
  assert not [r for r in reqs if Requirement(r).name.startswith('tensorflow')]


def test_cpu_extra_installs_exactly_one_build_on_every_platform():
  got = {k: _TensorFlowBuilds('cpu', env) for k, env in _PLATFORMS.items()}
  assert got == {'linux x86_64': ['tensorflow-cpu'],
                 'linux aarch64': ['tensorflow'],
                 'macos arm64': ['tensorflow'],
                 'windows': ['tensorflow']}


def test_gpu_extra_is_tensorflow_with_cuda_on_linux():
  line = _Lines(_Cfg()['options.extras_require']['gpu'])[0]
  req = Requirement(line)
  assert (req.name, sorted(req.extras)) == ('tensorflow', ['and-cuda'])
  assert req.marker.evaluate(_PLATFORMS['linux x86_64'])
  assert not req.marker.evaluate(_PLATFORMS['macos arm64'])



def test_console_scripts_name_callables():
  scripts = _Lines(_Cfg()['options.entry_points']['console_scripts'])
  assert [s.split('=')[0].strip() for s in scripts] == [
      'tf-learner-train', 'tf-learner-launch', 'tf-learner-plot-schedule']
  for s in scripts:
    module, func = s.split('=')[1].strip().split(':')
    assert callable(getattr(importlib.import_module(module), func)), s


def test_benchmarks_are_not_installed_and_the_license_ships():
  include = _Lines(_Cfg()['options.packages.find']['include'])
  assert not [p for p in include if p.startswith('benchmarks')]
  assert _Cfg()['metadata']['license_files'] == 'LICENSE'
  with open(os.path.join(_ROOT, 'LICENSE')) as f:
    assert 'Apache License' in f.read(200)


def test_kernel_sources_ship_as_package_data():
  # learner/optimizers/kernels/loader.py compiles the .cc on first use, so
  # an installed (non-editable) package must carry it.
  pattern = _Cfg()['options.package_data']['learner.optimizers.kernels']
  assert [p.strip() for p in pattern.split(',')] == ['*.cc', '*.h']
  kernels_dir = os.path.join(_ROOT, 'learner', 'optimizers', 'kernels')
  for name in ('multi_tensor_ops.cc', 'multi_tensor_rules.cc',
               'multi_tensor_common.h'):
    assert name in os.listdir(kernels_dir), name
