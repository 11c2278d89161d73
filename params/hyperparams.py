"""Params: the typed, documented, text-round-trippable configuration object.

Every component in this framework is built from a `Params` object: a set of
named, documented values (`Define`), changed with attribute assignment or
`Set`, copied deeply with `Copy`, frozen with `Freeze`, and written to and read
from text with `ToText` / `FromText`. `InstantiableParams` also carries the
class to build (`cls`) and builds it with `Instantiate()`.

Design after Lingvo's `lingvo/core/hyperparams.py`, with these differences:
  * `Freeze()` freezes every nested Params too, not only the top level.
  * The text form covers lists/dicts of Params, classes, functions, enums,
    `tf.DType` and self-describing objects (see `TextSerializable`), and it is
    parsed by a small safe reader: nothing is ever `eval`-ed or unpickled,
    no module is imported, and nothing is called but the constructors
    registered for text (see "Params text is data" in README.md and
    `DecodeValue`).
  * Values with no text form (lambdas, arbitrary objects) are written as a
    marker that `FromText` refuses with a clear error.
"""

import ast
import copy
import difflib
import enum
import importlib
import inspect
import keyword
import re
import sys
import types
import warnings

import numpy as np

from params import moved_paths
from params import nested_map

_NAME_RE = re.compile(r'^[a-z_][a-z0-9_]*$')
_NO_TEXT_MARKER = '<no text form: '
_KEY_SEGMENT_RE = re.compile(r'^([a-z_][a-z0-9_]*)((?:\[\d+\])*)$')


def _ClosestNames(name, names, n=3):
  """Returns up to n defined names close to `name`, best first."""
  close = difflib.get_close_matches(name, list(names), n=n, cutoff=0.5)
  return close


_MAX_LISTED_NAMES = 20


def _UnknownNameMessage(kind, name, names):
  """'<kind> <name> is not defined. Did you mean ...? Defined names: ...'.

  At most _MAX_LISTED_NAMES names are listed (sorted), then '... and N more'.
  """
  msg = '%s %r is not defined.' % (kind, name)
  close = _ClosestNames(name, names)
  if close:
    msg += ' Did you mean %s?' % ' or '.join(repr(c) for c in close)
  listed = sorted(names)
  more = len(listed) - _MAX_LISTED_NAMES
  if more > 0:
    msg += ' Defined names: %s ... and %d more.' % (
        ', '.join(repr(n) for n in listed[:_MAX_LISTED_NAMES]), more)
  else:
    msg += ' Defined names: %s.' % listed
  return msg


def _Index(key, container, i):
  """container[i] for the key's '[i]'; AttributeError naming what is wrong."""
  if not isinstance(container, (list, tuple)):
    raise AttributeError(
        'Key %r: [%d] indexes a list or tuple, but the value there is not a '
        'list (it is a %s: %s). Drop the [%d] or point the key at a list.' %
        (key, i, type(container).__name__, _OneLine(repr(container), 80), i))
  if not -len(container) <= i < len(container):
    raise AttributeError(
        'Key %r: index [%d] is out of range: the list has %d item(s) '
        '(indices 0..%d).' % (key, i, len(container), len(container) - 1))
  return container[i]


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


class _Param:
  """One defined value: name, value and its documentation."""

  def __init__(self, name, default, doc):
    self.name = name
    self.value = default
    self.doc = doc


