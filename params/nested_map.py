"""NestedMap: a dict with attribute access that `tf.nest` understands.

After Lingvo's `py_utils.NestedMap`. Keys are identifiers that do not clash
with dict methods; values may be NestedMaps, lists, tuples or leaves.
`tf.nest.flatten` / `tf.nest.pack_sequence_as` keep the NestedMap type.

NestedMap's own methods (`Flatten`, `Pack`, `Transform`, `Filter`, ...)
descend into dicts, lists and plain tuples, and treat namedtuples (such as
`learner.VarGrad`) as leaves, as Lingvo does, so
`var_grads.Transform(lambda vg: ...)` sees whole (var, grad) pairs.
"""

import copy
import re

_KEY_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_PATH_SEGMENT_RE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$')


def _IsSeq(v):
  """True for lists and plain tuples (namedtuples are leaves)."""
  return isinstance(v, list) or (isinstance(v, tuple) and
                                 not hasattr(v, '_fields'))


class NestedMap(dict):
  """A dict whose keys are also attributes: `m.a.b` is `m['a']['b']`.

  Raises:
    ValueError: when a key is not an identifier or clashes with a dict method
      (e.g. 'keys', 'items').
    AttributeError: on attribute access of a missing key (listing the keys).
  """

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    for key in self.keys():
      self.CheckKey(key)

  @staticmethod
  def CheckKey(key):
    """Raises ValueError if `key` cannot be a NestedMap key."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
      raise ValueError('NestedMap key %r is not a valid identifier.' % (key,))
    if key in _RESERVED:
      raise ValueError('NestedMap key %r clashes with a dict or NestedMap '
                       'method or attribute; choose another name.' % key)

  def __setitem__(self, key, value):
    self.CheckKey(key)
    super().__setitem__(key, value)

  def update(self, *args, **kwargs):  # pylint: disable=invalid-name
    """dict.update that checks every key (see CheckKey)."""
    for k, v in dict(*args, **kwargs).items():
      self[k] = v

  def setdefault(self, key, default=None):  # pylint: disable=invalid-name
    """dict.setdefault that checks the key (see CheckKey)."""
    if key not in self:
      self[key] = default
    return self[key]

  def __setattr__(self, name, value):
    self[name] = value

  def __getattr__(self, name):
    try:
      return self[name]
    except KeyError:
      raise AttributeError('%r is not in the NestedMap; keys: %s' %
                           (name, sorted(self.keys()))) from None

  def __delattr__(self, name):
    try:
      del self[name]
    except KeyError:
      raise AttributeError(name) from None

  def copy(self):
    """Shallow copy that keeps the NestedMap type."""
    return NestedMap(self)

  def __deepcopy__(self, memo):
    # copy.deepcopy copies everything, leaves included; DeepCopy() is the
    # cheap structural copy that shares leaves.
    return NestedMap(
        (k, copy.deepcopy(v, memo)) for k, v in self.items())

  def DeepCopy(self):
    """Copies every nested container; leaves are shared (tensors are immutable)."""

    def _Copy(v):
      if isinstance(v, NestedMap):
        return v.DeepCopy()
      if isinstance(v, dict):
        return type(v)((k, _Copy(x)) for k, x in v.items())
      if isinstance(v, list):
        return [_Copy(x) for x in v]
      if _IsSeq(v):
        return tuple(_Copy(x) for x in v)
      return v

    return NestedMap((k, _Copy(v)) for k, v in self.items())

  # ---- flattening ----------------------------------------------------------

  def FlattenItems(self):
    """Returns [(dotted_key, leaf)] in sorted key order; lists as 'a.b[0]'."""
    out = []

    def _Walk(prefix, v):
      if isinstance(v, dict):
        for k in sorted(v.keys()):
          _Walk('%s.%s' % (prefix, k) if prefix else k, v[k])
      elif _IsSeq(v):
        for i, x in enumerate(v):
          _Walk('%s[%d]' % (prefix, i), x)
      else:
        out.append((prefix, v))

    _Walk('', self)
    return out

  def Flatten(self):
    """Returns the leaves in the order of `FlattenItems`."""
    return [v for _, v in self.FlattenItems()]

  def Pack(self, leaves):
    """Returns a NestedMap like self with the leaves replaced, in order.

    Raises:
      ValueError: if the number of leaves does not match.
    """
    leaves = list(leaves)
    n = len(self.Flatten())
    if len(leaves) != n:
      raise ValueError('Pack expected %d leaves, got %d.' % (n, len(leaves)))
    it = iter(leaves)

    def _Rebuild(v):
      if isinstance(v, dict):
        return type(v)((k, _Rebuild(v[k])) for k in sorted(v.keys()))
      if isinstance(v, list):
        return [_Rebuild(x) for x in v]
      if _IsSeq(v):
        return tuple(_Rebuild(x) for x in v)
      return next(it)

    return _Rebuild(self)

  def Transform(self, fn):
    """Returns a NestedMap like self with `fn(leaf)` at each leaf."""
    return self.Pack([fn(v) for v in self.Flatten()])

  def IsCompatible(self, other):
    """True if `other` is a NestedMap with the same structure and keys.

    Structure means the same dict keys, list/tuple lengths and leaf
    positions, empty containers included; the leaf values do not matter.
    """
    if not isinstance(other, NestedMap):
      return False
    return _Structure(self) == _Structure(other)

  def FilterKeyVal(self, fn):
    """Returns a NestedMap with the leaves where fn(dotted_key, leaf) is true.

    Empty sub-containers are removed.
    """

    def _Filter(prefix, v):
      if isinstance(v, dict):
        res = type(v)()
        for k in v:
          sub = _Filter('%s.%s' % (prefix, k) if prefix else k, v[k])
          if sub is not _DROP:
            res[k] = sub
        return res if res else _DROP
      if _IsSeq(v):
        res = []
        for i, x in enumerate(v):
          sub = _Filter('%s[%d]' % (prefix, i), x)
          if sub is not _DROP:
            res.append(sub)
        return type(v)(res) if res else _DROP
      return v if fn(prefix, v) else _DROP

    res = _Filter('', self)
    return NestedMap() if res is _DROP else res

  def Filter(self, fn):
    """Returns a NestedMap with the leaves where fn(leaf) is true."""
    return self.FilterKeyVal(lambda _, v: fn(v))

  # ---- dotted access -------------------------------------------------------

  def _Walk(self, key, create):
    """Returns (container, last key or index) for a dotted key."""
    if not isinstance(key, str):
      raise KeyError('NestedMap key %r must be a str.' % (key,))
    segments = key.split('.')
    obj = self
    for i, seg in enumerate(segments):
      m = _PATH_SEGMENT_RE.match(seg)
      if not m:
        raise KeyError('Malformed key %r (segment %r); expected dotted '
                       'identifiers with optional [i] indices, e.g. '
                       '\'a.b[0].c\'.' % (key, seg))
      name = m.group(1)
      indices = [int(x) for x in re.findall(r'\[(\d+)\]', m.group(2))]
      last = i == len(segments) - 1
      if not isinstance(obj, dict):
        raise KeyError('%r: %r is a %s, not a map.' %
                       (key, '.'.join(segments[:i]), type(obj).__name__))
      if last and not indices:
        return obj, name
      if name not in obj:
        if not create or indices:
          raise KeyError('%r: %r is not in the map; keys: %s' %
                         (key, name, sorted(obj.keys())))
        obj[name] = NestedMap()
      obj = obj[name]
      for j, idx in enumerate(indices):
        if not isinstance(obj, (list, tuple)) or idx >= len(obj):
          raise KeyError('%r: index [%d] of %r is out of range or not a list.'
                         % (key, idx, seg))
        if last and j == len(indices) - 1:
          return obj, idx
        obj = obj[idx]
    raise KeyError(key)

  def Get(self, key):
    """Returns the value at a dotted key ('a.b', 'a.b[0].c').

    Raises:
      KeyError: naming the key, the missing part and the keys that exist.
    """
    container, last = self._Walk(key, create=False)
    try:
      return container[last]
    except (KeyError, IndexError):
      raise KeyError('%r: %r is not in the map; keys: %s' %
                     (key, last, sorted(container.keys()))) from None

  def Set(self, key, value):
    """Sets the value at a dotted key, creating NestedMaps on the way.

    Raises:
      KeyError: if the path goes through a leaf or a missing list index.
      ValueError: if a new key clashes with a method (see CheckKey).
    """
    container, last = self._Walk(key, create=True)
    if isinstance(container, tuple):
      raise KeyError('%r: cannot assign into a tuple.' % key)
    container[last] = value


class _Drop:
  pass


_DROP = _Drop()


def _Structure(v):
  """A hashable description of v's containers, ignoring the leaf values."""
  if isinstance(v, dict):
    return ('dict', tuple((k, _Structure(v[k])) for k in sorted(v.keys())))
  if _IsSeq(v):
    return (type(v).__name__, tuple(_Structure(x) for x in v))
  return 'leaf'


# Keys that would hide a dict or NestedMap method or attribute.
_RESERVED = frozenset(dir(NestedMap))
