"""Test-wide setup: two logical CPU devices, configured before TF starts.

MirroredStrategy tests need two devices; logical devices can only be set
before the TensorFlow runtime initialises, so this runs at import time.
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import tensorflow as tf  # pylint: disable=g-import-not-at-top

_cpus = tf.config.list_physical_devices('CPU')
try:
  tf.config.set_logical_device_configuration(
      _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # The runtime was already initialised.
  pass

