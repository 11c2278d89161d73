r"""The export job: a SavedModel of the task's predictions.

    python -m learner.trainer --model=digits.MlpMomentum --logdir=D --mode=export

writes `<logdir>/export/<global step>/` (or `<--export_dir>/<global step>/`),
a SavedModel whose
`serving_default` signature (and the `predict` function of the loaded
object) runs the task's `ComputePredictions` on a batch of features and
returns its outputs ('logits' for the classifiers, 'y' for the regressions;
nested outputs get dotted names), with the weights of the newest checkpoint
in `<logdir>/ckpt` (or of `--checkpoint`, alias `--export_checkpoint`: a
prefix, or a directory such as `<logdir>/best/`): restored as every
read-only job restores (`eval_restore.RestoreForEval`), so the variables
of a learner that averages its weights (Ema) get their averages and the
others their raw weights, as evaluation uses them.

    loaded = tf.saved_model.load('D/export/1200')
    logits = loaded.signatures['serving_default'](features=x)['logits']
    logits = loaded.predict({'features': x})['logits']     # the same

The input signature comes from the eval input generator's batches (their
`element_spec`), with the batch dimension left free (None), keeping only
the features the predictions read: the keys that `ComputePredictions`
does not use (the labels) are dropped by tracing it once.

Why a mode of the trainer and not a separate binary (Model Garden has
`export_saved_model.py`): the export needs exactly what the trainer's
command line already resolves (the registry key, --params_file,
--params_override) to build the same task, and Lingvo's trainer does the
same (`--mode=write_inference_graph`). Like the evaler, it only reads the
run's checkpoints and writes nothing but `<logdir>/export/` (or
`--export_dir`); on a read-only logdir without `--export_dir` it refuses in
one line, exit 2, before any work. An existing export of a step is left as
it is. The SavedModel is written to a
temporary directory and renamed into place, so a killed export leaves no
half-written `<global step>/`.
"""

import os
import sys

from absl import flags
import tensorflow as tf

from params import NestedMap
from learner.training.services import checkpointer as checkpointer_lib
from learner.training.jobs import eval_restore
from learner.training.services import logdir as logdir_lib


EXPORT_DIR = 'export'  # Under the logdir, unless --export_dir.

# The logdir has no checkpoint to export, or --checkpoint names none.
NothingToExportError = eval_restore.NoCheckpointError


def CheckpointToExport(logdir, checkpoint=None, flag='--checkpoint'):
  """The checkpoint prefix to export: the newest of the candidates.

  Args:
    logdir: the run's logdir.
    checkpoint: None (the newest in `<logdir>/ckpt`), a checkpoint prefix,
      or a directory of checkpoints (its newest; e.g. '<logdir>/best').
    flag: the flag that gave `checkpoint`, for the error message.

  Raises:
    NothingToExportError: no checkpoint there.
  """
  return eval_restore.ResolveEvalCheckpoint(logdir, checkpoint, flag,
                                            mode='export')[0]


def FeatureSpecs(params, task):
  """The input signature: {key: tf.TensorSpec} of the batches' features.

  Taken from the eval input's `element_spec` with the first (batch)
  dimension None; the keys `task.ComputePredictions` does not read are
  dropped (found by tracing it once on every key).

  Raises:
    ValueError: the eval input's batches are not dicts of tensors.
  """
  spec = params.eval_input.Instantiate().GetDataset().element_spec
  if not isinstance(spec, dict) or not all(
      isinstance(s, tf.TensorSpec) for s in spec.values()):
    raise ValueError(
        'mode=export needs eval_input batches that are dicts of tensors, got '
        '%r; give the input generator dict batches.' % (spec,))
  specs = {k: tf.TensorSpec([None] + s.shape.as_list()[1:], s.dtype, name=k)
           for k, s in sorted(spec.items())}
  fn = tf.function(lambda batch: _Predictions(task, batch), autograph=False)
  graph = fn.get_concrete_function(specs).graph
  used = {op.name for op in graph.get_operations()
          if op.type == 'Placeholder' and op.outputs[0].consumers()}
  return {k: s for k, s in specs.items() if k in used}


def _Predictions(task, batch):
  """{dotted name: tensor} of ComputePredictions on a dict batch."""
  predictions = task.ComputePredictions(task.theta, NestedMap(batch))
  if isinstance(predictions, dict):
    return dict(NestedMap(predictions).FlattenItems())
  return {'predictions': predictions}


class _Serving(tf.Module):
  """What the SavedModel holds: the task (its variables) and `predict`."""

  def __init__(self, task, specs):
    super().__init__(name='serving')
    self.task = task
    self.predict = tf.function(lambda batch: _Predictions(self.task, batch),
                               input_signature=[specs], autograph=False)


