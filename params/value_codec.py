"""One value and its text form: `EncodeValue` writes it, `DecodeValue` reads it.

The writer covers literals, lists/tuples/dicts, Params inside containers,
NestedMap, classes, functions, enum members, `tf.DType`s and objects with a
`TextSpec` (text_registry.TextSerializable); anything else is a marker the
reader refuses. The reader is safe: it parses with `ast` after a bounded
pre-scan, never evaluates or imports, names only what params/text_registry.py
allows, and checks the kind of a value against the key's current value
before building it. Params/hyperparams.py holds `Params`; params_text.py
applies these values to the keys of a Params.

Imports go one way: hyperparams -> params_text -> value_codec (this module
is the bottom; it imports only nested_map and text_registry). It knows a
Params by its base, `ParamsBase`, and builds one only with the classes its
caller passes (`ParamsClasses`, e.g. `hyperparams.PARAMS_CLASSES`).
"""

import ast
import collections
import enum
import inspect
import keyword
import re
import sys

import numpy as np

from params import nested_map
from params.text_registry import ImportPath
from params.text_registry import LookupImported
from params.text_registry import MovedPath
from params.text_registry import RegisteredAt
from params.text_registry import ResolveImportPath

# How EncodeValue begins the text of a value that has none; the reader
# refuses it (params_text names the key).
NO_TEXT_MARKER = '<no text form: '


class ParamsBase:
  """What this module knows of a Params: `hyperparams.Params` derives from it.

  It has no state and no behaviour. An instance is written as
  `Params(k=v, ...)` from its `IterParams()` and is of the kind 'Params'
  when a value is checked against a key (`TypeMismatch`); it is the same
  test as `isinstance(x, hyperparams.Params)`, made without importing that
  module (which sits above this one). Derive from `hyperparams.Params`, not
  from this class.
  """


class ParamsClasses(collections.namedtuple('ParamsClasses',
                                           'params instantiable')):
  """The Params classes the reader builds, passed in by its caller.

  This module never imports params/hyperparams.py, so a caller that decodes
  text which may hold `Params(...)` passes `hyperparams.PARAMS_CLASSES`.

  Fields:
    params: the class of `Params(k=v, ...)` without `cls`, called with no
      argument (hyperparams.Params).
    instantiable: the class of `Params(cls=X, ...)` when X has no Params()
      classmethod (or X is None), called with X; `X.Params()` must return an
      instance of it (hyperparams.InstantiableParams).
  """
  __slots__ = ()


def OneLine(e, limit=600):
  """str(e) with its whitespace runs made one space, cut after `limit` chars.

  For error messages that must stay one line: a cut text ends with '...'.
  """
  text = ' '.join(str(e).split())
  return text if len(text) <= limit else text[:limit] + '...'


def TypeMismatch(current, value):
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


# A count given as a duration ('2000 examples', '1.5 epochs'): an int param
# of text may hold one; the schedules' lengths take it and the trainer
# converts it (schedules/durations.py); any other consumer refuses it.
_DURATION = re.compile(
    r'^\s*[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\s*(?:examples?|epochs?)\s*$')


_NEGATIVE_DURATION = re.compile(
    r'^\s*-\s*[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\s*(?:examples?|epochs?)\s*$')


def IsNegativeDuration(value):
  """True if `value` is a str like '-2000 examples' or '-1.5 epochs'.

  Such a value is refused wherever a duration is read (the params text, the
  trainer's conversion), with a message that names the sign: a duration is
  a length and must be positive. Any other value (an int, '2000 examples',
  'abc') gives False.
  """
  return isinstance(value, str) and _NEGATIVE_DURATION.match(value) is not None


def _IsCount(v):
  return (_IsNumber(v) and isinstance(v, int)) or (
      isinstance(v, str) and _DURATION.match(v) is not None)


def _KindOf(current):
  """(description, accepts(value)) for the kind of `current`, or None."""
  if isinstance(current, bool):
    return 'a bool', lambda v: isinstance(v, bool)
  if isinstance(current, enum.Enum):
    return ('a member of the enum %s' % type(current).__name__,
            lambda v: isinstance(v, type(current)))
  if isinstance(current, int):
    return 'an int', _IsCount
  if isinstance(current, float):
    return 'a float', _IsNumber
  for types, name in ((str, 'a str'), (bytes, 'a bytes'),
                      ((list, tuple), 'a list or tuple'), (dict, 'a dict'),
                      (ParamsBase, 'Params'), (type, 'a class')):
    if isinstance(current, types):
      return name, lambda v, types=types: isinstance(v, types)
  if _IsDType(current):
    return 'a DType', _IsDType
  return None



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
    return '%s%s>' % (NO_TEXT_MARKER, e)


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
  if isinstance(value, ParamsBase):
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


def IsParamsClass(obj):
  """True if `obj` is a class whose `Params` is a classmethod (found statically).

  Nothing is called: the attribute is read with `inspect.getattr_static`.
  """
  if not isinstance(obj, type):
    return False
  try:
    return isinstance(inspect.getattr_static(obj, 'Params'), classmethod)
  except AttributeError:
    return False


def _ResolveClass(path, current):
  """A class text may name: registered, with Params(), an Enum, or `current`."""
  entry = RegisteredAt(MovedPath(path))
  obj = entry[0] if entry else LookupImported(path)
  if not isinstance(obj, type):
    raise ValueError('%r is not a class' % path)
  if (entry or obj is current or IsParamsClass(obj) or
      issubclass(obj, enum.Enum)):
    return obj
  raise ValueError(
      'Class(%r) is refused: params text may name only classes with a '
      'Params() classmethod, Enum classes, classes registered with '
      'params.text_registry.RegisterForText, or the class already there' % path)