class Params:
  """A set of named, documented hyper-parameters.

  Usage:
    p = Params()
    p.Define('learning_rate', 0.1, 'Base learning rate.')
    p.learning_rate = 0.2
    p.Set(learning_rate=0.3)

  Raises:
    AttributeError: on get or set of an undefined name (the message lists the
      closest defined names), and on any change to frozen params.
    ValueError: on a malformed name or a redefinition in `Define`.
  """

  def __init__(self):
    self.__dict__['_params'] = {}
    self.__dict__['_immutable'] = False

  # ---- definition and access ----------------------------------------------

  def Define(self, name, default_value, description):
    """Defines a new param `name` (matching [a-z_][a-z0-9_]*) with a default.

    Raises:
      AttributeError: if the params are frozen.
      ValueError: if the name is malformed or already defined.
    """
    self._CheckMutable(name)
    if not isinstance(name, str) or not _NAME_RE.match(name):
      raise ValueError('Param name %r must match [a-z_][a-z0-9_]*.' % (name,))
    if name in self._params:
      raise ValueError('Param %r is already defined (doc: %r).' %
                       (name, self._params[name].doc))
    self._params[name] = _Param(name, default_value, description)

  def __getattr__(self, name):
    if name.startswith('__') and name.endswith('__'):
      raise AttributeError(name)
    params = self.__dict__['_params']
    if name not in params:
      raise AttributeError(_UnknownNameMessage('Param', name, params))
    return params[name].value

  def __setattr__(self, name, value):
    self._CheckMutable(name)
    if name not in self._params:
      raise AttributeError(_UnknownNameMessage('Param', name, self._params))
    self._params[name].value = value

  def __dir__(self):
    return sorted(list(self._params.keys()) + list(super().__dir__()))

  def __contains__(self, name):
    return name in self._params

  def __len__(self):
    return len(self._params)

  def __eq__(self, other):
    if not isinstance(other, Params) or type(self) is not type(other):
      return False
    if set(self._params) != set(other._params):
      return False
    return all(
        _ValuesEqual(self._params[k].value, other._params[k].value)
        for k in self._params)

  def __ne__(self, other):
    return not self == other

  __hash__ = None

  def __repr__(self):
    return self.ToText()

  def IterParams(self):
    """Yields (name, value) for each defined param, in definition order."""
    for name, param in self._params.items():
      yield name, param.value

  def GetDoc(self, name):
    """Returns the documentation string of param `name`."""
    if name not in self._params:
      raise AttributeError(_UnknownNameMessage('Param', name, self._params))
    return self._params[name].doc

  def _CheckMutable(self, name):
    if self.__dict__['_immutable']:
      raise AttributeError(
          'Params are frozen; cannot change %r. Make a mutable copy with '
          'p.Copy(frozen=False) and change that.' % (name,))

  # ---- dotted paths --------------------------------------------------------

  def _Resolve(self, key):
    """Returns (container, last_name, last_indices) for a dotted key."""
    segments = key.split('.')
    obj = self
    for seg_i, seg in enumerate(segments):
      m = _KEY_SEGMENT_RE.match(seg)
      if not m:
        raise AttributeError('Malformed key %r (segment %r).' % (key, seg))
      name, idx_text = m.group(1), m.group(2)
      indices = [int(i) for i in re.findall(r'\[(\d+)\]', idx_text)]
      if not isinstance(obj, Params):
        raise AttributeError('Key %r: %r is not a Params (it is a %s).' %
                             (key, '.'.join(segments[:seg_i]),
                              type(obj).__name__))
      if name not in obj._params:
        raise AttributeError(
            'Key %r: ' % key +
            _UnknownNameMessage('Param', name, obj._params))
      if seg_i == len(segments) - 1:
        return obj, name, indices
      obj = obj._params[name].value
      for i in indices:
        obj = _Index(key, obj, i)
    raise AttributeError('Empty key.')

  def Get(self, key):
    """Returns the value at a dotted key such as 'optimizer.beta1' or 'a[0].b'.

    Raises:
      AttributeError: naming the key and close names if it does not exist,
        the key's '[i]' indexes a value that is not a list, or i is out of
        range.
    """
    parent, name, indices = self._Resolve(key)
    value = parent._params[name].value
    for i in indices:
      value = _Index(key, value, i)
    return value

  def Set(self, **kwargs):
    """Sets params by name or dotted key; returns self (chainable).

    `p.Set(**{'optimizer.beta1': 0.8})` sets a nested param.

    Raises:
      AttributeError: if a key does not exist or the params are frozen.
    """
    for key, value in kwargs.items():
      self._SetKey(key, value)
    return self

  def _SetKey(self, key, value):
    parent, name, indices = self._Resolve(key)
    if not indices:
      setattr(parent, name, value)
      return
    container = parent._params[name].value
    for i in indices[:-1]:
      container = _Index(key, container, i)
    parent._CheckMutable(name)
    _Index(key, container, indices[-1])  # Checks it is a list, i in range.
    if isinstance(container, tuple):
      raise AttributeError('Key %r: cannot assign into a tuple.' % key)
    container[indices[-1]] = value

  def Delete(self, *names):
    """Removes the named params; returns self.

    Raises:
      AttributeError: if a name is not defined or the params are frozen.
    """
    for name in names:
      self._CheckMutable(name)
      if name not in self._params:
        raise AttributeError(_UnknownNameMessage('Param', name, self._params))
      del self._params[name]
    return self

  # ---- copy and freeze -----------------------------------------------------

  def Copy(self, frozen=None):
    """Returns a deep copy that shares no mutable state with this one.

    Args:
      frozen: None keeps this object's frozen state; False returns a mutable
        copy (the documented way to change frozen params); True a frozen one.
    """
    res = type(self).__new__(type(self))
    res.__dict__['_params'] = {}
    res.__dict__['_immutable'] = False
    for name, param in self._params.items():
      res._params[name] = _Param(name, _CopyValue(param.value), param.doc)
    for k, v in self.__dict__.items():
      if k not in ('_params', '_immutable'):
        res.__dict__[k] = copy.deepcopy(v)
    if frozen is None:
      frozen = self._immutable
    if frozen:
      res.Freeze()
    else:
      res._Thaw()
    return res

  def __deepcopy__(self, memo):
    return self.Copy()

  def __copy__(self):
    # A shallow copy would share the value table; Params copies are deep.
    return self.Copy()

  def Freeze(self):
    """Makes these params and every nested Params read-only; returns self.

  Nested means anywhere inside the values: a Params value, or Params inside
  lists, tuples and dicts (at any depth). Setting, defining, deleting and
  `FromText` then raise AttributeError, also through dotted keys such as
  'layers[0].dim'. The containers themselves (a list value) are ordinary
  Python objects; use tuples for values that must not change. Undo only with
  an explicit mutable copy: `p.Copy(frozen=False)`.
  """
    self.__dict__['_immutable'] = True
    for _, value in self.IterParams():
      for sub in _NestedParams(value):
        sub.Freeze()
    return self

  def _Thaw(self):
    self.__dict__['_immutable'] = False
    for _, value in self.IterParams():
      for sub in _NestedParams(value):
        sub._Thaw()

  @property
  def is_frozen(self):
    return self._immutable

  # ---- text -----------------------------------------------------------------

  def _FlatItems(self, prefix=''):
    """Yields (dotted_key, value) with nested Params and lists of them flattened."""
    for name, value in sorted(self.IterParams()):
      key = prefix + name
      if isinstance(value, Params):
        if len(value) == 0:
          yield key, value
        else:
          yield from value._FlatItems(key + '.')
      elif (isinstance(value, list) and value and
            all(isinstance(v, Params) and len(v) for v in value)):
        for i, v in enumerate(value):
          yield from v._FlatItems('%s[%d].' % (key, i))
      else:
        yield key, value

  def ToText(self):
    """Returns the params as sorted 'dotted.key : value' lines.

    Nested Params and lists of Params are flattened into dotted keys
    ('train.learner[0].learning_rate'); other values are written with
    `EncodeValue`.
    """
    lines = ['%s : %s' % (k, EncodeValue(v)) for k, v in self._FlatItems()]
    return '\n'.join(sorted(lines)) + ('\n' if lines else '')

  def FromText(self, text):
    """Applies 'dotted.key : value' lines to these params; returns self.

    Lines may be separated by newlines or ';'. Blank lines and '#' comments
    are ignored. Later lines win.

    Lines set values of keys that exist, with one structural exception that
    makes `q.FromText(p.ToText())` reproduce `p` when a nested params holds
    another class than in `q`: a line 'a.b.cls : Class(X)' (X having a
    `Params()` classmethod) whose X differs from the current class, or whose
    'a.b' is None, first replaces 'a.b' by `X.Params()`, keeping the values of
    the keys both define; 'a.b[i].cls' lines may so also grow a list of
    params (one element at a time). Class lines are applied first, outer
    keys before inner ones.

    The text is data (README, "Params text is data"): no module is imported,
    and a line's value is built (registered constructors, `X.Params()`) only
    after its key exists and the kind of its value fits the key; see
    `DecodeValue` for what may be named, and MAX_TEXT_CHARS,
    MAX_VALUE_CHARS, MAX_DEPTH, MAX_ITEMS, MAX_BUILDS for the bounds.

    Raises:
      AttributeError: if the params are frozen.
      ValueError: one line naming the line and key if a line is malformed,
        the key does not exist (with close names), the value has no text
        form, exceeds a bound, names something text may not name, or its
        type does not match the current value.
    """
    if self._immutable:
      raise AttributeError(
          'Params are frozen; FromText cannot change them. Apply the text to '
          'a mutable copy: p.Copy(frozen=False).FromText(text).')
    lines = list(TextLines(text))
    self._ApplyClassLines(lines)
    for line_no, line, key, value_text in lines:
      shown = '%s %s' % (line_no, _ShownLine(line))
      try:
        current = self.Get(key)
      except AttributeError as e:
        # The error starts with "Key '<key>': "; say the key only once.
        why = str(e)
        if why.startswith('Key %r: ' % key):
          why = why[len('Key %r: ' % key):]
        raise ValueError('Line %s: unknown key %r: %s' %
                         (shown, key, why)) from None
      value = _ReadLineValue(shown, key, value_text, current)
      if (isinstance(current, float) and isinstance(value, int) and
          not isinstance(value, bool)):
        value = float(value)  # '1' for a float param means 1.0.
      try:
        self._SetKey(key, value)
      except AttributeError as e:
        raise ValueError('Line %s: cannot set %r: %s' %
                         (shown, key, e)) from None
    return self

  def _ApplyClassLines(self, lines):
    """Rebuilds nested params named by 'prefix.cls' lines (see FromText).

    The key is resolved before the value is read, the value is only planned
    (a class is looked up, nothing is called), and X.Params() is called only
    for a class with a Params() classmethod. Anything else is left to the
    line-by-line pass, which reports it.
    """
    cls_lines = []
    for _, _, key, value_text in lines:
      if key.endswith('.cls'):
        prefix = key[:-len('.cls')]
        depth = prefix.count('.') + prefix.count('[')
        order = [int(t) if t.isdigit() else t
                 for t in re.split(r'(\d+)', prefix)]
        cls_lines.append((depth, order, prefix, value_text))
    for _, _, prefix, value_text in sorted(cls_lines, key=lambda x: x[:2]):
      try:
        parent, name, indices = self._Resolve(prefix)
      except (AttributeError, ValueError):
        continue
      slot = _ClassLineSlot(parent, name, indices)
      if slot is None:
        continue
      old, setter = slot
      current_cls = old.cls if isinstance(old, Params) and 'cls' in old else None
      try:
        plan = _ValueReader(current_cls).Plan(value_text)
      except ValueError:
        continue
      new_cls = plan[1] if plan[0] == 'value' else None
      if _IsParamsClass(new_cls) and _NeedsRebuild(old, new_cls):
        setter(_Rebuilt(new_cls, old))

  def TextDiff(self, other):
    """Returns a readable diff of two params: only keys that differ.

    Lines: '  key : mine -> theirs' for changed values, '- key : v' for keys
    only here, '+ key : v' for keys only in `other`. Empty string if equal.
    """
    mine = {k: EncodeValue(v) for k, v in self._FlatItems()}
    theirs = {k: EncodeValue(v) for k, v in other._FlatItems()}
    out = []
    for k in sorted(set(mine) | set(theirs)):
      if k not in theirs:
        out.append('- %s : %s' % (k, mine[k]))
      elif k not in mine:
        out.append('+ %s : %s' % (k, theirs[k]))
      elif mine[k] != theirs[k]:
        out.append('  %s : %s -> %s' % (k, mine[k], theirs[k]))
    return '\n'.join(out) + ('\n' if out else '')


