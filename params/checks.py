"""Checks of param values at construction: numbers, regexes, dtypes.

One place for the rule "values are in range or refused" (issue 12): a
numeric param is checked for its type (a bool is not a number; an int where
an int is required), for finiteness (NaN and inf are refused: `x < 0` is
False for NaN, so a plain comparison lets it through) and for its range. A
regex param must compile, and a dtype param must name a floating dtype.
Every refusal is one line of ValueError that names where (the layer), the
key, the value and the fix, e.g.

  Momentum 'digits/learner/optimizer': alpha=1.5 is outside [0, 1) (alpha
  >= 1 lets the velocity grow without bound). Set alpha to a finite number
  in [0, 1), e.g. 0.9.

(shown wrapped here; the message is one line).

Usage: a layer declares its specs in the classmethod `ValueChecks()`,
which `BaseLayer.__init__` applies before anything is built:

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(alpha=checks.Real(0, 1, high_open=True, example=0.9),
                 num_batches=checks.Int(1, example=4))
    return specs

or calls `CheckValue` / `CheckValues` itself where a value needs more than a
range (e.g. a string or a number).
"""

import math
import numbers
import re

import tensorflow as tf


class Spec:
  """What a numeric param accepts: its kind, its range, whether None is ok.

  Build with `Real(...)` or `Int(...)`. Bounds are inclusive unless
  `low_open` / `high_open`; either bound may be None (unbounded). Values
  are always required to be finite.
  """

  def __init__(self, integer, low=None, high=None, low_open=False,
               high_open=False, none_ok=False, example=None, why=None):
    self.integer = integer
    self.low = low
    self.high = high
    self.low_open = low_open
    self.high_open = high_open
    self.none_ok = none_ok
    self.example = example
    self.why = why

  def RangeText(self):
    """The range as text: '[0, 1)', '> 0', '>= 1', '' if unbounded."""
    lo, hi = self.low, self.high
    if lo is not None and hi is not None:
      return '%s%r, %r%s' % ('(' if self.low_open else '[', lo, hi,
                             ')' if self.high_open else ']')
    if lo is not None:
      return '%s %r' % ('>' if self.low_open else '>=', lo)
    if hi is not None:
      return '%s %r' % ('<' if self.high_open else '<=', hi)
    return ''

  def Describe(self):
    """What is accepted, e.g. 'a finite number in [0, 1)', 'None or an int
    >= 1'."""
    kind = 'an int' if self.integer else 'a finite number'
    rng = self.RangeText()
    if rng.startswith(('[', '(')):
      text = '%s in %s' % (kind, rng)
    else:
      text = ('%s %s' % (kind, rng)).strip()
    return ('None or ' + text) if self.none_ok else text

  def Problem(self, value):
    """Returns what is wrong with `value` as a phrase, or None if it is ok."""
    if value is None:
      return None if self.none_ok else 'is not set'
    if isinstance(value, bool) or type(value).__name__ == 'bool_':
      return 'is a bool, not a number'
    if self.integer:
      if not isinstance(value, numbers.Integral):
        return 'is not an int'
    elif not isinstance(value, numbers.Real):
      return 'is not a number'
    elif not math.isfinite(value):
      return 'is not finite'
    if not self._InRange(value):
      rng = self.RangeText()
      return ('is outside %s' % rng if rng.startswith(('[', '(')) else
              'is not %s' % rng)
    return None

  def _InRange(self, value):
    if self.low is not None and not (
        value > self.low if self.low_open else value >= self.low):
      return False
    if self.high is not None and not (
        value < self.high if self.high_open else value <= self.high):
      return False
    return True

  def Message(self, where, key, value, problem):
    """The one-line refusal of `value` for `key`."""
    fix = 'Set %s to %s' % (key, self.Describe())
    if self.example is not None:
      fix += ', e.g. %r' % (self.example,)
    why = (' (%s)' % self.why) if self.why else ''
    return '%s: %s=%s %s%s. %s.' % (where, key, _Repr(value), problem, why,
                                     fix)


def Real(low=None, high=None, *, low_open=False, high_open=False,
         none_ok=False, example=None, why=None):
  """A finite real number (int or float, not bool) in the given range."""
  return Spec(False, low, high, low_open, high_open, none_ok, example, why)


def Int(low=None, high=None, *, none_ok=False, example=None, why=None):
  """An int (not bool, not float) in [low, high] (None: unbounded)."""
  return Spec(True, low, high, False, False, none_ok, example, why)


def Where(layer):
  """How a message names `layer`: "<class> '<path>'"."""
  return '%s %r' % (type(layer).__name__, layer.path)


def CheckValue(where, key, value, spec):
  """Raises ValueError (one line, naming `key`) unless `spec` accepts `value`.

  Args:
    where: the owner, for the message: a string, or a layer (see `Where`).
    key: the param's name as the user writes it (e.g. 'train.max_steps').
    value: the value to check.
    spec: a `Spec` (from `Real` or `Int`).

  Returns:
    `value`, unchanged.

  Raises:
    ValueError: if `value` is not accepted.
  """
  problem = spec.Problem(value)
  if problem is not None:
    where = where if isinstance(where, str) else Where(where)
    raise ValueError(spec.Message(where, key, value, problem))
  return value


