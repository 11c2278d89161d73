"""Params: the typed, documented, text-round-trippable configuration object.

Every component in this framework is built from a `Params` object: a set of
named, documented values (`Define`), changed with attribute assignment or
`Set`, copied deeply with `Copy`, frozen with `Freeze`, and written to and read
from text with `ToText` / `FromText`. `InstantiableParams` also carries the
class to build (`cls`) and builds it with `Instantiate()`.

The text form lives beside this module: params/params_text.py (a Params as
'key : value' lines), params/value_codec.py (one value: `EncodeValue`,
`DecodeValue`) and params/text_registry.py (what text may name). Imports go
one way, hyperparams -> params_text -> value_codec: this module is the top,
`Params` derives from `value_codec.ParamsBase` (how the codec recognises
it), and `PARAMS_CLASSES` is what this module passes down for the reader to
build Params with. The reader uses only public methods (`IterParams`, `Get`,
`Set`, `ResolveKey`, `GetCopy`).

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

import copy
import difflib
import re

import numpy as np

from params import params_text
from params import value_codec

_NAME_RE = re.compile(r'^[a-z_][a-z0-9_]*$')
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
        (key, i, type(container).__name__,
         value_codec.OneLine(repr(container), 80), i))
  if not -len(container) <= i < len(container):
    raise AttributeError(
        'Key %r: index [%d] is out of range: the list has %d item(s) '
        '(indices 0..%d).' % (key, i, len(container), len(container) - 1))
  return container[i]


class _Param:
  """One defined value: name, value and its documentation."""

  def __init__(self, name, default, doc):
    self.name = name
    self.value = default
    self.doc = doc


def _ListKeyMessage(key, segments, seg_i, value):
  """The error for a key that goes through a list of Params without [i].

  E.g. 'task.train.learner.learning_rate' on a task with two learners: the
  fix is an index, 'task.train.learner[0].learning_rate'.
  """
  head = '.'.join(segments[:seg_i])
  tail = '.'.join(segments[seg_i:])
  return ('Key %r: %r is a list of %d Params, not a Params; index it, e.g. '
          '%r (indices 0..%d).' % (key, head, len(value),
                                   '%s[0].%s' % (head, tail), len(value) - 1))


class Params(value_codec.ParamsBase):
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
      raise AttributeError(self._Unknown(name))
    return params[name].value

  def __setattr__(self, name, value):
    self._CheckMutable(name)
    if name not in self._params:
      raise AttributeError(self._Unknown(name))
    self._params[name].value = value

  def SetHints(self, hints):
    """Says where a name that is not defined here belongs; returns self.

    Args:
      hints: {name: text}; getting or setting an undefined `name` raises
        AttributeError "Param '<name>' is not defined here: <text>" instead
        of the closest defined names (e.g. for a Lingvo key that lives on
        another params object). Kept by Copy; not part of the params' text
        or equality.
    """
    self.__dict__['_hints'] = dict(hints)
    return self

  def _Unknown(self, name):
    hint = self.__dict__.get('_hints', {}).get(name)
    if hint:
      return 'Param %r is not defined here: %s' % (name, hint)
    return _UnknownNameMessage('Param', name, self._params)

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
      raise AttributeError(self._Unknown(name))
    return self._params[name].doc

  def _CheckMutable(self, name):
    if self.__dict__['_immutable']:
      raise AttributeError(
          'Params are frozen; cannot change %r. Make a mutable copy with '
          'p.Copy(frozen=False) and change that.' %
          (self.__dict__.get('_frozen_at', '') + name,))

  # ---- dotted paths --------------------------------------------------------

  def ResolveKey(self, key):
    """Returns (params, name, indices) where the dotted key `key` ends.

    For 'a.b[1].c[0]': the Params holding 'c' (the value of a.b[1]), 'c',
    and [0], the indices after the last name (ints). Nothing is changed.

    Raises:
      AttributeError: as `Get`, if the key is malformed or does not exist.
    """
    segments = key.split('.')
    obj = self
    for seg_i, seg in enumerate(segments):
      m = _KEY_SEGMENT_RE.match(seg)
      if not m:
        if not seg:
          raise AttributeError(
              'Malformed key %r: an empty segment (two dots in a row, or a '
              'dot at an end); write the dotted path of a param, e.g. '
              'task.train.max_steps.' % key)
        raise AttributeError(
            'Malformed key %r (segment %r): a segment is a param name, '
            'optionally indexed (learner[0]); write e.g. '
            'task.train.learner[0].learning_rate.' % (key, seg))
      name, idx_text = m.group(1), m.group(2)
      indices = [int(i) for i in re.findall(r'\[(\d+)\]', idx_text)]
      if isinstance(obj, (list, tuple)) and any(
          isinstance(x, Params) for x in obj):
        raise AttributeError(_ListKeyMessage(key, segments, seg_i, obj))
      if not isinstance(obj, Params):
        parent = '.'.join(segments[:seg_i])
        raise AttributeError(
            'Key %r: %r is not a Params (it is a %s), so it has no %r; set '
            '%r itself (%s : <value>).' % (key, parent, type(obj).__name__,
                                           seg, parent, parent))
      if name not in obj._params:
        raise AttributeError(
            'Key %r: ' % key +
            obj._Unknown(name))
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
    parent, name, indices = self.ResolveKey(key)
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
    parent, name, indices = self.ResolveKey(key)
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

  def GetCopy(self, name):
    """Returns a deep copy of the value of param `name`, as `Copy` makes it.

    Nested Params are copied (keeping their frozen state), lists, tuples
    and dicts item by item (frozen ones come back plain), other values with
    copy.deepcopy; classes, functions and values that cannot be copied are
    shared.

    Raises:
      AttributeError: if `name` is not defined here.
    """
    if name not in self._params:
      raise AttributeError(self._Unknown(name))
    return _CopyValue(self._params[name].value)

  def Delete(self, *names):
    """Removes the named params; returns self.

    Raises:
      AttributeError: if a name is not defined or the params are frozen.
    """
    for name in names:
      self._CheckMutable(name)
      if name not in self._params:
        raise AttributeError(self._Unknown(name))
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
      if k not in ('_params', '_immutable', '_frozen_at'):
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
  'layers[0].dim'. List and dict values are frozen too (at any depth): they
  read, compare and print as before, but `append`, item assignment and the
  other changes in place raise AttributeError. Undo only with an explicit
  mutable copy: `p.Copy(frozen=False)`. A refused change names the param by
  its dotted key from the Params frozen (e.g. 'train.boundaries',
  'layers[0].dims[1]').
  """
    return self._FreezeAt('')

  def _FreezeAt(self, prefix):
    """Freeze(), with `prefix` (e.g. 'task.train.') before every key."""
    self.__dict__['_immutable'] = True
    self.__dict__['_frozen_at'] = prefix
    for name, param in self._params.items():
      param.value = _FrozenValue(param.value, prefix + name)
      for key, sub in _NestedParamsWithKeys(param.value, prefix + name):
        sub._FreezeAt(key + '.')
    return self

  def _Thaw(self):
    self.__dict__['_immutable'] = False
    self.__dict__.pop('_frozen_at', None)
    for param in self._params.values():
      param.value = _ThawedValue(param.value)
      for sub in _NestedParams(param.value):
        sub._Thaw()

  @property
  def is_frozen(self):
    return self._immutable

  # ---- text: written and read by params/params_text.py -----------------------

  def ToText(self):
    """Returns the params as sorted 'dotted.key : value' lines.

    Nested Params and lists of Params are flattened into dotted keys
    ('train.learner[0].learning_rate'); other values are written with
    `EncodeValue` (params/value_codec.py). See `params_text.ToText`.
    """
    return params_text.ToText(self)

  def FromText(self, text):
    """Applies 'dotted.key : value' lines to these params; returns self.

    See `params_text.FromText` (params/params_text.py) for the format, the
    class lines that rebuild nested params, and the reader's bounds.

    Raises:
      AttributeError: if the params are frozen.
      ValueError: one line naming the line and key if a line is malformed,
        the key does not exist (with close names), the value has no text
        form, exceeds a bound, names something text may not name, or its
        type does not match the current value.
    """
    return params_text.FromText(self, text, PARAMS_CLASSES)

  def TextDiff(self, other):
    """Returns a readable diff of two params: only keys that differ.

    Lines: '  key : mine -> theirs' for changed values, '- key : v' for keys
    only here, '+ key : v' for keys only in `other`. Empty string if equal.
    """
    return params_text.TextDiff(self, other)


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


