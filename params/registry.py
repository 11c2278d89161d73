"""The experiment registry: named experiment params, loaded from `configs/`.

An experiment is a class with methods `Task()`, `Train()` (the train input
params) and `Eval()` (the eval input params), registered with `@Register`.
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
    cls: a class whose instances have Task(), Train() and Eval() methods
      returning Params (task, train input, eval input).

  Returns:
    cls, unchanged.

  Raises:
    ValueError: if the key is already registered by another class (a
      re-executed module, e.g. importlib.reload, is not a duplicate), or the
      class lacks Task/Train/Eval.
  """
  for method in ('Task', 'Train', 'Eval'):
    if not callable(getattr(cls, method, None)):
      raise ValueError('Experiment %s must define %s().' %
                       (cls.__name__, method))
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


def _ImportFor(key):
  """Imports the module a key names: `configs.<module>`, else `<module>`.

  'digits.MlpMomentum' imports configs.digits; 'mypkg.exp.MyModel' imports
  configs.mypkg.exp if it exists, else the user's module mypkg.exp.
  """
  if '.' not in key:
    _TryImport('%s.%s' % (_CONFIGS_PACKAGE, key))
    return
  module = key.rsplit('.', 1)[0]
  if not _TryImport('%s.%s' % (_CONFIGS_PACKAGE, module)):
    _TryImport(module)


def AddWorkingDirectoryToPath():
  """Puts the current directory first on sys.path, as `python -m` does.

  The console scripts (`tf-learner-train`, `tf-learner-launch`,
  `tf-learner-plot-schedule`) start with their own bin/ directory on the
  path, not the current one; they call this so that `--model=pkg.mod.Class`
  finds the user's `pkg/` in the current directory exactly as
  `python -m learner.trainer` does. Calling it twice adds nothing.

  Returns:
    The directory (str) now first on sys.path.
  """
  cwd = os.getcwd()
  if not any(os.path.abspath(p or os.curdir) == cwd for p in sys.path):
    sys.path.insert(0, cwd)
  return cwd


def GetAllRegisteredKeys():
  """Returns the sorted keys of every experiment under `configs/`."""
  _ImportAllConfigs()
  return sorted(_REGISTRY)


def GetClass(key):
  """Returns the experiment class registered under `key`.

  Raises:
    LookupError: naming the key and the closest registered keys.
  """
  if key not in _REGISTRY:
    _ImportFor(key)
  if key not in _REGISTRY:
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


def GetParams(key, overrides=None):
  """Returns the experiment's params: a Params with task/train_input/eval_input.

  Args:
    key: a registry key, e.g. 'digits.MlpMomentum'.
    overrides: optional text ('a.b : 1; c : 2' or one per line) applied with
      `Params.FromText`, rooted at the returned params (so keys start with
      'task.', 'train_input.' or 'eval_input.').

  Returns:
    Params with `task`, `train_input` and `eval_input` (mutable).

  Raises:
    LookupError: unknown key (with close matches).
    TypeError: if the experiment's Task/Train/Eval does not return Params.
    ValueError: a bad override (naming the line, the key and close names).
  """
  cls = GetClass(key)
  experiment = cls()
  parts = {}
  for name, method in (('task', 'Task'), ('train_input', 'Train'),
                       ('eval_input', 'Eval')):
    value = getattr(experiment, method)()
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