class InstantiableParams(Params):
  """Params that carry the class to build in `cls`.

  `p.Instantiate(*args, **kwargs)` returns `p.cls(p, *args, **kwargs)`.
  """

  def __init__(self, cls=None):
    super().__init__()
    self.Define('cls', cls, 'Class that these params build.')

  def Instantiate(self, *args, **kwargs):
    """Builds `self.cls(self, ...)`.

    Raises:
      ValueError: if `cls` is not set.
    """
    if self.cls is None:
      raise ValueError('Cannot Instantiate params whose cls is None.')
    return self.cls(self, *args, **kwargs)


# ---- helpers on values --------------------------------------------------------


def _NeedsRebuild(current, new_cls):
  """True if a 'cls' line for `new_cls` must replace the params `current`."""
  if current is None:
    return True
  return (isinstance(current, Params) and 'cls' in current and
          current.cls is not new_cls)


def _Rebuilt(new_cls, old):
  """new_cls.Params() with the values of the keys `old` also defines."""
  p = _CallParams(new_cls)
  if isinstance(old, Params):
    for k, v in old.IterParams():
      if k != 'cls' and k in p:
        setattr(p, k, _CopyValue(v))
  return p


def _ClassLineSlot(parent, name, indices):
  """(old value, setter) of the params a 'prefix.cls' line may rebuild, or None.

  Nothing is changed here. A list grows by one element at a time (index ==
  its length, the order ToText writes), up to MAX_ITEMS; a None list may
  start at index 0; other indices must exist.
  """
  value = parent._params[name].value
  if not indices:
    if value is None or isinstance(value, Params):
      return value, lambda v: setattr(parent, name, v)
    return None
  if value is None and indices == [0]:
    return None, lambda v: setattr(parent, name, [v])
  container = value
  try:
    for i in indices[:-1]:
      container = container[i]
  except (IndexError, TypeError, KeyError):
    return None
  i = indices[-1]
  if not isinstance(container, list) or i > len(container) or i >= MAX_ITEMS:
    return None
  if i == len(container):
    return None, container.append
  old = container[i]
  if old is not None and not isinstance(old, Params):
    return None
  return old, lambda v: container.__setitem__(i, v)


