"""Params text is data (issue 12, item 1): hostile text runs nothing.

Every payload below is refused with a one-line ValueError naming the key, and
the marker file a payload would create never appears. The payload classes:
package factories, Function/Class/Enum of arbitrary paths, modules that are
not imported (a module in tmp_path whose import writes the marker), `.cls`
lines with unknown keys, `schedules.plot` and the trainer on hostile text
(in subprocesses), and parser bombs (depth, length, item counts).
"""

import enum
import io
import os
import random
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from params import hyperparams
from params import params_text
from params import text_registry
from params import value_codec
from params import registry
from params import InstantiableParams
from params import Params
from schedules import base_schedule
from learner.optimizers import factory

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
EVIL = 'evil_text_payload_q7'  # Never imported by anything but its own test.


@pytest.fixture
def marker(tmp_path, monkeypatch):
  """The marker path; a module EVIL on sys.path whose import would write it."""
  path = tmp_path / 'pwned'
  (tmp_path / (EVIL + '.py')).write_text(textwrap.dedent('''
      import enum
      open(%r, 'w').write('imported')

      class X:
        @classmethod
        def Params(cls):
          open(%r, 'w').write('Params() ran')

      class E(enum.Enum):
        A = 1

      def f(*args, **kwargs):
        open(%r, 'w').write('called')
      ''' % ((str(path),) * 3)))
  monkeypatch.syspath_prepend(str(tmp_path))
  sys.modules.pop(EVIL, None)
  yield str(path)
  assert EVIL not in sys.modules
  assert not os.path.exists(path), open(path).read()


def _Target():
  """Params shaped like an experiment: values, a nested schedule, a list."""
  p = Params()
  task = Params()
  task.Define('name', 'task', '')
  p.Define('task', task, '')
  p.Define('x', None, 'Takes any value.')
  p.Define('rate', 0.1, '')
  p.Define('optimizer_fn', None, '')
  p.Define('sub', base_schedule.Constant.Params(), '')
  p.Define('items', [], '')
  return p


def _Refused(line, key):
  """FromText(line) on _Target() raises one line naming `key`; returns it."""
  p = _Target()
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', FutureWarning)
    with pytest.raises(ValueError) as e:
      p.FromText(line)
  msg = str(e.value)
  assert repr(key) in msg, msg
  assert '\n' not in msg and len(msg) < 2000, msg
  return msg, p


def _Touch(m):
  return "['touch', %r]" % m


# ---- package factories and arbitrary callables in Object(...) --------------

_OBJECT_PAYLOADS = [
    # The issue's payload, by the new and the old (moved) path.
    ("task.name : Object('learner.training.cluster.launcher.StartWorkers', "
     "command={touch}, num_workers=1)", 'task.name'),
    ("task.name : Object('learner.launcher.StartWorkers', command={touch}, "
     "num_workers=1)", 'task.name'),
    ("x : Object('learner.training.cluster.launcher.StartWorkers', command={touch}, "
     "num_workers=1)", 'x'),
    ("x : Object('params.registry.GetParams', key='digits.MlpMomentum')", 'x'),
    ("x : Object('schedules.recipes.ResNet50Schedule', steps_per_epoch=10**9)",
     'x'),
    ("x : Object('schedules.recipes.EpochsToUpdates', epochs=1, "
     "steps_per_epoch=1)", 'x'),
    ("x : Object('learner.optimizers.factory.OptimizerParamsFromFn', "
     "optimizer_fn=Function('os.getpid'))", 'x'),
    ("x : Object('learner.optimizers.factory._Factory', name='sgd', "
     "kwargs={{}})", 'x'),
    ("x : Object('learner.training.services.summary.WriteParamsText', writer=None, "
     "params_text='x')", 'x'),
    ("x : Object('os.system', command='touch {m}')", 'x'),
    ("x : Object('subprocess.run', args={touch})", 'x'),
    ("x : Object('subprocess.Popen', args={touch})", 'x'),
    ("x : Object('builtins.exec', source=\"open({m!r}, 'w')\")", 'x'),
    ("x : Object('builtins.eval', source='1')", 'x'),
    ("x : Object('importlib.import_module', name='%s')" % EVIL, 'x'),
    ("x : Object('%s.f')" % EVIL, 'x'),
    # A registered factory with a payload inside its arguments.
    ("optimizer_fn : Object('learner.optimizers.factory.get_optimizer_fn', "
     "name='sgd', learning_rate=Object('os.system', command='touch {m}'))",
     'optimizer_fn'),
    ("x : [1, {{'a': (Object('subprocess.run', args={touch}),)}}]", 'x'),
]


