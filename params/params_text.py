

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
