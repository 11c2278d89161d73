"""Params and InstantiableParams: definition, access, copy, freeze (issue 2)."""

import copy

import numpy as np
import pytest

from params import hyperparams
from params import text_registry
from params import value_codec
from params import InstantiableParams
from params import Params


def _Optimizer():
  p = Params()
  p.Define('learning_rate', 0.1, 'Base learning rate.')
  p.Define('beta1', 0.9, 'First moment decay.')
  return p


def _Tree():
  """A params tree: nested Params, a list of Params and a dict of Params."""
  p = Params()
  p.Define('name', 'root', 'Name.')
  p.Define('optimizer', _Optimizer(), 'Nested params.')
  p.Define('layers', [_Optimizer(), _Optimizer()], 'List of params.')
  p.Define('by_name', {'enc': _Optimizer()}, 'Dict of params.')
  p.Define('dims', [1, 2], 'A list.')
  return p


# ---- Define and names ----------------------------------------------------------


def test_define_sets_default_and_doc():
  p = Params()
  p.Define('num_layers', 3, 'How many layers.')
  assert p.num_layers == 3
  assert p.GetDoc('num_layers') == 'How many layers.'


@pytest.mark.parametrize('bad', ['Caps', '1abc', 'a-b', 'a.b', '', 'a b'])
def test_define_rejects_malformed_name(bad):
  p = Params()
  with pytest.raises(ValueError) as e:
    p.Define(bad, 1, '')
  assert repr(bad) in str(e.value)
  assert '[a-z_][a-z0-9_]*' in str(e.value)


def test_define_accepts_underscore_and_digits():
  p = Params()
  p.Define('_x1', 1, '')
  p.Define('a_2_b', 2, '')
  assert (p._x1, p.a_2_b) == (1, 2)


def test_redefine_is_an_error_naming_the_key():
  p = Params()
  p.Define('dropout', 0.1, 'Dropout rate.')
  with pytest.raises(ValueError, match="'dropout' is already defined"):
    p.Define('dropout', 0.2, 'Again.')
  assert p.dropout == 0.1


# ---- unknown names: "did you mean" -----------------------------------------------


def test_get_unknown_attribute_suggests_close_names():
  p = _Optimizer()
  with pytest.raises(AttributeError) as e:
    _ = p.learning_rat
  msg = str(e.value)
  assert "'learning_rat'" in msg
  assert "Did you mean 'learning_rate'" in msg


def test_set_unknown_attribute_suggests_close_names_and_does_not_define():
  p = _Optimizer()
  with pytest.raises(AttributeError) as e:
    p.beta_1 = 0.5
  assert "'beta_1'" in str(e.value)
  assert "Did you mean 'beta1'" in str(e.value)
  assert 'beta_1' not in p


def test_unknown_far_name_lists_defined_names_without_guess():
  p = _Optimizer()
  with pytest.raises(AttributeError) as e:
    _ = p.zzz
  assert 'Did you mean' not in str(e.value)
  assert "['beta1', 'learning_rate']" in str(e.value)


def test_hasattr_is_false_for_unknown_and_dunder():
  p = _Optimizer()
  assert not hasattr(p, 'nope')
  assert not hasattr(p, '__array__')


# ---- Set, Get, Delete, in, len, ==, IterParams ----------------------------------


def test_set_is_chainable_and_accepts_dotted_keys():
  p = _Tree()
  res = p.Set(name='x').Set(**{'optimizer.beta1': 0.8,
                               'layers[1].learning_rate': 0.5,
                               'dims[0]': 7})
  assert res is p
  assert p.name == 'x'
  assert p.optimizer.beta1 == 0.8
  assert p.layers[1].learning_rate == 0.5
  assert p.layers[0].learning_rate == 0.1
  assert p.dims == [7, 2]


