"""A Params as text: sorted 'dotted.key : value' lines, written and read.

`ToText(p)` flattens nested Params (and lists of them) into dotted keys and
writes each value with `value_codec.EncodeValue`; `FromText(p, text)` reads
such lines back into existing keys (`TextLines` splits them, the value
reader of params/value_codec.py reads each value after its key and kind are
checked); `TextDiff` compares two params by their text. `Params.ToText`,
`Params.FromText` and `Params.TextDiff` (params/hyperparams.py) call these.
`ReadTextFile` reads a params file within the reader's size bound.

The text is data: see "Params text is data" in README.md.

Imports go one way: hyperparams -> params_text -> value_codec. This module
never imports params/hyperparams.py: it knows a Params by its base
(`value_codec.ParamsBase`), reaches into one only through its public
methods (`IterParams`, `Get`, `Set`, `ResolveKey`, `GetCopy`), and builds
Params only with the classes the caller passes (`FromText`'s
`params_classes`).
"""

import re

from params.value_codec import CallParams
from params.value_codec import EncodeValue
from params.value_codec import IsNegativeDuration
from params.value_codec import IsParamsClass
from params.value_codec import MAX_ITEMS
from params.value_codec import MAX_TEXT_CHARS
from params.value_codec import NO_TEXT_MARKER
from params.value_codec import OneLine
from params.value_codec import ParamsBase
from params.value_codec import PlanMismatch
from params.value_codec import TypeMismatch
from params.value_codec import ValueReader


def _FlatItems(p, prefix=''):
  """Yields (dotted_key, value) with nested Params and lists of them flattened."""
  for name, value in sorted(p.IterParams()):
    key = prefix + name
    if isinstance(value, ParamsBase):
      if len(value) == 0:
        yield key, value
      else:
        yield from _FlatItems(value, key + '.')
    elif (isinstance(value, list) and value and
          all(isinstance(v, ParamsBase) and len(v) for v in value)):
      for i, v in enumerate(value):
        yield from _FlatItems(v, '%s[%d].' % (key, i))
    else:
      yield key, value


def ToText(p):
  """Returns the params as sorted 'dotted.key : value' lines.

  Nested Params and lists of Params are flattened into dotted keys
  ('train.learner[0].learning_rate'); other values are written with
  `EncodeValue`.
  """
  lines = ['%s : %s' % (k, EncodeValue(v)) for k, v in _FlatItems(p)]
  return '\n'.join(sorted(lines)) + ('\n' if lines else '')


def FromText(p, text, params_classes):
  """Applies 'dotted.key : value' lines to the Params `p`; returns p.

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

  Args:
    p: the Params to change (a `value_codec.ParamsBase`).
    text: str, the lines.
    params_classes: a `value_codec.ParamsClasses`, the classes that
      `Params(...)` values build (`hyperparams.PARAMS_CLASSES`;
      `Params.FromText` passes it).

  Raises:
    AttributeError: if the params are frozen.
    ValueError: one line naming the line and key if a line is malformed,
      the key does not exist (with close names), the value has no text
      form, exceeds a bound, names something text may not name, or its
      type does not match the current value.
  """
  if p.is_frozen:
    raise AttributeError(
        'Params are frozen; FromText cannot change them. Apply the text to '
        'a mutable copy: p.Copy(frozen=False).FromText(text).')
  lines = list(TextLines(text))
  _ApplyClassLines(p, lines, params_classes)
  for line_no, line, key, value_text in lines:
    shown = '%s %s' % (line_no, _ShownLine(line))
    try:
      current = p.Get(key)
    except AttributeError as e:
      # The error starts with "Key '<key>': "; say the key only once.
      why = str(e)
      if why.startswith('Key %r: ' % key):
        why = why[len('Key %r: ' % key):]
      raise ValueError('Line %s: unknown key %r: %s' %
                       (shown, key, why)) from None
    value = _ReadLineValue(shown, key, value_text, current, params_classes)
    if (isinstance(current, float) and isinstance(value, int) and
        not isinstance(value, bool)):
      value = float(value)  # '1' for a float param means 1.0.
    try:
      p.Set(**{key: value})
    except AttributeError as e:
      raise ValueError('Line %s: cannot set %r: %s' %
                       (shown, key, e)) from None
  return p


def _ApplyClassLines(p, lines, params_classes):
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
      parent, name, indices = p.ResolveKey(prefix)
    except (AttributeError, ValueError):
      continue
    slot = _ClassLineSlot(parent, name, indices)
    if slot is None:
      continue
    old, setter = slot
    current_cls = old.cls if isinstance(old, ParamsBase) and 'cls' in old else None
    try:
      plan = ValueReader(current_cls).Plan(value_text)
    except ValueError:
      continue
    new_cls = plan[1] if plan[0] == 'value' else None
    if IsParamsClass(new_cls) and _NeedsRebuild(old, new_cls):
      setter(_Rebuilt(new_cls, old, params_classes))


