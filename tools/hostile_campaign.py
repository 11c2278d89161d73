"""A hostile-tester campaign against the trainer, as a user would run it.

Issue 12 asks for the figures of such a campaign: inputs tried, code
payloads tried and executed, faults injected, survived and with data lost.
This script produces them from the command line, the way an attacker or a
fault reaches the framework: params text in `--params_override`, in a
`--params_file`, in a logdir's `params.txt` read by `schedules.plot`; bad
values; damaged checkpoints; kills and interrupts; multi-worker start-up
faults.

  python tools/hostile_campaign.py --workdir=/tmp/campaign            # all
  python tools/hostile_campaign.py --workdir=/tmp/campaign --only=text

It is not a test (it runs a few hundred processes, ~15 minutes on 2 cores);
the tests under tests/ hold each behaviour to its value. Every process runs
from the repository root with TF_CPP_MIN_LOG_LEVEL=3.

Sections and what counts as a pass:
  text     a payload is refused (exit != 0, or FromText raises) with a
           message of one line, and its marker file never appears.
  values   a bad value exits 2 with one 'ERROR:' line naming the key, and
           creates no logdir.
  faults   after the fault the job either refuses with a one-line error or
           recovers; no checkpoint that existed before is lost, and a resumed
           run ends with the weights of an uninterrupted one.
  busy     another experiment's logdir (every mode, finished or not), a
           second live trainer, a file-size limit at a save: one ERROR line,
           exit 2, no file changed; after kill -9 of a live trainer and
           after the limit is lifted, the run proceeds.
  workers  a multi-worker start-up fault fails on every worker within the
           start-up bound, naming the peer or the duplicate.
"""

import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='',
           PYTHONPATH=ROOT, PYTHONUNBUFFERED='1')
EVIL = 'campaign_evil_module'
MODEL = 'regression.LinearRegression'
MAX_ARG_CHARS = 100_000
START = 0  # --text_start: the first payload to try (to finish a broken run).
VALUES_MODEL = 'digits.MlpMomentum'  # Has a finite data set and a dev metric.


class Tally:
  """Counts per section: tried, passed, and the failures' descriptions."""

  def __init__(self):
    self.rows = {}

  def Add(self, section, name, ok, detail=''):
    row = self.rows.setdefault(section, {'tried': 0, 'passed': 0,
                                         'failed': []})
    row['tried'] += 1
    row['passed'] += bool(ok)
    if not ok:
      row['failed'].append('%s: %s' % (name, detail[-600:]))
    print('%-8s %-4s %s' % (section, 'ok' if ok else 'FAIL', name),
          flush=True)


def Run(args, timeout=300, cwd=ROOT, env=None):
  """Runs a command; returns (returncode, stdout, stderr)."""
  try:
    r = subprocess.run(args, cwd=cwd, env=env or ENV, capture_output=True,
                       text=True, timeout=timeout)
  except subprocess.TimeoutExpired as e:
    return 'timeout', e.stdout or '', e.stderr or ''
  return r.returncode, r.stdout, r.stderr


def Trainer(*flags, timeout=300):
  return Run([sys.executable, '-m', 'learner.trainer'] + list(flags),
             timeout=timeout)


# ---- text: code payloads ------------------------------------------------------