@pytest.mark.parametrize('line,key', _OBJECT_PAYLOADS)
def test_object_of_an_unregistered_callable_is_refused(marker, line, key):
  import learner.training.cluster.launcher  # pylint: disable=g-import-not-at-top,unused-import
  # Imported or not, a callable is not a text constructor unless registered.
  msg, _ = _Refused(line.format(touch=_Touch(marker), m=marker), key)
  assert 'refusing to call it' in msg or 'refused' in msg or (
      'not imported' in msg), msg


# ---- Function / Class / Enum / Params(cls=...) of arbitrary paths -----------

_NAME_PAYLOADS = [
    ("optimizer_fn : Function('os.system')", 'optimizer_fn'),
    ("optimizer_fn : Function('os.getpid')", 'optimizer_fn'),
    ("optimizer_fn : Function('os.fork')", 'optimizer_fn'),
    ("optimizer_fn : Function('subprocess.run')", 'optimizer_fn'),
    ("optimizer_fn : Function('subprocess.Popen')", 'optimizer_fn'),
    ("optimizer_fn : Function('builtins.exec')", 'optimizer_fn'),
    ("optimizer_fn : Function('builtins.eval')", 'optimizer_fn'),
    ("optimizer_fn : Function('builtins.breakpoint')", 'optimizer_fn'),
    ("optimizer_fn : Function('importlib.import_module')", 'optimizer_fn'),
    ("optimizer_fn : Function('learner.training.cluster.launcher.StartWorkers')",
     'optimizer_fn'),
    ("optimizer_fn : Function('params.registry.GetParams')", 'optimizer_fn'),
    ("optimizer_fn : Function('%s.f')" % EVIL, 'optimizer_fn'),
    ("x : Function('os.system')", 'x'),
    ("x : Class('subprocess.Popen')", 'x'),
    ("x : Class('threading.Thread')", 'x'),
    ("x : Class('builtins.exec')", 'x'),
    ("x : Class('os')", 'x'),
    ("x : Class('%s.X')" % EVIL, 'x'),
    ("x : Class('%s')" % EVIL, 'x'),
    ("x : Class('%s.sub.X')" % EVIL, 'x'),
    ("x : Enum('%s.E', 'A')" % EVIL, 'x'),
    ("x : Params(cls=Class('%s.X'))" % EVIL, 'x'),
    ("x : Params(cls=Function('os.system'))", 'x'),
    ("x : Params(cls=Class('subprocess.Popen'), args={touch})", 'x'),
    ("x : [Params(cls=Class('%s.X'), a=1)]" % EVIL, 'x'),
    ("sub.cls : Class('subprocess.Popen')", 'sub.cls'),
    ("sub.cls : Class('%s.X')" % EVIL, 'sub.cls'),
    ("sub.cls : Function('os.system')", 'sub.cls'),
    ("x : __import__('%s')" % EVIL, 'x'),
    ("x : open({m!r}, 'w')", 'x'),
    ("x : exec('import %s')" % EVIL, 'x'),
    ("x : (lambda: 0)()", 'x'),
    ("x : [c for c in ().__class__.__base__.__subclasses__()]", 'x'),
    ("x : f'{{__import__(\"%s\")}}'" % EVIL, 'x'),
]


