"""The jobs that only read checkpoints: eval, evaler, export (issue 21.4).

One restore for the three (`eval_restore.RestoreForEval`): with two
learners where only 'lb' averages its weights (Ema, decay 0.9), each job
reports / exports the average of b and the raw w, read by hand from the
checkpoint; an Ema given through optimizer_fn is evaluated on its averages
by --mode=eval as by train_and_eval; --checkpoint (alias
--export_checkpoint) chooses the checkpoint, e.g. <logdir>/best/; a
read-only logdir is evaluated without writing a byte (or into --eval_dir);
a flag the mode does not read is refused in one line, exit 2, before any
file. Experiments: tests/test_training/readonly_experiments.py (y = w*x + b).
"""

import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from params import registry
from learner.training.jobs import eval_restore
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import export as export_lib
from learner.training.services import logdir as logdir_lib
from learner.training.jobs import mode_keys
from learner.training.jobs import trainer as trainer_lib
import readonly_experiments  # pylint: disable=unused-import
import trainer_helpers

_ONE_EMA = 'readonly_experiments.TwoLearnersOneEma'
_EMA_FN = 'readonly_experiments.TwoLearnersEmaFn'
_W = 'task/_private_vars/w/.ATTRIBUTES/VARIABLE_VALUE'
_B = 'task/_private_vars/b/.ATTRIBUTES/VARIABLE_VALUE'
_B_AVG = ('task/_private_children/lb/_private_children/optimizer/_averages/'
          'regression_b/.ATTRIBUTES/VARIABLE_VALUE')
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
_TIMEOUT = 300


def _Train(logdir, key, mode='train_and_eval'):
  p = registry.GetParams(key)
  return trainer_lib.Trainer(p, str(logdir), mode=mode,
                             stream=io.StringIO()).Run()


def _Eval(logdir, key=_ONE_EMA, **kw):
  out = io.StringIO()
  r = trainer_lib.Trainer(registry.GetParams(key), str(logdir), mode='eval',
                          stream=out, **kw).Run()
  return r, out.getvalue()


def _Expected(prefix, key=_ONE_EMA):
  """{'w', 'b', 'loss'} by hand: raw w, b's average, the eval set's MSE."""
  reader = tf.train.load_checkpoint(prefix)
  w = float(reader.get_tensor(_W))
  b = float(reader.get_tensor(_B_AVG))
  assert abs(b - float(reader.get_tensor(_B))) > 1e-3  # The average lags.
  assert not any('_averages/regression_w' in k for k in
                 reader.get_variable_to_shape_map())  # 'lw' keeps none.
  sq = [(w * batch['x'].numpy().astype(np.float64) + b -
         batch['y'].numpy()) ** 2 for batch in
        registry.GetParams(key).eval_input.Instantiate().GetDataset()]
  return {'w': w, 'b': b, 'loss': float(np.concatenate(sq).mean())}


def _AssertValues(got, want):
  for k in ('w', 'b', 'loss'):
    np.testing.assert_allclose(got[k], want[k], rtol=1e-5, err_msg=k)


def _Md5s(logdir):
  return {k: hashlib.md5(v).hexdigest()
          for k, v in trainer_helpers.Files(logdir).items()}


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """TwoLearnersOneEma trained 30 steps: ckpt-10, 20, 30 and best/."""
  logdir = tmp_path_factory.mktemp('one_ema') / 'run'
  _Train(logdir, _ONE_EMA)
  return logdir