def test_set_dotted_unknown_key_names_key_and_close_names():
  p = _Tree()
  with pytest.raises(AttributeError) as e:
    p.Set(**{'optimizer.beta': 0.8})
  assert "'optimizer.beta'" in str(e.value)
  assert "Did you mean 'beta1'" in str(e.value)


def test_set_dotted_index_out_of_range_names_key():
  p = _Tree()
  with pytest.raises(AttributeError, match=r"'layers\[5\].beta1'.*\[5\]"):
    p.Set(**{'layers[5].beta1': 0.1})


def test_set_through_a_non_params_value_names_key():
  p = _Tree()
  with pytest.raises(AttributeError, match="'name.x'.*'name' is not a Params"):
    p.Set(**{'name.x': 1})


def test_get_dotted_and_indexed():
  p = _Tree()
  assert p.Get('optimizer.learning_rate') == 0.1
  assert p.Get('layers[1].beta1') == 0.9
  assert p.Get('dims[1]') == 2
  assert p.Get('layers[0]') is p.layers[0]


def test_get_unknown_key_names_it():
  p = _Tree()
  with pytest.raises(AttributeError, match="'optimizer.lr'"):
    p.Get('optimizer.lr')


def test_delete_contains_len():
  p = _Optimizer()
  assert len(p) == 2 and 'beta1' in p
  assert p.Delete('beta1') is p
  assert len(p) == 1 and 'beta1' not in p
  with pytest.raises(AttributeError, match="'beta1'"):
    p.Delete('beta1')


def test_equality_is_deep():
  a, b = _Tree(), _Tree()
  assert a == b
  b.layers[1].beta1 = 0.5
  assert a != b
  b.layers[1].beta1 = 0.9
  b.by_name['enc'].learning_rate = 1.0
  assert a != b


def test_equality_considers_keys_and_nan():
  a, b = _Optimizer(), _Optimizer()
  b.Define('extra', 1, '')
  assert a != b
  a.learning_rate = b.learning_rate = float('nan')
  b.Delete('extra')
  assert a == b


def test_equality_of_numpy_values():
  a, b = Params(), Params()
  a.Define('w', np.array([1.0, 2.0]), '')
  b.Define('w', np.array([1.0, 2.0]), '')
  assert a == b
  b.w = np.array([1.0, 3.0])
  assert a != b
  b.w = np.array([1.0, 2.0, 3.0])
  assert a != b


def test_iter_params_in_definition_order():
  p = Params()
  p.Define('z', 1, '')
  p.Define('a', 2, '')
  assert list(p.IterParams()) == [('z', 1), ('a', 2)]


# ---- Copy ------------------------------------------------------------------------


def test_copy_is_deep_and_shares_no_mutable_state():
  p = _Tree()
  p.Define('table', {'k': [1, {'x': [2]}]}, '')
  c = p.Copy()
  assert c == p
  c.optimizer.beta1 = 0.1
  c.layers[0].learning_rate = 9.0
  c.layers.append(_Optimizer())
  c.by_name['enc'].beta1 = 0.2
  c.dims.append(3)
  c.table['k'][1]['x'].append(3)
  assert p.optimizer.beta1 == 0.9
  assert p.layers[0].learning_rate == 0.1
  assert len(p.layers) == 2
  assert p.by_name['enc'].beta1 == 0.9
  assert p.dims == [1, 2]
  assert p.table == {'k': [1, {'x': [2]}]}


def test_copy_module_functions_are_deep_too():
  p = _Tree()
  for c in (copy.copy(p), copy.deepcopy(p)):
    c.optimizer.beta1 = 0.0
    c.dims.append(5)
    assert p.optimizer.beta1 == 0.9 and p.dims == [1, 2]


def test_copy_keeps_type_and_docs():
  p = InstantiableParams(dict)
  p.Define('x', 1, 'The x.')
  c = p.Copy()
  assert type(c) is InstantiableParams
  assert c.cls is dict and c.GetDoc('x') == 'The x.'


# ---- Freeze ----------------------------------------------------------------------


