"""Params text form: ToText / FromText / TextDiff / EncodeValue (issue 2)."""

import enum
import math

import numpy as np
import pytest
import tensorflow as tf

from params import hyperparams
from params import text_registry
from params import value_codec
from params import InstantiableParams
from params import NestedMap
from params import Params
from params import TextSerializable


class Color(enum.Enum):
  RED = 1
  GREEN = 2


class Level(enum.IntEnum):
  LOW = 1
  HIGH = 2


def Square(x):
  return x * x


class Outer:

  class Inner:
    pass


class Schedule(TextSerializable):
  """A self-describing object, like the optimizer factories."""

  def __init__(self, name, rate=0.1, steps=(1, 2)):
    self.name, self.rate, self.steps = name, rate, steps

  def TextSpec(self):
    return ('%s.Schedule' % __name__,
            {'name': self.name, 'rate': self.rate, 'steps': self.steps})

  def __eq__(self, other):
    return (type(other) is Schedule and
            (self.name, self.rate, self.steps) ==
            (other.name, other.rate, other.steps))


# Params text may name a function, or a class without Params(), only if it is
# registered for text (issue 12: text is data); _AllTypes holds these.
for _value in (Square, Outer.Inner, Schedule.TextSpec, tf.nn.relu, max):
  text_registry.RegisterForText(_value)


class Built:
  """An instantiable class with its own Params()."""

  @classmethod
  def Params(cls):
    p = InstantiableParams(cls)
    p.Define('size', 1, 'Size.')
    p.Define('scale', 0.5, 'Scale.')
    return p


def _Leaf(x=3):
  p = Params()
  p.Define('x', x, 'An int.')
  p.Define('y', 'why', 'A str.')
  return p


def _AllTypes():
  """Params holding every value type configs use, all non-default values."""
  p = InstantiableParams(Built)
  p.Define('an_int', 0, '')
  p.Define('neg_int', 0, '')
  p.Define('big_int', 0, '')
  p.Define('a_float', 0.0, '')
  p.Define('tiny_float', 0.0, '')
  p.Define('pos_inf', 0.0, '')
  p.Define('neg_inf', 0.0, '')
  p.Define('a_nan', 0.0, '')
  p.Define('a_str', '', '')
  p.Define('tricky_str', '', '')
  p.Define('multi_line', '', '')
  p.Define('empty_str', 'x', '')
  p.Define('a_true', False, '')
  p.Define('a_false', True, '')
  p.Define('a_none', 1, '')
  p.Define('a_list', [], '')
  p.Define('empty_list', [1], '')
  p.Define('a_tuple', (), '')
  p.Define('one_tuple', (), '')
  p.Define('empty_tuple', (1,), '')
  p.Define('a_dict', {}, '')
  p.Define('nested', _Leaf(), '')
  p.Define('empty_params', _Leaf(), '')
  p.Define('list_of_params', [_Leaf(), _Leaf(), _Leaf()], '')
  p.Define('dict_of_params', {}, '')
  p.Define('tuple_of_params', (), '')
  p.Define('mixed_list', [], '')
  p.Define('instantiable', Built.Params(), '')
  p.Define('a_class', None, '')
  p.Define('inner_class', None, '')
  p.Define('a_function', None, '')
  p.Define('a_tf_function', None, '')
  p.Define('a_builtin', None, '')
  p.Define('a_static_method', None, '')
  p.Define('an_enum', Color.RED, '')
  p.Define('an_int_enum', Level.LOW, '')
  p.Define('a_dtype', tf.float32, '')
  p.Define('an_int_dtype', tf.float32, '')
  p.Define('an_object', None, '')
  p.Define('a_bytes', b'', '')
  p.Define('a_nested_map', {}, '')
  p.Define('lambda', 0, 'A param whose name is a Python keyword.')
  return p


