"""NestedMap: attribute dict that tf.nest understands (issue 2)."""

import collections
import copy

import numpy as np
import pytest
import tensorflow as tf

from params import NestedMap

Pair = collections.namedtuple('Pair', ['var', 'grad'])


def _Map():
  return NestedMap(
      w=1, enc=NestedMap(layers=[NestedMap(b=2, a=3), 4], t=(5, 6)), c=7)


def test_attribute_and_item_access_are_the_same():
  m = NestedMap(a=1)
  m.b = 2
  m['c'] = 3
  assert (m.a, m['b'], m.c) == (1, 2, 3)
  del m.a
  assert 'a' not in m
  with pytest.raises(AttributeError, match="'zz' is not in the NestedMap"):
    _ = m.zz


@pytest.mark.parametrize('key', ['keys', 'items', 'get', 'pop', 'update',
                                 'copy', 'Flatten', 'Set', 'Transform'])
def test_keys_that_clash_with_methods_are_rejected(key):
  for make in (lambda: NestedMap({key: 1}), lambda: NestedMap(**{key: 1}),
               lambda: NestedMap().__setitem__(key, 1),
               lambda: setattr(NestedMap(), key, 1),
               lambda: NestedMap().update({key: 1}),
               lambda: NestedMap().setdefault(key, 1)):
    with pytest.raises(ValueError) as e:
      make()
    assert repr(key) in str(e.value) and 'clashes' in str(e.value)


@pytest.mark.parametrize('key', ['1a', 'a-b', 'a.b', '', 3])
def test_keys_that_are_not_identifiers_are_rejected(key):
  with pytest.raises(ValueError, match='not a valid identifier'):
    NestedMap({key: 1})


def test_tf_nest_flatten_and_pack_keep_the_type():
  m = _Map()
  leaves = tf.nest.flatten(m)
  # tf.nest sorts dict keys: c, enc.layers[0].a, .b, enc.layers[1], enc.t, w.
  assert leaves == [7, 3, 2, 4, 5, 6, 1]
  packed = tf.nest.pack_sequence_as(m, [x * 10 for x in leaves])
  assert type(packed) is NestedMap and type(packed.enc) is NestedMap
  assert type(packed.enc.layers[0]) is NestedMap
  assert packed.enc.layers[0].a == 30 and packed.w == 10
  mapped = tf.nest.map_structure(lambda x: x + 1, m)
  assert type(mapped) is NestedMap and mapped.enc.t == (6, 7)


def test_flatten_items_uses_dotted_keys_and_indices():
  assert _Map().FlattenItems() == [
      ('c', 7), ('enc.layers[0].a', 3), ('enc.layers[0].b', 2),
      ('enc.layers[1]', 4), ('enc.t[0]', 5), ('enc.t[1]', 6), ('w', 1)]
  assert _Map().Flatten() == [7, 3, 2, 4, 5, 6, 1]


def test_pack_replaces_leaves_in_flatten_order():
  m = _Map()
  packed = m.Pack(['c', 'a', 'b', 'l1', 't0', 't1', 'w'])
  assert type(packed) is NestedMap
  assert packed.enc.layers[0] == {'a': 'a', 'b': 'b'}
  assert packed.enc.t == ('t0', 't1') and packed.w == 'w'
  assert m.w == 1  # the original is untouched
  with pytest.raises(ValueError, match='expected 7 leaves, got 2'):
    m.Pack([1, 2])


def test_transform_applies_to_every_leaf():
  t = _Map().Transform(lambda x: x * 2)
  assert t.Flatten() == [14, 6, 4, 8, 10, 12, 2]
  assert t.IsCompatible(_Map())


def test_namedtuples_are_leaves():
  m = NestedMap(x=Pair(1, 2), y=[Pair(3, 4)])
  assert m.Flatten() == [Pair(1, 2), Pair(3, 4)]
  assert [k for k, _ in m.FlattenItems()] == ['x', 'y[0]']
  swapped = m.Transform(lambda p: Pair(p.grad, p.var))
  assert swapped.x == Pair(2, 1) and isinstance(swapped.y[0], Pair)
  assert m.Filter(lambda p: p.var > 2) == {'y': [Pair(3, 4)]}


def test_filter_and_filter_key_val_drop_empty_containers():
  m = _Map()
  evens = m.Filter(lambda v: v % 2 == 0)
  assert type(evens) is NestedMap
  assert evens == {'enc': {'layers': [{'b': 2}, 4], 't': (6,)}}
  by_key = m.FilterKeyVal(lambda k, _: k.startswith('enc.layers'))
  assert by_key.FlattenItems() == [('enc.layers[0].a', 3),
                                   ('enc.layers[0].b', 2),
                                   ('enc.layers[1]', 4)]
  assert m.Filter(lambda v: False) == NestedMap()


def test_is_compatible_compares_structure_not_values():
  assert _Map().IsCompatible(_Map().Transform(str))
  other = _Map()
  other.enc.layers.append(8)
  assert not _Map().IsCompatible(other)
  assert not NestedMap(a=[]).IsCompatible(NestedMap(b=[]))
  assert not NestedMap(a=1).IsCompatible(NestedMap(a=[1]))
  assert not NestedMap(a=1).IsCompatible({'a': 1})


def test_deep_copy_copies_containers_and_shares_leaves():
  leaf = np.array([1.0])
  m = NestedMap(a=NestedMap(b=[leaf]), t=(1,))
  c = m.DeepCopy()
  assert type(c) is NestedMap and type(c.a) is NestedMap
  c.a.b.append(2)
  c.a.x = 3
  assert m.a.b == [leaf] and 'x' not in m.a
  assert c.a.b[0] is leaf
  full = copy.deepcopy(m)
  assert type(full) is NestedMap and full.a.b[0] is not leaf
  np.testing.assert_array_equal(full.a.b[0], leaf)
  shallow = m.copy()
  assert type(shallow) is NestedMap and shallow.a is m.a


def test_dotted_get_and_set():
  m = _Map()
  assert m.Get('enc.layers[0].a') == 3
  assert m.Get('enc.t[1]') == 6
  m.Set('enc.layers[0].a', 30)
  m.Set('enc.layers[1]', 40)
  m.Set('new.deep.key', 1)
  assert m.enc.layers[0].a == 30 and m.enc.layers[1] == 40
  assert type(m.new.deep) is NestedMap and m.new.deep.key == 1


@pytest.mark.parametrize('key,part', [
    ('enc.nope', "'nope'"),
    ('enc.layers[5].a', '[5]'),
    ('w.x', "'w' is a int"),
    ('enc..a', 'Malformed'),
])
def test_dotted_get_errors_name_the_key(key, part):
  with pytest.raises(KeyError) as e:
    _Map().Get(key)
  assert repr(key) in str(e.value) and part in str(e.value)


def test_dotted_set_rejects_reserved_keys_and_tuples():
  with pytest.raises(ValueError, match="'items'"):
    NestedMap().Set('a.items', 1)
  with pytest.raises(KeyError, match='tuple'):
    _Map().Set('enc.t[0]', 1)