def test_freeze_is_deep():
  p = _Tree().Freeze()
  assert p.is_frozen
  with pytest.raises(AttributeError, match="frozen; cannot change 'name'"):
    p.name = 'x'
  # A nested param is named by its dotted key from the frozen root.
  with pytest.raises(AttributeError, match="change 'optimizer.beta1'"):
    p.optimizer.beta1 = 0.5
  with pytest.raises(AttributeError,
                     match=r"change 'layers\[1\].learning_rate'"):
    p.layers[1].learning_rate = 0.5
  with pytest.raises(AttributeError,
                     match=r'change "by_name\[\'enc\'\].beta1"'):
    p.by_name['enc'].beta1 = 0.5
  with pytest.raises(AttributeError, match='frozen'):
    p.Set(**{'layers[0].beta1': 0.5})
  with pytest.raises(AttributeError, match='frozen'):
    p.Set(**{'dims[0]': 5})
  with pytest.raises(AttributeError, match='frozen'):
    p.Define('new', 1, '')
  with pytest.raises(AttributeError, match='frozen'):
    p.Delete('name')
  with pytest.raises(AttributeError, match=r'Copy\(frozen=False\)'):
    p.FromText('name : "y"')
  assert p.optimizer.beta1 == 0.9 and p.layers[1].learning_rate == 0.1


def test_freeze_reaches_params_in_tuples_and_nested_dicts():
  p = Params()
  p.Define('t', (_Optimizer(),), '')
  p.Define('d', {'a': {'b': [_Optimizer()]}}, '')
  p.Freeze()
  assert p.t[0].is_frozen
  assert p.d['a']['b'][0].is_frozen


def test_copy_of_frozen_stays_frozen_unless_frozen_false():
  p = _Tree().Freeze()
  c = p.Copy()
  assert c.is_frozen and c.layers[0].is_frozen
  m = p.Copy(frozen=False)
  assert not m.is_frozen
  m.optimizer.beta1 = 0.5
  m.layers[1].beta1 = 0.4
  m.by_name['enc'].beta1 = 0.3
  assert (m.optimizer.beta1, m.layers[1].beta1, m.by_name['enc'].beta1) == (
      0.5, 0.4, 0.3)
  assert p.optimizer.beta1 == 0.9 and p.is_frozen
  assert p.Copy(frozen=True).is_frozen
  assert _Tree().Copy(frozen=True).optimizer.is_frozen


# ---- InstantiableParams ----------------------------------------------------------


class _Built:

  def __init__(self, params, extra=None):
    self.params = params
    self.extra = extra


def test_instantiate_builds_cls_with_params_and_args():
  p = InstantiableParams(_Built)
  p.Define('size', 3, '')
  obj = p.Instantiate(extra='e')
  assert isinstance(obj, _Built)
  assert obj.params is p and obj.params.size == 3 and obj.extra == 'e'


def test_instantiate_without_cls_is_an_error():
  with pytest.raises(ValueError, match='cls is None'):
    InstantiableParams().Instantiate()


def test_instantiable_params_defines_cls():
  p = InstantiableParams(_Built)
  assert 'cls' in p and p.cls is _Built
  assert p.GetDoc('cls')


def test_resolve_import_path():
  assert text_registry.ResolveImportPath('params.hyperparams.Params') is Params
  assert (text_registry.ResolveImportPath('params.hyperparams.Params.Copy') is
          Params.Copy)
  with pytest.raises(ValueError, match="'params.hyperparams.Nope'"):
    text_registry.ResolveImportPath('params.hyperparams.Nope')
  with pytest.raises(ValueError, match="'no_such_module_xyz.A'"):
    text_registry.ResolveImportPath('no_such_module_xyz.A')


# ---- message polish (round 2) ----------------------------------------------