def test_eval_evaler_export_average_only_the_ema_learners_variables(
    trained, tmp_path):
  want = _Expected(str(trained / 'ckpt' / 'ckpt-30'))
  r, out = _Eval(trained)
  assert r['global_step'] == 30
  _AssertValues(r, want)
  assert 'EMA averages of the weights (1 variables restored' in out
  # The evaler: every checkpoint, each against its own values.
  logdir = tmp_path / 'run'
  shutil.copytree(trained, logdir)
  record = evaler_lib.Evaler(registry.GetParams(_ONE_EMA), str(logdir),
                             timeout_secs=0.5, poll_secs=0,
                             stream=io.StringIO()).Run()
  assert [e['global_step'] for e in record['evaluations']] == [10, 20, 30]
  for e in record['evaluations']:
    _AssertValues(e['metrics'], _Expected(e['checkpoint']))
  # The export: y = w * x + b with raw w and b's average.
  export_dir = export_lib.Export(registry.GetParams(_ONE_EMA), str(logdir),
                                 stream=io.StringIO())
  assert export_dir == str(logdir / 'export' / '30')
  x = np.array([0.0, 1.0, -2.5], np.float32)
  y = tf.saved_model.load(export_dir).signatures['serving_default'](
      x=tf.constant(x))['y'].numpy()
  np.testing.assert_allclose(y, want['w'] * x + want['b'], rtol=1e-5)


def test_ema_given_through_optimizer_fn_is_evaluated_on_its_averages(
    tmp_path):
  final = _Train(tmp_path, _EMA_FN)
  want = _Expected(str(tmp_path / 'ckpt' / 'ckpt-30'), _EMA_FN)
  _AssertValues(final, want)  # train_and_eval's final evaluation.
  r, out = _Eval(tmp_path, _EMA_FN)
  _AssertValues(r, want)
  assert 'EMA averages of the weights (1 variables restored' in out
  for k in ('w', 'b', 'loss'):
    assert r[k] == final[k], k


def test_checkpoint_flag_evaluates_and_exports_the_best_checkpoint(
    trained, tmp_path, capsys):
  logdir = tmp_path / 'run'
  shutil.copytree(trained, logdir)
  best = json.loads((logdir / 'best' / 'best.json').read_text())
  step = best['step']
  assert step != 30  # dev_metric_mode 'max' of the loss: not the newest.
  want = _Expected(str(logdir / 'best' / ('ckpt-%d' % step)))
  r, out = _Eval(logdir, checkpoint=str(logdir / 'best') + '/')
  assert r['global_step'] == step
  _AssertValues(r, want)
  assert 'Eval at global step %d (%s)' % (
      step, logdir / 'best' / ('ckpt-%d' % step)) in out
  # A prefix, and the command line with each flag name.
  r10, _ = _Eval(logdir, checkpoint=str(logdir / 'ckpt' / 'ckpt-10'))
  assert r10['global_step'] == 10
  _AssertValues(r10, _Expected(str(logdir / 'ckpt' / 'ckpt-10')))
  for flag in ('--checkpoint', '--export_checkpoint'):
    code, out, err = trainer_helpers.RunMain(
        ['--model=' + _ONE_EMA, '--logdir=%s' % logdir, '--mode=eval',
         '%s=%s/best/' % (flag, logdir)], capsys)
    assert code == 0, err
    metrics = json.loads((logdir / 'eval_job' / 'metrics.json').read_text())
    assert metrics['global_step'] == step
    _AssertValues(metrics, want)
  code, out, err = trainer_helpers.RunMain(
      ['--model=' + _ONE_EMA, '--logdir=%s' % logdir, '--mode=export',
       '--checkpoint=%s/best/' % logdir], capsys)
  assert code == 0, err
  assert out.startswith('Exported %s/best/ckpt-%d (EMA averages of 1 '
                        'variables) to %s/export/%d: ' % (logdir, step,
                                                          logdir, step))
  y = tf.saved_model.load(str(logdir / 'export' / str(step))).signatures[
      'serving_default'](x=tf.constant([1.0]))['y'].numpy()
  np.testing.assert_allclose(y, [want['w'] + want['b']], rtol=1e-5)


def test_a_checkpoint_that_is_not_there_is_one_line_and_writes_nothing(
    trained, capsys):
  before = _Md5s(trained)
  for mode in ('eval', 'export'):
    code, _, err = trainer_helpers.RunMain(
        ['--model=' + _ONE_EMA, '--logdir=%s' % trained, '--mode=' + mode,
         '--checkpoint=%s/ckpt/ckpt-15' % trained], capsys)
    assert code == 2
    assert err.count('\n') == 1, err
    assert err.startswith('ERROR: --checkpoint=%s/ckpt/ckpt-15: no such '
                          'checkpoint (no ckpt-15.index).' % trained), err
  assert _Md5s(trained) == before