def _ResolveFunction(path, current):
  """A function text may name: registered for text, or the one already there."""
  entry = RegisteredAt(MovedPath(path))
  if entry is not None and callable(entry[0]):
    return entry[0]
  if current is not None and callable(current) and ImportPath(current) in (
      path, MovedPath(path)):
    return current
  raise ValueError(
      'Function(%r) is refused: params text may name only functions '
      'registered with params.text_registry.RegisterForText (or TextFactory) '
      'in their module, or the function already there' % path)


def _ResolveEnum(path, member):
  enum_cls = (RegisteredAt(MovedPath(path)) or (None,))[0]
  if enum_cls is None:
    enum_cls = LookupImported(path)
  if not (isinstance(enum_cls, type) and issubclass(enum_cls, enum.Enum)):
    raise ValueError('%r is not an Enum class' % path)
  members = vars(enum_cls).get('_member_map_')
  if not isinstance(members, dict) or member not in members:
    raise ValueError('%r has no member %r' % (path, member))
  return members[member]


def _ResolveConstructor(path):
  entry = RegisteredAt(MovedPath(path))
  if entry is None or not entry[1]:
    raise ValueError(
        'Object(%r, ...): %r is not registered as a text constructor (a '
        'TextSerializable subclass or a function decorated with '
        'params.text_registry.TextFactory, in a module this process has '
        'imported); refusing to call it' % (path, path))
  return entry[0]


_NO_CURRENT = object()


class ValueReader:
  """Reads one value in two steps: Plan (looks names up, calls nothing),
  then Build (calls the registered constructors, at most MAX_BUILDS).

  Args:
    current: the value now at the key, if any: a `Class`/`Function` line
      may restate it even when text could not name it otherwise.
    params_classes: a `ParamsClasses`, the classes `Params(...)` builds; if
      None, Build refuses a `Params(...)` value (ValueError naming the fix).
  """

  def __init__(self, current=_NO_CURRENT, params_classes=None):
    self._current = None if current is _NO_CURRENT else current
    self._classes = params_classes
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
      return _BuildParams(kwargs, self._classes)
    try:
      return plan[2](**kwargs)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError('Object(%r, ...) failed: %s: %s' % (
          plan[1], type(e).__name__, OneLine(e))) from None

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
    raise ValueError('DType(%r): %s' % (name, OneLine(e))) from None


_PLAN_KINDS = {'list': ([], 'a list'), 'tuple': ((), 'a tuple'),
               'dict': ({}, 'a dict'), 'params': (None, 'Params'),
               'nested_map': (None, 'a NestedMap')}


def PlanMismatch(current, plan):
  """Like `TypeMismatch`, for a value that is not built yet; None if it fits.

  Args:
    current: the value now at the key.
    plan: what `ValueReader.Plan` returned for the new value.

  Returns:
    None if the planned value may replace `current`, else a message
    ('expected a float, got Params').
  """
  if current is None:
    return None
  kind = plan[0]
  if kind == 'value':
    return TypeMismatch(current, plan[1])
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
    sample = ParamsBase() if kind == 'params' else nested_map.NestedMap()
  if expected is None:
    bad = callable(current) and not callable(sample)
    return 'expected a callable, got %s' % got if bad else None
  return None if expected[1](sample) else 'expected %s, got %s' % (
      expected[0], got)


def DecodeValue(text, params_classes=None):
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
    params_classes: a `ParamsClasses`, the classes a `Params(...)` in the
      text builds: pass `params.PARAMS_CLASSES` (hyperparams) to read one.
      Without it every other form is read as usual and `Params(...)` is
      refused.

  Returns:
    The value.

  Raises:
    ValueError: if the text is not a valid encoded value, exceeds a bound,
      names something not allowed or not imported, a constructor fails, or
      it holds `Params(...)` and no params_classes were given.
  """
  reader = ValueReader(params_classes=params_classes)
  return reader.Build(reader.Plan(text))


def _BuildParams(kwargs, classes):
  """Rebuilds an inline Params: cls.Params() if cls has one, with the keys."""
  if classes is None:
    raise ValueError(
        'Params(...) is built only with the Params classes, and none were '
        'given; read it with DecodeValue(text, '
        'params_classes=params.PARAMS_CLASSES)')
  cls = kwargs.get('cls')
  if cls is not None and not isinstance(cls, type):
    raise ValueError('Params(cls=...) must be a class, got %s %r' %
                     (type(cls).__name__, cls))
  if IsParamsClass(cls):
    p = CallParams(cls, classes)
  elif 'cls' in kwargs:
    p = classes.instantiable(cls)
  else:
    p = classes.params()
  extra = [k for k, _ in p.IterParams() if k not in kwargs]
  if extra:
    p.Delete(*extra)  # The text lists every key the params had.
  for k, v in kwargs.items():
    if k in p:
      setattr(p, k, v)
    else:
      p.Define(k, v, '')
  return p


def CallParams(cls, params_classes):
  """Returns cls.Params() for a class `IsParamsClass` accepts.

  Args:
    cls: a class with a Params() classmethod.
    params_classes: a `ParamsClasses`; the result must be an instance of its
      `instantiable` class.

  Raises:
    ValueError: if cls.Params() did not return such params with `cls` set
      to `cls`.
  """
  p = inspect.getattr_static(cls, 'Params').__get__(None, cls)()
  if not isinstance(p, params_classes.instantiable) or p.cls is not cls:
    raise ValueError('%s.Params() did not return InstantiableParams with cls '
                     '%s' % (cls.__qualname__, cls.__qualname__))
  return p
