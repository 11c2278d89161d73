"""TensorBoard summaries: scalars from metrics, params as text and hparams.

Metrics are `{name: (value, weight)}`; a metric with weight 0 was not
measured this step (docs/DESIGN.md, "Words with one meaning") and is not written.
Learner metrics are tagged `<metric>` when the task has one learner and
`<metric>/<learner name>` when it has several. `StepCounter` adds the
throughput, `global_step/sec` and `examples/sec`, as Estimator names them.

Scalars are stored as tensors (what `tf.summary.scalar` writes in TF 2), so
an `EventAccumulator` lists them under `Tags()['tensors']` and
`Tensors(tag)` reads them (README, "TensorBoard").
"""

import time

import numpy as np
import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api


def _Scalar(x):
  return float(np.asarray(x).reshape(-1)[0]) if np.size(x) else float('nan')


def MetricsToDict(metrics):
  """{name: (value, weight)} of tensors -> {name: (float, float)}."""
  out = {}
  for name, vw in metrics.items():
    value, weight = vw
    out[name] = (_Scalar(value), _Scalar(weight))
  return out


def FlattenStepOutput(step_out, num_learners):
  """Flattens a TrainStep output into {tag: (value, weight)} floats.

  Args:
    step_out: NestedMap(metrics=..., learners={name: eval_metrics}).
    num_learners: learners in the task; with more than one, learner metrics
      are tagged '<metric>/<learner name>'.
  """
  out = dict(MetricsToDict(step_out['metrics']))
  for lname, em in step_out['learners'].items():
    for name, vw in MetricsToDict(em).items():
      tag = name if num_learners == 1 else '%s/%s' % (name, lname)
      out[tag] = vw
  return out


def _ScalarsProto(tagged):
  """Serialized tf.compat.v1.Summary of every (tag, value) with weight != 0.

  Each value is what `tf.summary.scalar(tag, value)` writes: a float32
  scalar tensor with the 'scalars' plugin metadata, so TensorBoard and
  event readers see the same records.
  """
  summary = tf.compat.v1.Summary()
  for tag, (value, weight) in sorted(tagged.items()):
    if weight == 0:
      continue
    v = summary.value.add()
    v.tag = tag
    v.metadata.plugin_data.plugin_name = 'scalars'
    v.tensor.dtype = tf.float32.as_datatype_enum
    v.tensor.tensor_shape.SetInParent()
    v.tensor.tensor_content = np.float32(value).tobytes()
  return summary.SerializeToString()


def WriteScalars(writer, step, tagged, flush=True):
  """Writes every {tag: (value, weight)} with weight != 0 at `step`.

  All tags go into one event with one op (`write_raw_pb`): writing each
  with an eager `tf.summary.scalar` cost ~0.6 ms per tag, a third of the
  trainer's time on a small model.

  Args:
    writer: a tf.summary writer.
    step: int, the global step of the values.
    tagged: {tag: (float value, float weight)}.
    flush: flush the writer after writing (the trainer passes False and
      flushes at checkpoints and at the end; a flush costs a file sync).
  """
  with writer.as_default(step=int(step)):
    tf.summary.experimental.write_raw_pb(_ScalarsProto(tagged))
  if flush:
    writer.flush()


def WriteParamsText(writer, params_text):
  """Writes the params text once, as the text summary 'params'."""
  with writer.as_default(step=0):
    tf.summary.text('params', '```\n%s\n```' % params_text)
  writer.flush()


def ScalarParams(params):
  """The params as a flat {dotted key: bool/int/float/str} for hparams.

  Every key of `params.ToText()` whose value is a scalar: a bool, an int, a
  float or a str; a class (the `cls` of nested params) is given as its
  'module.Name'. Lists, functions, None and other values are left out (the
  whole text is in the 'params' text summary).
  """
  out = {}
  for line in params.ToText().splitlines():
    key = line.split(' : ', 1)[0]
    value = params.Get(key)
    if isinstance(value, (bool, int, float, str, np.generic)):
      out[key] = value.item() if isinstance(value, np.generic) else value
    elif isinstance(value, type):
      out[key] = '%s.%s' % (value.__module__, value.__qualname__)
  return out


def WriteHParams(writer, params):
  """Writes the run's scalar params once, for TensorBoard's HPARAMS tab.

  Uses `tensorboard.plugins.hparams.api.hparams` (a session-start record
  of this run, at step 0) with `ScalarParams(params)`.
  """
  with writer.as_default(step=0):
    hparams_api.hparams(ScalarParams(params))
  writer.flush()


class StepCounter:
  """Training throughput between two summary steps.

  `Rates(step)` returns 'global_step/sec' (global steps per second of wall
  time since the previous call, evaluations and saves in between
  included) and, when the examples per step are known, 'examples/sec'
  (that times the global batch size). The first call only starts the
  clock, so the tracing of the first train loop is not counted. Names and
  rule of `tf.estimator.StepCounterHook` and TPUEstimator's examples/sec.

  Args:
    examples_per_step: the global batch size, or None (not written).
    clock: callable returning seconds (default time.time).
  """

  def __init__(self, examples_per_step=None, clock=time.time):
    self._examples_per_step = examples_per_step
    self._clock = clock
    self._last = None

  def Rates(self, step):
    """{tag: (value, 1.0)} of the rates since the last call (maybe {})."""
    now = self._clock()
    out = {}
    if self._last is not None:
      last_step, last_time = self._last
      if step > last_step and now > last_time:
        rate = (step - last_step) / (now - last_time)
        out['global_step/sec'] = (rate, 1.0)
        if self._examples_per_step:
          out['examples/sec'] = (rate * self._examples_per_step, 1.0)
    self._last = (int(step), now)
    return out
