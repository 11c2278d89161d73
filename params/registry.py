"""The experiment registry: named experiment params, loaded from `configs/`.

An experiment is a class with methods `Task()`, `Train()` (the train input
params) and `Eval()` (the eval input params) or Lingvo's `Dev()` and
`Test()` (`--evaler_dataset=dev|test` picks one), registered with
`@Register`.
Its key is its module path under `configs/` plus the class name, e.g. the
class `MlpMomentum` in `configs/digits.py` is `digits.MlpMomentum`.

An experiment may also live in the user's own package: `mypkg.exp.MyModel`
is looked up as `configs/mypkg/exp.py` first and then as the module
`mypkg.exp` (importable from the working directory or the environment),
whose `@Register`-ed class `MyModel` keeps its full path as its key.

This is the one place where `params` refers upward: `GetParams` imports
`configs.<module>` (or the module a full key names) by name when asked for a
key that is not yet registered. Only a key given by the user (the trainer's
--model) is imported this way; params text never imports anything.
"""

import difflib
import importlib
import os
import pkgutil
import sys
import traceback

from params import hyperparams

_CONFIGS_PACKAGE = 'configs'

# The registry itself: key -> experiment class. Explicit and tested.
_REGISTRY = {}


def _KeyOf(cls):
  module = cls.__module__
  prefix = _CONFIGS_PACKAGE + '.'
  if module.startswith(prefix):
    module = module[len(prefix):]
  return '%s.%s' % (module, cls.__name__)


def Register(cls):
  """Class decorator: registers an experiment under '<module>.<ClassName>'.

  <module> is the module path with the leading 'configs.' removed, so
  `configs/vision/mnist.py`'s class `Cnn` is 'vision.mnist.Cnn'; a class
  outside configs keeps its full module path.

  Args:
    cls: a class whose instances have Task() and Train() and, for
      evaluation, Eval() and/or Lingvo's Dev() and Test(), each returning
      Params (task, train input, an eval input).

  Returns:
    cls, unchanged.

  Raises:
    ValueError: if the key is already registered by another class (a
      re-executed module, e.g. importlib.reload, is not a duplicate), or the
      class lacks Task, Train or every one of Eval, Dev and Test.
  """
  for method in ('Task', 'Train'):
    if not callable(getattr(cls, method, None)):
      raise ValueError('Experiment %s must define %s().' %
                       (cls.__name__, method))
  if not EvalDatasets(cls):
    raise ValueError('Experiment %s must define Eval(), or Dev() and/or '
                     'Test() (Lingvo\'s form).' % cls.__name__)
  key = _KeyOf(cls)
  existing = _REGISTRY.get(key)
  if existing is not None and existing is not cls and not _IsReload(
      existing, cls):
    raise ValueError(
        'Experiment key %r is already registered (by %s.%s, defined at %s); '
        'the second definition is at %s. Rename one of the classes.' %
        (key, existing.__module__, existing.__qualname__,
         _Where(existing), _Where(cls)))
  _REGISTRY[key] = cls
  return cls


def _Where(cls):
  """'file:line' of the class's first own method, or its module."""
  lines = [(f.__code__.co_filename, f.__code__.co_firstlineno)
           for f in vars(cls).values() if hasattr(f, '__code__')]
  if not lines:
    return cls.__module__
  return '%s:%d' % min(lines, key=lambda x: x[1])


def _IsReload(existing, cls):
  """True if `cls` is `existing` defined again (its module re-executed).

  A copy-pasted class with the same name in the same module is not a reload:
  its methods start on other lines.
  """
  return (existing.__module__ == cls.__module__ and
          existing.__qualname__ == cls.__qualname__ and
          _Where(existing) == _Where(cls))


def _ImportAllConfigs():
  """Imports every module under the configs package (errors propagate)."""
  try:
    package = importlib.import_module(_CONFIGS_PACKAGE)
  except ModuleNotFoundError as e:
    if e.name == _CONFIGS_PACKAGE:
      return  # No configs package installed: nothing to list.
    raise
  for info in pkgutil.walk_packages(package.__path__, _CONFIGS_PACKAGE + '.'):
    importlib.import_module(info.name)


def _TryImport(module):
  """Imports `module`; False if it (or a parent package) does not exist.

  A module that exists but fails to import raises its error: a broken config
  must not look like an unregistered one.
  """
  try:
    importlib.import_module(module)
  except ModuleNotFoundError as e:
    missing = e.name or ''
    if not (module == missing or module.startswith(missing + '.')):
      raise
    return False
  return True


class ExperimentModuleError(ImportError):
  """The module of an experiment exists but fails to import.

  Its message is a few lines: which module and key, then the user's file,
  line and source line (the deepest frame outside importlib and this
  project's packages), then the original error's type and message. The
  original error is its __cause__.
  """