def _Values(p):
  """Sets every param of _AllTypes() to a non-default value."""
  return p.Set(
      an_int=42, neg_int=-7, big_int=2**70, a_float=0.125, tiny_float=1e-30,
      pos_inf=float('inf'), neg_inf=float('-inf'), a_nan=float('nan'),
      a_str='hello', tricky_str='it\'s "quoted" # not a comment ; nor a split',
      multi_line='line one\nline two\n\ttabbed\\ end', empty_str='',
      a_true=True, a_false=False, a_none=None, a_list=[1, 'two', 3.0, None],
      empty_list=[], a_tuple=(1, (2, 3)), one_tuple=(5,), empty_tuple=(),
      a_dict={'k': [1, 2], 3: 'three', 'nested': {'deep': (True,)}},
      empty_params=Params(),
      list_of_params=[_Leaf(1), _Leaf(2), _Leaf(3)],
      dict_of_params={'enc': _Leaf(10), 'dec': Built.Params().Set(size=4)},
      tuple_of_params=(_Leaf(5),),
      mixed_list=[_Leaf(6), 7, Color.GREEN],
      instantiable=Built.Params().Set(size=9, scale=2.0),
      a_class=Built, inner_class=Outer.Inner, a_function=Square,
      a_tf_function=tf.nn.relu, a_builtin=max,
      a_static_method=Schedule.TextSpec,
      an_enum=Color.GREEN, an_int_enum=Level.HIGH, a_dtype=tf.bfloat16,
      an_int_dtype=tf.int64,
      an_object=Schedule('cosine', rate=0.5, steps=(10, 20)),
      a_bytes=b'\x00bin',
      a_nested_map=NestedMap(a=[1, NestedMap(b=2)], c={'d': 3}),
      **{'lambda': 3, 'nested.x': 33, 'nested.y': 'Y'})


def test_round_trip_every_value_type():
  p = _Values(_AllTypes())
  text = p.ToText()
  q = _AllTypes().FromText(text)
  assert q == p, p.TextDiff(q)
  assert q.ToText() == text
  # Spot-check the values that equality could blur.
  assert math.isnan(q.a_nan) and q.pos_inf == math.inf
  assert q.neg_inf == -math.inf
  assert type(q.a_float) is float and type(q.big_int) is int
  assert q.multi_line == 'line one\nline two\n\ttabbed\\ end'
  assert q.tricky_str == 'it\'s "quoted" # not a comment ; nor a split'
  assert q.one_tuple == (5,) and type(q.one_tuple) is tuple
  assert type(q.a_tuple[1]) is tuple
  assert q.an_enum is Color.GREEN and q.an_int_enum is Level.HIGH
  assert q.a_dtype == tf.bfloat16 and q.an_int_dtype == tf.int64
  assert q.a_class is Built and q.inner_class is Outer.Inner
  assert q.a_function is Square and q.a_tf_function(-1.0) == 0.0
  assert q.a_builtin is max
  assert isinstance(q.an_object, Schedule) and q.an_object.steps == (10, 20)
  assert type(q.dict_of_params['dec']) is InstantiableParams
  assert q.dict_of_params['dec'].cls is Built
  assert q.list_of_params[2].x == 3 and len(q.list_of_params) == 3
  assert q.Get('lambda') == 3
  assert type(q.a_nested_map) is NestedMap
  assert type(q.a_nested_map.a[1]) is NestedMap and q.a_nested_map.a[1].b == 2


def test_round_trip_into_a_fresh_copy_of_the_same_structure():
  # The registry applies text to params built by the experiment: same keys.
  p = _Values(_AllTypes())
  q = _Values(_AllTypes())
  q.Set(an_int=0, a_str='other', **{'list_of_params[1].x': 99})
  q.FromText(p.ToText())
  assert q == p


def test_list_of_params_of_another_length_needs_the_whole_list():
  # Plain Params have no cls line to build a new element from, so a text that
  # addresses element [2] of a 2-element list is refused; the whole list on
  # one line works.
  p = Params()
  p.Define('layers', [_Leaf(1), _Leaf(2)], '')
  longer = p.Copy().Set(layers=[_Leaf(1), _Leaf(2), _Leaf(3)])
  with pytest.raises(ValueError, match=r"'layers\[2\].x'"):
    p.Copy().FromText(longer.ToText())
  whole = 'layers : %s' % value_codec.EncodeValue(longer.layers)
  assert p.Copy().FromText(whole) == longer


def test_to_text_is_sorted_dotted_lines():
  p = Params()
  p.Define('b', 2, '')
  p.Define('a', _Leaf(), '')
  p.Define('c', [_Leaf(7)], '')
  assert p.ToText() == ("a.x : 3\n"
                        "a.y : 'why'\n"
                        "b : 2\n"
                        "c[0].x : 7\n"
                        "c[0].y : 'why'\n")