def Export(params, logdir, checkpoint=None, stream=None,
           flag='--checkpoint', export_dir=None):
  """Writes the SavedModel of a checkpoint's predictions; returns its dir.

  Args:
    params: the experiment's params, as the trainer ran it.
    logdir: the run's logdir; the SavedModel goes to
      `<logdir>/export/<global step>/`.
    checkpoint: optional checkpoint (see `CheckpointToExport`).
    stream: where the one-line report goes (default sys.stdout).
    flag: the flag that gave `checkpoint`, for the error message.
    export_dir: optional directory to write `<export_dir>/<global step>/`
      into instead of `<logdir>/export` (e.g. for a read-only logdir).

  Returns:
    The export directory (left as it is when it already exists).

  Raises:
    validate.ExperimentError: the logdir is read-only and no `export_dir`
      was given (before any work).
    NothingToExportError: no checkpoint.
    checkpointer.CheckpointMismatchError: the checkpoint does not restore
      every model variable of the task.
  """
  stream = stream or sys.stdout
  if not export_dir:
    logdir_lib.CheckJobDirWritable(logdir, EXPORT_DIR, 'export', 'export_dir')
  candidates = eval_restore.ResolveEvalCheckpoint(logdir, checkpoint, flag,
                                                  mode='export')
  task = params.task.Instantiate()
  path, step, num_ema = eval_restore.RestoreNewestForEval(
      candidates, task, lambda line: stream.write(line + '\n'))
  export_dir = os.path.join(
      os.path.abspath(export_dir) if export_dir else os.path.join(
          logdir, EXPORT_DIR), str(step))
  if tf.io.gfile.exists(os.path.join(export_dir, 'saved_model.pb')):
    stream.write('Already exported: %s (global step %d); left as it is.\n' %
                 (export_dir, step))
    return export_dir
  specs = FeatureSpecs(params, task)
  module = _Serving(task, specs)
  serving = module.predict.get_concrete_function()
  tmp = export_dir + '.tmp'
  if tf.io.gfile.exists(tmp):
    tf.io.gfile.rmtree(tmp)
  tf.saved_model.save(module, tmp, signatures={'serving_default': serving})
  tf.io.gfile.rename(tmp, export_dir)
  outputs = serving.structured_outputs
  stream.write('Exported %s%s to %s: serving_default(%s) -> %s\n' % (
      path, ' (%s of %d variables)' % (eval_restore.EvalWeightsLabel(
          eval_restore.EvalAverageClasses(task)), num_ema)
      if num_ema else '',
      export_dir,
      ', '.join('%s %s %s' % (k, s.dtype.name, s.shape.as_list())
                for k, s in specs.items()),
      ', '.join('%s %s %s' % (k, t.dtype.name, t.shape.as_list())
                for k, t in sorted(outputs.items()))))
  stream.flush()
  return export_dir


# ---- command line -----------------------------------------------------------


def DefineFlags():
  """The export job's flags (the trainer's command line defines them)."""
  flags.DEFINE_string(
      'export_checkpoint', None,
      '--mode=export or eval: the same as --checkpoint (kept as its alias).')
  flags.DEFINE_string(
      'export_dir', None,
      '--mode=export: write the SavedModel to <export_dir>/<global step>/ '
      'instead of <logdir>/export/<global step>/ (needed for a read-only '
      'logdir, which it refuses without this flag).')


def Main(params, flag_values):
  """`--mode=export`: runs the export; returns the exit status (0, or 2).

  The checkpoint is `--checkpoint` (or its alias `--export_checkpoint`):
  a prefix, or a directory such as <logdir>/best; default the newest in
  <logdir>/ckpt. The SavedModel goes under `--export_dir` if given, else
  <logdir>/export.

  Raises:
    validate.ExperimentError: the logdir is of another experiment, or it is
      read-only and --export_dir was not given (before any work).
  """
  if not flag_values.export_dir:
    logdir_lib.CheckJobDirWritable(flag_values.logdir, EXPORT_DIR, 'export',
                                   'export_dir')
  logdir_lib.CheckNotAnotherExperiment(flag_values.logdir, params.ToText())
  flag, checkpoint = eval_restore.ChosenCheckpoint(flag_values)
  try:
    Export(params, flag_values.logdir, checkpoint, flag=flag,
           export_dir=flag_values.export_dir)
  except (NothingToExportError, checkpointer_lib.CheckpointError) as e:
    print('ERROR: %s' % ' '.join(str(e).split()), file=sys.stderr)
    return 2
  return 0
