"""Nothing is lost by a rerun or another job (issue 15, item 1).

A rerun of a finished run, an eval job and a resume with other params each
leave the train job's metrics.json and params.txt byte-identical; the eval
job writes only eval_job/. In-process, on regression.LinearRegression.
"""

import io
import os

import numpy as np
import pytest
import tensorflow as tf

from params import registry
from learner.training.services import logdir as logdir_lib
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import validate
import trainer_helpers

_KEY = 'regression.LinearRegression'


def _Params(max_steps=20):
  """Saves every 10 steps, evaluates only at the end."""
  return registry.GetParams(_KEY).Set(**{
      'task.train.max_steps': max_steps, 'task.eval.interval_steps': 0,
      'task.train.save_interval_steps': 10})


def _Run(logdir, p, mode='train', **kw):
  """(the job's metrics, what it printed)."""
  out = io.StringIO()
  result = trainer_lib.Trainer(p, str(logdir), mode=mode, stream=out,
                               **kw).Run()
  return result, out.getvalue()


_Tree = trainer_helpers.Files


@pytest.mark.parametrize('mode', ['train', 'train_and_eval'])
def test_rerun_of_a_finished_run_writes_nothing_and_prints_the_metrics(
    tmp_path, mode):
  first, _ = _Run(tmp_path, _Params(), mode=mode)
  before = _Tree(tmp_path)
  again, out = _Run(tmp_path, _Params(), mode=mode)
  assert _Tree(tmp_path) == before  # every file, byte for byte; none new
  assert again == first and again['global_step'] == 20
  assert 'is finished (global step 20, max_steps 20)' in out
  assert 'Final metrics (global step 20, stored in %s' % os.path.join(
      str(tmp_path), 'metrics.json') in out
  assert 'WARNING' not in out


def test_eval_job_writes_only_eval_job_and_never_warns_about_params(tmp_path):
  trained, _ = _Run(tmp_path, _Params(), mode='train')
  params_txt = (tmp_path / 'params.txt').read_bytes()
  metrics_json = (tmp_path / 'metrics.json').read_bytes()
  # Other params than the trainer's (the case: defaults, clipping).
  p = _Params(300)
  p.task.train.learner.clip_gradient_norm_to_value = 7.0
  r, out = _Run(tmp_path, p, mode='eval')
  assert 'WARNING' not in out and 'params differ' not in out
  assert (tmp_path / 'params.txt').read_bytes() == params_txt
  assert (tmp_path / 'metrics.json').read_bytes() == metrics_json
  assert logdir_lib.ReadMetrics(
      str(tmp_path / 'eval_job' / 'metrics.json')) == r
  assert any(n.startswith('events') for n in os.listdir(tmp_path /
                                                        'eval_job'))
  # The loss, by numpy, of the restored w and b on the eval split.
  arrays = p.eval_input.Instantiate().LoadArrays()
  ref = np.mean((r['w'] * arrays['x'] + r['b'] - arrays['y'])**2)
  np.testing.assert_allclose(r['loss'], ref, rtol=1e-5)
  assert r['global_step'] == 20
  reader = tf.train.load_checkpoint(str(tmp_path / 'ckpt' / 'ckpt-20'))
  w_key, = [k for k in reader.get_variable_to_shape_map()
            if k.endswith('_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE')]
  np.testing.assert_allclose(r['w'], reader.get_tensor(w_key), rtol=1e-6)
  # The next train rerun is still the trainer's own finished run.
  again, out = _Run(tmp_path, _Params(), mode='train')
  assert again == trained and 'WARNING' not in out
  assert (tmp_path / 'params.txt').read_bytes() == params_txt


def test_resume_with_other_params_keeps_params_txt_and_says_how(tmp_path):
  _Run(tmp_path, _Params(20), mode='train')
  params_txt = (tmp_path / 'params.txt').read_bytes()
  r, out = _Run(tmp_path, _Params(30), mode='train',
                resume_hint='rerun with --params_file=X')
  assert r['global_step'] == 30
  assert 'params differ from the earlier run' in out
  assert '- task.train.max_steps : 20' in out
  assert '+ task.train.max_steps : 30' in out
  assert 'To resume it unchanged, rerun with --params_file=X.' in out
  assert (tmp_path / 'params.txt').read_bytes() == params_txt