def test_encode_forms():
  enc = value_codec.EncodeValue
  assert enc(Built) == "Class('%s.Built')" % __name__
  assert enc(Square) == "Function('%s.Square')" % __name__
  assert enc(Color.RED) == "Enum('%s.Color', 'RED')" % __name__
  assert enc(tf.float16) == "DType('float16')"
  assert enc((1,)) == '(1,)'
  assert enc(float('-inf')) == "float('-inf')"
  assert enc(np.float64(0.5)) == '0.5'
  assert enc(Schedule('a', 1.0, (3,))) == (
      "Object('%s.Schedule', name='a', rate=1.0, steps=(3,))" % __name__)


def test_comments_blank_lines_and_semicolons():
  p = _Leaf()
  p.FromText("""
      # a comment line
      x : 5   # trailing comment
      y : 'a;b#c' ; x : 6
  """)
  assert p.x == 6 and p.y == 'a;b#c'


def test_float_param_accepts_int_text_as_float():
  p = Params()
  p.Define('lr', 0.1, '')
  p.FromText('lr : 1')
  assert p.lr == 1.0 and type(p.lr) is float


def test_none_default_accepts_any_value():
  p = Params()
  p.Define('opt', None, '')
  p.FromText("opt : Class('%s.Built')" % __name__)
  assert p.opt is Built


# ---- values with no text form -------------------------------------------------------


def test_lambda_is_written_as_marker_and_refused_by_from_text():
  p = Params()
  p.Define('fn', lambda x: x, '')
  p.Define('k', 1, '')
  text = p.ToText()
  assert text.startswith('fn : <no text form: function ')
  assert text.splitlines()[0].endswith('<lambda>>')
  with pytest.raises(ValueError) as e:
    p.Copy().FromText(text)
  msg = str(e.value)
  assert "'fn'" in msg and 'set in code' in msg and 'Line 1' in msg


@pytest.mark.parametrize('value', [
    (lambda: 0),
    object(),
    Schedule('x').TextSpec,       # bound method: would resolve to the function
    np.zeros(2),
    [1, lambda: 0],               # one bad element marks the whole value
    {'a': Schedule(lambda: 0)},   # TextSpec kwargs need a text form too
])
def test_values_without_text_form_get_the_marker(value):
  assert value_codec.EncodeValue(value).startswith('<no text form: ')


def test_nested_function_has_no_text_form():

  def Local():
    pass

  assert 'Local' in value_codec.EncodeValue(Local)
  assert value_codec.EncodeValue(Local).startswith('<no text form: ')


# ---- bad text: ValueError naming the line and the key ---------------------------------


def _Target():
  p = _Leaf()
  p.Define('lr', 0.1, '')
  p.Define('flag', False, '')
  p.Define('names', ['a'], '')
  p.Define('sub', _Leaf(), '')
  p.Define('dtype', tf.float32, '')
  p.Define('kind', Color.RED, '')
  p.Define('cls_', Built, '')
  p.Define('fn', Square, '')
  return p


@pytest.mark.parametrize('line,key,words', [
    ('x : 1.5', 'x', 'expected an int'),
    ('x : "3"', 'x', 'expected an int, got str'),
    ('y : 3', 'y', 'expected a str'),
    ('flag : 1', 'flag', 'expected a bool'),
    ('lr : True', 'lr', 'expected a float'),
    ('dtype : "float32"', 'dtype', 'expected a DType'),
    ("kind : Enum('%s.Level', 'LOW')" % __name__, 'kind',
     'expected a member of the enum Color'),
    ('kind : 1', 'kind', 'expected a member of the enum Color'),
    ("cls_ : Function('%s.Square')" % __name__, 'cls_', 'expected a class'),
    ('fn : 1', 'fn', 'expected a callable'),
    ('names : 3', 'names', 'expected a list'),
    ('sub : 3', 'sub', 'expected Params'),
    ('sub.x : [1]', 'sub.x', 'wrong type'),
])
def test_wrong_type_names_line_and_key(line, key, words):
  p = _Target()
  with pytest.raises(ValueError) as e:
    p.FromText('# header\n' + line)
  msg = str(e.value)
  assert 'Line 2' in msg and repr(key) in msg and words in msg