def Payloads(marker):
  """(name, params line) pairs; each would create `marker` if it ran."""
  touch = "['touch', %r]" % marker
  return [
      ('launcher via Object', "task.name : Object('learner.training.cluster.launcher."
       "StartWorkers', command=%s, num_workers=1)" % touch),
      ('old launcher path', "task.name : Object('learner.launcher."
       "StartWorkers', command=%s, num_workers=1)" % touch),
      ('os.system', "task.name : Object('os.system', command='touch %s')" %
       marker),
      ('subprocess.run', "task.name : Object('subprocess.run', args=%s)" %
       touch),
      ('subprocess.Popen', "task.name : Object('subprocess.Popen', args=%s)" %
       touch),
      ('builtins.exec', "task.name : Object('builtins.exec', source=\"open(%r,"
       " 'w')\")" % marker),
      ('builtins.eval', "task.name : Object('builtins.eval', source='1')"),
      ('import_module', "task.name : Object('importlib.import_module', "
       "name=%r)" % EVIL),
      ('Function of evil', "task.name : Function('%s.f')" % EVIL),
      ('Class of evil', "task.name : Class('%s.X')" % EVIL),
      ('Function as optimizer_fn', "task.train.learner[0].optimizer_fn : "
       "Function('%s.f')" % EVIL),
      ('Function os.getpid', "task.train.learner[0].optimizer_fn : "
       "Function('os.getpid')"),
      ('Class as cls', "task.train.learner[0].optimizer.cls : Class('%s.X')"
       % EVIL),
      ('cls line of unknown key', "task.no_such.cls : Class('%s.X')" % EVIL),
      ('Params() of evil', "task.train.learner[0].lr_schedule : Class('%s.X')"
       % EVIL),
      ('payload inside factory', "task.train.learner[0].optimizer_fn : "
       "Object('learner.optimizers.factory.get_optimizer_fn', name='sgd', "
       "learning_rate=Object('os.system', command='touch %s'))" % marker),
      ('nested in list', "task.name : [1, {'a': (Object('subprocess.run', "
       "args=%s),)}]" % touch),
      ('registry GetParams', "task.name : Object('params.registry.GetParams',"
       " key='digits.MlpMomentum')"),
      ('summary writer', "task.name : Object('learner.training.services.summary."
       "WriteParamsText', writer=None, params_text='x')"),
      ('recipe allocation', "task.name : Object('schedules.recipes."
       "ResNet50Schedule', steps_per_epoch=10**9)"),
      ('dunder attribute', "task.name : ().__class__.__base__"
       ".__subclasses__()"),
      ('lambda', "task.name : (lambda: __import__('os').system('touch %s'))()"
       % marker),
      ('f-string', "task.name : f\"{__import__('os').system('touch %s')}\"" %
       marker),
      ('walrus', "task.name : (x := 1)"),
      ('comprehension', "task.name : [open(%r, 'w') for _ in [1]]" % marker),
      ('unary bomb 1.5k', 'task.name : ' + '-' * 1500 + '1'),
      ('unary bomb 1M', 'task.name : ' + '-' * 1000000 + '1'),
      ('bracket bomb', 'task.name : ' + '[' * 5000 + ']' * 5000),
      ('power bomb', 'task.name : 9**9**9**9'),
      ('string repeat bomb', "task.name : 'a' * 10**10"),
      ('list repeat bomb', 'task.name : [0] * 10**10'),
      ('huge int literal', 'task.name : ' + '9' * 200000),
      ('deep dict', 'task.name : ' + '{1:' * 3000 + '1' + '}' * 3000),
  ]


def _WriteEvil(dirname, marker):
  path = os.path.join(dirname, EVIL + '.py')
  with open(path, 'w') as f:
    f.write(textwrap.dedent('''
        open(%r, 'w').write('imported')

        class X:
          @classmethod
          def Params(cls):
            open(%r, 'w').write('Params() ran')

        def f(*args, **kwargs):
          open(%r, 'w').write('called')
        ''' % ((marker,) * 3)))


def _OneLineError(code, err):
  lines = [l for l in err.strip().splitlines() if l.strip()]
  return code not in (0, 'timeout') and len(lines) == 1


