"""Progress reporting and summary tagging used by the trainer."""

import io

import numpy as np

from learner.training import progress
from learner.training import summary


def test_plain_log_lines_every_interval_when_not_a_terminal():
  out = io.StringIO()
  p = progress.Progress(max_steps=25, start_step=0, log_interval_steps=10,
                        stream=out, tty=False)
  for step in range(1, 26):
    p.Update(step, loss=0.5, lr=0.1)
  p.Close()
  lines = out.getvalue().splitlines()
  assert [l.split()[1] for l in lines] == ['10/25', '20/25', '25/25']
  assert 'loss 0.5' in lines[0] and 'lr 0.1' in lines[0]
  assert 'steps/s' in lines[0] and 'ETA' in lines[0]
  assert '\r' not in out.getvalue()


def test_bar_redrawn_in_place_on_a_terminal():
  out = io.StringIO()
  p = progress.Progress(max_steps=4, log_interval_steps=100, stream=out,
                        tty=True)
  for step in range(1, 5):
    p.Update(step, loss=1.0)
  p.Close()
  text = out.getvalue()
  assert text.count('\r') == 4  # every step, in place
  assert '[' + '#' * 20 + ']' in text  # full bar at the end
  assert text.endswith('\n')


def test_values_wanted_only_for_shown_steps():
  # Not a terminal: the loss is fetched for log lines and the last step.
  p = progress.Progress(max_steps=25, log_interval_steps=10, tty=False,
                        stream=io.StringIO())
  assert [s for s in range(1, 26) if p.WantsValues(s)] == [10, 20, 25]
  bar = progress.Progress(max_steps=25, log_interval_steps=10, tty=True,
                          stream=io.StringIO())
  assert all(bar.WantsValues(s) for s in range(1, 26))


def test_learner_metrics_tagged_per_learner_only_when_several():
  step_out = {'metrics': {'loss': (np.float32(2.0), np.float32(8.0))},
              'learners': {'a': {'learning_rate': (0.1, 1.0)}}}
  assert summary.FlattenStepOutput(step_out, 1) == {
      'loss': (2.0, 8.0), 'learning_rate': (0.1, 1.0)}
  step_out['learners']['b'] = {'learning_rate': (0.2, 1.0),
                               'grad_norm/all': (3.0, 0.0)}
  tags = summary.FlattenStepOutput(step_out, 2)
  assert tags['learning_rate/a'] == (0.1, 1.0)
  assert tags['learning_rate/b'] == (0.2, 1.0)
  assert tags['grad_norm/all/b'] == (3.0, 0.0)


def test_weight_zero_metrics_are_not_written(tmp_path):
  import glob  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  writer = tf.summary.create_file_writer(str(tmp_path))
  summary.WriteScalars(writer, 3, {'measured': (1.5, 2.0),
                                   'not_measured': (7.0, 0.0)})
  tags = {}
  for f in glob.glob(str(tmp_path / 'events*')):
    for e in tf.compat.v1.train.summary_iterator(f):
      for v in e.summary.value:
        tags[v.tag] = (e.step, tf.make_ndarray(v.tensor))
  assert sorted(tags) == ['measured']
  assert tags['measured'][0] == 3
  np.testing.assert_allclose(tags['measured'][1], 1.5)


def test_scalars_are_the_records_tf_summary_scalar_writes(tmp_path):
  import glob  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def _Values(logdir):
    out = {}
    for f in glob.glob(str(logdir / 'events*')):
      for e in tf.compat.v1.train.summary_iterator(f):
        for v in e.summary.value:
          out[v.tag] = (e.step, v.SerializeToString())
    return out

  tagged = {'loss': (0.1, 64.0), 'grad_norm/all': (np.float32(2.5), 1.0),
            'num_updates': (np.int64(7), 1.0)}
  ours = tf.summary.create_file_writer(str(tmp_path / 'ours'))
  summary.WriteScalars(ours, 5, tagged)
  ref = tf.summary.create_file_writer(str(tmp_path / 'ref'))
  with ref.as_default(step=5):
    for tag, (value, _) in tagged.items():
      tf.summary.scalar(tag, value)
  ref.flush()
  got, want = _Values(tmp_path / 'ours'), _Values(tmp_path / 'ref')
  assert sorted(got) == ['grad_norm/all', 'loss', 'num_updates']
  assert got == want
