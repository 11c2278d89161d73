"""Speed and memory benchmarks (benchmarks/README.md).

Every `python -m benchmarks.<name>` loads this package first, so TensorFlow
is quieted here, before any benchmark module imports it, as the trainer
does (learner/tf_log.py): the user's own TF_CPP_MIN_LOG_LEVEL, else '3'
(`TF_CPP_MIN_LOG_LEVEL=0 python -m benchmarks.<name>` shows every line).
"""

from learner import tf_log as _tf_log

_tf_log.QuietTensorFlow([])

with _tf_log.QuietImport():
  import tensorflow as _tf  # noqa: F401  pylint: disable=unused-import