def _ReadLineValue(shown, key, value_text, current):
  """Decodes one line's value for `key`, checking its kind before building."""
  if value_text.startswith(_NO_TEXT_MARKER):
    raise ValueError(
        'Line %s: key %r holds a value with no text form (%s); it must be '
        'set in code, not in text.' % (shown, key, _ShownLine(value_text)))
  reader = _ValueReader(current)
  try:
    plan = reader.Plan(value_text)
    err = _PlanMismatch(current, plan)
    if err is None:
      value = reader.Build(plan)
      err = _TypeMismatch(current, value)
  except ValueError as e:
    hint = ''
    if isinstance(current, str) and len(value_text) <= 80:
      hint = (' %r holds a string: quote the value, e.g. %s : %r.' %
              (key, key, value_text))
    raise ValueError('Line %s: cannot read the value of %r: %s.%s' %
                     (shown, key, _OneLine(e), hint)) from None
  if err:
    raise ValueError('Line %s: wrong type for %r: %s' %
                     (shown, key, _OneLine(err)))
  return value


def _ShownLine(line, limit=120):
  """repr(line), cut to `limit` characters so errors stay one short line."""
  if len(line) <= limit:
    return repr(line)
  return '%r... (%d characters)' % (line[:limit], len(line))


def ReadTextFile(path, what):
  """Returns the text of a params file, read with the reader's size bound.

  At most MAX_TEXT_CHARS + 1 characters are read, so a huge file is refused
  without being loaded whole, and the bytes must be UTF-8 text.

  Args:
    path: the file's path (str).
    what: how the caller names it in errors, e.g. '--params_file'.

  Returns:
    The file's text (str, at most MAX_TEXT_CHARS characters).

  Raises:
    ValueError: naming `what` and `path` if the file cannot be opened or
      read, is not UTF-8 text, or is longer than MAX_TEXT_CHARS.
  """
  try:
    with open(path, encoding='utf-8', errors='strict') as f:
      text = f.read(MAX_TEXT_CHARS + 1)
  except OSError as e:
    raise ValueError('%s %r cannot be read: %s' % (what, path, e)) from None
  except UnicodeDecodeError as e:
    raise ValueError('%s %r is not UTF-8 params text (byte %d); give a file '
                     'of "key : value" lines.' % (what, path, e.start)) from None
  if len(text) > MAX_TEXT_CHARS:
    raise ValueError('%s %r is longer than %d characters (MAX_TEXT_CHARS); a '
                     'params file is a few kB of "key : value" lines.' %
                     (what, path, MAX_TEXT_CHARS))
  return text


def TextLines(text):
  """Yields (position, item, key, value_text) for each 'key : value' item.

  The reader every caller of params text shares (`Params.FromText`,
  `schedules.plot`). Items are separated by newlines or ';'; blank items and
  '#' comments are skipped (see `_SplitLines` for the position).

  Raises:
    ValueError: if the text exceeds MAX_TEXT_CHARS, or an item has no ':'
      (naming its position and its first characters).
  """
  if not isinstance(text, str):
    raise ValueError('params text must be a str, got %s' % type(text).__name__)
  if len(text) > MAX_TEXT_CHARS:
    raise ValueError('params text is %d characters long; at most %d are read '
                     '(MAX_TEXT_CHARS).' % (len(text), MAX_TEXT_CHARS))
  for line_no, line in _SplitLines(text):
    if ':' not in line:
      raise ValueError('Line %s %s: expected "key : value".' %
                       (line_no, _ShownLine(line, 60)))
    key, value_text = line.split(':', 1)
    yield line_no, line, key.strip(), value_text.strip()


def _NestedParams(value):
  """Yields every Params directly inside value (itself, or in containers)."""
  if isinstance(value, Params):
    yield value
  elif isinstance(value, (list, tuple)):
    for v in value:
      yield from _NestedParams(v)
  elif isinstance(value, dict):
    for v in value.values():
      yield from _NestedParams(v)


def _CopyValue(value):
  if isinstance(value, Params):
    return value.Copy()
  if isinstance(value, list):
    return [_CopyValue(v) for v in value]
  if isinstance(value, tuple):
    return type(value)(*[_CopyValue(v) for v in value]) if hasattr(
        value, '_fields') else tuple(_CopyValue(v) for v in value)
  if isinstance(value, dict):
    return type(value)((k, _CopyValue(v)) for k, v in value.items())
  if isinstance(value, type) or callable(value) and not hasattr(
      value, '__dict__'):
    return value
  try:
    return copy.deepcopy(value)
  except Exception:  # pylint: disable=broad-except
    return value


def _ValuesEqual(a, b):
  # A numpy scalar equals its Python value (its text form reads back as it).
  if isinstance(a, np.generic):
    a = a.item()
  if isinstance(b, np.generic):
    b = b.item()
  if isinstance(a, Params) or isinstance(b, Params):
    return a == b
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return (type(a) is type(b) and len(a) == len(b) and
            all(_ValuesEqual(x, y) for x, y in zip(a, b)))
  if isinstance(a, dict) and isinstance(b, dict):
    return (set(a) == set(b) and
            all(_ValuesEqual(a[k], b[k]) for k in a))
  if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
    return True
  if a is b:
    return True
  try:
    eq = a == b
    if isinstance(eq, bool):
      return eq
    # Array-like values (numpy arrays, tensors) compare element-wise.
    if getattr(a, 'shape', None) != getattr(b, 'shape', None):
      return False
    return bool(eq.all()) if hasattr(eq, 'all') else bool(eq)
  except Exception:  # pylint: disable=broad-except
    return False


