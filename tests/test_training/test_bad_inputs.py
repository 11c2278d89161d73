"""The bad inputs of issue 21.9: one line naming the key, value and fix.

Each case runs the trainer's main() in-process and must end with exit 2, one
`ERROR:` line naming what the user typed and what to write instead, and no
file written (the logdir never created; a directory given as the logdir, or
the warm-start source, unchanged).
"""

import hashlib
import json
import os

import pytest
import tensorflow as tf

from learner.training.services import checkpointer as checkpointer_lib
from learner.training.services import logdir as logdir_lib
import trainer_helpers

_MODEL = '--model=digits.MlpMomentum'
_Main = trainer_helpers.RunMain

# (flags, parts the one line must hold: the key/flag, the value, the fix).
_CASES = {
    'seed_negative': (['--seed=-1'], [
        '--seed=-1', '[0, 2**32 - 1]', 'e.g. --seed=1234']),
    'seed_too_large': (['--seed=4294967296'], ['--seed=4294967296',
                                               '[0, 2**32 - 1]']),
    'init_missing': (['--init_from_checkpoint=/nonexistent/ckpt-1'], [
        'init_from_checkpoint', "'/nonexistent/ckpt-1'",
        'Give a checkpoint prefix (e.g. <logdir>/ckpt/ckpt-100)']),
    'empty_value': (['--params_override=task.train.max_steps :'], [
        "'task.train.max_steps'", 'the value is empty',
        'e.g. task.train.max_steps : 1200']),
    'two_values': (['--params_override=task.train.max_steps : 5 6'], [
        "'task.train.max_steps'", "'task.train.max_steps : 5 6'",
        'Write one value', 'e.g. task.train.max_steps : 1200']),
    'tuple_for_int': (['--params_override=task.train.max_steps : 5, 6'], [
        "'task.train.max_steps'", 'expected an int, got a tuple',
        'e.g. task.train.max_steps : 1200']),
    'empty_segment': (['--params_override=task..train.max_steps : 5'], [
        "'task..train.max_steps'", 'an empty segment',
        'e.g. task.train.max_steps']),
    'below_a_value': (['--params_override=task.train.max_steps.foo : 5'], [
        "'task.train.max_steps.foo'", 'is not a Params (it is a int)',
        "set 'task.train.max_steps' itself"]),
    'exclusion_excludes_all': ([
        '--params_override=task.train.learner.bprop_variable_exclusion : '
        "'.*'"], ['task.train.learner.bprop_variable_exclusion', "'.*'",
                  'excludes every variable', 'Narrow the exclusion']),
    'invalid_exclusion_regex': ([
        '--params_override=task.train.learner.bprop_variable_exclusion : '
        "'(['"], ['task.train.learner.bprop_variable_exclusion', "'(['",
                  'not a valid regex', 'Fix the regex']),
}


def _CheckOneLine(code, err, parts):
  assert code == 2, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('ERROR: '), err
  for part in parts:
    assert part in lines[0], (part, lines[0])


@pytest.mark.parametrize('name', sorted(_CASES))
def test_refused_in_one_line_before_any_file(tmp_path, capsys, name):
  flags, parts = _CASES[name]
  logdir = tmp_path / 'never'
  code, _, err = _Main([_MODEL, '--logdir=%s' % logdir] + flags, capsys)
  _CheckOneLine(code, err, parts)
  assert not logdir.exists()


def test_a_logdir_that_is_a_file_is_refused_and_left_alone(tmp_path, capsys):
  path = tmp_path / 'notes.txt'
  path.write_text('my notes\n')
  code, _, err = _Main([_MODEL, '--logdir=%s' % path], capsys)
  _CheckOneLine(code, err, ['--logdir=%s' % path, 'an existing file',
                            'give the path of a directory'])
  assert path.read_text() == 'my notes\n'


def _Digest(directory):
  out = {}
  for root, _, files in os.walk(directory):
    for f in files:
      full = os.path.join(root, f)
      with open(full, 'rb') as fh:
        out[os.path.relpath(full, directory)] = hashlib.md5(
            fh.read()).hexdigest()
  return out


@pytest.fixture(scope='module')
def source_logdir(tmp_path_factory):
  """A finished 2-step run of the same model: a warm-start source."""
  src = tmp_path_factory.mktemp('src')
  trainer_helpers.RunMain([_MODEL, '--logdir=%s' % src, '--max_steps=2'],
                          _NoCapture())
  return src


class _NoCapture:

  def readouterr(self):
    return type('Out', (), {'out': '', 'err': ''})()


def test_rules_that_match_nothing_are_refused_before_any_file(
    tmp_path, capsys, source_logdir):
  before = _Digest(source_logdir)
  logdir = tmp_path / 'never'
  code, _, err = _Main([
      _MODEL, '--logdir=%s' % logdir, '--init_from_checkpoint=%s' %
      source_logdir, '--init_from_checkpoint_rules=nomatch/(.*)=>x/\\1'],
                       capsys)
  _CheckOneLine(code, err, ['init_from_checkpoint', 'no variable of',
                            "('nomatch/(.*)', 'x/\\\\1')",
                            'Add (regex, replacement) rules'])
  assert not logdir.exists()
  assert _Digest(source_logdir) == before


def test_a_directory_without_checkpoints_is_named(tmp_path, capsys):
  empty = tmp_path / 'empty'
  empty.mkdir()
  logdir = tmp_path / 'never'
  code, _, err = _Main([_MODEL, '--logdir=%s' % logdir,
                        '--init_from_checkpoint=%s' % empty], capsys)
  _CheckOneLine(code, err, ["no checkpoint in directory '%s'" % empty,
                            'nor in its ckpt/'])
  assert not logdir.exists()


def test_a_good_warm_start_still_runs(tmp_path, capsys, source_logdir):
  logdir = tmp_path / 'run'
  code, out, err = _Main([_MODEL, '--logdir=%s' % logdir, '--max_steps=1',
                          '--init_from_checkpoint=%s' % source_logdir],
                         capsys)
  assert code == 0, err
  assert 'Warm-started 4 variables from %s.' % source_logdir in out


def _StrictLoad(text):
  def _Refuse(name):
    raise ValueError('not JSON: %s' % name)
  return json.loads(text, parse_constant=_Refuse)


def test_metrics_json_is_strict_json_with_null_for_non_finite(tmp_path):
  path = str(tmp_path / 'metrics.json')
  logdir_lib.WriteMetrics(path, {
      'loss': float('nan'), 'eval/loss': float('inf'), 'lr': -float('inf'),
      'global_step': 7, 'accuracy': 0.5, 'nested': {'x': [1.0, float('nan')]}})
  with open(path) as f:
    text = f.read()
  assert 'NaN' not in text and 'Infinity' not in text
  assert _StrictLoad(text) == {
      'loss': None, 'eval/loss': None, 'lr': None, 'global_step': 7,
      'accuracy': 0.5, 'nested': {'x': [1.0, None]}}


def test_a_non_finite_value_is_never_the_best_checkpoint(tmp_path):
  ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
  best = checkpointer_lib.BestCheckpoint(ckpt, str(tmp_path / 'best'), 'min')
  assert not best.MaybeSave(1, float('nan'), 'loss')
  assert not best.MaybeSave(2, float('inf'), 'loss')
  assert best.best is None
  assert best.MaybeSave(3, 0.5, 'loss')
  with open(tmp_path / 'best' / 'best.json') as f:
    assert _StrictLoad(f.read())['value'] == 0.5