def _ReadOnly(path):
  """chmod -R a-w `path`; True if that stops this process writing it."""
  for root, dirs, files in os.walk(path):
    for name in dirs + files + ['.']:
      p = os.path.join(root, name)
      os.chmod(p, stat.S_IMODE(os.stat(p).st_mode) & ~0o222)
  return not os.access(path, os.W_OK)


def _Writable(path):
  for root, dirs, files in os.walk(path):
    for name in dirs + files + ['.']:
      p = os.path.join(root, name)
      os.chmod(p, stat.S_IMODE(os.stat(p).st_mode) | 0o200)


def test_eval_of_a_read_only_logdir_writes_nothing_or_into_eval_dir(
    trained, tmp_path, monkeypatch):
  logdir = tmp_path / 'run'
  shutil.copytree(trained, logdir)
  shutil.rmtree(logdir / 'eval_job', ignore_errors=True)
  before = _Md5s(logdir)
  if not _ReadOnly(logdir):  # Root: chmod does not stop it; say it does.
    monkeypatch.setattr(logdir_lib, 'IsWritable', lambda p: not str(
        p).startswith(str(logdir)))
  try:
    want = _Expected(str(logdir / 'ckpt' / 'ckpt-30'))
    r, out = _Eval(logdir)
    _AssertValues(r, want)
    assert ('NOTE: %s is read-only: the eval results are printed, not '
            'written. Give --eval_dir=' % logdir) in out
    assert _Md5s(logdir) == before  # Not a byte, not a new file.
    r2, out2 = _Eval(logdir, eval_dir=str(tmp_path / 'out'))
    assert r2 == r and 'NOTE' not in out2
    assert json.loads((tmp_path / 'out' / 'metrics.json').read_text()) == r
    assert any(n.startswith('events.') for n in os.listdir(tmp_path / 'out'))
    assert _Md5s(logdir) == before
  finally:
    _Writable(logdir)


def _AsReadOnlyUser():
  """The command prefix under which chmod a-w stops writes, or None.

  This user's own, or for root (whom the mode bits do not stop) root
  without the capabilities that override them (setpriv drops
  CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set).
  """
  if os.geteuid() != 0:
    return []
  if shutil.which('setpriv') is None:
    return None
  return ['setpriv', '--bounding-set', '-dac_override,-dac_read_search']


def test_eval_command_line_on_a_really_read_only_logdir(trained, tmp_path):
  prefix = _AsReadOnlyUser()
  if prefix is None:
    pytest.skip('running as root without setpriv: chmod would not bind')
  logdir = tmp_path / 'run'
  shutil.copytree(trained, logdir)
  shutil.rmtree(logdir / 'eval_job', ignore_errors=True)
  _ReadOnly(logdir)
  before = _Md5s(logdir)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='',
             PYTHONPATH=os.pathsep.join([_HERE, _ROOT]))

  def _Run(*extra):
    return subprocess.run(
        prefix + [sys.executable, '-m', 'learner.trainer',
                  '--model=' + _ONE_EMA, '--logdir=%s' % logdir,
                  '--mode=eval'] + list(extra),
        env=env, cwd=_ROOT, capture_output=True, text=True,
        timeout=_TIMEOUT)

  try:
    probe = subprocess.run(prefix + [sys.executable, '-c', (
        'import os; open(os.path.join(%r, "probe"), "w")' % str(logdir))],
                           capture_output=True, text=True, timeout=_TIMEOUT)
    assert probe.returncode != 0 and 'Permission' in probe.stderr
    proc = _Run()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'Traceback' not in proc.stderr and 'Permission' not in proc.stderr
    assert 'Eval at global step 30:' in proc.stdout
    assert 'is read-only: the eval results are printed' in proc.stdout
    assert _Md5s(logdir) == before
    proc = _Run('--eval_dir=%s' % (tmp_path / 'out'))
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads((tmp_path / 'out' / 'metrics.json').read_text())
    _AssertValues(got, _Expected(str(logdir / 'ckpt' / 'ckpt-30')))
    assert _Md5s(logdir) == before
  finally:
    _Writable(logdir)