def _TypeMismatch(current, value):
  """Returns a message if `value` may not replace `current`, else None.

  None on either side is always allowed (an unset param takes any value, and
  any param may be unset). Otherwise the value must be of the same kind:
  bool, int, float (an int is accepted), str, bytes, list/tuple, dict,
  Params, a member of the same Enum, a DType, a class, a callable. Objects of
  other types may be replaced by anything.
  """
  if current is None or value is None:
    return None
  kind = _KindOf(current)
  if kind is None:
    if callable(current) and not callable(value):
      return 'expected a callable, got %s %r' % (type(value).__name__, value)
    return None
  name, accepts = kind
  if accepts(value):
    return None
  if name == 'an int' and isinstance(value, float):
    return 'expected an int, got the float %r' % (value,)
  return 'expected %s, got %s %r' % (name, type(value).__name__, value)


def _IsNumber(v):
  return isinstance(v, (int, float)) and not isinstance(v, (bool, enum.Enum))


def _KindOf(current):
  """(description, accepts(value)) for the kind of `current`, or None."""
  if isinstance(current, bool):
    return 'a bool', lambda v: isinstance(v, bool)
  if isinstance(current, enum.Enum):
    return ('a member of the enum %s' % type(current).__name__,
            lambda v: isinstance(v, type(current)))
  if isinstance(current, int):
    return 'an int', lambda v: _IsNumber(v) and isinstance(v, int)
  if isinstance(current, float):
    return 'a float', _IsNumber
  for types, name in ((str, 'a str'), (bytes, 'a bytes'),
                      ((list, tuple), 'a list or tuple'), (dict, 'a dict'),
                      (Params, 'Params'), (type, 'a class')):
    if isinstance(current, types):
      return name, lambda v, types=types: isinstance(v, types)
  if _IsDType(current):
    return 'a DType', _IsDType
  return None


def _SplitLines(text):
  """Yields (position, stripped item) for non-empty, non-comment items.

  Items are separated by newlines or ';'. The position is the line number
  ('3'), or the line number and the item's place on a line that holds
  several ('1 (item 2)'), so an error in 'a : 1; b : x' points at 'b'.
  """
  line_no = 0
  for raw in text.split('\n'):
    line_no += 1
    items = [p.strip() for p in _SplitOutsideQuotes(raw, ';')]
    items = [p for p in items if p and not p.startswith('#')]
    for i, item in enumerate(items):
      yield (str(line_no) if len(items) == 1 else
             '%d (item %d)' % (line_no, i + 1)), item


def _SplitOutsideQuotes(line, sep):
  """Splits on `sep` outside quotes and stops at a '#' outside quotes."""
  parts, cur, quote, escape = [], [], None, False
  for ch in line:
    if quote:
      cur.append(ch)
      if escape:
        escape = False
      elif ch == '\\':
        escape = True
      elif ch == quote:
        quote = None
      continue
    if ch in ('"', "'"):
      quote = ch
      cur.append(ch)
    elif ch == '#':
      break
    elif ch == sep:
      parts.append(''.join(cur))
      cur = []
    else:
      cur.append(ch)
  parts.append(''.join(cur))
  return parts


# ---- value encoding ------------------------------------------------------------

def EncodeValue(value):
  """Returns the text form of one value (one line, no newline).

  Literals use Python literal syntax; classes are `Class('mod.Name')`,
  functions `Function('mod.fn')`, enum members `Enum('mod.E', 'NAME')`,
  `tf.DType`s `DType('float32')`, Params inside containers
  `Params(cls=..., key=value, ...)`, self-describing objects
  `Object('mod.factory', k=v)`; numpy scalars as their Python value
  (np.float32(0.1) -> 0.10000000149011612). Anything else (a lambda, a bound method, a
  nested function, an arbitrary object) is a '<no text form: ...>' marker,
  which `Params.FromText` refuses.

  Args:
    value: any Python value.

  Returns:
    str, a single line.
  """
  try:
    return _Encode(value)
  except _NoTextForm as e:
    return '%s%s>' % (_NO_TEXT_MARKER, e)


class _NoTextForm(Exception):
  pass


def _EncodeKwargs(kwargs):
  """Encodes keyword arguments; names that are Python keywords go in **{}."""
  plain, special = [], []
  for k, v in kwargs.items():
    if isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k):
      plain.append('%s=%s' % (k, _Encode(v)))
    else:
      special.append('%r: %s' % (k, _Encode(v)))
  if special:
    plain.append('**{%s}' % ', '.join(special))
  return plain


def _PathOf(value, kind):
  """Import path of a class/function that resolves back to `value`."""
  path = ImportPath(value)
  if path is None:
    raise _NoTextForm('%s %s' % (kind, getattr(value, '__qualname__', value)))
  try:
    resolved = ResolveImportPath(path)
  except ValueError:
    resolved = None
  if resolved is not value and resolved != value:
    raise _NoTextForm('%s %s (its import path %r names another object)' %
                      (kind, value.__qualname__, path))
  return path


