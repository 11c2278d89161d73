"""BaseLayer: a tf.Module tree built from Params (issue 2)."""

import numpy as np
import pytest
import tensorflow as tf

from params import BaseLayer
from params import NestedMap


class Leaf(BaseLayer):
  """Level 3: y = x * w + b, with a non-trainable counter."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('dim', 2, 'Width of w and b.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [self.params.dim])
    self.CreateVariable('b', [self.params.dim], init=0.5)
    self.CreateVariable('count', [], init=0, trainable=False, dtype=tf.int64)

  def FProp(self, theta, x):
    return x * theta.w + theta.b


class Block(BaseLayer):
  """Level 2: a list of Leafs, a dict of Leafs and its own scale."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('leaf', Leaf.Params(), 'Template of the leaves.')
    p.Define('num_leaves', 2, 'Leaves in the list.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self.CreateChildren('leaves', [p.leaf] * p.num_leaves)
    self.CreateChildren('named', {'left': p.leaf, 'right': p.leaf})
    self.CreateVariable('scale', [], init=2.0)

  def FProp(self, theta, x):
    for leaf, t in zip(self.leaves, theta.leaves):
      x = leaf.FProp(t, x)
    return x * theta.scale


class Root(BaseLayer):
  """Level 1: an encoder Block, a single Leaf head and an embedding."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('enc', Block.Params(), 'Encoder.')
    p.Define('head', Leaf.Params().Set(dim=3), 'Head.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('enc', self.params.enc)
    self.CreateChild('head', self.params.head)
    self.CreateVariable('emb', [4, 2], init='ones')


def _Root(**kw):
  return Root(Root.Params().Set(name='model', **kw))


@pytest.fixture(scope='module')
def root():
  return _Root(params_init={'class_name': 'Constant', 'config': {'value': 0.25}})


_VAR_NAMES = {
    'emb': 'model/emb',
    'enc.leaves[0].w': 'model/enc/leaves_0/w',
    'enc.leaves[0].b': 'model/enc/leaves_0/b',
    'enc.leaves[0].count': 'model/enc/leaves_0/count',
    'enc.leaves[1].w': 'model/enc/leaves_1/w',
    'enc.leaves[1].b': 'model/enc/leaves_1/b',
    'enc.leaves[1].count': 'model/enc/leaves_1/count',
    'enc.named.left.w': 'model/enc/left/w',
    'enc.named.left.b': 'model/enc/left/b',
    'enc.named.left.count': 'model/enc/left/count',
    'enc.named.right.w': 'model/enc/right/w',
    'enc.named.right.b': 'model/enc/right/b',
    'enc.named.right.count': 'model/enc/right/count',
    'enc.scale': 'model/enc/scale',
    'head.w': 'model/head/w',
    'head.b': 'model/head/b',
    'head.count': 'model/head/count',
}


def test_three_level_tree_vars_keys_and_variable_names(root):
  items = root.vars.FlattenItems()
  assert [k for k, _ in items] == sorted(_VAR_NAMES)
  assert {k: v.name for k, v in items} == {
      k: n + ':0' for k, n in _VAR_NAMES.items()}
  assert type(root.vars) is NestedMap and type(root.vars.enc) is NestedMap
  assert isinstance(root.vars.enc.leaves, list)
  assert root.vars.enc.leaves[1].w is root.enc.leaves[1].vars.w
  assert root.enc.path == 'model/enc'
  assert root.enc.leaves[1].path == 'model/enc/leaves_1'
  # tf.Module sees the same variables.
  assert len(root.variables) == len(_VAR_NAMES)
  assert len(root.trainable_variables) == len(_VAR_NAMES) - 5


def test_children_and_attribute_access(root):
  assert sorted(root.children.keys()) == ['enc', 'head']
  assert root.children.enc is root.enc
  assert isinstance(root.enc.leaves[0], Leaf)
  assert sorted(root.enc.named) == ['left', 'right']
  assert type(root.enc.named) is NestedMap and root.enc.named.left.path == (
      'model/enc/left')
  assert type(root.enc.children.named) is NestedMap
  with pytest.raises(AttributeError, match="'nope'"):
    _ = root.nope


def test_values_from_initializers(root):
  # params_init (Constant 0.25) is inherited by every child; explicit inits win.
  np.testing.assert_allclose(root.enc.leaves[0].vars.w.numpy(), [0.25, 0.25])
  np.testing.assert_allclose(root.head.vars.w.numpy(), [0.25] * 3)
  np.testing.assert_allclose(root.enc.named.left.vars.b.numpy(), [0.5, 0.5])
  np.testing.assert_allclose(root.vars.emb.numpy(), np.ones([4, 2]))
  assert root.vars.enc.scale.numpy() == 2.0
  assert root.vars.head.count.dtype == tf.int64


def test_get_descendant(root):
  assert root.GetDescendant('enc') is root.enc
  assert root.GetDescendant('enc.leaves[1]') is root.enc.leaves[1]
  assert root.GetDescendant('enc.named.right') is root.enc.named['right']
  assert root.GetDescendant('head') is root.head


@pytest.mark.parametrize('path,part', [
    ('enc.nope', "no child 'nope'"),
    ('enc.leaves[2]', 'leaves[2] does not exist'),
    ('head[0]', 'not a list'),
    ('enc.leaves.w', 'index it with [i]'),
    ('enc..x', 'Malformed'),
])
def test_get_descendant_errors_name_the_path(root, path, part):
  with pytest.raises(KeyError) as e:
    root.GetDescendant(path)
  assert repr(path) in str(e.value) and part in str(e.value)


def test_params_are_a_frozen_copy():
  p = Leaf.Params().Set(name='leaf', dim=3)
  layer = Leaf(p)
  assert layer.params == p and layer.params is not p
  assert layer.params.is_frozen and not p.is_frozen
  p.dim = 5
  assert layer.params.dim == 3
  with pytest.raises(AttributeError, match='frozen'):
    layer.params.dim = 4


def test_forward_uses_theta(root):
  x = tf.constant([1.0, 2.0])
  # leaves: x*0.25+0.5 twice -> [0.8125, 0.875]... computed by hand:
  # [1, 2] -> [0.75, 1.0] -> [0.6875, 0.75]; * scale 2 -> [1.375, 1.5].
  np.testing.assert_allclose(root.enc.FProp(root.enc.theta, x), [1.375, 1.5])


def test_theta_is_cast_to_fprop_dtype_and_inherited():
  for fprop in (tf.bfloat16, tf.float16):
    model = _Root(fprop_dtype=fprop)
    theta = model.theta
    assert model.vars.head.w.dtype == tf.float32
    assert theta.head.w.dtype == fprop
    assert theta.enc.leaves[1].b.dtype == fprop
    assert theta.head.count.dtype == tf.int64  # integers are not cast
    # Children inherit fprop_dtype, so their own theta is cast too.
    assert model.enc.leaves[0].params.fprop_dtype == fprop
    assert model.enc.leaves[0].theta.w.dtype == fprop
    out = model.enc.FProp(model.enc.theta, tf.constant([1.0, 2.0], fprop))
    assert out.dtype == fprop


def test_theta_gradients_flow_to_float32_variables():
  model = _Root(fprop_dtype=tf.bfloat16, params_init=1.0)
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.cast(
        model.head.FProp(model.theta.head, tf.constant([1.0, 2.0, 3.0],
                                                       tf.bfloat16)),
        tf.float32))
  g = tape.gradient(loss, model.vars.head.w)
  assert g.dtype == tf.float32
  np.testing.assert_allclose(g.numpy(), [1.0, 2.0, 3.0])


def test_children_inherit_dtype_and_params_init():
  model = _Root(dtype=tf.float64, params_init=3.0)
  assert model.vars.enc.leaves[0].w.dtype == tf.float64
  assert model.enc.named['left'].params.dtype == tf.float64
  np.testing.assert_allclose(model.vars.head.w.numpy(), [3.0] * 3)
  assert model.theta.head.w.dtype == tf.float64
  # A child's own setting wins over the parent's.
  p = Root.Params().Set(name='m', params_init=3.0)
  p.head.params_init = 'zeros'
  p.head.dtype = tf.float16
  model = Root(p)
  np.testing.assert_allclose(model.vars.head.w.numpy(), [0.0] * 3)
  assert model.vars.head.w.dtype == tf.float16
  np.testing.assert_allclose(model.vars.enc.scale.numpy(), 2.0)


def test_default_init_is_zeros():
  leaf = Leaf(Leaf.Params().Set(name='z'))
  np.testing.assert_allclose(leaf.vars.w.numpy(), [0.0, 0.0])


# ---- initializers -------------------------------------------------------------------


class Pair(BaseLayer):
  """Two same-shape variables from the layer's params_init."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('a', [50])
    self.CreateVariable('b', [50])


@pytest.mark.parametrize('init,check', [
    ('glorot_uniform', lambda v: np.abs(v).max() <= np.sqrt(6.0 / 100) + 1e-6),
    ({'class_name': 'RandomNormal', 'config': {'stddev': 0.01}},
     lambda v: 0.001 < v.std() < 0.02),
    ({'class_name': 'RandomUniform', 'config': {'minval': 2.0, 'maxval': 3.0}},
     lambda v: v.min() >= 2.0 and v.max() <= 3.0),
])
def test_keras_initializers_by_name_and_config_with_seed(init, check):
  p = Pair.Params().Set(name='pair', params_init=init, random_seed=7)
  x, y = Pair(p), Pair(p)
  a = x.vars.a.numpy()
  assert check(a)
  # Same seed and names -> same values; two variables of one layer differ.
  np.testing.assert_array_equal(a, y.vars.a.numpy())
  assert not np.array_equal(a, x.vars.b.numpy())
  other = Pair(p.Copy().Set(random_seed=8)).vars.a.numpy()
  assert not np.array_equal(a, other)


def test_keras_initializer_object_and_array_value():
  class Two(BaseLayer):

    def __init__(self, params):
      super().__init__(params)
      self.CreateVariable('k', [2], init=tf.keras.initializers.Constant(4.0))
      self.CreateVariable('v', [2], init=np.array([1.0, 2.0]))

  t = Two(Two.Params().Set(name='two'))
  np.testing.assert_allclose(t.vars.k.numpy(), [4.0, 4.0])
  np.testing.assert_allclose(t.vars.v.numpy(), [1.0, 2.0])


@pytest.mark.parametrize('init,part', [
    ('no_such_init', "'no_such_init'"),
    ({'class_name': 'Nope'}, "'Nope'"),
    (True, 'True'),
    (np.zeros([3]), '[3] != [50]'),
])
def test_bad_initializer_names_layer_and_variable(init, part):
  class One(BaseLayer):

    def __init__(self, params):
      super().__init__(params)
      self.CreateVariable('a', [50], init=init)

  with pytest.raises(ValueError) as e:
    One(One.Params().Set(name='one'))
  assert "one: CreateVariable('a')" in str(e.value) and part in str(e.value)


# ---- names --------------------------------------------------------------------------


class Dup(BaseLayer):

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('what', 'var', 'Which duplicate to make.')
    return p

  def __init__(self, params):
    super().__init__(params)
    what = self.params.what
    self.CreateVariable('x', [1])
    if what == 'var':
      self.CreateVariable('x', [1])
    elif what == 'child':
      self.CreateChild('x', Leaf.Params())
    elif what == 'children':
      self.CreateChildren('x', [Leaf.Params()])
    elif what == 'element':
      self.CreateChildren('ls', [Leaf.Params().Set(name='x')])
    elif what == 'same_elements':
      self.CreateChildren('ls', [Leaf.Params().Set(name='y')] * 2)
    elif what == 'bad_name':
      self.CreateVariable('a/b', [1])


@pytest.mark.parametrize('what,part', [
    ('var', "'x' is already a child or variable"),
    ('child', "'x' is already a child or variable"),
    ('children', "'x' is already a child or variable"),
    ('element', "would be named 'x'"),
    ('same_elements', "would be named 'y'"),
    ('bad_name', "'a/b' must be an identifier"),
])
def test_duplicate_and_bad_names_are_errors(what, part):
  with pytest.raises(ValueError) as e:
    Dup(Dup.Params().Set(name='dup', what=what))
  assert 'dup' in str(e.value) and part in str(e.value)


@pytest.mark.parametrize('name', ['', 'a b', '1x', None])
def test_layer_name_must_be_an_identifier(name):
  with pytest.raises(ValueError) as e:
    Leaf(Leaf.Params().Set(name=name))
  assert 'params.name %r' % (name,) in str(e.value)


def test_layer_needs_params():
  with pytest.raises(TypeError, match='expects Params'):
    Leaf({'name': 'x'})


def test_fprop_must_be_implemented():
  layer = Pair(Pair.Params().Set(name='p'))
  with pytest.raises(NotImplementedError, match='Pair does not implement'):
    layer.FProp(layer.theta)


# ---- checkpoints -------------------------------------------------------------------


def test_checkpoint_save_fresh_tree_restore_equal_values(tmp_path):
  p = Root.Params().Set(name='model', params_init='glorot_uniform',
                        random_seed=1)
  saved = Root(p)
  for i, var in enumerate(saved.variables):
    var.assign(tf.cast(tf.fill(var.shape, i + 1), var.dtype) +
               tf.zeros_like(var))
  path = tf.train.Checkpoint(model=saved).save(str(tmp_path / 'ckpt'))

  fresh = Root(p.Copy().Set(random_seed=2))
  before = {k: v.numpy() for k, v in fresh.vars.FlattenItems()}
  assert any(not np.array_equal(before[k], v.numpy())
             for k, v in saved.vars.FlattenItems())
  tf.train.Checkpoint(model=fresh).restore(path).assert_consumed()
  want = dict(saved.vars.FlattenItems())
  for key, var in fresh.vars.FlattenItems():
    np.testing.assert_array_equal(var.numpy(), want[key].numpy(), err_msg=key)
  assert fresh.vars.enc.named.right.count.numpy() > 0


class Stack(BaseLayer):
  """A list of Blocks, for paths that index and then go on: 'a[1].b'."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateChildren('blocks', [Block.Params()] * 2)


def test_get_descendant_through_an_index_and_on():
  s = Stack(Stack.Params().Set(name='s'))
  leaf = s.GetDescendant('blocks[1].leaves[0]')
  assert leaf is s.blocks[1].leaves[0]
  assert leaf.path == 's/blocks_1/leaves_0'
  assert leaf.vars.w.name == 's/blocks_1/leaves_0/w:0'
  assert s.GetDescendant('blocks[0].named.left').path == 's/blocks_0/left'


class _Holder(BaseLayer):
  """A layer with one child slot, for the wrong-type errors."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('child', None, 'Params of the child.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('child', self.params.child)


@pytest.mark.parametrize('given,says', [
    (BaseLayer, 'got the class BaseLayer. Fix: pass BaseLayer.Params()'),
    (BaseLayer.Params, 'got BaseLayer.Params (a method, not called). Fix: '
     'call it: BaseLayer.Params().'),
    (object(), 'got an instance of builtins.object.'),
])
def test_create_child_wrong_type_names_the_slot_and_the_fix(given, says):
  with pytest.raises(TypeError) as e:
    _Holder.Params().Set(name='h', child=given).Instantiate()
  assert str(e.value).startswith('h.child: expected InstantiableParams, ')
  assert says in str(e.value)