@pytest.mark.parametrize('line,key', _NAME_PAYLOADS)
def test_names_of_arbitrary_callables_and_unimported_modules_are_refused(
    marker, line, key):
  _Refused(line.format(touch=_Touch(marker), m=marker), key)


def test_decode_value_alone_refuses_the_same_payloads(marker):
  for line, _ in _OBJECT_PAYLOADS + _NAME_PAYLOADS:
    value = line.format(touch=_Touch(marker), m=marker).split(':', 1)[1]
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', FutureWarning)
      with pytest.raises(ValueError):
        value_codec.DecodeValue(
            value, params_classes=hyperparams.PARAMS_CLASSES)


# ---- nothing is called before the key and its type are checked ------------

CALLS = []


@text_registry.TextFactory
def CountingFactory(**kwargs):
  CALLS.append(('factory', kwargs))
  return object()


class CountingLayer:
  """A class whose Params() records that it ran."""

  @classmethod
  def Params(cls):
    CALLS.append(('Params', cls.__name__))
    return InstantiableParams(cls)


_FACTORY = "Object('%s.CountingFactory', a=1)" % __name__
_COUNTING = "Class('%s.CountingLayer')" % __name__


@pytest.mark.parametrize('line,key', [
    ('nope : ' + _FACTORY, 'nope'),
    ('task.nope : ' + _FACTORY, 'task.nope'),
    ('rate : ' + _FACTORY, 'rate'),                 # a float key
    ('task.name : ' + _FACTORY, 'task.name'),       # a str key
    ('items : ' + _FACTORY, 'items'),               # a list key
    ('rate : Params(cls=%s)' % _COUNTING, 'rate'),
    ('rate : [%s]' % _FACTORY, 'rate'),
    ('nope.cls : ' + _COUNTING, 'nope.cls'),        # .cls of unknown keys
    ('task.nope.cls : ' + _COUNTING, 'task.nope.cls'),
    ('nope[0].cls : ' + _COUNTING, 'nope[0].cls'),
    ('rate.cls : ' + _COUNTING, 'rate.cls'),
    ('items[3].cls : ' + _COUNTING, 'items[3].cls'),  # not the next index
    ('items[99999999999].cls : ' + _COUNTING, 'items[99999999999].cls'),
    ('nope.cls : ' + _FACTORY, 'nope.cls'),
    ('sub.cls : ' + _FACTORY, 'sub.cls'),
])
def test_nothing_is_called_before_key_and_type_are_checked(line, key):
  del CALLS[:]
  _, p = _Refused(line, key)
  assert CALLS == []
  assert p.items == []  # A refused '.cls' line did not grow the list.


def test_registered_factory_and_params_class_are_called_once_when_valid():
  del CALLS[:]
  p = _Target().FromText('x : %s\nitems[0].cls : %s\nitems[1].cls : %s' %
                         (_FACTORY, _COUNTING, _COUNTING))
  assert CALLS == [('Params', 'CountingLayer'), ('Params', 'CountingLayer'),
                   ('factory', {'a': 1})]
  assert [i.cls for i in p.items] == [CountingLayer, CountingLayer]
  # 'sub' holds Params, so an inline Params(...) fits; its class's Params()
  # runs after that check.
  del CALLS[:]
  p = _Target().FromText('sub : Params(cls=%s)' % _COUNTING)
  assert CALLS == [('Params', 'CountingLayer')] and p.sub.cls is CountingLayer


# ---- what text may still name ----------------------------------------------


def test_registered_and_params_classes_and_factories_still_read():
  p = _Target().FromText(
      "optimizer_fn : Object('learner.optimizers.factory.get_optimizer_fn', "
      "name='adam', learning_rate=0.01)\n"
      "sub.cls : Class('schedules.cosine.CosineDecay')\n"
      "sub.total_steps : 7\n"
      "x : Enum('%s.Mode', 'B')" % __name__)
  assert p.optimizer_fn == factory.get_optimizer_fn('adam', learning_rate=0.01)
  assert p.sub.cls.__name__ == 'CosineDecay' and p.sub.total_steps == 7
  assert p.x is Mode.B


