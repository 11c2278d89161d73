"""params.registry: experiments registered under configs/ (issue 2).

Each test gets its own throw-away configs package (written to tmp_path and
put in place of 'configs' by monkeypatching the registry's package name) and
an empty registry, so the project's real configs are never imported here.
"""

import importlib
import itertools
import sys
import textwrap

import pytest

from params import Params
from params import registry

_COUNTER = itertools.count()

_DIGITS = '''
"""Digits experiments (test-only)."""
from params import Params
from params import registry


def _Input(batch_size):
  p = Params()
  p.Define('batch_size', batch_size, 'Examples per batch.')
  p.Define('split', 'train', 'Which split.')
  return p


@registry.Register
class MlpMomentum:
  """An MLP trained with momentum.

  More words that Describe() leaves out.
  """

  def Task(self):
    p = Params()
    p.Define('learning_rate', 0.1, 'Base rate.')
    p.Define('hidden_dims', [32], 'Widths.')
    p.Define('x', 0, 'A number.')
    return p

  def Train(self):
    return _Input(32)

  def Eval(self):
    return _Input(100).Set(split='test')


@registry.Register
class MlpAdam(MlpMomentum):
  """The same MLP with Adam."""

  def Task(self):
    return super().Task().Set(learning_rate=0.001)
'''

_MNIST = '''
from params import Params
from params import registry


@registry.Register
class Cnn:

  def Task(self):
    p = Params()
    p.Define('filters', 8, '')
    return p

  def Train(self):
    return Params()

  def Eval(self):
    return Params()
'''


def _Write(root, rel, text):
  path = root.joinpath(*rel.split('/'))
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(textwrap.dedent(text))


@pytest.fixture
def configs(tmp_path, monkeypatch):
  """A fresh configs package name with digits.py and vision/mnist.py."""
  name = 'test_only_configs_%d' % next(_COUNTER)
  _Write(tmp_path, name + '/__init__.py', '')
  _Write(tmp_path, name + '/digits.py', _DIGITS)
  _Write(tmp_path, name + '/vision/__init__.py', '')
  _Write(tmp_path, name + '/vision/mnist.py', _MNIST)
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.setattr(registry, '_CONFIGS_PACKAGE', name)
  monkeypatch.setattr(registry, '_REGISTRY', {})
  yield name
  for mod in [m for m in sys.modules if m.split('.')[0] == name]:
    del sys.modules[mod]


def test_get_params_builds_task_and_inputs(configs):
  del configs
  p = registry.GetParams('digits.MlpMomentum')
  assert isinstance(p, Params)
  assert sorted(k for k, _ in p.IterParams()) == ['eval_input', 'task',
                                                  'train_input']
  assert p.task.learning_rate == 0.1
  assert p.train_input.batch_size == 32
  assert (p.eval_input.batch_size, p.eval_input.split) == (100, 'test')
  assert registry.GetParams('digits.MlpAdam').task.learning_rate == 0.001


def test_key_is_module_path_under_configs_plus_class_name(configs):
  cls = registry.GetClass('vision.mnist.Cnn')
  assert cls.__module__ == configs + '.vision.mnist'
  assert registry.GetParams('vision.mnist.Cnn').task.filters == 8


def test_get_params_loads_the_module_by_name_on_demand(configs):
  assert configs + '.digits' not in sys.modules
  registry.GetParams('digits.MlpAdam')
  assert configs + '.digits' in sys.modules
  assert configs + '.vision.mnist' not in sys.modules


def test_listing_all_keys_imports_every_config(configs):
  del configs
  assert registry.GetAllRegisteredKeys() == [
      'digits.MlpAdam', 'digits.MlpMomentum', 'vision.mnist.Cnn']


