"""TensorBoard summaries: scalars from metrics, params as text.

Metrics are `{name: (value, weight)}`; a metric with weight 0 was not
measured this step (docs/DESIGN.md, "Words with one meaning") and is not written.
Learner metrics are tagged `<metric>` when the task has one learner and
`<metric>/<learner name>` when it has several.
"""

import numpy as np
import tensorflow as tf


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