class Mode(enum.Enum):
  A = 1
  B = 2


def _Unregistered():
  return 0


def test_text_may_restate_the_function_already_at_a_key_but_not_another():
  p = Params()
  p.Define('fn', _Unregistered, '')
  q = p.Copy().FromText(p.ToText())
  assert q.fn is _Unregistered
  r = Params()
  r.Define('fn', None, '')
  with pytest.raises(ValueError, match="'fn'.*RegisterForText"):
    r.FromText(p.ToText())
  text_registry.RegisterForText(_Unregistered)
  try:
    assert r.FromText(p.ToText()).fn is _Unregistered
  finally:
    text_registry._TEXT_REGISTRY.pop(text_registry.ImportPath(_Unregistered))  # pylint: disable=protected-access


def test_register_for_text_refuses_a_lambda():
  with pytest.raises(ValueError, match='no import path'):
    text_registry.RegisterForText(lambda: 0)


def test_experiment_params_written_before_the_layout_move_still_load():
  # tests/data/pre_move: params.txt of runs made before issue 11's move; old
  # paths (learner.input_generator.DigitsInput, learner.optimizer_factory.*)
  # map to the new ones without importing anything.
  for key in ('digits.MlpLarsAccumulate', 'multi.TwoLearners'):
    path = os.path.join(_ROOT, 'tests', 'data', 'pre_move', key, 'params.txt')
    with open(path) as f:
      text = f.read()
    with pytest.warns(FutureWarning, match='has moved to'):
      p = registry.GetParams(key).FromText(text)
    assert p.task.train.max_steps == 12
    again = registry.GetParams(key).FromText(p.ToText())
    assert again.ToText() == p.ToText()


def test_reading_text_imports_no_module():
  # In a fresh process: read every form, good and hostile, naming modules
  # that exist but are not imported (the launcher, configs, the trainer).
  code = textwrap.dedent('''
      import sys, warnings
      warnings.simplefilter('ignore')
      from params import hyperparams
      import schedules
      before = set(sys.modules)
      lines = [
          "x : Class('learner.training.cluster.launcher.PickFreePorts')",
          "x : Object('learner.training.cluster.launcher.StartWorkers', command=[])",
          "x : Class('configs.inputs.DigitsInput')",
          "x : Class('learner.input_generator.DigitsInput')",
          "x : Function('learner.training.jobs.cli.main')",
          "x : Enum('learner.training.jobs.mode_keys.ModeKeys', 'TRAIN')",
          "x : Object('learner.optimizer_factory.get_optimizer_fn', name='sgd')",
          "x : Params(cls=Class('learner.learner.Learner'))",
          "x.cls : Class('learner.learner.Learner')",
          "x : DType('float32')",
      ]
      refused = 0
      for line in lines:
        p = hyperparams.Params()
        p.Define('x', None, '')
        try:
          p.FromText(line)
        except ValueError as e:
          refused += 1
      new = sorted(set(sys.modules) - before)
      print(refused, len(lines), new)
      ''')
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        text=True, timeout=300, env=_ENV, cwd=_ROOT)
  assert proc.returncode == 0, proc.stderr
  # DType works only because schedules imported TensorFlow; every named
  # module above is not imported, so each line is refused, and none of them
  # got imported.
  assert proc.stdout.strip() == '9 10 []', proc.stdout


# ---- bombs: depth, length, counts -------------------------------------------