def test_overrides_are_rooted_at_task_train_input_eval_input(configs):
  del configs
  p = registry.GetParams(
      'digits.MlpMomentum',
      overrides='task.x : 1; train_input.batch_size : 64\n'
                '# a comment\n'
                "task.hidden_dims : [8, 4]\neval_input.split : 'valid'")
  assert p.task.x == 1 and p.train_input.batch_size == 64
  assert p.task.hidden_dims == [8, 4] and p.eval_input.split == 'valid'
  assert p.task.learning_rate == 0.1


def test_each_get_params_is_a_fresh_mutable_copy(configs):
  del configs
  a = registry.GetParams('digits.MlpMomentum', overrides='task.x : 5')
  b = registry.GetParams('digits.MlpMomentum')
  assert (a.task.x, b.task.x) == (5, 0)
  b.task.x = 2  # mutable


@pytest.mark.parametrize('override,key,words', [
    ('task.learning_rat : 0.5', 'task.learning_rat',
     "Did you mean 'learning_rate'"),
    ('train_input.batch_sise : 64', 'train_input.batch_sise',
     "Did you mean 'batch_size'"),
    ('trian_input.batch_size : 64', 'trian_input.batch_size',
     "Did you mean 'train_input'"),
    ('train_input.batch_size : 6.4', 'train_input.batch_size',
     'expected an int'),
    ('task.x : ', 'task.x', 'cannot read'),
    ('task.x = 1', None, 'key : value'),
])
def test_bad_override_names_the_key_and_close_names(configs, override, key,
                                                    words):
  del configs
  with pytest.raises(ValueError) as e:
    registry.GetParams('digits.MlpMomentum', overrides='task.x : 1\n' +
                       override)
  msg = str(e.value)
  assert 'Line 2' in msg and words in msg
  if key:
    assert repr(key) in msg


def test_unknown_key_names_it_and_close_matches(configs):
  del configs
  with pytest.raises(LookupError) as e:
    registry.GetParams('digits.MlpMomentm')
  msg = str(e.value)
  assert "'digits.MlpMomentm' is not registered" in msg
  assert "Did you mean 'digits.MlpMomentum'" in msg
  assert "'vision.mnist.Cnn'" in msg  # the full listing


def test_unknown_module_is_a_lookup_error_too(configs):
  del configs
  with pytest.raises(LookupError, match="'nomodule.Exp' is not registered"):
    registry.GetClass('nomodule.Exp')


@pytest.mark.parametrize(
    'key', ['..', '.x', 'a..b', '.', 'digits.', 'a b.C', '1x.Y', ''])
def test_a_key_that_is_not_a_dotted_name_says_the_form_to_give(configs, key):
  # Not importable at all: a LookupError (not importlib's TypeError) that
  # gives the form of a key.
  del configs
  with pytest.raises(LookupError) as e:
    registry.GetClass(key)
  msg = str(e.value)
  assert 'Experiment %r is not a dotted name of Python identifiers' % key in msg
  assert '--model=<module>.<Class>, e.g. --model=digits.MlpMomentum' in msg
  assert 'configs//' not in msg and "'vision.mnist.Cnn'" in msg


def test_duplicate_key_is_an_error_naming_the_key(configs):
  registry.GetClass('digits.MlpMomentum')

  class MlpMomentum:  # a second class that maps to the same key

    def Task(self):
      return Params()

    Train = Eval = Task

  MlpMomentum.__module__ = configs + '.digits'
  with pytest.raises(ValueError) as e:
    registry.Register(MlpMomentum)
  msg = str(e.value)
  assert "'digits.MlpMomentum' is already registered" in msg
  assert 'digits.py' in msg and 'test_experiment_registry.py' in msg
  assert registry.GetClass('digits.MlpMomentum') is not MlpMomentum


def test_reloading_a_config_module_is_not_a_duplicate(configs):
  registry.GetClass('digits.MlpMomentum')
  module = importlib.reload(sys.modules[configs + '.digits'])
  assert registry.GetClass('digits.MlpMomentum') is module.MlpMomentum