def test_a_logdir_without_checkpoint_is_a_new_run_and_gets_its_params(
    tmp_path):
  (tmp_path / 'params.txt').write_text('task.train.max_steps : 7\n')
  _, out = _Run(tmp_path, _Params(10), mode='train')
  assert 'WARNING' not in out
  assert 'task.train.max_steps : 10' in (tmp_path / 'params.txt').read_text()


def test_a_refused_value_writes_nothing_and_the_fixed_run_does_not_warn(
    tmp_path):
  logdir = tmp_path / 'run'
  p = _Params()
  p.task.train.learner.loss_name = 'xent'
  with pytest.raises(validate.ExperimentError,
                     match=r"loss_name : 'xent' .*\['b', 'loss', 'w'\]"):
    _Run(logdir, p)
  assert not logdir.exists()
  r, out = _Run(logdir, _Params())
  assert r['global_step'] == 20 and 'WARNING' not in out


def test_train_and_eval_after_a_train_run_still_evaluates(tmp_path):
  _Run(tmp_path, _Params(), mode='train')
  r, out = _Run(tmp_path, _Params(), mode='train_and_eval')
  # The train run had no evaluation: this job adds it (not a rerun).
  assert 'Eval at global step 20 (final)' in out and 'loss' in r


def test_params_diff_lists_each_changed_key_once():
  old = 'a : 1\nb : 2\nc : [1, 2]\n'
  new = 'a : 1\nb : 3\nd : None\n'
  assert logdir_lib.ParamsDiff(old, new) == [
      ('b', '2', '3'), ('c', '[1, 2]', None), ('d', None, 'None')]
  msg = logdir_lib.ParamsChangeWarning('D/params.txt', old, new, max_lines=1)
  assert '(3 keys;' in msg and '... and 2 more keys' in msg
  assert '- b : 2' in msg and '- c' not in msg


def test_finished_needs_metrics_a_checkpoint_and_for_eval_eval_metrics(
    tmp_path):
  d = str(tmp_path)
  assert logdir_lib.FinishedMetrics(d, 10, with_eval=False) is None
  logdir_lib.WriteMetrics(os.path.join(d, 'metrics.json'),
                          {'global_step': 10, 'train/loss': 1.0})
  assert logdir_lib.FinishedMetrics(d, 10, with_eval=False) is None  # no ckpt
  os.makedirs(os.path.join(d, 'ckpt'))
  open(os.path.join(d, 'ckpt', 'ckpt-10.index'), 'w').close()
  assert logdir_lib.CheckpointSteps(d) == [10]
  assert logdir_lib.FinishedMetrics(d, 10, with_eval=False)['global_step'] == 10
  assert logdir_lib.FinishedMetrics(d, 11, with_eval=False) is None
  assert logdir_lib.FinishedMetrics(d, 10, with_eval=True) is None
  with open(os.path.join(d, 'metrics.json'), 'w') as f:
    f.write('{"global_st')  # truncated: not finished, trained again
  assert logdir_lib.FinishedMetrics(d, 10, with_eval=False) is None


def test_a_finished_run_of_another_experiment_is_refused_not_reported(
    tmp_path):
  # The run in tmp_path is regression's; a digits job on it is not "finished".
  p = registry.GetParams('regression.LinearRegression')
  p.task.train.max_steps = 5
  trainer_lib.Trainer(p, str(tmp_path), mode='train',
                      stream=io.StringIO()).Run()
  before = {f: (tmp_path / f).read_bytes() for f in ('metrics.json',
                                                      'params.txt')}
  q = registry.GetParams('digits.MlpMomentum')
  q.task.train.max_steps = 5
  with pytest.raises(validate.ExperimentError) as e:
    trainer_lib.Trainer(q, str(tmp_path), mode='train',
                        stream=io.StringIO()).Run()
  message = str(e.value)
  assert 'is a run of another experiment' in message and '\n' not in message
  assert 'LinearRegressionTask' in message and 'Choose another --logdir' in message
  assert {f: (tmp_path / f).read_bytes() for f in before} == before