_BOMBS = [
    ('-' * 1500 + '1', 'sign'),
    ('-' * 1_000_000 + '1', 'MAX_VALUE_CHARS'),
    ('[' * 10_000 + ']' * 10_000, 'MAX_DEPTH'),
    ('(' * 40 + '1' + ')' * 40, 'MAX_DEPTH'),
    ('Params(a=' * 40 + '1' + ')' * 40, 'MAX_DEPTH'),
    ("Object('x', a=" * 40 + '1' + ')' * 40, 'MAX_DEPTH'),
    ('[0] * 10**9', 'unsupported'),
    ("'a' * 10**9", 'unsupported'),
    ('[' + '0, ' * 20_000 + ']', 'MAX_ITEMS'),
    ('{' + ','.join('%d:0' % i for i in range(10_500)) + '}', 'MAX_ITEMS'),
    ("'" + 'a' * 200_000 + "'", 'MAX_VALUE_CHARS'),
    ('1' + '+1' * 40_000, 'no operators'),
    ('1' + '+1' * 60_000, 'MAX_VALUE_CHARS'),
    ('-(' * 30 + '1' + ')' * 30, 'sign'),
    ('a' + '.a' * 40_000, 'unsupported'),
    ('not ' * 20_000 + '1', 'keyword'),
    ('1 if 1 else ' * 5000 + '1', 'keyword'),
    ('9' * 5000, 'not a valid value'),
    ("'''" + 'a' * 10 + "'''", 'unsupported'),
    ('[' * 33 + ']' * 33, 'MAX_DEPTH'),
]


@pytest.mark.parametrize('value,words', _BOMBS,
                         ids=['bomb%d' % i for i in range(len(_BOMBS))])
def test_bombs_are_refused_quickly_with_one_line(value, words):
  start = time.perf_counter()
  msg, _ = _Refused('x : ' + value, 'x')
  assert time.perf_counter() - start < 5.0
  assert words in msg, msg[:300]


def test_list_built_of_params_classes_is_bounded_in_builds():
  p = _Target()
  value = '[' + ', '.join(['Params(cls=%s)' % _COUNTING] * 1001) + ']'
  del CALLS[:]
  with pytest.raises(ValueError, match="'x'.*MAX_BUILDS"):
    p.FromText('x : ' + value)
  assert len(CALLS) == 1000