def _Encode(value):
  if isinstance(value, enum.Enum):
    return 'Enum(%r, %r)' % (_PathOf(type(value), 'enum'), value.name)
  if value is None or isinstance(value, bool):
    return repr(value)
  if isinstance(value, int):
    return int.__repr__(value)
  if isinstance(value, str):
    return str.__repr__(value)
  if isinstance(value, bytes):
    return bytes.__repr__(value)
  if isinstance(value, float):
    if value != value:
      return "float('nan')"
    if value in (float('inf'), float('-inf')):
      return "float('%s')" % ('inf' if value > 0 else '-inf')
    return float.__repr__(value)
  if isinstance(value, Params):
    return 'Params(%s)' % ', '.join(_EncodeKwargs(dict(value.IterParams())))
  if isinstance(value, list):
    return '[%s]' % ', '.join(_Encode(v) for v in value)
  if isinstance(value, tuple):
    if hasattr(value, '_fields'):
      raise _NoTextForm('namedtuple %r' % (value,))
    if len(value) == 1:
      return '(%s,)' % _Encode(value[0])
    return '(%s)' % ', '.join(_Encode(v) for v in value)
  if isinstance(value, nested_map.NestedMap):
    return 'NestedMap(%s)' % ', '.join(_EncodeKwargs(value))
  if isinstance(value, dict):
    return '{%s}' % ', '.join(
        '%s: %s' % (_Encode(k), _Encode(v)) for k, v in value.items())
  if _IsDType(value):
    return 'DType(%r)' % value.name
  if isinstance(value, np.generic) and isinstance(
      value.item(), (bool, int, float, str, bytes)):
    # A numpy scalar (np.float32(0.1), np.int64(3), np.bool_(True)) is
    # written as its Python value; it reads back as that value, which
    # compares equal.
    return _Encode(value.item())
  if not isinstance(value, type) and callable(
      getattr(type(value), 'TextSpec', None)):
    path, kwargs = value.TextSpec()
    return 'Object(%s)' % ', '.join([repr(path)] + _EncodeKwargs(kwargs))
  if isinstance(value, type):
    return 'Class(%r)' % _PathOf(value, 'class')
  if inspect.ismethod(value) and not isinstance(value.__self__, type):
    raise _NoTextForm('method %s bound to an object' % value.__qualname__)
  if callable(value) and hasattr(value, '__qualname__'):
    return 'Function(%r)' % _PathOf(value, type(value).__name__)
  raise _NoTextForm('%s object %r' % (type(value).__name__, value))


def _IsDType(value):
  t = type(value)
  return t.__name__ == 'DType' and t.__module__.startswith('tensorflow')



# ---- reading values: params text is data ---------------------------------------
#
# Reading never imports a module, never calls anything but the constructors
# registered for text (TextFactory, TextSerializable subclasses), the Params()
# classmethod of an already-imported class for a Params value, NestedMap and
# tf.as_dtype, and calls those only after the key and the kind of its value
# were checked. Every value is bounded before Python's parser sees it.

MAX_TEXT_CHARS = 4_000_000   # One FromText call (a --params_file, a params.txt).
MAX_VALUE_CHARS = 100_000    # The value of one line.
MAX_DEPTH = 32               # Brackets and calls nested in one value.
MAX_ITEMS = 10_000           # Elements of one list/tuple/dict/call; list growth.
MAX_BUILDS = 1_000           # Constructor and Params() calls for one value.

_SUPPORTED_FORMS = (
    "supported forms: Python literals (1, 2.5, 'str', True, None, [..], "
    "(..), {..}), float('nan'|'inf'|'-inf'), Class('mod.Name'), "
    "Function('mod.fn'), Enum('mod.Enum', 'MEMBER'), DType('float32'), "
    "Params(k=v, ...), NestedMap(k=v, ...), Object('mod.factory', k=v, ...)")

# The tokens a value may hold; anything else (operators, '.', keywords other
# than True/False/None, f-strings, triple quotes) is refused before parsing.
# With '+'/'-' only as the sign of a number, only brackets and calls nest, so
# the parse tree is at most about 2 * MAX_DEPTH deep.
_TOKEN_RE = re.compile(r'''
    (?P<space>\s+)
  | (?P<triple>[bBrRuU]{0,2}(?:\'\'\'|"""))
  | (?P<str>[bBrRuU]{0,2}(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"))
  | (?P<num>0[xXoObB][0-9a-fA-F_]+
      |(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?[jJ]?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?![A-Za-z0-9_'"]))
  | (?P<op>\*\*|[()\[\]{},:=+-])''', re.VERBOSE)
_OPEN, _CLOSE = '([{', ')]}'
_VALUE_KEYWORDS = ('True', 'False', 'None')
_OPERAND_START = (None, '(', '[', '{', ',', ':', '=')


def _Prescan(text):
  """Checks size, nesting, item counts and tokens of one value's text.

  Linear in len(text); raises ValueError saying which bound was hit.
  """
  if len(text) > MAX_VALUE_CHARS:
    raise ValueError('the value is %d characters long; at most %d are read '
                     '(MAX_VALUE_CHARS)' % (len(text), MAX_VALUE_CHARS))
  counts, pos, prev = [0], 0, None
  while pos < len(text):
    m = _TOKEN_RE.match(text, pos)
    if m is None or m.lastgroup == 'triple':
      raise ValueError('unsupported text at character %d: %r; %s' %
                       (pos, text[pos:pos + 20], _SUPPORTED_FORMS))
    kind, tok, pos = m.lastgroup, m.group(), m.end()
    if kind == 'space':
      continue
    if prev in ('+', '-') and kind != 'num':
      raise ValueError('a sign must be followed by a number, got %r after %r'
                       % (tok[:20], prev))
    if tok in ('+', '-') and prev not in _OPERAND_START:
      raise ValueError('%r is only a sign before a number here; there are no '
                       'operators in params text' % tok)
    if kind == 'name' and keyword.iskeyword(tok) and tok not in _VALUE_KEYWORDS:
      raise ValueError('the keyword %r is not a value; %s' %
                       (tok, _SUPPORTED_FORMS))
    if tok in _OPEN:
      counts.append(0)
      if len(counts) > MAX_DEPTH + 1:
        raise ValueError('brackets and calls nest more than %d deep '
                         '(MAX_DEPTH)' % MAX_DEPTH)
    elif tok in _CLOSE:
      if len(counts) == 1:
        raise ValueError('unbalanced %r at character %d' % (tok, m.start()))
      counts.pop()
    elif tok == ',':
      counts[-1] += 1
      if counts[-1] >= MAX_ITEMS:
        raise ValueError('a list, tuple, dict or call holds more than %d '
                         'items (MAX_ITEMS)' % MAX_ITEMS)
    prev = tok if kind == 'op' else kind


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
  path = _MovedPath(path)
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
        raise ValueError(
            'cannot resolve %r: %r has no %r, or it is a module that is not '
            'imported (params text never imports a module: import it in '
            'code)' % (path, getattr(obj, '__name__', module_name), attr))
      obj = found.__func__ if isinstance(found, staticmethod) else found
    return obj
  raise ValueError('cannot resolve %r: its module is not imported (params text '
                   'never imports a module: import it in code, or run the '
                   'experiment that imports it)' % path)


