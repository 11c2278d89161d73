"""An experiment in the user's own package, run through the trainer's CLI.

`--model=mypkg.exp.MyRegression` imports `mypkg.exp` (not under configs/)
and trains its registered class; the key is the class's full path.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from params import registry

_EXPERIMENT = textwrap.dedent('''
    from params import registry
    from configs import inputs, model_tasks
    from learner import learner as learner_lib
    from learner.optimizers import get_optimizer_fn


    @registry.Register
    class MyRegression:
      """y = 5x + 2 from the user's own package."""

      def Task(self):
        p = model_tasks.LinearRegressionTask.Params().Set(name='mine')
        p.train.max_steps = 200
        p.train.learner = learner_lib.Learner.Params().Set(
            name='learner', loss_name='loss',
            optimizer_fn=get_optimizer_fn('momentum', learning_rate=0.05,
                                          momentum=0.9))
        return p

      def Train(self):
        return inputs.LinearRegressionInput.Params().Set(
            split='train', batch_size=32)

      def Eval(self):
        return inputs.LinearRegressionInput.Params().Set(
            split='test', batch_size=200, shuffle=False, num_epochs=1,
            drop_remainder=False)
''')


def _WritePackage(root, name='mypkg_user_exp'):
  pkg = root / name
  pkg.mkdir()
  (pkg / '__init__.py').write_text('')
  (pkg / 'exp.py').write_text(_EXPERIMENT)
  return name


def test_user_module_outside_configs_trains_through_the_cli(tmp_path):
  name = _WritePackage(tmp_path)
  logdir = tmp_path / 'logdir'
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
  repo = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env['PYTHONPATH'] = os.pathsep.join([repo, env.get('PYTHONPATH', '')])
  proc = subprocess.run(
      [sys.executable, '-m', 'learner.trainer',
       '--model=%s.exp.MyRegression' % name, '--logdir=%s' % logdir],
      cwd=str(tmp_path), env=env, capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  metrics = json.loads((logdir / 'metrics.json').read_text())
  assert metrics['global_step'] == 200
  # The data is y = 5x + 2 + N(0, 0.1^2): a model that learned nothing has
  # w = b = 0; after 200 Momentum steps both are close to the truth.
  assert abs(metrics['train/w'] - 5.0) < 0.3, metrics
  assert abs(metrics['train/b'] - 2.0) < 0.1, metrics


def test_user_module_key_is_its_full_path(tmp_path, monkeypatch):
  name = _WritePackage(tmp_path, 'mypkg_user_key')
  monkeypatch.syspath_prepend(str(tmp_path))
  cls = registry.GetClass('%s.exp.MyRegression' % name)
  assert cls.__module__ == '%s.exp' % name
  assert registry.Describe('%s.exp.MyRegression' % name) == (
      'y = 5x + 2 from the user\'s own package.')


def test_user_module_without_the_class_says_how_to_register(
    tmp_path, monkeypatch):
  name = _WritePackage(tmp_path, 'mypkg_user_missing')
  monkeypatch.syspath_prepend(str(tmp_path))
  with pytest.raises(LookupError) as e:
    registry.GetClass('%s.exp.NotThere' % name)
  assert '@params.registry.Register' in str(e.value)
  assert "'%s.exp'" % name in str(e.value)


def test_user_module_that_cannot_be_imported_says_where_to_run_from():
  with pytest.raises(LookupError) as e:
    registry.GetClass('nosuchpkg_q9.exp.MyRegression')
  assert ("No module 'nosuchpkg_q9.exp' could be imported (neither "
          "configs/nosuchpkg_q9/exp.py nor nosuchpkg_q9.exp on the import "
          "path): run from the directory that contains nosuchpkg_q9/, or add "
          "it to PYTHONPATH.") in str(e.value)


def _ReadmeExperiment():
  """The README's `mypkg/exp.py`, verbatim."""
  repo = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  with open(os.path.join(repo, 'README.md')) as f:
    text = f.read()
  start = text.index('# mypkg/exp.py')
  return text[start:text.index('```', start)]


def _FinalWeights(logdir):
  """{checkpoint key: value} of every numeric tensor of the last save."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = tf.train.latest_checkpoint(str(logdir / 'ckpt'))
  reader = tf.train.load_checkpoint(path)
  dtypes = reader.get_variable_to_dtype_map()
  return {k: reader.get_tensor(k) for k in dtypes if dtypes[k].is_floating}


def test_two_runs_of_the_readmes_keras_experiment_without_seed_are_equal(
    tmp_path):
  # Issue 21: its Keras layers' initializers were unseeded (0.98 and 0.9775
  # in two runs); every run now seeds the global RNGs before the task is
  # built (task.random_seed, else 0).
  pkg = tmp_path / 'mypkg'
  pkg.mkdir()
  (pkg / 'exp.py').write_text(_ReadmeExperiment())
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
  repo = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env['PYTHONPATH'] = os.pathsep.join([repo, env.get('PYTHONPATH', '')])
  weights = []
  for run in ('a', 'b'):
    logdir = tmp_path / run
    proc = subprocess.run(
        [sys.executable, '-m', 'learner.trainer',
         '--model=mypkg.exp.MyConvNet', '--logdir=%s' % logdir,
         '--mode=train', '--max_steps=20'],
        cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    weights.append(_FinalWeights(logdir))
  for layer in ('conv', 'head'):  # the model, slots and averages too
    for var in ('_kernel', 'bias'):
      assert 'task/%s/%s/.ATTRIBUTES/VARIABLE_VALUE' % (layer, var) in (
          weights[0])
  for key, value in weights[0].items():
    assert (value == weights[1][key]).all(), key