def test_register_needs_task_train_eval(configs):
  del configs

  class NoEval:

    def Task(self):
      return Params()

    def Train(self):
      return Params()

  with pytest.raises(ValueError, match=r'NoEval must define Eval\(\)'):
    registry.Register(NoEval)


def test_methods_must_return_params(configs):
  del configs

  @registry.Register
  class Broken:

    def Task(self):
      return {'lr': 0.1}

    def Train(self):
      return Params()

    Eval = Train

  key = 'test_experiment_registry.Broken'
  assert registry.GetClass(key) is Broken
  with pytest.raises(TypeError) as e:
    registry.GetParams(key)
  assert repr(key) in str(e.value) and 'Task() must return Params' in str(
      e.value)


def test_a_broken_config_module_raises_its_own_error(configs, tmp_path):
  # Issue 21: the error names the module's file and line, its own error is
  # the cause (it was the bare ModuleNotFoundError before).
  _Write(tmp_path, configs + '/bad.py', 'import no_such_dependency_qq\n')
  with pytest.raises(registry.ExperimentModuleError,
                     match='no_such_dependency_qq') as e:
    registry.GetClass('bad.Exp')
  assert isinstance(e.value.__cause__, ModuleNotFoundError)
  with pytest.raises(ModuleNotFoundError, match='no_such_dependency_qq'):
    registry.GetAllRegisteredKeys()


def test_describe_is_the_first_docstring_line(configs):
  del configs
  assert registry.Describe('digits.MlpMomentum') == 'An MLP trained with momentum.'
  assert registry.Describe('vision.mnist.Cnn') == ''


def test_no_configs_package_lists_nothing(monkeypatch):
  monkeypatch.setattr(registry, '_CONFIGS_PACKAGE', 'no_such_configs_pkg_qq')
  monkeypatch.setattr(registry, '_REGISTRY', {})
  assert registry.GetAllRegisteredKeys() == []


# ---- errors in the experiment's module and a module as the key (issue 21) --


@pytest.mark.parametrize('source, shown, error', [
    ('X = 1\nimport no_such_dependency_qq\n', 'import no_such_dependency_qq',
     "ModuleNotFoundError: No module named 'no_such_dependency_qq'"),
    ('X = 1\ndef f(:\n  pass\n', 'def f(:',
     'SyntaxError: invalid syntax'),
    ('X = 1\nY = X / 0\n', 'Y = X / 0',
     'ZeroDivisionError: division by zero'),
])
def test_an_error_in_the_module_is_its_file_line_and_message(
    configs, tmp_path, source, shown, error):
  _Write(tmp_path, configs + '/broken.py', source)
  with pytest.raises(registry.ExperimentModuleError) as e:
    registry.GetClass('broken.Exp')
  path = tmp_path / configs / 'broken.py'
  assert str(e.value).splitlines() == [
      "Importing module '%s.broken' for experiment 'broken.Exp' failed:" %
      configs,
      '  File "%s", line 2' % path,
      '    ' + shown,
      error]


def test_a_module_as_the_key_lists_its_own_experiments(configs):
  del configs
  with pytest.raises(LookupError) as e:
    registry.GetClass('digits')
  assert str(e.value) == (
      "'digits' is a module, not an experiment: give one of its experiments, "
      "'digits.MlpAdam' or 'digits.MlpMomentum' (e.g. "
      "--model=digits.MlpAdam).")
  with pytest.raises(LookupError) as e:
    registry.GetClass('vision.mnist')
  assert "give one of its experiments, 'vision.mnist.Cnn' (" in str(e.value)
  assert 'digits' not in str(e.value)  # Nothing unrelated.


def test_a_module_without_experiments_says_how_to_register(configs):
  del configs
  with pytest.raises(LookupError) as e:
    registry.GetClass('vision')
  assert str(e.value) == (
      "'vision' is a module, not an experiment, and registers none: decorate "
      "an experiment class in it with @params.registry.Register and give "
      "--model=vision.<ClassName>.")