@pytest.mark.parametrize('line,key,close', [
    ('lrr : 0.1', 'lrr', 'lr'),
    ('sub.xx : 1', 'sub.xx', 'x'),
    ('names[3] : 1', 'names[3]', None),
    ('nope.x : 1', 'nope.x', None),
])
def test_unknown_key_names_line_key_and_close_names(line, key, close):
  p = _Target()
  with pytest.raises(ValueError) as e:
    p.FromText('x : 1\n' + line)
  msg = str(e.value)
  assert 'Line 2' in msg and 'unknown key %r' % key in msg
  if close:
    assert 'Did you mean %r' % close in msg


@pytest.mark.parametrize('line,key', [
    ('x : ', 'x'),
    ('x : 1 +', 'x'),
    ('x : 1 + 2', 'x'),
    ('x : __import__("os")', 'x'),
    ('y : hello', 'y'),
    ("x : Class('no_such_module_q.A')", 'x'),
    ("x : Enum('%s.Color', 'BLUE')" % __name__, 'x'),
    ("x : Enum('%s.Built', 'A')" % __name__, 'x'),
    ("x : Class('%s.Square')" % __name__, 'x'),
    ("dtype : DType('floaty')", 'dtype'),
    ("x : {[1]: 2}", 'x'),
])
def test_malformed_value_names_line_and_key(line, key):
  p = _Target()
  with pytest.raises(ValueError) as e:
    p.FromText(line)
  msg = str(e.value)
  assert 'Line 1' in msg and repr(key) in msg


def test_bare_word_for_a_string_param_hints_quoting():
  with pytest.raises(ValueError, match="quote the value"):
    _Target().FromText('y : hello')


def test_line_without_colon_is_malformed():
  with pytest.raises(ValueError) as e:
    _Target().FromText('x : 1\njust words')
  assert 'Line 2' in str(e.value) and "'just words'" in str(e.value)
  assert 'key : value' in str(e.value)


def test_object_factory_outside_the_project_is_refused():
  with pytest.raises(ValueError) as e:
    _Target().FromText("x : Object('os.getcwd')")
  assert "'x'" in str(e.value) and 'refusing to call it' in str(e.value)


def test_object_factory_marked_text_factory_is_called():
  p = Params()
  p.Define('v', None, '')
  p.FromText("v : Object('%s.MakeSchedule', name='m')" % __name__)
  assert p.v == Schedule('m', rate=0.25)


@text_registry.TextFactory
def MakeSchedule(name):
  return Schedule(name, rate=0.25)


# ---- TextDiff ----------------------------------------------------------------------------


def test_text_diff_lists_only_differing_keys():
  a = _Target()
  b = _Target().Set(lr=0.5, **{'sub.y': 'zed'})
  b.Delete('flag')
  b.Define('extra', 1, '')
  lines = a.TextDiff(b).splitlines()
  assert lines == ["+ extra : 1", "- flag : False", "  lr : 0.1 -> 0.5",
                   "  sub.y : 'why' -> 'zed'"]
  assert a.TextDiff(a.Copy()) == ''


# ---- class lines rebuild nested params ---------------------------------------------


class Other:
  """Another buildable class, with a key Built lacks and one it shares."""

  @classmethod
  def Params(cls):
    p = InstantiableParams(cls)
    p.Define('size', 1, 'Size.')
    p.Define('depth', 2, 'Depth.')
    p.Define('child', None, 'Optional nested params.')
    return p


def _Holder():
  p = Params()
  p.Define('sub', Built.Params(), '')
  p.Define('opt', None, '')
  p.Define('items', [], '')
  return p


def test_cls_line_swaps_a_nested_params_class_onto_fresh_params():
  p = _Holder()
  p.sub = Other.Params().Set(size=5, depth=7,
                             child=Built.Params().Set(scale=3.0))
  p.opt = Other.Params().Set(depth=1)
  p.items = [Built.Params().Set(size=i) for i in range(12)]
  q = _Holder().FromText(p.ToText())
  assert q == p, q.TextDiff(p)
  assert q.sub.cls is Other and q.sub.child.scale == 3.0
  assert [x.size for x in q.items] == list(range(12))
  assert 'scale' not in q.sub  # Built's key is gone with Built