# Frames in these packages are ours, not the user's (see _UserFrame).
_OWN_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                 name) + os.sep
    for name in ('params', 'layers', 'schedules', 'learner'))


def _UserFrame(error):
  """(file, line, source text) where `error` arose in the user's code.

  A SyntaxError names its own place; otherwise the deepest traceback frame
  outside importlib (`<frozen ...>`) and our packages, else the deepest one.
  """
  if isinstance(error, SyntaxError) and error.filename:
    return error.filename, error.lineno, (error.text or '').strip()
  frames = [f for f in traceback.extract_tb(error.__traceback__)
            if not f.filename.startswith('<')]
  mine = [f for f in frames if not f.filename.startswith(_OWN_DIRS)]
  frame = (mine or frames or [None])[-1]
  if frame is None:
    return None, None, ''
  return frame.filename, frame.lineno, (frame.line or '').strip()


def _ModuleErrorMessage(module, key, error):
  """The few lines of an ExperimentModuleError (see there)."""
  filename, line, text = _UserFrame(error)
  msg = error.msg if isinstance(error, SyntaxError) else str(error)
  lines = ['Importing module %r for experiment %r failed:' % (module, key)]
  if filename:
    lines.append('  File "%s", line %s' % (filename, line))
    if text:
      lines.append('    %s' % text)
  lines.append('%s: %s' % (type(error).__name__, msg))
  return '\n'.join(lines)


def _Import(module, key):
  """_TryImport(module), an error inside it as ExperimentModuleError.

  A name that is not dotted identifiers ('..', '.x') names no module: False.
  """
  if not all(part.isidentifier() for part in module.split('.')):
    return False
  try:
    return _TryImport(module)
  except Exception as e:  # pylint: disable=broad-except
    raise ExperimentModuleError(_ModuleErrorMessage(module, key, e)) from e


def _ImportFor(key):
  """Imports the module a key names: `configs.<module>`, else `<module>`.

  'digits.MlpMomentum' imports configs.digits; 'mypkg.exp.MyModel' imports
  configs.mypkg.exp if it exists, else the user's module mypkg.exp.
  """
  if '.' not in key:
    _Import('%s.%s' % (_CONFIGS_PACKAGE, key), key)
    return
  module = key.rsplit('.', 1)[0]
  if not _Import('%s.%s' % (_CONFIGS_PACKAGE, module), key):
    _Import(module, key)


def AddWorkingDirectoryToPath():
  """Puts the current directory first on sys.path, as `python -m` does.

  The console scripts (`tf-learner-train`, `tf-learner-plot-schedule`)
  start with their own bin/ directory on the path, not the current one;
  they call this so that `--model=pkg.mod.Class` finds the user's `pkg/` in
  the current directory exactly as `python -m learner.trainer` does.
  (`tf-learner-launch` imports no experiment: its workers run `python -m`
  in its directory.) Calling it twice adds nothing.

  Returns:
    The directory (str) now first on sys.path.
  """
  cwd = os.getcwd()
  if not any(os.path.abspath(p or os.curdir) == cwd for p in sys.path):
    sys.path.insert(0, cwd)
  return cwd


def _RaiseIfModule(key):
  """Raises LookupError listing the experiments of `key` if it is a module.

  `--model=mypkg.exp` names the module, not a class in it: the user wants
  one of that module's experiments, not the closest unrelated keys.
  """
  configs_module = '%s.%s' % (_CONFIGS_PACKAGE, key)
  if not (_Import(configs_module, key) or _Import(key, key)):
    return
  own = sorted(k for k in _REGISTRY
               if k.startswith(key + '.') and '.' not in k[len(key) + 1:])
  if own:
    raise LookupError(
        '%r is a module, not an experiment: give one of its experiments, '
        '%s (e.g. --model=%s).' % (key, ' or '.join(repr(k) for k in own),
                                   own[0]))
  raise LookupError(
      '%r is a module, not an experiment, and registers none: decorate an '
      'experiment class in it with @params.registry.Register and give '
      '--model=%s.<ClassName>.' % (key, key))


def GetAllRegisteredKeys():
  """Returns the sorted keys of every experiment under `configs/`."""
  _ImportAllConfigs()
  return sorted(_REGISTRY)


