"""Progress reporting and summary tagging used by the trainer."""

import io

import numpy as np
import pytest

from learner.training.services import progress
from learner.training.services import summary


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


# ---- labels, replicas and ETA (issue 15, item 5) ---------------------------


def test_several_learners_rates_are_labelled_by_learner_name():
  out = io.StringIO()
  p = progress.Progress(max_steps=10, log_interval_steps=5, stream=out,
                        tty=False)
  p.Update(5, loss=0.25, lr={'enc': 2e-3, 'dec': 1e-3})
  line = out.getvalue().splitlines()[0]
  assert 'lr[dec] 0.001  lr[enc] 0.002' in line
  assert ' lr ' not in ' ' + line.split('loss')[1].split('lr[')[0]


def test_learning_rates_come_from_the_tagged_step_output():
  one = {'metrics': {'loss': (1.0, 4.0)},
         'learners': {'body': {'learning_rate': (0.1, 1.0)}}}
  assert progress.LearningRates(summary.FlattenStepOutput(one, 1)) == 0.1
  two = {'metrics': {'loss': (1.0, 4.0)},
         'learners': {'enc': {'learning_rate': (0.002, 1.0)},
                      'dec': {'learning_rate': (0.001, 1.0),
                              'grad_norm/all': (3.0, 1.0)}}}
  assert progress.LearningRates(summary.FlattenStepOutput(two, 2)) == {
      'enc': 0.002, 'dec': 0.001}
  assert progress.LearningRates({'loss': (1.0, 1.0)}) is None


def test_replicas_said_once_at_start_and_shown_on_each_line():
  out = io.StringIO()
  p = progress.Progress(max_steps=20, log_interval_steps=10, stream=out,
                        tty=False, num_replicas=2,
                        strategy_name='MirroredStrategy')
  for step in range(1, 21):
    p.Update(step, loss=0.5, lr=0.1)
  lines = out.getvalue().splitlines()
  assert lines[0] == 'Training on 2 replicas in sync (MirroredStrategy).'
  assert len(lines) == 3
  assert all('replicas 2' in l for l in lines[1:])
  single = io.StringIO()
  p = progress.Progress(max_steps=10, log_interval_steps=10, stream=single,
                        tty=False)
  p.Update(10, loss=0.5)
  assert 'replica' not in single.getvalue()


@pytest.mark.parametrize('seconds,text', [
    (0.01, '<0.1s'), (0.5, '0.5s'), (9.94, '9.9s'), (12.2, '12s'),
    (185, '3m05s'), (7620, '2h07m')])
def test_eta_is_readable_at_every_scale(seconds, text):
  assert progress.FormatEta(seconds) == text


def test_a_fast_run_does_not_show_eta_0s_and_the_last_line_says_done(
    monkeypatch):
  now = [0.0]
  monkeypatch.setattr(progress.time, 'time', lambda: now[0])
  out = io.StringIO()
  p = progress.Progress(max_steps=25, log_interval_steps=10, stream=out,
                        tty=False)
  for step, t in ((10, 100.0), (20, 101.0), (25, 101.4)):
    now[0] = t
    p.Update(step, loss=0.5, lr=0.1)
  lines = out.getvalue().splitlines()
  # The first line starts the clock: no rate yet (not '0.0 steps/s', found
  # by a fresh-user trial). Then 10 steps in 1 s: 10 steps/s, 5 steps left
  # -> 0.5 s.
  assert lines[0].endswith('step 10/25  - steps/s  loss 0.5  lr 0.1  ETA -'), (
      lines)
  assert lines[1].endswith('10.0 steps/s  loss 0.5  lr 0.1  ETA 0.5s'), lines
  assert lines[2].endswith('ETA done'), lines


# ---- the bar clears its line (issue 21, item 8h) ----------------------------


class _Clock:
  """time.time() stand-in: `now` seconds, set by the test."""

  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_a_shorter_bar_blanks_what_the_longer_one_left(monkeypatch):
  # The clock starts at step 1 (t=0). Step 2 at t=10 s: 0.1 steps/s, 98
  # steps left: 'ETA 16m20s'. Step 3 at t=10.5 s: 2 / 10.5 = 0.19 steps/s,
  # 97 left: 509 s, 'ETA 8m29s', one character shorter, so one blank
  # covers the old line's last 's' (it showed 'ETA 8m29ss' before).
  clock = _Clock()
  monkeypatch.setattr(progress.time, 'time', clock)
  out = io.StringIO()
  p = progress.Progress(max_steps=100, log_interval_steps=1000, stream=out,
                        tty=True)
  draws = []
  for step, now in ((1, 0.0), (2, 10.0), (3, 10.5)):
    clock.now = now
    p.Update(step, loss=0.25)
    draws.append(out.getvalue().rsplit('\r', 1)[1])
  assert draws[1].endswith('0.1 steps/s  loss 0.25  lr -  ETA 16m20s')
  assert draws[2].endswith('0.2 steps/s  loss 0.25  lr -  ETA 8m29s ')
  assert len(draws[2]) == len(draws[1])


def test_close_ends_the_open_line_once():
  out = io.StringIO()
  p = progress.Progress(max_steps=4, log_interval_steps=100, stream=out,
                        tty=True)
  p.Close()  # Nothing drawn: nothing to end.
  assert out.getvalue() == ''
  p.Update(1, loss=1.0)
  p.Close()
  p.Close()
  assert out.getvalue().count('\n') == 1 and out.getvalue().endswith('\n')