_MISSING = object()


def _MovedPath(path):
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


def _IsParamsClass(obj):
  """True if `obj` is a class whose `Params` is a classmethod (found statically)."""
  if not isinstance(obj, type):
    return False
  try:
    return isinstance(inspect.getattr_static(obj, 'Params'), classmethod)
  except AttributeError:
    return False


def _ResolveClass(path, current):
  """A class text may name: registered, with Params(), an Enum, or `current`."""
  entry = _TEXT_REGISTRY.get(_MovedPath(path))
  obj = entry[0] if entry else LookupImported(path)
  if not isinstance(obj, type):
    raise ValueError('%r is not a class' % path)
  if (entry or obj is current or _IsParamsClass(obj) or
      issubclass(obj, enum.Enum)):
    return obj
  raise ValueError(
      'Class(%r) is refused: params text may name only classes with a '
      'Params() classmethod, Enum classes, classes registered with '
      'params.hyperparams.RegisterForText, or the class already there' % path)


def _ResolveFunction(path, current):
  """A function text may name: registered for text, or the one already there."""
  entry = _TEXT_REGISTRY.get(_MovedPath(path))
  if entry is not None and callable(entry[0]):
    return entry[0]
  if current is not None and callable(current) and ImportPath(current) in (
      path, _MovedPath(path)):
    return current
  raise ValueError(
      'Function(%r) is refused: params text may name only functions '
      'registered with params.hyperparams.RegisterForText (or TextFactory) '
      'in their module, or the function already there' % path)


def _ResolveEnum(path, member):
  enum_cls = _TEXT_REGISTRY.get(_MovedPath(path), (None,))[0]
  if enum_cls is None:
    enum_cls = LookupImported(path)
  if not (isinstance(enum_cls, type) and issubclass(enum_cls, enum.Enum)):
    raise ValueError('%r is not an Enum class' % path)
  members = vars(enum_cls).get('_member_map_')
  if not isinstance(members, dict) or member not in members:
    raise ValueError('%r has no member %r' % (path, member))
  return members[member]


def _ResolveConstructor(path):
  entry = _TEXT_REGISTRY.get(_MovedPath(path))
  if entry is None or not entry[1]:
    raise ValueError(
        'Object(%r, ...): %r is not registered as a text constructor (a '
        'TextSerializable subclass or a function decorated with '
        'params.hyperparams.TextFactory, in a module this process has '
        'imported); refusing to call it' % (path, path))
  return entry[0]


_NO_CURRENT = object()


