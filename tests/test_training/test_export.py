"""The export job (issue 15.3): a SavedModel that reproduces the predictions.

digits.MlpMomentum: the reloaded SavedModel's logits equal the MLP computed
by hand with numpy from the checkpoint's weights (or from its EMA averages
when the learner averages them). mnist1d.ConvNet (Keras layers in a task):
they equal the task's own ComputePredictions on the same batch.
"""

import io
import os

import numpy as np
import pytest
import tensorflow as tf

from params import NestedMap
from params import registry
from learner.optimizers.wrappers import ema as ema_lib
from learner.training.jobs import eval_restore
from learner.training.jobs import export as export_lib
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import cli as cli_lib

_LAYER = 'task/_private_children/layer_%d/_private_vars/%s/.ATTRIBUTES/VARIABLE_VALUE'
_AVERAGE = ('task/_private_children/learner/_private_children/optimizer/'
            '_averages/digits_layer_%d_%s/.ATTRIBUTES/VARIABLE_VALUE')


def _DigitsParams(ema=False):
  p = registry.GetParams('digits.MlpMomentum')
  p.task.train.Set(max_steps=30, save_interval_steps=30)
  if ema:
    lp = p.task.train.learner
    lp.optimizer = ema_lib.Ema.Params().Set(decay=0.9, optimizer=lp.optimizer)
  return p


def _TrainAndExport(logdir, p):
  trainer_lib.Trainer(p, str(logdir), mode='train',
                      stream=io.StringIO()).Run()
  out = io.StringIO()
  export_dir = export_lib.Export(p, str(logdir), stream=out)
  return export_dir, out.getvalue()


def _EvalBatch(p):
  return next(iter(p.eval_input.Instantiate().GetDataset()))


def _MlpByHand(reader, x, key):
  """relu(x w0 + b0) w1 + b1 in float64 from the checkpoint's tensors."""
  w0, b0, w1, b1 = (reader.get_tensor(key % (i, n)).astype(np.float64)
                    for i in (0, 1) for n in ('w', 'b'))
  return np.maximum(x @ w0 + b0, 0.0) @ w1 + b1


@pytest.mark.parametrize('ema', [False, True])
def test_digits_saved_model_gives_the_mlp_logits_by_hand(tmp_path, ema):
  p = _DigitsParams(ema)
  export_dir, out = _TrainAndExport(tmp_path, p)
  assert export_dir == os.path.join(str(tmp_path), 'export', '30')
  assert ('(EMA averages of 4 variables)' in out) == ema
  assert 'serving_default(features float32 [None, 64]) -> logits float32 ' \
         '[None, 10]' in out
  loaded = tf.saved_model.load(export_dir)
  serving = loaded.signatures['serving_default']
  # The labels are not an input: the predictions do not read them.
  assert set(serving.structured_input_signature[1]) == {'features'}
  batch = _EvalBatch(p)
  x = batch['features'].numpy()
  assert x.shape == (359, 64)  # The whole test split.
  got = serving(features=batch['features'])['logits'].numpy()
  reader = tf.train.load_checkpoint(
      tf.train.latest_checkpoint(str(tmp_path / 'ckpt')))
  want = _MlpByHand(reader, x.astype(np.float64), _AVERAGE if ema else _LAYER)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  if ema:  # The averages differ from the weights here.
    raw = _MlpByHand(reader, x.astype(np.float64), _LAYER)
    assert np.abs(raw - want).max() > 1e-2
  # `predict` of the loaded object is the same function.
  np.testing.assert_array_equal(
      loaded.predict({'features': batch['features']})['logits'].numpy(), got)


def test_an_export_is_not_redone_and_leaves_no_temporary_dir(tmp_path):
  p = _DigitsParams()
  export_dir, _ = _TrainAndExport(tmp_path, p)
  stamp = os.path.getmtime(os.path.join(export_dir, 'saved_model.pb'))
  out = io.StringIO()
  assert export_lib.Export(p, str(tmp_path), stream=out) == export_dir
  assert out.getvalue().startswith('Already exported: ')
  assert os.path.getmtime(os.path.join(export_dir, 'saved_model.pb')) == stamp
  assert os.listdir(tmp_path / 'export') == ['30']


def test_mnist1d_convnet_saved_model_equals_the_task_on_the_same_batch(
    tmp_path):
  p = registry.GetParams('mnist1d.ConvNet')
  p.task.train.Set(max_steps=20, save_interval_steps=20)
  export_dir, _ = _TrainAndExport(tmp_path, p)
  # The task, built afresh and restored from the same checkpoint.
  task = p.task.Instantiate()
  path = tf.train.latest_checkpoint(str(tmp_path / 'ckpt'))
  assert eval_restore.RestoreForEval(path, task) == (20, 0)
  batch = _EvalBatch(p)
  want = task.ComputePredictions(task.theta, NestedMap(batch)).logits.numpy()
  got = tf.saved_model.load(export_dir).signatures['serving_default'](
      features=batch['features'])['logits'].numpy()
  assert got.shape == (batch['features'].shape[0], 10)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  assert np.abs(want).max() > 0.1  # Real logits, not zeros.


def test_nothing_to_export_and_a_missing_checkpoint_are_one_line(tmp_path):
  p = _DigitsParams()
  with pytest.raises(export_lib.NothingToExportError,
                     match='no checkpoint in .*ckpt to export'):
    export_lib.Export(p, str(tmp_path))
  with pytest.raises(export_lib.NothingToExportError,
                     match='no such checkpoint'):
    export_lib.Export(p, str(tmp_path), checkpoint=str(tmp_path / 'ckpt-9'))
  assert not os.path.exists(tmp_path / 'export')


def _Main(argv, capsys):
  cli_lib.DefineFlags()
  try:
    cli_lib.FLAGS(['trainer'] + argv)
    code = cli_lib.main([])
  finally:
    cli_lib.FLAGS.unparse_flags()
  captured = capsys.readouterr()
  return code, captured.out, captured.err


def test_export_command_line(tmp_path, capsys):
  logdir = str(tmp_path / 'run')
  args = ['--model=regression.LinearRegression', '--logdir=%s' % logdir,
          '--mode=export']
  code, _, err = _Main(args, capsys)
  assert code == 2 and err.count('\n') == 1
  assert err.startswith('ERROR: mode=export: no checkpoint in ')
  assert not os.path.exists(logdir)  # Nothing was created.
  p = registry.GetParams('regression.LinearRegression')
  p.task.train.Set(max_steps=20, save_interval_steps=20)
  trainer_lib.Trainer(p, logdir, stream=io.StringIO()).Run()
  code, out, _ = _Main(args, capsys)
  assert code == 0
  assert out.startswith('Exported %s/ckpt/ckpt-20 to %s/export/20: '
                        'serving_default(x float32 [None]) -> y float32 '
                        '[None]' % (logdir, logdir))
  loaded = tf.saved_model.load(os.path.join(logdir, 'export', '20'))
  reader = tf.train.load_checkpoint(os.path.join(logdir, 'ckpt', 'ckpt-20'))
  w, b = (reader.get_tensor('task/_private_vars/%s/.ATTRIBUTES/'
                            'VARIABLE_VALUE' % n) for n in ('w', 'b'))
  x = np.array([-1.0, 0.0, 2.5], np.float32)
  np.testing.assert_allclose(loaded.predict({'x': x})['y'].numpy(),
                             w * x + b, rtol=1e-6)