def TextDiff(p, other):
  """Returns a readable diff of two params: only keys that differ.

  Lines: '  key : mine -> theirs' for changed values, '- key : v' for keys
  only here, '+ key : v' for keys only in `other`. Empty string if equal.
  """
  mine = {k: EncodeValue(v) for k, v in _FlatItems(p)}
  theirs = {k: EncodeValue(v) for k, v in _FlatItems(other)}
  out = []
  for k in sorted(set(mine) | set(theirs)):
    if k not in theirs:
      out.append('- %s : %s' % (k, mine[k]))
    elif k not in mine:
      out.append('+ %s : %s' % (k, theirs[k]))
    elif mine[k] != theirs[k]:
      out.append('  %s : %s -> %s' % (k, mine[k], theirs[k]))
  return '\n'.join(out) + ('\n' if out else '')


def _NeedsRebuild(current, new_cls):
  """True if a 'cls' line for `new_cls` must replace the params `current`."""
  if current is None:
    return True
  return (isinstance(current, ParamsBase) and 'cls' in current and
          current.cls is not new_cls)


def _Rebuilt(new_cls, old, params_classes):
  """new_cls.Params() with the values of the keys `old` also defines."""
  p = CallParams(new_cls, params_classes)
  if isinstance(old, ParamsBase):
    for k, _ in old.IterParams():
      if k != 'cls' and k in p:
        setattr(p, k, old.GetCopy(k))
  return p


def _ClassLineSlot(parent, name, indices):
  """(old value, setter) of the params a 'prefix.cls' line may rebuild, or None.

  Nothing is changed here. A list grows by one element at a time (index ==
  its length, the order ToText writes), up to MAX_ITEMS; a None list may
  start at index 0; other indices must exist.
  """
  value = parent.Get(name)
  if not indices:
    if value is None or isinstance(value, ParamsBase):
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
  if old is not None and not isinstance(old, ParamsBase):
    return None
  return old, lambda v: container.__setitem__(i, v)


def _ReadLineValue(shown, key, value_text, current, params_classes):
  """Decodes one line's value for `key`, checking its kind before building."""
  if value_text.startswith(NO_TEXT_MARKER):
    raise ValueError(
        'Line %s: key %r holds a value with no text form (%s); it must be '
        'set in code, not in text.' % (shown, key, _ShownLine(value_text)))
  reader = ValueReader(current, params_classes)
  try:
    plan = reader.Plan(value_text)
    err = PlanMismatch(current, plan)
    if err is None:
      value = reader.Build(plan)
      err = TypeMismatch(current, value)
  except ValueError as e:
    hint = _ExampleHint(key, current)
    if not value_text:
      e = 'the value is empty'
    elif isinstance(current, str) and len(value_text) <= 80:
      hint = (' %r holds a string: quote the value, e.g. %s : %r.' %
              (key, key, value_text))
    raise ValueError('Line %s: cannot read the value of %r: %s.%s' %
                     (shown, key, OneLine(e), hint)) from None
  if err and (isinstance(current, int) and not isinstance(current, bool) and
              plan[0] == 'value' and IsNegativeDuration(plan[1])):
    raise ValueError(
        'Line %s: %r : %r is a negative duration; a duration must be '
        'positive, e.g. %s : %r.' % (shown, key, plan[1], key,
                                     plan[1].replace('-', '', 1).strip()))
  if err:
    hint = _ExampleHint(key, current)
    if (isinstance(current, int) and not isinstance(current, bool) and
        value_text.strip()[:1] in ('"', "'")):
      hint += (" A schedule's length may instead be one duration, e.g. "
               "'2000 examples' or '3 epochs'.")
    if (isinstance(current, ParamsBase) and plan[0] == 'value' and
        isinstance(plan[1], type)):
      hint = (' To swap the class of %r write %s.cls : %s (its other keys '
              'stay), or give its params: %s : Params(...).' % (
                  key, key, value_text.strip(), key))
    raise ValueError('Line %s: wrong type for %r: %s.%s' %
                     (shown, key, OneLine(err).rstrip('.'), hint))
  return value


def _ExampleHint(key, current):
  """' Write one value, e.g. key : <current value>.' (or '' if long)."""
  try:
    example = EncodeValue(current)
  except ValueError:
    return ''
  if len(example) > 40:
    return ''
  return ' Write one value in its text form, e.g. %s : %s.' % (key, example)


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