# The classes the text reader builds Params with (value_codec.ParamsClasses):
# `Params(...)` values, `Params(cls=X)` for an X without Params(), and what
# X.Params() must return. Pass it to value_codec.DecodeValue.
PARAMS_CLASSES = value_codec.ParamsClasses(params=Params,
                                           instantiable=InstantiableParams)


# ---- helpers on values --------------------------------------------------------
def _RefuseChange(kind):
  def _Refuse(self, *unused_args, **unused_kwargs):
    what = ('the %s value of %r' % (kind, self.key) if self.key else
            'this %s value' % kind)
    raise AttributeError('Params are frozen; %s cannot change. Make a '
                         'mutable copy with p.Copy(frozen=False) and change '
                         'that.' % what)
  return _Refuse


class FrozenList(list):
  """A list value of frozen Params: reads as a list, refuses every change.

  `key`: the param's dotted key (e.g. 'train.boundaries'), named when a
  change is refused; None if unknown.
  """
  append = extend = insert = remove = pop = clear = sort = reverse = (
      _RefuseChange('list'))
  __setitem__ = __delitem__ = __iadd__ = __imul__ = _RefuseChange('list')

  def __init__(self, items=(), key=None):
    super().__init__(items)
    self.key = key

  def __reduce__(self):  # copy, deepcopy and pickle rebuild it whole.
    return (FrozenList, (list(self), self.key))