def TextSection(tally, workdir):
  """Each payload by three channels; the marker must never appear."""
  evil_dir = os.path.join(workdir, 'evil')
  os.makedirs(evil_dir, exist_ok=True)
  marker = os.path.join(workdir, 'pwned')
  _WriteEvil(evil_dir, marker)
  env = dict(ENV, PYTHONPATH=ROOT + os.pathsep + evil_dir)
  for name, line in Payloads(marker)[START:]:
    for channel in ('override', 'file', 'plot'):
      if channel == 'override' and len(line) > MAX_ARG_CHARS:
        continue  # No shell can pass it as one argument (Linux: 128 KiB).
      logdir = os.path.join(workdir, 'text_logdir')
      shutil.rmtree(logdir, ignore_errors=True)
      path = os.path.join(workdir, 'payload.txt')
      with open(path, 'w') as f:
        f.write('task.train.max_steps : 3\n' + line + '\n')
      if channel == 'override':
        args = ['-m', 'learner.trainer', '--model=' + MODEL,
                '--logdir=' + logdir, '--params_override=' + line]
      elif channel == 'file':
        args = ['-m', 'learner.trainer', '--model=' + MODEL,
                '--logdir=' + logdir, '--params_file=' + path]
      else:
        args = ['-m', 'schedules.plot', '--params_text=' + path]
      code, _, err = Run([sys.executable] + args, timeout=120, env=env)
      ran = os.path.exists(marker)
      if ran:
        os.remove(marker)
      ok = not ran and _OneLineError(code, err)
      tally.Add('text', '%s [%s]' % (name, channel), ok,
                'ran' if ran else 'exit %s: %s' % (code, err))


# ---- values: refused before the logdir exists -----------------------------------


BAD_VALUES = [
    ('task.train.learner[0].learning_rate : True', 'learning_rate'),
    ("task.train.learner[0].learning_rate : float('nan')", 'learning_rate'),
    ('task.train.learner[0].learning_rate : -0.1', 'learning_rate'),
    ('task.train.learner[0].learning_rate : 1e400', 'learning_rate'),
    ('task.train.learner[0].clip_gradient_norm_to_value : -1.0',
     'clip_gradient_norm_to_value'),
    ("task.train.learner[0].clip_gradient_norm_to_value : float('nan')",
     'clip_gradient_norm_to_value'),
    ("task.train.learner[0].loss_name : 'xent'", 'loss_name'),
    ("task.train.learner[0].bprop_variable_filter : 'no_such_var'",
     'bprop_variable_filter'),
    ("task.train.learner[0].bprop_variable_filter : '(['",
     'bprop_variable_filter'),
    ('train_input.batch_size : 5000', 'batch_size'),
    ('train_input.batch_size : 0', 'batch_size'),
    ('task.train.max_steps : -5', 'max_steps'),
    ('task.train.save_max_to_keep : 0', 'save_max_to_keep'),
    ("task.train.init_from_checkpoint_rules : [('(', 'x')]",
     'init_from_checkpoint_rules'),
    ("task.eval.dev_metric : 'acc'", 'dev_metric'),
    ('task.fprop_dtype : tf.int32', 'fprop_dtype'),
    # Issue 23: Lingvo's train knobs.
    ('task.train.learning_rate : 0.5', 'learning_rate'),  # Beside a learner.
    ('task.train.vn_std : 0.1', 'vn_std'),
    ('task.train.ema_decay : 1.0', 'ema_decay'),
    ('task.train.ema_decay_moving_vars : 1', 'ema_decay_moving_vars'),
    ('task.train.save_interval_seconds : 0', 'save_interval_seconds'),
    ("task.train.early_stop.metric_history.metric : 'log_pplx'; "
     'task.train.early_stop.window : 100', 'metric_history.metric'),
    ("task.train.init_from_checkpoint_rules : {'a': ([], []), 'b': ([], "
     '[])}', 'init_from_checkpoint_rules'),
]