def CheckValues(where, params, specs, prefix=''):
  """`CheckValue` for each {key: spec} of `specs`, reading `params.<key>`.

  Args:
    where: the owner (a string or a layer), for the message.
    params: the Params holding the values.
    specs: dict {key: Spec}; a key may be dotted ('train.max_steps'). A key
      that `params` does not define is skipped (a subclass may have removed
      it).
    prefix: prepended to the key in messages (e.g. 'train.').

  Raises:
    ValueError: for the first value that is not accepted.
  """
  for key, spec in specs.items():
    try:
      value = params.Get(key)
    except AttributeError:
      continue
    CheckValue(where, prefix + key, value, spec)


def CheckRegex(where, key, pattern, none_ok=True):
  """Raises ValueError naming `key` and `pattern` unless `pattern` compiles.

  Returns:
    The compiled regex, or None for None (when `none_ok`).
  """
  where = where if isinstance(where, str) else Where(where)
  if pattern is None and none_ok:
    return None
  if not isinstance(pattern, str):
    raise ValueError('%s: %s=%s is not a regex string. Set %s to a regex '
                     'such as \'enc/.*\'%s.' %
                     (where, key, _Repr(pattern), key,
                      ' or None' if none_ok else ''))
  try:
    return re.compile(pattern)
  except re.error as e:
    raise ValueError(
        '%s: %s has the regex %r, which does not compile (%s). Fix it; '
        'escape a literal character such as [ ( * + ? with a backslash.' %
        (where, key, pattern, e)) from None


def CheckRegexList(where, key, patterns):
  """`CheckRegex` for each element of the list or tuple `patterns`."""
  where = where if isinstance(where, str) else Where(where)
  if not isinstance(patterns, (list, tuple)):
    raise ValueError('%s: %s=%s is not a list of regexes. Set e.g. '
                     '%s=[\'bias\'].' % (where, key, _Repr(patterns), key))
  for i, pattern in enumerate(patterns):
    CheckRegex(where, '%s[%d]' % (key, i), pattern, none_ok=False)


def CheckRewriteRules(where, key, rules):
  """Checks a list of (regex, replacement) pairs for `re.sub`.

  Each regex must compile, and each replacement must be valid for its
  regex (a group reference such as \\2 must exist).

  Raises:
    ValueError: naming `key`, the rule and what is wrong.
  """
  where = where if isinstance(where, str) else Where(where)
  if not isinstance(rules, (list, tuple)):
    raise ValueError('%s: %s=%s is not a list of (regex, replacement) pairs. '
                     'Set e.g. %s=[(\'^old/\', \'new/\')].' %
                     (where, key, _Repr(rules), key))
  for i, rule in enumerate(rules):
    if (not isinstance(rule, (list, tuple)) or len(rule) != 2 or
        not all(isinstance(s, str) for s in rule)):
      raise ValueError('%s: %s[%d]=%s is not a (regex, replacement) pair of '
                       'strings. Write it as (\'^old/\', \'new/\').' %
                       (where, key, i, _Repr(rule)))
    compiled = CheckRegex(where, '%s[%d]' % (key, i), rule[0], none_ok=False)
    try:
      compiled.sub(rule[1], '')  # Parses the replacement template.
    except (re.error, IndexError) as e:
      raise ValueError(
          '%s: %s[%d] has the replacement %r, which is not valid for the '
          'regex %r (%s). Refer only to groups the regex has (\\1, '
          '\\g<name>).' % (where, key, i, rule[1], rule[0], e)) from None


def CheckFloatDtype(where, key, dtype, none_ok=True):
  """Raises ValueError naming `key` unless `dtype` is a floating dtype.

  Args:
    where: the owner (a string or a layer), for the message.
    key: the param's name (e.g. 'fprop_dtype').
    dtype: a tf.DType, a numpy dtype or a dtype name ('float32').
    none_ok: whether None (meaning "inherit") is accepted.

  Returns:
    The tf.DType, or None.
  """
  where = where if isinstance(where, str) else Where(where)
  if dtype is None and none_ok:
    return None
  try:
    as_tf = tf.as_dtype(dtype)
  except TypeError:
    as_tf = None
  if as_tf is None or not as_tf.is_floating:
    got = as_tf.name if as_tf is not None else _Repr(dtype)
    raise ValueError(
        '%s: %s=%s is not a floating point dtype; the gradients of the loss '
        'need one. Set %s to float32 (or float16 / bfloat16 for mixed '
        'precision, float64)%s.' % (where, key, got, key,
                                    ', or None' if none_ok else ''))
  return as_tf


def _Repr(value):
  """repr of a value, kept short and on one line."""
  text = repr(value).replace('\n', ' ')
  return text if len(text) <= 80 else text[:77] + '...'