def test_text_longer_than_the_bound_is_refused_before_reading():
  text = 'x : 1\n' * (value_codec.MAX_TEXT_CHARS // 6 + 1)
  with pytest.raises(ValueError, match='MAX_TEXT_CHARS'):
    _Target().FromText(text)


def test_a_long_good_value_reads_within_the_time_bound():
  # Just under every bound: MAX_ITEMS - 1 floats in a value below
  # MAX_VALUE_CHARS, nested MAX_DEPTH deep.
  n = value_codec.MAX_ITEMS - 1
  flat = '[' + ', '.join(['0.5'] * n) + ']'
  deep = '[' * value_codec.MAX_DEPTH + '1' + ']' * value_codec.MAX_DEPTH
  assert len(flat) < value_codec.MAX_VALUE_CHARS
  start = time.perf_counter()
  p = _Target().FromText('x : %s\nitems : %s' % (flat, deep))
  assert time.perf_counter() - start < 5.0
  assert p.x == [0.5] * n
  inner = p.items
  for _ in range(value_codec.MAX_DEPTH - 1):
    inner = inner[0]
  assert inner == [1]


def test_random_token_soup_only_ever_raises_value_error(marker):
  # A small fuzz campaign: random sequences of the reader's tokens and of
  # hostile fragments. Each is read as the value of 'x'; the only allowed
  # outcomes are a value or a one-line ValueError naming 'x'.
  pieces = ['(', ')', '[', ']', '{', '}', ',', ':', '=', '-', '+', '**', '1',
            '2.5', "'s'", 'True', 'None', 'Class', 'Function', 'Object',
            'Params', 'NestedMap', 'Enum', 'DType', 'float', "'nan'",
            "'%s.X'" % EVIL, "'os.system'", "'subprocess.run'", 'cls', 'a',
            "'schedules.cosine.CosineDecay'", '.', '*', 'lambda', '#']
  rng = random.Random(12)
  read = refused = 0
  for _ in range(3000):
    value = ' '.join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
    p = _Target()
    try:
      p.FromText('x : ' + value)
      read += 1
    except ValueError as e:
      assert "'x'" in str(e) and '\n' not in str(e), (value, str(e))
      refused += 1
  assert read + refused == 3000 and refused > 2000


# ---- the commands: schedules.plot and the trainer on hostile text ----------


def _HostilePlotTexts(m):
  touch = _Touch(m)
  return [
      ("cls : Class('%s.X')" % EVIL, 'cls'),
      ("task.train.learner.lr_schedule.cls : Object("
       "'learner.training.cluster.launcher.StartWorkers', command=%s, num_workers=1)"
       % touch, 'task.train.learner.lr_schedule.cls'),
      ("task.train.learner.lr_schedule.cls : Class('subprocess.Popen')",
       'task.train.learner.lr_schedule.cls'),
      ("lr_schedule.cls : Class('schedules.cosine.CosineDecay')\n"
       "lr_schedule.total_steps : Object('os.system', command='touch %s')" % m,
       'total_steps'),
      ("lr_schedule.cls : Class('schedules.cosine.CosineDecay')\n"
       "lr_schedule.nope.cls : Params(cls=Class('%s.X'))" % EVIL, 'nope.cls'),
      ("lr_schedule.cls : Class('schedules.cosine.CosineDecay')\n"
       "lr_schedule.total_steps : " + '-' * 1500 + '1', 'total_steps'),
  ]


def test_schedules_plot_on_a_hostile_params_txt(marker, tmp_path):
  from schedules import plot  # pylint: disable=g-import-not-at-top
  env = dict(_ENV, PYTHONPATH=os.pathsep.join([str(tmp_path), _ROOT]))
  for i, (text, key) in enumerate(_HostilePlotTexts(marker)):
    path = tmp_path / ('params%d.txt' % i)
    path.write_text(text + '\n')
    if i == 1:  # The issue's payload, through the command itself.
      proc = subprocess.run(
          [sys.executable, '-m', 'schedules.plot', '--params_text=%s' % path],
          capture_output=True, text=True, timeout=300, env=env, cwd=_ROOT)
      code, err = proc.returncode, proc.stderr
    else:
      out, errs = io.StringIO(), io.StringIO()
      code = plot.Main(['plot', '--params_text=%s' % path], out=out, err=errs)
      err = errs.getvalue()
    lines = [l for l in err.splitlines() if l.startswith('error:')]
    assert code == 1, (text, err)
    assert len(lines) == 1 and key in lines[0], err
    assert not os.path.exists(marker), text


def test_trainer_params_file_and_override_refuse_payloads(marker, tmp_path):
  from learner.training.jobs import cli as cli_lib  # pylint: disable=g-import-not-at-top
  payload = ("task.train.learner.optimizer_fn : Object("
             "'learner.training.cluster.launcher.StartWorkers', command=%s, "
             "num_workers=1)" % _Touch(marker))
  bad = tmp_path / 'bad.txt'
  bad.write_text('task.train.max_steps : 5\n' + payload + '\n')
  with pytest.raises(ValueError, match="--params_file.*'task.train.learner."
                     "optimizer_fn'.*refusing to call it"):
    cli_lib.LoadExperimentParams('regression.LinearRegression',
                                     params_file=str(bad))
  for line, key in [(payload, 'task.train.learner.optimizer_fn'),
                    ("task.nope.cls : Class('%s.X')" % EVIL, 'task.nope.cls'),
                    ("task.cls : Class('subprocess.Popen')", 'task.cls')]:
    with pytest.raises(ValueError) as e:
      cli_lib.LoadExperimentParams('regression.LinearRegression',
                                       params_override=line)
    assert str(e.value).startswith('--params_override: ')
    assert repr(key) in str(e.value) and '\n' not in str(e.value)


def test_trainer_command_refuses_the_issue_payload(marker, tmp_path):
  logdir = tmp_path / 'logdir'
  proc = subprocess.run(
      [sys.executable, '-m', 'learner.trainer',
       '--model=regression.LinearRegression', '--logdir=%s' % logdir,
       "--params_override=task.train.learner.optimizer_fn : Object("
       "'learner.launcher.StartWorkers', command=%s, num_workers=1)" %
       _Touch(marker)],
      capture_output=True, text=True, timeout=300, env=_ENV, cwd=_ROOT)
  assert proc.returncode != 0
  assert 'refusing to call it' in proc.stderr, proc.stderr
  assert not logdir.exists()


def test_an_index_into_params_is_refused_in_one_line():
  # The message used to hold repr(Params), i.e. its whole multi-line text.
  msg, _ = _Refused("task[3].cls : Class('schedules.cosine.CosineDecay')",
                    'task[3].cls')
  assert '[3] indexes a list or tuple' in msg


# ---- reading a params file: bounded, text only -------------------------------


def test_read_text_file_refuses_a_file_longer_than_the_bound(tmp_path):
  path = tmp_path / 'huge.txt'
  path.write_text('a : 1\n' * (value_codec.MAX_TEXT_CHARS // 6 + 10))
  with pytest.raises(ValueError) as e:
    params_text.ReadTextFile(str(path), '--params_file')
  message = str(e.value)
  assert '--params_file' in message and 'huge.txt' in message
  assert str(value_codec.MAX_TEXT_CHARS) in message and '\n' not in message


def test_read_text_file_refuses_binary_and_missing_files(tmp_path):
  binary = tmp_path / 'model.bin'
  binary.write_bytes(b'\x89PNG\r\n\x1a\n\xff\xfe\x00')
  with pytest.raises(ValueError, match=r"--params_file '.*model.bin' is not "
                     r'UTF-8 params text \(byte 0\)'):
    params_text.ReadTextFile(str(binary), '--params_file')
  with pytest.raises(ValueError, match=r"--params_text '.*nothere' cannot be "
                     'read'):
    params_text.ReadTextFile(str(tmp_path / 'nothere'), '--params_text')


def test_read_text_file_returns_a_file_at_the_bound_unchanged(tmp_path):
  path = tmp_path / 'params.txt'
  text = 'task.train.max_steps : 7\n# a comment\n'
  path.write_text(text)
  assert params_text.ReadTextFile(str(path), '--params_file') == text


def test_schedule_plot_refuses_a_binary_params_file_in_one_line(tmp_path):
  from schedules import plot
  binary = tmp_path / 'weights.bin'
  binary.write_bytes(bytes(range(128, 256)))
  out, err = io.StringIO(), io.StringIO()
  # A bad value exits 1 in schedules.plot (2 is for a bad flag).
  assert plot.Main(['plot', '--params_text=%s' % binary], out=out,
                   err=err) == 1
  lines = err.getvalue().strip().splitlines()
  assert len(lines) == 1 and 'is not UTF-8 params text' in lines[0]


def test_moved_path_and_registered_at_are_the_registry_s_public_lookups():
  with pytest.warns(FutureWarning, match="'learner.input_generator.DigitsInput'"
                    " has moved to 'configs.inputs.DigitsInput'"):
    assert text_registry.MovedPath('learner.input_generator.DigitsInput') == (
        'configs.inputs.DigitsInput')
  assert text_registry.MovedPath('configs.inputs.DigitsInput') == (
      'configs.inputs.DigitsInput')
  with pytest.raises(ValueError, match='a non-empty str of at most 500'):
    text_registry.MovedPath('')
  path = 'learner.optimizers.factory.get_optimizer_fn'
  assert text_registry.RegisteredAt(path) == (factory.get_optimizer_fn, True)
  assert text_registry.RegisteredAt('os.system') is None