def test_get_index_into_a_non_list_says_it_is_not_a_list():
  p = _Tree()
  # 'optimizer' is a Params, 'name' a str: '[0]' cannot index them.
  for key, kind in [('optimizer[0].beta1', 'Params'), ('name[0]', 'str')]:
    with pytest.raises(AttributeError) as e:
      p.Get(key)
    msg = str(e.value)
    assert repr(key) in msg
    assert 'is not a list (it is a %s' % kind in msg
    assert 'out of range' not in msg


def test_set_index_into_a_non_list_says_it_is_not_a_list():
  p = _Tree()
  with pytest.raises(AttributeError) as e:
    p.Set(**{'optimizer[1].beta1': 0.5})
  assert "'optimizer[1].beta1'" in str(e.value)
  assert 'is not a list' in str(e.value)


def test_get_index_out_of_range_gives_the_list_length():
  p = _Tree()
  with pytest.raises(AttributeError) as e:
    p.Get('dims[2]')
  assert str(e.value) == ("Key 'dims[2]': index [2] is out of range: the list "
                          'has 2 item(s) (indices 0..1).')


def test_defined_names_are_capped_at_20_with_a_count_of_the_rest():
  p = Params()
  for i in range(25):
    p.Define('knob_%02d' % i, i, '')
  with pytest.raises(AttributeError) as e:
    _ = p.knob_99
  msg = str(e.value)
  assert "'knob_99'" in msg
  # Sorted, first 20 listed, then the count of the other 5.
  assert "'knob_19' ... and 5 more." in msg
  assert "'knob_20'" not in msg.split('Defined names:')[1]


def test_defined_names_up_to_20_are_all_listed():
  p = _Optimizer()
  with pytest.raises(AttributeError) as e:
    _ = p.beta2
  assert str(e.value).endswith(
      "Defined names: ['beta1', 'learning_rate'].")
  assert 'more' not in str(e.value)


# ---- deep freeze (issue 21.9) ----------------------------------------------


def _WithContainers():
  p = hyperparams.Params()
  p.Define('xs', [1, [2, 3]], 'a list holding a list')
  p.Define('table', {'a': [1]}, 'a dict holding a list')
  p.Define('pair', (1, [2]), 'a tuple holding a list')
  return p


@pytest.mark.parametrize('change', [
    lambda q: q.xs.append(4),
    lambda q: q.xs[1].append(4),
    lambda q: q.xs.__setitem__(0, 9),
    lambda q: q.xs.extend([5]),
    lambda q: q.xs.pop(),
    lambda q: q.table.update(b=2),
    lambda q: q.table.__setitem__('a', 0),
    lambda q: q.table['a'].append(2),
    lambda q: q.pair[1].append(3),
], ids=['append', 'nested_append', 'setitem', 'extend', 'pop', 'dict_update',
        'dict_setitem', 'list_in_dict', 'list_in_tuple'])
def test_frozen_params_refuse_changes_inside_their_lists_and_dicts(change):
  q = _WithContainers().Copy(frozen=True)
  with pytest.raises(AttributeError, match='Params are frozen; the (list|'
                     r'dict) value of .* cannot change\. Make a mutable copy '
                     r'with p\.Copy\(frozen=False\)'):
    change(q)
  assert q.xs == [1, [2, 3]] and q.table == {'a': [1]} and q.pair == (1, [2])


@pytest.mark.parametrize('change, key', [
    (lambda q: q.xs.append(4), "the list value of 'xs'"),
    (lambda q: q.xs[1].append(4), "the list value of 'xs[1]'"),
    (lambda q: q.table.update(b=2), "the dict value of 'table'"),
    (lambda q: q.table['a'].append(2), "the list value of \"table['a']\""),
    (lambda q: q.pair[1].append(3), "the list value of 'pair[1]'"),
    (lambda q: q.sub.xs.append(4), "the list value of 'sub.xs'"),
    (lambda q: q.subs[0].table['a'].append(4),
     "the list value of \"subs[0].table['a']\""),
], ids=['list', 'nested_list', 'dict', 'list_in_dict', 'list_in_tuple',
        'nested_params', 'params_in_a_list'])