# Bad flags and params text found by issue 21's campaign: (flags, what the
# one ERROR line must name). Each is refused before the logdir exists.
BAD_FLAGS = [
    (['--seed=-1'], '--seed=-1'),
    (['--seed=4294967296'], '--seed=4294967296'),
    (['--model=..'], '--model'),
    (['--mode=bogus'], '--mode'),
    (['--init_from_checkpoint=/nonexistent/ckpt-1'], 'init_from_checkpoint'),
    (['--params_override=task.train.max_steps :'], 'task.train.max_steps'),
    (['--params_override=task.train.max_steps : 5 6'], 'task.train.max_steps'),
    (['--params_override=task.train.max_steps : 5, 6'],
     'task.train.max_steps'),
    (['--params_override=task..train.max_steps : 5'], 'task..train.max_steps'),
    (['--params_override=task.train.max_steps.foo : 5'],
     'task.train.max_steps.foo'),
    (["--params_override=task.train.learner.bprop_variable_exclusion : '.*'"],
     'bprop_variable_exclusion'),
    (["--params_override=task.train.learner.bprop_variable_exclusion : '(['"],
     'bprop_variable_exclusion'),
    (['--params_override=task.train.learner.lr_schedule.schedule'
      '.warmup_steps : -5'], 'warmup_steps'),
    (['--checkpoint=/tmp/x/ckpt-1'], '--checkpoint'),
    (['--eval_dir=/tmp/x_eval'], '--eval_dir'),
    (['--mode=eval', '--eval_dir=/tmp/x_eval', '--evaler_timeout_secs=5'],
     '--evaler_timeout_secs'),
]


def _ValueRefused(tally, name, flags, key, logdir):
  shutil.rmtree(logdir, ignore_errors=True)
  code, out, err = Trainer('--model=' + VALUES_MODEL, '--logdir=' + logdir,
                           *flags, timeout=120)
  text = (out + err).strip().splitlines()
  errors = [l for l in text if l.startswith('ERROR')]
  ok = (code == 2 and len(errors) == 1 and key in errors[0] and
        not os.path.exists(logdir) and 'Traceback' not in out + err)
  tally.Add('values', name, ok, 'exit %s: %s' % (code, out + err))


def _LogdirIsAFile(tally, workdir):
  path = os.path.join(workdir, 'values_logdir_file')
  with open(path, 'w') as f:
    f.write('not a logdir\n')
  code, out, err = Trainer('--model=' + VALUES_MODEL, '--logdir=' + path,
                           timeout=120)
  errors = [l for l in (out + err).splitlines() if l.startswith('ERROR')]
  with open(path) as f:
    kept = f.read() == 'not a logdir\n'
  ok = (code == 2 and len(errors) == 1 and '--logdir' in errors[0] and kept
        and 'Traceback' not in out + err)
  tally.Add('values', '--logdir=<a regular file>', ok,
            'exit %s: %s' % (code, out + err))


def _WarmupLongerThanRun(tally, workdir):
  logdir = os.path.join(workdir, 'values_warmup')
  shutil.rmtree(logdir, ignore_errors=True)
  code, out, err = Trainer(
      '--model=' + VALUES_MODEL, '--logdir=' + logdir, '--max_steps=3',
      '--mode=train', '--params_override=task.train.learner.lr_schedule'
      '.schedule.warmup_steps : 50', timeout=300)
  warnings = [l for l in (out + err).splitlines()
              if l.startswith('WARNING') and 'warmup' in l]
  ok = code == 0 and len(warnings) == 1
  tally.Add('values', 'warmup 50 steps in a 3-step run (warned)', ok,
            'exit %s: %s' % (code, out + err))


def ValuesSection(tally, workdir):
  """Each bad value: exit 2, one ERROR line naming the key, no logdir."""
  logdir = os.path.join(workdir, 'values_logdir')
  for line, key in BAD_VALUES:
    _ValueRefused(tally, line, ['--params_override=' + line], key, logdir)
  for flags, key in BAD_FLAGS:
    _ValueRefused(tally, ' '.join(flags), flags, key, logdir)
  _LogdirIsAFile(tally, workdir)
  _WarmupLongerThanRun(tally, workdir)


# ---- faults: damaged checkpoints, kills, interrupts, wrong jobs ----------------

FAST = ('task.train.save_interval_steps : 10; task.train.save_max_to_keep : 3;'
        ' task.eval.interval_steps : 20; task.train.log_interval_steps : 5')


