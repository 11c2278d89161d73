"""What params text may name, and how a name is found.

Params text names classes and functions by import path ('mod.Name'). Only
what code registered here may be called while reading (`TextFactory`,
subclasses of `TextSerializable`) or named as a function (`RegisterForText`);
classes with a `Params()` classmethod and Enum classes need no registration.
`LookupImported` finds a path among modules already imported (text never
imports), `ResolveImportPath` imports (for code only). Paths that moved are
mapped by params/moved_paths.py first. Nothing here knows `Params`.
"""

import difflib
import importlib
import sys
import types
import warnings

from params import moved_paths


class TextSerializable:
  """Protocol for objects that have a text form inside Params.

  An object whose class defines `TextSpec()` returning
  `(import_path, kwargs)` is written as `Object('import.path', k=v, ...)`.
  `FromText` reads it back by calling the constructor registered for text
  under `import_path` with the keyword arguments (which must themselves have
  a text form). This lets packages above `params` (e.g.
  `learner.optimizers.factory.get_optimizer_fn`) round-trip their objects
  without `params` importing them.

  Subclassing this class registers the subclass itself as a text
  constructor (its `__init__` may be called from text with keyword
  arguments); pass `text_constructor=False` in the class statement to opt
  out. A factory function named by `TextSpec` is registered with
  `TextFactory`. An object with a `TextSpec` method but no registered
  constructor is still written, but `FromText` refuses to read it.
  """

  def __init_subclass__(cls, text_constructor=True, **kwargs):
    super().__init_subclass__(**kwargs)
    if text_constructor:
      _Register(cls, constructor=True)

  def TextSpec(self):
    """Returns (import_path: str, kwargs: dict) that rebuild this object."""
    raise NotImplementedError


# ---- the text registry --------------------------------------------------------

# import path -> (object, may Object(...) call it). Filled only by code, when
# the module that defines the object is imported: text never adds to it.
_TEXT_REGISTRY = {}


def _Register(obj, constructor):
  path = ImportPath(obj)
  if path is None:
    if constructor:
      return  # A local class (e.g. in a test function): not readable by path.
    raise ValueError('RegisterForText(%r): it has no import path (a lambda or '
                     'a function defined inside a function).' % (obj,))
  old = _TEXT_REGISTRY.get(path)
  _TEXT_REGISTRY[path] = (obj, constructor or bool(old and old[0] is obj and
                                                   old[1]))


def RegisterForText(obj):
  """Lets params text name `obj` as `Function('path')` or `Class('path')`.

  Text may then *name* the class or function (it is looked up, never called
  while reading). Use it for functions that are values of params (e.g. an
  activation); classes with a `Params()` classmethod and Enum classes need no
  registration. Usable as a decorator; returns `obj` unchanged.

  Raises:
    ValueError: if `obj` has no import path (a lambda, a nested function).
  """
  _Register(obj, constructor=False)
  return obj


def TextFactory(fn):
  """Decorator: registers `fn` as a constructor `Object('path', ...)` may call.

  `FromText` calls `fn(**kwargs)` with keyword arguments read from text
  (literals, registered objects, params), so register only functions that
  build a value from their arguments and do nothing else (no files, no
  processes, bounded work). Returns `fn` unchanged (also marked with
  `fn.__text_factory__ = True`).
  """
  fn.__text_factory__ = True
  _Register(fn, constructor=True)
  return fn


def RegisteredForText():
  """Returns {import path: (object, is_constructor)} registered for text."""
  return dict(_TEXT_REGISTRY)


def RegisteredAt(path):
  """Returns (object, is_constructor) registered under `path`, or None.

  `path` is looked up as given: map a path that may have moved with
  `MovedPath` first. The reader (params/value_codec.py) asks here, so the
  table itself stays private to this module.
  """
  return _TEXT_REGISTRY.get(path)


def ImportPath(obj):
  """Returns 'module.qualname' for a class or function, or None if it has none.

  Lambdas and functions defined inside functions have no import path.
  """
  module = getattr(obj, '__module__', None)
  qualname = getattr(obj, '__qualname__', None)
  if not module or not qualname or '<' in qualname:
    return None
  return '%s.%s' % (module, qualname)