def test_cls_line_keeps_values_of_shared_keys():
  p = _Holder()
  p.sub.size = 9
  p.FromText("sub.cls : Class('%s.Other')" % __name__)
  assert p.sub.cls is Other and p.sub.size == 9 and p.sub.depth == 2


def test_cls_line_for_the_same_class_changes_nothing_else():
  p = _Holder()
  p.sub.scale = 4.0
  p.FromText("sub.cls : Class('%s.Built')" % __name__)
  assert p.sub.scale == 4.0


def test_cls_line_of_a_class_without_params_only_sets_cls():
  p = _Holder()
  p.FromText("sub.cls : Class('%s.Color')" % __name__)
  assert p.sub.cls is Color and p.sub.scale == 0.5


def test_keys_under_a_cls_line_of_the_wrong_class_are_unknown():
  with pytest.raises(ValueError) as e:
    _Holder().FromText("sub.depth : 3")
  assert "unknown key 'sub.depth'" in str(e.value)


# ---- message polish and numpy scalars (round 2) ----------------------------


def test_unknown_key_message_names_the_key_once():
  p = _Target()
  with pytest.raises(ValueError) as e:
    p.FromText('sub.xx : 1')
  msg = str(e.value)
  assert msg.startswith("Line 1 'sub.xx : 1': unknown key 'sub.xx': Param "
                        "'xx' is not defined.")
  assert "Key 'sub.xx'" not in msg  # Was: "... unknown key 'sub.xx'. Key 'sub.xx': ..."


@pytest.mark.parametrize('value,text,python', [
    (np.float32(0.1), '0.10000000149011612', 0.10000000149011612),
    (np.float64(0.25), '0.25', 0.25),
    (np.int64(3), '3', 3),
    (np.int32(-7), '-7', -7),
    (np.bool_(True), 'True', True),
    (np.float32('nan'), "float('nan')", float('nan')),
])
def test_numpy_scalar_is_written_as_its_python_value(value, text, python):
  assert value_codec.EncodeValue(value) == text
  decoded = value_codec.DecodeValue(text)
  assert type(decoded) is type(python)
  if python == python:
    assert decoded == python and decoded == value


def test_numpy_scalars_round_trip_through_params_text():
  p = hyperparams.Params()
  p.Define('lr', np.float32(0.1), '')
  p.Define('steps', np.int64(100), '')
  p.Define('rates', [np.float32(0.5), np.float64(0.25)], '')
  text = p.ToText()
  assert '<no text form' not in text
  assert 'lr : 0.10000000149011612' in text
  q = hyperparams.Params()
  q.Define('lr', 0.0, '')
  q.Define('steps', 0, '')
  q.Define('rates', [], '')
  q.FromText(text)
  assert q == p
  assert q.lr == np.float32(0.1) and q.steps == 100


def test_from_text_error_points_at_the_item_after_a_semicolon():
  # 'a : 1; b : x' is one line of two items: the error names item 2.
  p = Params()
  p.Define('a', 0, '')
  p.Define('bb', 0, '')
  with pytest.raises(ValueError) as e:
    p.FromText('a : 1; b : 2')
  assert str(e.value).startswith("Line 1 (item 2) 'b : 2': unknown key 'b'")


# ---- DecodeValue builds Params only with the classes passed in (issue 37) ---


def test_decode_value_builds_params_with_the_classes_given():
  sub = Params()
  sub.Define('depth', 2, '')
  inst = InstantiableParams()
  text = value_codec.EncodeValue([sub, {'x': inst}])
  assert text == '[Params(depth=2), {\'x\': Params(cls=None)}]'
  value = value_codec.DecodeValue(text,
                                  params_classes=hyperparams.PARAMS_CLASSES)
  assert value == [sub, {'x': inst}]
  assert type(value[0]) is Params and type(value[1]['x']) is InstantiableParams


def test_decode_value_without_the_classes_refuses_params_and_says_how():
  assert value_codec.DecodeValue("[1, 'a', NestedMap(b=2.5)]") == [
      1, 'a', NestedMap(b=2.5)]
  with pytest.raises(ValueError) as e:
    value_codec.DecodeValue('[1, Params(depth=2)]')
  assert str(e.value) == (
      'Params(...) is built only with the Params classes, and none were '
      'given; read it with DecodeValue(text, '
      'params_classes=params.PARAMS_CLASSES)')