def test_a_refused_change_inside_frozen_params_names_the_dotted_key(change,
                                                                    key):
  # It said only "this list value cannot change", with no key.
  q = _WithContainers()
  q.Define('sub', _WithContainers(), '')
  q.Define('subs', [_WithContainers()], '')
  q.Freeze()
  with pytest.raises(AttributeError) as e:
    change(q)
  assert str(e.value) == (
      'Params are frozen; %s cannot change. Make a mutable copy with '
      'p.Copy(frozen=False) and change that.' % key)
  with pytest.raises(AttributeError, match="cannot change 'subs\\[0\\].xs'"):
    q.subs[0].xs = []
  # A frozen copy of a nested Params names keys from itself.
  with pytest.raises(AttributeError, match="list value of 'xs'"):
    q.sub.Copy().xs.append(4)


def test_frozen_containers_read_compare_and_print_as_before():
  p = _WithContainers()
  q = p.Copy(frozen=True)
  assert q == p and p == q
  assert q.ToText() == p.ToText()
  assert isinstance(q.xs, list) and isinstance(q.table, dict)
  # A mutable copy is plain again and shares nothing with the frozen one.
  r = q.Copy(frozen=False)
  r.xs.append(4)
  r.xs[1].append(5)
  r.table['b'] = 2
  assert type(r.xs) is list and type(r.table) is dict
  assert r.xs == [1, [2, 3, 5], 4] and q.xs == [1, [2, 3]]
  assert p.xs == [1, [2, 3]]  # Freezing a copy left the original alone.


def test_hints_say_where_an_undefined_name_belongs_and_survive_copy():
  p = hyperparams.Params()
  p.Define('a', 1, '')
  p.SetHints({'b': 'b lives on the parent: parent.b.'})
  for q in (p, p.Copy()):
    with pytest.raises(AttributeError) as e:
      q.b = 2
    assert str(e.value) == ("Param 'b' is not defined here: b lives on the "
                            'parent: parent.b.')
    with pytest.raises(AttributeError, match="Did you mean 'a'"):
      q.aa = 2  # No hint: the closest names, as before.
  other = hyperparams.Params()
  other.Define('a', 1, '')
  assert p == other and p.ToText() == other.ToText()  # Not part of either.


# ---- public hooks the text reader uses (issue 37, item 5) -------------------


def test_resolve_key_returns_the_params_the_key_ends_in():
  p = _Tree()
  parent, name, indices = p.ResolveKey('layers[1].beta1')
  assert parent is p.layers[1] and name == 'beta1' and indices == []
  parent, name, indices = p.ResolveKey('dims[0]')
  assert parent is p and name == 'dims' and indices == [0]
  with pytest.raises(AttributeError, match=r"Key 'optimizer\.beta2': Param "
                     r"'beta2' is not defined\. Did you mean 'beta1'\?"):
    p.ResolveKey('optimizer.beta2')


def test_get_copy_copies_one_value_as_copy_does():
  p = _Tree()
  p.layers[0].Freeze()
  layers = p.GetCopy('layers')
  assert layers == p.layers and layers[0] is not p.layers[0]
  assert layers[0].is_frozen and not layers[1].is_frozen  # As Copy() keeps it.
  frozen = p.Copy().Freeze()
  dims = frozen.GetCopy('dims')
  assert type(dims) is list and dims == [1, 2]  # Plain, not FrozenList.
  dims.append(3)
  assert frozen.dims == [1, 2]
  with pytest.raises(AttributeError, match="Param 'dim' is not defined. Did "
                     "you mean 'dims'"):
    p.GetCopy('dim')


def test_params_is_what_the_codec_knows_as_params():
  assert issubclass(Params, value_codec.ParamsBase)
  assert hyperparams.PARAMS_CLASSES == (Params, InstantiableParams)