def _Train(logdir, max_steps, mode='train_and_eval', extra=(), timeout=300):
  return Trainer('--model=' + MODEL, '--logdir=' + logdir, '--mode=' + mode,
                 '--max_steps=%d' % max_steps, '--seed=1',
                 '--params_override=' + FAST, *extra, timeout=timeout)


def _Steps(logdir):
  """The global steps of the complete checkpoints in logdir/ckpt."""
  found = glob.glob(os.path.join(logdir, 'ckpt', 'ckpt-*.index'))
  return sorted(int(os.path.basename(p)[5:-6]) for p in found)


def _Weights(logdir):
  """{name: value} of the newest checkpoint in logdir/ckpt (numpy)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = tf.train.latest_checkpoint(os.path.join(logdir, 'ckpt'))
  if path is None:
    steps = _Steps(logdir)
    path = os.path.join(logdir, 'ckpt', 'ckpt-%d' % steps[-1])
  reader = tf.train.load_checkpoint(path)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if 'model' in k or 'task' in k}


def _Same(a, b):
  import numpy as np  # pylint: disable=g-import-not-at-top
  return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _Fresh(workdir, name):
  logdir = os.path.join(workdir, 'faults', name)
  shutil.rmtree(logdir, ignore_errors=True)
  os.makedirs(os.path.dirname(logdir), exist_ok=True)
  return logdir


def _Damage(tally, workdir, reference, name, damage, expect_resume=True):
  """Trains 40 steps, damages the logdir, resumes to 60: refuses or recovers."""
  logdir = _Fresh(workdir, name)
  code, out, err = _Train(logdir, 40)
  if code != 0:
    tally.Add('faults', name, False, 'first run exit %s: %s' % (code, err))
    return
  before = _Steps(logdir)
  damage(logdir)
  code, out, err = _Train(logdir, 60)
  lines = [l for l in (out + err).splitlines() if l.startswith('ERROR')]
  if code == 0:
    ok = expect_resume and _Same(_Weights(logdir), reference)
    detail = 'resumed, weights %s the reference' % (
        'equal' if ok else 'differ from')
  else:
    ok = len(lines) == 1 and 'Traceback' not in out + err and (
        'delete' not in (out + err).lower())
    detail = 'exit %s: %s' % (code, out + err)
  lost = [s for s in before if s not in _Steps(logdir) and s > 20]
  if code != 0 and lost:
    ok, detail = False, 'refused but lost checkpoints %s' % lost
  tally.Add('faults', name, ok, detail)


def _WaitForTraining(proc, timeout=180):
  """Reads proc's stdout until a progress line (a global step) appears."""
  found = threading.Event()

  def Read():
    for line in proc.stdout:
      if 'step' in line:
        found.set()
    found.set()

  threading.Thread(target=Read, daemon=True).start()
  found.wait(timeout)