class FrozenDict(dict):
  """A dict value of frozen Params: reads as a dict, refuses every change.

  `key` as FrozenList's.
  """
  __setitem__ = __delitem__ = _RefuseChange('dict')
  clear = pop = popitem = setdefault = update = _RefuseChange('dict')
  __ior__ = _RefuseChange('dict')

  def __init__(self, items=(), key=None):
    super().__init__(items)
    self.key = key

  def __reduce__(self):
    return (FrozenDict, (dict(self), self.key))


def _ItemKey(key, index):
  """'key[index]' (a list or tuple position, or a dict key's repr)."""
  return '%s[%r]' % (key, index)


def _FrozenValue(value, key=None):
  """`value` with its plain lists and dicts (at any depth) frozen.

  `key`, the param's dotted key, is kept on each frozen container (an
  element's as 'key[i]') for the message that refuses a change.
  """
  if type(value) in (list, FrozenList):
    return FrozenList((_FrozenValue(v, _ItemKey(key, i))
                       for i, v in enumerate(value)), key)
  if type(value) in (dict, FrozenDict):
    return FrozenDict(((k, _FrozenValue(v, _ItemKey(key, k)))
                       for k, v in value.items()), key)
  if type(value) is tuple:
    return tuple(_FrozenValue(v, _ItemKey(key, i))
                 for i, v in enumerate(value))
  return value


def _ThawedValue(value):
  """`value` with its frozen lists and dicts made plain again."""
  if type(value) in (list, FrozenList):
    return [_ThawedValue(v) for v in value]
  if type(value) in (dict, FrozenDict):
    return {k: _ThawedValue(v) for k, v in value.items()}
  if type(value) is tuple:
    return tuple(_ThawedValue(v) for v in value)
  return value


def NestedParamsWithKeys(p, key):
  """Yields (dotted key, Params) for `p` and every Params inside it.

  Nested Params and Params in lists or tuples are visited depth first;
  a list element's key is '<key>.<name>[i]'.

  Args:
    p: a Params.
    key: its own dotted key, e.g. 'task.train.learner[0]'.
  """
  yield key, p
  for name, value in p.IterParams():
    sub = '%s.%s' % (key, name)
    if isinstance(value, Params):
      yield from NestedParamsWithKeys(value, sub)
    elif isinstance(value, (list, tuple)):
      for i, v in enumerate(value):
        if isinstance(v, Params):
          yield from NestedParamsWithKeys(v, '%s[%d]' % (sub, i))


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


def _NestedParamsWithKeys(value, key):
  """As `_NestedParams`, yielding (dotted key, Params): 'key', 'key[i]'."""
  if isinstance(value, Params):
    yield key, value
  elif isinstance(value, (list, tuple)):
    for i, v in enumerate(value):
      yield from _NestedParamsWithKeys(v, _ItemKey(key, i))
  elif isinstance(value, dict):
    for k, v in value.items():
      yield from _NestedParamsWithKeys(v, _ItemKey(key, k))


def _CopyValue(value):
  if isinstance(value, Params):
    return value.Copy()
  if isinstance(value, list):
    return [_CopyValue(v) for v in value]
  if isinstance(value, tuple):
    return type(value)(*[_CopyValue(v) for v in value]) if hasattr(
        value, '_fields') else tuple(_CopyValue(v) for v in value)
  if isinstance(value, FrozenDict):
    return {k: _CopyValue(v) for k, v in value.items()}
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
    kind = lambda x: list if isinstance(x, FrozenList) else type(x)
    return (kind(a) is kind(b) and len(a) == len(b) and
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
