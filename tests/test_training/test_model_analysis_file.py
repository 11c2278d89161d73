"""The trainer writes model_analysis.txt when training starts (not in eval)."""

import io

from learner.training.jobs import trainer as trainer_lib
from params import registry


def _Trainer(logdir, mode):
  p = registry.GetParams('mnist1d.ConvNetTwoLearners')
  p.task.Set(num_conv=1, filters=4)
  p.task.train.max_steps = 2
  return trainer_lib.Trainer(p, str(logdir), mode=mode, stream=io.StringIO())


def test_model_analysis_written_by_train_not_by_eval(tmp_path):
  _Trainer(tmp_path, 'train').Run()
  path = tmp_path / 'model_analysis.txt'
  lines = path.read_text().splitlines()
  # conv_0: kernel [5, 1, 4] = 20, bias 4; head: Dense (20 positions x 4
  # filters = 80) -> 10: kernel 800, bias 10.
  rows = {l.split()[0]: l.split() for l in lines[1:5]}
  assert rows['convnet/conv_0/kernel'][-3:] == ['20', 'float32',
                                                   'conv_learner']
  assert rows['convnet/head/kernel'][-3:] == ['800', 'float32',
                                                 'head_learner']
  assert 'Learner conv_learner: 2 variables, 24 values' in lines
  assert 'Learner head_learner: 2 variables, 810 values' in lines
  assert 'Total: 4 variables, 834 values (834 trainable)' in lines
  path.write_text('sentinel')
  _Trainer(tmp_path, 'eval').Run()
  assert path.read_text() == 'sentinel'  # eval leaves it alone.