@pytest.mark.parametrize('mode,extra,flag', [
    ('train', ['--eval_dir=/tmp/x'], 'eval_dir'),
    ('evaler', ['--checkpoint=/tmp/x'], 'checkpoint'),
    ('train_and_eval', ['--export_checkpoint=/tmp/x'], 'export_checkpoint'),
    ('eval', ['--evaler_timeout_secs=5'], 'evaler_timeout_secs'),
    ('export', ['--evaler_poll_secs=0'], 'evaler_poll_secs'),
    ('export', ['--init_from_checkpoint=/tmp/x'], 'init_from_checkpoint'),
    ('eval', ['--init_from_checkpoint_rules=a=>b'],
     'init_from_checkpoint_rules'),
    ('evaler', ['--strategy=mirrored'], 'strategy'),
    ('eval', ['--evaler_dir=/tmp/x'], 'evaler_dir'),
    ('evaler', ['--export_dir=/tmp/x'], 'export_dir'),
])
def test_a_flag_the_mode_does_not_read_is_refused_in_one_line(
    tmp_path, capsys, mode, extra, flag):
  logdir = tmp_path / 'new'
  code, out, err = trainer_helpers.RunMain(
      ['--model=regression.LinearRegression', '--logdir=%s' % logdir,
       '--mode=' + mode] + extra, capsys)
  assert code == 2 and out == ''
  modes = mode_keys.MODE_FLAGS[flag]
  assert err == ('ERROR: --%s does not apply to --mode=%s: it is read by '
                 '--mode=%s only. Remove it, or run one of those modes.\n' %
                 (flag, mode, ' or --mode='.join(modes)))
  assert not logdir.exists()


def test_two_different_checkpoints_through_the_alias_are_refused(
    tmp_path, capsys):
  code, _, err = trainer_helpers.RunMain(
      ['--model=regression.LinearRegression', '--logdir=%s' % tmp_path,
       '--mode=eval', '--checkpoint=/a/ckpt-1',
       '--export_checkpoint=/b/ckpt-2'], capsys)
  assert code == 2 and err.count('\n') == 1
  assert err.startswith('ERROR: --checkpoint=/a/ckpt-1 and '
                        '--export_checkpoint=/b/ckpt-2 name two checkpoints')
  assert os.listdir(tmp_path) == []


def test_eval_candidates_are_the_listed_and_the_complete_checkpoints(
    trained, tmp_path):
  ckpt = tmp_path / 'ckpt'
  shutil.copytree(trained / 'ckpt', ckpt)
  os.remove(ckpt / 'checkpoint')  # Found from the files alone.
  assert eval_restore.EvalCandidates(str(ckpt)) == [
      str(ckpt / ('ckpt-%d' % s)) for s in (10, 20, 30)]
  os.remove(ckpt / 'ckpt-30.index')  # Incomplete: not a candidate.
  assert eval_restore.ResolveEvalCheckpoint(str(tmp_path)) == [
      str(ckpt / 'ckpt-20'), str(ckpt / 'ckpt-10')]
  assert eval_restore.EvalCandidates(str(tmp_path / 'none')) == []


@pytest.mark.parametrize('mode', ['train', 'train_and_eval'])
def test_the_trainer_class_takes_checkpoint_and_eval_dir_in_eval_only(mode):
  for kw in ({'checkpoint': '/a/ckpt-1'}, {'eval_dir': '/tmp/out'}):
    with pytest.raises(ValueError, match='applies to mode .eval. only, not '
                       '.%s.' % mode):
      trainer_lib.Trainer(registry.GetParams(_ONE_EMA), '/tmp/unused',
                          mode=mode, **kw)


def _RefusalLine(mode, logdir, flag):
  return ('ERROR: --mode=%s writes %s, but %s is read-only (not writable by '
          'this process); nothing was done. Give --%s=<a writable directory> '
          'to write there instead.\n' % (mode, os.path.join(str(logdir), mode),
                                         logdir, flag))