def ResolveImportPath(path):
  """Imports 'pkg.module.Name[.Inner]' and returns the named object.

  For code only (it imports modules): params text is read with
  `LookupImported`, which never imports.

  Args:
    path: str, a module path followed by attribute names.

  Returns:
    The object (class, function, ...) the path names.

  Raises:
    ValueError: if no prefix of the path is an importable module, the module
      has no such attribute, or importing the module itself fails.
  """
  if not isinstance(path, str) or not path:
    raise ValueError('Import path must be a non-empty str, got %r.' % (path,))
  moved = moved_paths.Resolve(path)
  if moved is not None:
    warnings.warn('%r has moved to %r; params text written with the old path '
                  'still loads, but write the new one.' % (path, moved),
                  FutureWarning, stacklevel=2)
    path = moved
  parts = path.split('.')
  for i in range(len(parts) - 1, 0, -1):
    module_name = '.'.join(parts[:i])
    try:
      obj = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
      missing = e.name or ''
      if module_name == missing or module_name.startswith(missing + '.'):
        continue  # This prefix is not a module; try a shorter one.
      raise ValueError('Cannot resolve %r: importing %r failed: %s' %
                       (path, module_name, e)) from e
    except ImportError as e:
      raise ValueError('Cannot resolve %r: importing %r failed: %s' %
                       (path, module_name, e)) from e
    try:
      for attr in parts[i:]:
        obj = getattr(obj, attr)
    except AttributeError:
      raise ValueError('Cannot resolve %r: module %r has no attribute %r.' %
                       (path, module_name, '.'.join(parts[i:])))
    return obj
  raise ValueError('Cannot resolve %r: no importable module in it.' % path)


def LookupImported(path):
  """Returns the object 'pkg.module.Name[.Inner]' names; never imports.

  Only modules already in `sys.modules` are searched, by their `__dict__`
  (so a module's `__getattr__`, a lazy loader or a property never runs), and
  only through modules and classes. Paths that moved (params/moved_paths.py)
  are mapped to their new place first, with a FutureWarning.

  Raises:
    ValueError: if no prefix of the path is an imported module, a name is
      missing, or the path goes through something that is neither a plain
      module nor a class.
  """
  path = MovedPath(path)
  parts = path.split('.')
  for i in range(len(parts) - 1, 0, -1):
    module_name = '.'.join(parts[:i])
    obj = sys.modules.get(module_name)
    if obj is None:
      continue
    for attr in parts[i:]:
      if type(obj) is not types.ModuleType and not isinstance(obj, type):
        raise ValueError('cannot look up %r: %r is neither a module nor a '
                         'class' % (path, attr))
      found = vars(obj).get(attr, _MISSING)
      if found is _MISSING:
        close = difflib.get_close_matches(attr, list(vars(obj)), n=1)
        raise ValueError(
            'cannot resolve %r: %r has no %r%s, or it is a module that is not '
            'imported (params text never imports a module: import it in '
            'code)' % (path, getattr(obj, '__name__', module_name), attr,
                       ' (did you mean %r?)' % close[0] if close else ''))
      obj = found.__func__ if isinstance(found, staticmethod) else found
    return obj
  raise ValueError('cannot resolve %r: its module is not imported (params text '
                   'never imports a module: import it in code, or run the '
                   'experiment that imports it)' % path)


_MISSING = object()


def MovedPath(path):
  """Returns where the import path `path` lives today (itself if it never moved).

  A moved path (params/moved_paths.py) gives its new place and a
  FutureWarning that names both (reported two calls up, stacklevel=3).

  Raises:
    ValueError: if `path` is not a non-empty str of at most 500 characters.
  """
  if not isinstance(path, str) or not path or len(path) > 500:
    raise ValueError('an import path must be a non-empty str of at most 500 '
                     'characters, got %r' % (path[:80] if isinstance(
                         path, str) else path,))
  moved = moved_paths.Resolve(path)
  if moved is None:
    return path
  warnings.warn('%r has moved to %r; params text written with the old path '
                'still loads, but write the new one.' % (path, moved),
                FutureWarning, stacklevel=3)
  return moved