def _Kill(tally, workdir, reference, sig, kills, expect_code):
  """Kills a training `kills` times at random moments; resumes to the end."""
  name = '%s x%d' % (signal.Signals(sig).name, kills)
  logdir = _Fresh(workdir, name.replace(' ', '_'))
  rng = random.Random(sig * 100 + kills)
  codes = []
  for _ in range(kills):
    proc = subprocess.Popen(
        [sys.executable, '-m', 'learner.trainer', '--model=' + MODEL,
         '--logdir=' + logdir, '--mode=train_and_eval', '--max_steps=60',
         '--seed=1', '--params_override=' + FAST], cwd=ROOT, env=ENV,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if sig == signal.SIGKILL:  # Anywhere: start-up, a step, a save.
      time.sleep(rng.uniform(4.0, 9.0))
    else:  # SIGINT/SIGTERM are handled once training runs: wait for it.
      _WaitForTraining(proc)
      time.sleep(rng.uniform(0.0, 2.0))
    proc.send_signal(sig)
    proc.wait(timeout=120)
    err = proc.stderr.read()
    codes.append(proc.returncode)
    if sig != signal.SIGKILL and proc.returncode not in (0, expect_code):
      tally.Add('faults', name, False, 'exit %s: %s' % (proc.returncode, err))
      return
  partial = [p for p in glob.glob(os.path.join(logdir, 'ckpt', '*.data-*'))
             if not os.path.exists(p.split('.data-')[0] + '.index')]
  code, out, err = _Train(logdir, 60)
  ok = code == 0 and not partial and _Same(_Weights(logdir), reference)
  tally.Add('faults', name, ok, 'codes %s, partial %s, final exit %s %s' %
            (codes, partial, code, err[-300:]))


def FaultsSection(tally, workdir):
  """Checkpoint damage, kills and interrupts, and jobs on the wrong logdir."""
  ref_dir = _Fresh(workdir, 'reference')
  code, _, err = _Train(ref_dir, 60)
  if code != 0:
    tally.Add('faults', 'reference run', False, err)
    return
  reference = _Weights(ref_dir)

  def Remove(name):
    return lambda d: os.remove(os.path.join(d, 'ckpt', name))

  def Write(name, text):
    def Damage(d):
      with open(os.path.join(d, *name.split('/')), 'w') as f:
        f.write(text)
    return Damage

  def Truncate(pattern):
    def Damage(d):
      path = sorted(glob.glob(os.path.join(d, *pattern.split('/'))))[-1]
      with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) // 2)
    return Damage

  def NewestIndexRemoved(d):
    os.remove(os.path.join(d, 'ckpt', 'ckpt-%d.index' % _Steps(d)[-1]))

  def StaleTemp(d):
    os.makedirs(os.path.join(d, 'ckpt', 'ckpt-35_temp'))
    with open(os.path.join(d, 'ckpt', 'ckpt-35_temp', 'part-0.data'),
              'w') as f:
      f.write('partial')

  cases = [
      ('state file deleted', Remove('checkpoint')),
      ('state file garbled', Write('ckpt/checkpoint', '\x00\xffgarbage{{')),
      ('state file empty', Write('ckpt/checkpoint', '')),
      ('state file names a missing ckpt', Write(
          'ckpt/checkpoint', 'model_checkpoint_path: "ckpt-999"\n')),
      ('newest index deleted', NewestIndexRemoved),
      ('newest data truncated', Truncate('ckpt/ckpt-*.data-*')),
      ('best.json truncated', Truncate('best/best.json')),
      ('best.json garbage', Write('best/best.json', '{"step": ')),
      ('metrics.json garbage', Write('metrics.json', '{{{')),
      ('params.txt garbage', Write('params.txt', 'task.zzz : 1\n\x00')),
      ('stale _temp directory', StaleTemp),
  ]
  for name, damage in cases:
    _Damage(tally, workdir, reference, name, damage)
  for sig, kills, code in ((signal.SIGKILL, 5, -9), (signal.SIGINT, 2, 130),
                           (signal.SIGTERM, 2, 143)):
    _Kill(tally, workdir, reference, sig, kills, code)
  _WrongJobs(tally, workdir, ref_dir)


def _WrongJobs(tally, workdir, ref_dir):
  """Jobs pointed at a logdir that is not theirs, and an all-NaN run."""
  before = {p: open(p, 'rb').read() for p in
            (os.path.join(ref_dir, 'metrics.json'),
             os.path.join(ref_dir, 'params.txt'))}
  for name, args in (
      ('eval with another model', ['--model=digits.MlpMomentum',
                                   '--mode=eval']),
      ('train with another model', ['--model=digits.MlpMomentum',
                                    '--mode=train', '--max_steps=5']),
      ('rerun of a finished run', ['--model=' + MODEL, '--mode=train_and_eval',
                                   '--max_steps=60', '--seed=1',
                                   '--params_override=' + FAST]),
      ('eval of a finished run', ['--model=' + MODEL, '--mode=eval'])):
    code, out, err = Trainer('--logdir=' + ref_dir, *args)
    after = {p: open(p, 'rb').read() for p in before}
    same = after == before
    refused = 'another model' in name
    ok = same and ((code != 0 and 'Traceback' not in out + err and
                    'delete' not in (out + err).lower()) if refused else
                   code == 0)
    tally.Add('faults', name, ok, 'exit %s, files %s: %s' % (
        code, 'unchanged' if same else 'CHANGED', (out + err)[-400:]))
  logdir = _Fresh(workdir, 'all_nan')
  code, out, err = Trainer('--model=' + MODEL, '--logdir=' + logdir,
                           '--mode=train', '--max_steps=400',
                           '--params_override=task.train.learner[0].'
                           'learning_rate : 50', timeout=300)
  ok = code not in (0, 'timeout') and 'Traceback' not in out + err
  tally.Add('faults', 'non-finite on every step', ok,
            'exit %s: %s' % (code, (out + err)[-400:]))