class _ValueReader:
  """Reads one value in two steps: Plan (looks names up, calls nothing),
  then Build (calls the registered constructors, at most MAX_BUILDS)."""

  def __init__(self, current=_NO_CURRENT):
    self._current = None if current is _NO_CURRENT else current
    self._builds = 0

  def Plan(self, text):
    """Returns the plan of `text`: nested tuples ('value', v), ('list', [..]),
    ('tuple', [..]), ('dict', [(k, v)..]), ('dtype', name),
    ('params', kwargs), ('nested_map', kwargs), ('object', path, fn, kwargs)."""
    text = text.strip()
    _Prescan(text)
    try:
      tree = ast.parse(text, mode='eval')
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
      raise ValueError('not a valid value (%s)' %
                       (getattr(e, 'msg', None) or type(e).__name__)) from None
    return self._PlanNode(tree.body, top=True)

  def _PlanNode(self, node, top=False):
    if isinstance(node, ast.Constant):
      return ('value', node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(
        node.op, (ast.USub, ast.UAdd)) and isinstance(
            node.operand, ast.Constant):
      v = node.operand.value
      if not isinstance(v, (int, float, complex)) or isinstance(v, bool):
        raise ValueError('unary sign on a non-number')
      return ('value', -v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, (ast.List, ast.Tuple)):
      kind = 'list' if isinstance(node, ast.List) else 'tuple'
      return (kind, [self._PlanNode(e) for e in node.elts])
    if isinstance(node, ast.Dict):
      if any(k is None for k in node.keys):
        raise ValueError('** inside a dict literal is not supported')
      return ('dict', [(self._PlanNode(k), self._PlanNode(v))
                       for k, v in zip(node.keys, node.values)])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
      return self._PlanCall(node, node.func.id, top)
    raise ValueError('unsupported expression %r; %s' %
                     (ast.unparse(node)[:80], _SUPPORTED_FORMS))

  def _PlanCall(self, node, fn, top):
    """Plans Class/Function/Enum/DType/float/Object/Params/NestedMap(...)."""
    strs = [a.value for a in node.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if len(strs) != len(node.args):
      strs = None  # Positional arguments must be string literals.
    plain = strs is not None and not node.keywords
    current = self._current if top else None
    if fn == 'float' and plain and strs in (['nan'], ['inf'], ['-inf']):
      return ('value', float(strs[0]))
    if fn == 'Class' and plain and len(strs) == 1:
      return ('value', _ResolveClass(strs[0], current))
    if fn == 'Function' and plain and len(strs) == 1:
      return ('value', _ResolveFunction(strs[0], current))
    if fn == 'Enum' and plain and len(strs) == 2:
      return ('value', _ResolveEnum(strs[0], strs[1]))
    if fn == 'DType' and plain and len(strs) == 1:
      return ('dtype', strs[0])
    if fn == 'Object' and strs is not None and len(strs) == 1:
      return ('object', strs[0], _ResolveConstructor(strs[0]),
              self._PlanKwargs(node))
    if fn in ('Params', 'NestedMap') and not node.args:
      return ('params' if fn == 'Params' else 'nested_map',
              self._PlanKwargs(node))
    raise ValueError('unsupported expression %r; %s' %
                     (ast.unparse(node)[:80], _SUPPORTED_FORMS))

  def _PlanKwargs(self, node):
    out = []
    for kw in node.keywords:
      plan = self._PlanNode(kw.value)
      if kw.arg is None and plan[0] != 'dict':
        raise ValueError('** arguments must be a dict')
      out.append((kw.arg, plan))
    return out

  def Build(self, plan):
    """Returns the value of a plan; ValueError if a constructor fails."""
    kind = plan[0]
    if kind == 'value':
      return plan[1]
    if kind in ('list', 'tuple'):
      items = [self.Build(p) for p in plan[1]]
      return items if kind == 'list' else tuple(items)
    if kind == 'dict':
      out = {}
      for k, v in plan[1]:
        key, value = self.Build(k), self.Build(v)
        try:
          out[key] = value
        except TypeError:
          raise ValueError('a dict key must be hashable, got %s %r' %
                           (type(key).__name__, key)) from None
      return out
    if kind == 'dtype':
      return _AsDType(plan[1])
    kwargs = self._BuildKwargs(plan[-1])
    if kind == 'nested_map':
      return nested_map.NestedMap(kwargs)
    self._builds += 1
    if self._builds > MAX_BUILDS:
      raise ValueError('the value builds more than %d params or objects '
                       '(MAX_BUILDS)' % MAX_BUILDS)
    if kind == 'params':
      return _BuildParams(kwargs)
    try:
      return plan[2](**kwargs)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError('Object(%r, ...) failed: %s: %s' % (
          plan[1], type(e).__name__, _OneLine(e))) from None

  def _BuildKwargs(self, plans):
    kwargs = {}
    for name, plan in plans:
      value = self.Build(plan)
      if name is not None:
        kwargs[name] = value
        continue
      if not all(isinstance(k, str) for k in value):
        raise ValueError('** argument keys must be strings')
      kwargs.update(value)
    return kwargs


def _AsDType(name):
  tf = sys.modules.get('tensorflow')
  if tf is None:
    raise ValueError('DType(%r) needs TensorFlow, which this process has not '
                     'imported' % (name,))
  try:
    return tf.as_dtype(name)
  except (TypeError, ValueError) as e:
    raise ValueError('DType(%r): %s' % (name, _OneLine(e))) from None


_PLAN_KINDS = {'list': ([], 'a list'), 'tuple': ((), 'a tuple'),
               'dict': ({}, 'a dict'), 'params': (None, 'Params'),
               'nested_map': (None, 'a NestedMap')}


def _PlanMismatch(current, plan):
  """Like `_TypeMismatch`, for a value that is not built yet; None if it fits."""
  if current is None:
    return None
  kind = plan[0]
  if kind == 'value':
    return _TypeMismatch(current, plan[1])
  expected = _KindOf(current)
  if kind == 'object':
    got = 'Object(%r, ...)' % plan[1]
    return None if expected is None else 'expected %s, got %s' % (
        expected[0], got)
  if kind == 'dtype':
    ok = expected is None or _IsDType(current)
    return None if ok else 'expected %s, got a DType' % expected[0]
  sample, got = _PLAN_KINDS[kind]
  if sample is None:
    sample = Params() if kind == 'params' else nested_map.NestedMap()
  if expected is None:
    bad = callable(current) and not callable(sample)
    return 'expected a callable, got %s' % got if bad else None
  return None if expected[1](sample) else 'expected %s, got %s' % (
      expected[0], got)


def _OneLine(e, limit=600):
  text = ' '.join(str(e).split())
  return text if len(text) <= limit else text[:limit] + '...'


def DecodeValue(text):
  """Reads a value written by `EncodeValue`; never evaluates code.

  Only literal syntax and the named forms of `EncodeValue` are accepted, and
  within the bounds MAX_VALUE_CHARS, MAX_DEPTH, MAX_ITEMS and MAX_BUILDS.
  No module is imported: `Class`, `Function` and `Enum` look names up in
  modules already imported. `Class` names only classes with a `Params()`
  classmethod, Enum classes and classes registered with `RegisterForText`;
  `Function` only registered functions; `Object('path', ...)` calls only a
  constructor registered for text (`TextFactory`, `TextSerializable`);
  `Params(cls=X, ...)` calls `X.Params()` only for such an X.
  `Params.FromText` also lets a line restate the class or function already
  at its key, and checks the kind of the value before building it.

  Args:
    text: str, one encoded value.

  Returns:
    The value.

  Raises:
    ValueError: if the text is not a valid encoded value, exceeds a bound,
      names something not allowed or not imported, or a constructor fails.
  """
  reader = _ValueReader()
  return reader.Build(reader.Plan(text))


def _BuildParams(kwargs):
  """Rebuilds an inline Params: cls.Params() if cls has one, with the keys."""
  cls = kwargs.get('cls')
  if cls is not None and not isinstance(cls, type):
    raise ValueError('Params(cls=...) must be a class, got %s %r' %
                     (type(cls).__name__, cls))
  if _IsParamsClass(cls):
    p = _CallParams(cls)
  elif 'cls' in kwargs:
    p = InstantiableParams(cls)
  else:
    p = Params()
  extra = [k for k, _ in p.IterParams() if k not in kwargs]
  if extra:
    p.Delete(*extra)  # The text lists every key the params had.
  for k, v in kwargs.items():
    if k in p:
      setattr(p, k, v)
    else:
      p.Define(k, v, '')
  return p


def _CallParams(cls):
  """cls.Params() for a class `_IsParamsClass` accepts; checks what it returns."""
  p = inspect.getattr_static(cls, 'Params').__get__(None, cls)()
  if not isinstance(p, InstantiableParams) or p.cls is not cls:
    raise ValueError('%s.Params() did not return InstantiableParams with cls '
                     '%s' % (cls.__qualname__, cls.__qualname__))
  return p
