"""Test-wide setup: two logical CPU devices, configured before TF starts.

MirroredStrategy tests need two devices; logical devices can only be set
before the TensorFlow runtime initialises, so this runs at import time.
"""

import os

import pytest

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from learner import tf_log  # pylint: disable=g-import-not-at-top

# Quiet in every worker whatever the CPU (oneDNN's start-up line ignores
# TF_CPP_MIN_LOG_LEVEL; learner/tf_log.py).
with tf_log.QuietImport():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

_cpus = tf.config.list_physical_devices('CPU')
try:
  tf.config.set_logical_device_configuration(
      _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # The runtime was already initialised.
  pass



# TensorFlow turns oneDNN on by default on some x86 CPUs (AVX512 VNNI/BF16
# and newer) and off on others, and prints start-up lines only when it is
# on. Tests of what our commands print force it on in their subprocesses,
# so they pass or fail alike whatever CPU runs the suite. On is the strict
# value: with it off TensorFlow prints a subset of the same lines (TF 2.21,
# `import tensorflow` with TF_CPP_MIN_LOG_LEVEL unset: absl's preamble and
# cpu_feature_guard under 0; the same plus two oneDNN lines and a second
# preamble under 1), so a run under '0' could fail only where '1' fails.
# (Both values ran until 2026-12-07: each such test and module-scoped
# launch ran twice for nothing more.)
ONEDNN_VALUES = ('1',)


def _OneDnnId(value):
  return 'onednn' + value


@pytest.fixture(params=ONEDNN_VALUES, ids=_OneDnnId)
def onednn(request):
  """TF_ENABLE_ONEDNN_OPTS for this test's subprocesses ('1', see above)."""
  return request.param


@pytest.fixture(scope='module', params=ONEDNN_VALUES, ids=_OneDnnId)
def onednn_module(request):
  """As `onednn`, for module-scoped fixtures."""
  return request.param


# The fused kernels compile on first use and say so in one stderr line
# (learner/optimizers/kernels/loader.py). Built here, once per session (the
# loader's lock makes the xdist workers build once), so no command a test
# starts compiles them and prints that line among the output it checks.
from learner.optimizers.kernels import loader as _kernel_loader  # pylint: disable=g-import-not-at-top,wrong-import-position

_kernel_loader.Library()


def pytest_collection_modifyitems(items):
  """Modules that hold a test marked `slow` go out first, in their order.

  Under `--dist loadscope --no-loadscope-reorder` (setup.cfg) the workers
  take whole modules in collection order, so a module of multi-process,
  many-second tests collected last (tests/test_training's stop, refusal and
  Lingvo-params modules) ran at the end on one worker while the other had
  nothing left. A stable sort: each module's tests stay together and in
  their order, and the fast in-process modules end the run on both workers.
  """
  slow = {item.nodeid.split('::')[0] for item in items
          if item.get_closest_marker('slow') is not None}
  items.sort(key=lambda item: item.nodeid.split('::')[0] not in slow)