def _CheckEvalerRecord(out_dir):
  record = json.loads((out_dir / 'metrics.json').read_text())
  assert [e['global_step'] for e in record['evaluations']] == [10, 20, 30]
  for e in record['evaluations']:
    _AssertValues(e['metrics'], _Expected(e['checkpoint']))


def _CheckExport(export_dir, prefix):
  want = _Expected(prefix)
  x = np.array([0.0, 1.0, -2.5], np.float32)
  y = tf.saved_model.load(str(export_dir)).signatures['serving_default'](
      x=tf.constant(x))['y'].numpy()
  np.testing.assert_allclose(y, want['w'] * x + want['b'], rtol=1e-5)


def test_evaler_and_export_refuse_a_read_only_logdir_or_write_their_dir(
    trained, tmp_path, capsys, monkeypatch):
  # Issue: both wrote <logdir>/evaler, <logdir>/export and ended in a
  # PermissionDeniedError traceback; now one line, exit 2, before any work,
  # and --evaler_dir / --export_dir (as eval's --eval_dir) write elsewhere.
  logdir = tmp_path / 'run'
  shutil.copytree(trained, logdir)
  before = _Md5s(logdir)
  if not _ReadOnly(logdir):  # Root: chmod does not stop it; say it does.
    monkeypatch.setattr(logdir_lib, 'IsWritable', lambda p: not str(
        p).startswith(str(logdir)))
  base = ['--model=' + _ONE_EMA, '--logdir=%s' % logdir]
  try:
    for mode, flag in (('evaler', 'evaler_dir'), ('export', 'export_dir')):
      code, out, err = trainer_helpers.RunMain(base + ['--mode=' + mode],
                                               capsys)
      assert (code, out) == (2, '')
      assert err == _RefusalLine(mode, logdir, flag)
    assert _Md5s(logdir) == before
    code, out, err = trainer_helpers.RunMain(
        base + ['--mode=evaler', '--evaler_dir=%s' % (tmp_path / 'ev')],
        capsys)
    assert code == 0, err
    assert out.splitlines()[-1].endswith('(%s).' % (tmp_path / 'ev' /
                                                   'metrics.json'))
    _CheckEvalerRecord(tmp_path / 'ev')
    assert any(n.startswith('events.') for n in os.listdir(tmp_path / 'ev'))
    code, out, err = trainer_helpers.RunMain(
        base + ['--mode=export', '--export_dir=%s' % (tmp_path / 'ex')],
        capsys)
    assert code == 0, err
    assert out.startswith('Exported %s/ckpt/ckpt-30 (EMA averages of 1 '
                          'variables) to %s/30: ' % (logdir, tmp_path / 'ex'))
    _CheckExport(tmp_path / 'ex' / '30', str(logdir / 'ckpt' / 'ckpt-30'))
    assert _Md5s(logdir) == before  # Not a byte, not a new file.
  finally:
    _Writable(logdir)


def test_evaler_and_export_command_lines_on_a_really_read_only_logdir(
    trained, tmp_path):
  prefix = _AsReadOnlyUser()
  if prefix is None:
    pytest.skip('running as root without setpriv: chmod would not bind')
  logdir = tmp_path / 'run'
  shutil.copytree(trained, logdir)
  _ReadOnly(logdir)
  before = _Md5s(logdir)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='',
             PYTHONPATH=os.pathsep.join([_HERE, _ROOT]))
  base = ['--model=' + _ONE_EMA, '--logdir=%s' % logdir]
  try:
    results = trainer_helpers.RunModuleBatch('learner.trainer', [
        base + ['--mode=evaler'], base + ['--mode=export'],
        base + ['--mode=evaler', '--evaler_dir=%s' % (tmp_path / 'ev')],
        base + ['--mode=export', '--export_dir=%s' % (tmp_path / 'ex')]],
                                             env, _TIMEOUT, prefix=prefix)
    assert [r['code'] for r in results] == [2, 2, 0, 0], results
    assert results[0]['stderr'] == _RefusalLine('evaler', logdir,
                                                'evaler_dir')
    assert results[1]['stderr'] == _RefusalLine('export', logdir,
                                                'export_dir')
    for r in results[2:]:
      assert 'Traceback' not in r['stderr'] and (
          'Permission' not in r['stderr']), r['stderr'][-2000:]
    _CheckEvalerRecord(tmp_path / 'ev')
    _CheckExport(tmp_path / 'ex' / '30', str(logdir / 'ckpt' / 'ckpt-30'))
    assert _Md5s(logdir) == before
  finally:
    _Writable(logdir)