# ---- busy: foreign, locked and full logdirs; the evaler beside a trainer -------


def _Md5s(logdir):
  import hashlib  # pylint: disable=g-import-not-at-top
  out = {}
  for root, _, names in os.walk(logdir):
    for n in names:
      with open(os.path.join(root, n), 'rb') as f:
        out[os.path.join(root, n)] = hashlib.md5(f.read()).hexdigest()
  return out


def _OneErrorLine(code, out, err):
  lines = [l for l in (out + err).splitlines() if l.startswith('ERROR')]
  return code == 2 and len(lines) == 1 and 'Traceback' not in out + err


def _FileSizeLimit():
  import resource  # pylint: disable=g-import-not-at-top
  signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
  resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))


def BusySection(tally, workdir):
  """Another experiment's logdir, a second live trainer, a full disk."""
  done = os.path.join(workdir, 'busy', 'done')
  shutil.rmtree(os.path.dirname(done), ignore_errors=True)
  code, _, err = _Train(done, 20, mode='train')
  if code != 0:
    tally.Add('busy', 'first run', False, err)
    return
  for finished in (True, False):
    for mode in ('train', 'train_and_eval', 'eval', 'evaler', 'export'):
      name = 'another experiment, %s, %s run' % (
          mode, 'finished' if finished else 'unfinished')
      logdir = os.path.join(workdir, 'busy', name.replace(' ', '_'))
      shutil.copytree(done, logdir)
      if not finished:
        os.remove(os.path.join(logdir, 'metrics.json'))
      before = _Md5s(logdir)
      code, out, err = Trainer('--model=digits.MlpMomentum', '--mode=' + mode,
                               '--logdir=' + logdir,
                               '--evaler_timeout_secs=2')
      ok = _OneErrorLine(code, out, err) and _Md5s(logdir) == before
      tally.Add('busy', name, ok, 'exit %s: %s' % (code, (out + err)[-400:]))
  live = os.path.join(workdir, 'busy', 'live')
  first = subprocess.Popen(
      [sys.executable, '-m', 'learner.trainer', '--model=' + MODEL,
       '--logdir=' + live, '--max_steps=100000000',
       '--params_override=' + FAST], cwd=ROOT, env=ENV,
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  _WaitForTraining(first)
  code, out, err = Trainer('--model=' + MODEL, '--logdir=' + live,
                           '--seed=2')
  tally.Add('busy', 'second live trainer', _OneErrorLine(code, out, err) and
            'in use by another live train job' in err, (out + err)[-400:])
  first.kill()
  first.wait()
  code, out, err = Trainer('--model=' + MODEL, '--logdir=' + live,
                           '--params_override=' + FAST, '--max_steps=%d' % (
                               (_Steps(live) or [0])[-1] + 10))
  tally.Add('busy', 'a new run after kill -9 of the live one', code == 0,
            'exit %s: %s' % (code, err[-400:]))
  full = os.path.join(workdir, 'busy', 'fsize')
  shutil.copytree(done, full)
  before = {p: h for p, h in _Md5s(full).items() if '/ckpt/' in p}
  r = subprocess.run(
      [sys.executable, '-m', 'learner.trainer', '--model=' + MODEL,
       '--logdir=' + full, '--max_steps=40', '--params_override=' + FAST],
      cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300,
      preexec_fn=_FileSizeLimit)
  after = {p: h for p, h in _Md5s(full).items() if '/ckpt/' in p}
  code2, _, err2 = _Train(full, 40, mode='train')
  tally.Add('busy', 'file-size limit at a save', _OneErrorLine(
      r.returncode, r.stdout, r.stderr) and after == before and code2 == 0,
            'exit %s, then %s: %s %s' % (r.returncode, code2, r.stderr[-400:],
                                         err2[-300:]))


# ---- workers: start-up faults --------------------------------------------------

REGISTER_SECS = 10


def _Worker(index, ports, logdir):
  config = {'cluster': {'worker': ['127.0.0.1:%d' % p for p in ports]},
            'task': {'type': 'worker', 'index': index}}
  env = dict(ENV, TF_CONFIG=json.dumps(config))
  env.pop('TF_CPP_MIN_LOG_LEVEL')
  return subprocess.Popen(
      [sys.executable, '-m', 'learner.trainer',
       '--model=regression.DistributedLinearRegression', '--logdir=' + logdir,
       '--strategy=multi_worker',
       '--worker_register_timeout_secs=%d' % REGISTER_SECS], cwd=ROOT,
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def WorkersSection(tally, workdir):
  """A missing leader, a missing follower, a duplicate index, 3 workers."""
  sys.path.insert(0, ROOT)
  from learner.training.cluster import launcher  # pylint: disable=g-import-not-at-top
  cases = {
      'leader alone (worker 1 never starts)': [(0, 2)],
      'follower alone (worker 0 never starts)': [(1, 2)],
      'duplicate index 0': [(0, 2), (0, 2)],
      'two of three workers': [(0, 3), (1, 3)],
  }
  for name, workers in cases.items():
    ports = launcher.PickFreePorts(workers[0][1])
    start = time.monotonic()
    procs = [_Worker(i, ports, os.path.join(workdir, 'workers', name[:6] +
                                            str(k)))
             for k, (i, _) in enumerate(workers)]
    results = []
    for proc in procs:
      try:
        _, err = proc.communicate(timeout=600)
      except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
      results.append((proc.returncode, err, time.monotonic() - start))
    lines = [[l for l in err.splitlines() if l.strip()] for _, err, _ in
             results]
    ok = all(code == 1 and len(l) == 1 and l[0].startswith('ERROR:') and
             ('did not register' in l[0] or 'duplicate' in l[0] or
              'worker 0' in l[0]) for (code, _, _), l in zip(results, lines))
    tally.Add('workers', name, ok, '; '.join(
        'exit %s after %.0f s: %s' % (code, secs, err.strip()[-300:])
        for code, err, secs in results))


# ---- main ------------------------------------------------------------------------

SECTIONS = {'text': TextSection, 'values': ValuesSection,
            'faults': FaultsSection, 'busy': BusySection,
            'workers': WorkersSection}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--only', choices=sorted(SECTIONS), action='append')
  parser.add_argument('--text_start', type=int, default=0)
  args = parser.parse_args()
  global START
  START = args.text_start
  os.makedirs(args.workdir, exist_ok=True)
  tally = Tally()
  for name in args.only or list(SECTIONS):
    SECTIONS[name](tally, os.path.abspath(args.workdir))
  print('\nsection   tried  passed')
  for name, row in tally.rows.items():
    print('%-8s %6d %7d' % (name, row['tried'], row['passed']))
    for failure in row['failed']:
      print('   FAIL ' + failure.replace('\n', ' | '))
  with open(os.path.join(args.workdir, 'campaign.json'), 'w') as f:
    json.dump(tally.rows, f, indent=1)
  return 0 if all(not r['failed'] for r in tally.rows.values()) else 1


if __name__ == '__main__':
  sys.exit(main())