def GetClass(key):
  """Returns the experiment class registered under `key`.

  Raises:
    LookupError: naming the key and the closest registered keys; for a key
      that is not a dotted name of identifiers (e.g. '..'), naming the
      form to give; for a key that names a module ('mypkg.exp'), naming
      that module's experiments.
    ExperimentModuleError: the experiment's module exists but fails to
      import (its message names the user's file and line).
  """
  if not all(part.isidentifier() for part in str(key).split('.')):
    raise LookupError(
        'Experiment %r is not a dotted name of Python identifiers: give '
        '--model=<module>.<Class>, e.g. --model=digits.MlpMomentum. '
        'Registered: %s.' % (key, GetAllRegisteredKeys()))
  if key not in _REGISTRY:
    _ImportFor(key)
  if key not in _REGISTRY:
    _RaiseIfModule(key)
    keys = GetAllRegisteredKeys()
    if key in _REGISTRY:
      return _REGISTRY[key]
    close = difflib.get_close_matches(key, keys, n=3, cutoff=0.4)
    msg = 'Experiment %r is not registered.' % key
    module = key.rsplit('.', 1)[0] if '.' in key else ''
    if module and module not in sys.modules and (
        '%s.%s' % (_CONFIGS_PACKAGE, module)) not in sys.modules:
      msg += (' No module %r could be imported (neither configs/%s.py nor '
              '%s on the import path): run from the directory that contains '
              '%s/, or add it to PYTHONPATH.' %
              (module, module.replace('.', '/'), module,
               module.split('.')[0]))
    if module and module in sys.modules:
      msg += (' Module %r was imported but registers no %r: decorate the '
              'class with @params.registry.Register.' %
              (module, key.rsplit('.', 1)[1]))
    if close:
      msg += ' Did you mean %s?' % ' or '.join(repr(c) for c in close)
    msg += ' Registered: %s.' % keys
    raise LookupError(msg)
  return _REGISTRY[key]


# Evaluation datasets an experiment may define: {name: method}.
EVAL_DATASETS = {'eval': 'Eval', 'dev': 'Dev', 'test': 'Test'}


def EvalDatasets(cls):
  """The names ('eval', 'dev', 'test') of the eval datasets `cls` defines."""
  return [n for n, m in EVAL_DATASETS.items()
          if callable(getattr(cls, m, None))]


def DefaultEvalDataset(key):
  """The eval dataset `GetParams(key)` takes when none is named (a str).

  The first of 'eval', 'dev', 'test' that the experiment defines (Eval(),
  Dev(), Test()).

  Raises:
    LookupError: unknown key (with close matches).
  """
  return EvalDatasets(GetClass(key))[0]


def GetParams(key, overrides=None, eval_dataset=None):
  """Returns the experiment's params: a Params with task/train_input/eval_input.

  Args:
    key: a registry key, e.g. 'digits.MlpMomentum'.
    overrides: optional text ('a.b : 1; c : 2' or one per line) applied with
      `Params.FromText`, rooted at the returned params (so keys start with
      'task.', 'train_input.' or 'eval_input.').

    eval_dataset: which eval input becomes `eval_input`: 'eval', 'dev' or
      'test' (Eval(), Dev(), Test()); None takes the first the class
      defines in that order.

  Returns:
    Params with `task`, `train_input` and `eval_input` (mutable).

  Raises:
    LookupError: unknown key (with close matches).
    TypeError: if the experiment's Task/Train/eval method does not return
      Params.
    ValueError: a bad override (naming the line, the key and close names),
      or an eval_dataset the class does not define (naming those it does).
  """
  cls = GetClass(key)
  experiment = cls()
  have = EvalDatasets(cls)
  if eval_dataset is None:
    eval_dataset = have[0]
  if eval_dataset not in have:
    raise ValueError(
        '--evaler_dataset=%s: experiment %r defines no %s(); its eval '
        'datasets: %s.' % (eval_dataset, key,
                           EVAL_DATASETS.get(eval_dataset, eval_dataset),
                           ', '.join(have)))
  parts = {}
  for name, method in (('task', 'Task'), ('train_input', 'Train'),
                       ('eval_input', EVAL_DATASETS[eval_dataset])):
    try:
      value = getattr(experiment, method)()
    except AttributeError as e:  # E.g. a param set on the wrong object.
      raise ValueError('Experiment %r: %s(): %s' % (key, method, e)) from None
    if not isinstance(value, hyperparams.Params):
      raise TypeError('Experiment %r: %s() must return Params, got %s.' %
                      (key, method, type(value).__name__))
    parts[name] = value
  p = hyperparams.Params()
  p.Define('task', parts['task'], 'The task params.')
  p.Define('train_input', parts['train_input'], 'The training input params.')
  p.Define('eval_input', parts['eval_input'], 'The evaluation input params.')
  if overrides:
    p.FromText(overrides)
  return p


def Describe(key):
  """Returns the first line of the experiment class's docstring."""
  doc = (GetClass(key).__doc__ or '').strip()
  return doc.split('\n', 1)[0] if doc else ''