def test_a_newest_checkpoint_without_its_index_is_named_with_the_one_used(
    trained, tmp_path, capsys):
  # Issue: --mode=export with ckpt-30.index deleted exported ckpt-20, exit
  # 0, and no line said the newest was skipped. Now one line names both
  # (the state file still lists ckpt-30); --mode=eval says the same.
  logdir = tmp_path / 'run'
  shutil.copytree(trained, logdir)
  os.remove(logdir / 'ckpt' / 'ckpt-30.index')
  ckpt = logdir / 'ckpt'
  assert eval_restore.ResolveEvalCheckpoint(str(logdir)) == [
      str(ckpt / ('ckpt-%d' % s)) for s in (30, 20, 10)]
  line = ('WARNING: checkpoint %s/ckpt-30 cannot be read (no ckpt-30.index: '
          'deleted, or its save did not finish); using %s/ckpt-20 (global '
          'step 20) instead.' % (ckpt, ckpt))
  base = ['--model=' + _ONE_EMA, '--logdir=%s' % logdir]
  code, out, err = trainer_helpers.RunMain(base + ['--mode=export'], capsys)
  assert code == 0, err
  lines = out.splitlines()
  assert lines[0] == line
  assert lines[1].startswith('Exported %s/ckpt-20 (EMA averages of 1 '
                             'variables) to %s/export/20: ' % (ckpt, logdir))
  _CheckExport(logdir / 'export' / '20', str(ckpt / 'ckpt-20'))
  code, out, err = trainer_helpers.RunMain(base + ['--mode=eval'], capsys)
  assert code == 0, err
  assert out.splitlines().count(line) == 1
  metrics = json.loads((logdir / 'eval_job' / 'metrics.json').read_text())
  assert metrics['global_step'] == 20
  _AssertValues(metrics, _Expected(str(ckpt / 'ckpt-20')))


def test_the_default_dataset_named_or_not_is_one_directory(tmp_path, capsys):
  # Issue: --mode=eval wrote eval_job/ and --evaler_dataset=dev (the
  # default dataset, Dev() being the first defined) the same numbers into
  # eval_job_dev/. Now the default, named or not, is eval_job/ (evaler/
  # for the evaler); another dataset keeps its own directory.
  key = 'readonly_experiments.TwoLearnersDevTest'
  logdir = tmp_path / 'run'
  _Train(logdir, key, mode='train')
  base = ['--model=' + key, '--logdir=%s' % logdir]
  code, _, err = trainer_helpers.RunMain(base + ['--mode=eval'], capsys)
  assert code == 0, err
  default = json.loads((logdir / 'eval_job' / 'metrics.json').read_text())
  _AssertValues(default, _Expected(str(logdir / 'ckpt' / 'ckpt-30'), key))
  code, _, err = trainer_helpers.RunMain(
      base + ['--mode=eval', '--evaler_dataset=dev'], capsys)
  assert code == 0, err
  assert json.loads((logdir / 'eval_job' / 'metrics.json').read_text()) == (
      default)
  code, _, err = trainer_helpers.RunMain(
      base + ['--mode=eval', '--evaler_dataset=test'], capsys)
  assert code == 0, err
  test = json.loads((logdir / 'eval_job_test' / 'metrics.json').read_text())
  assert test['global_step'] == 30 and test['loss'] != default['loss']
  code, _, err = trainer_helpers.RunMain(
      base + ['--mode=evaler', '--evaler_dataset=dev'], capsys)
  assert code == 0, err
  record = json.loads((logdir / 'evaler' / 'metrics.json').read_text())
  last = record['evaluations'][-1]['metrics']
  assert last == {k: default[k] for k in ('w', 'b', 'loss')}
  assert sorted(n for n in os.listdir(logdir) if n.startswith('eval')) == [
      'eval_job', 'eval_job_test', 'evaler']
