"""BaseLayer: a `tf.Module` built from Params, owning children and variables.

After Lingvo's `lingvo/core/base_layer.py`, in TF2 form:
  * `Params()` is a classmethod returning `InstantiableParams` with `cls` set.
  * `__init__(params)` keeps a frozen copy in `self.params`.
  * `CreateChild` / `CreateChildren` build sub-layers, which inherit the unset
    base params (`dtype`, `fprop_dtype`, `params_init`) of their parent.
  * `CreateVariable` makes a `tf.Variable` named '<layer path>/<name>'.
  * `vars` is a NestedMap of every variable (children included), `theta` the
    values of the trainable and non-trainable variables, cast to
    `fprop_dtype` for floating point ones.
  * tf.Module tracking: `tf.train.Checkpoint(model=layer)` saves every child
    and variable.
"""

import re

import tensorflow as tf

from params import hyperparams
from params.nested_map import NestedMap

_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_DESCENDANT_RE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$')


class BaseLayer(tf.Module):
  """Base class of every configurable component.

  Subclasses define their knobs in `Params()` and their structure in
  `__init__` (children with `CreateChild`, variables with `CreateVariable`).

  Raises:
    ValueError: on a layer name that is not an identifier, a duplicate child
      or variable name, or a bad initializer.
  """

  @classmethod
  def Params(cls):
    """Returns InstantiableParams for this layer; subclasses add Defines."""
    p = hyperparams.InstantiableParams(cls)
    p.Define('name', '', 'Name of this layer; the last part of its path.')
    p.Define('dtype', tf.float32, 'Dtype of the variables this layer creates.')
    p.Define(
        'fprop_dtype', None,
        'Dtype of the computation: theta is cast to it (float16/bfloat16 '
        'for mixed precision). None means `dtype`.')
    p.Define(
        'params_init', None,
        'Default initializer of this layer\'s variables: anything '
        'tf.keras.initializers.get() accepts (a name such as '
        '\'glorot_uniform\', or {\'class_name\': ..., \'config\': ...}), or a '
        'number for a constant. None inherits the parent\'s, else zeros.')
    p.Define('random_seed', None,
             'Seed for random initializers; None inherits the parent\'s.')
    return p

  def __init__(self, params):
    if not isinstance(params, hyperparams.Params):
      raise TypeError('%s expects Params, got %r.' %
                      (type(self).__name__, type(params).__name__))
    name = params.name
    if not isinstance(name, str) or not _NAME_RE.match(name):
      raise ValueError(
          '%s: params.name %r must be a Python identifier (letters, digits, '
          '_), e.g. p.Set(name=\'encoder\').' % (type(self).__name__, name))
    super().__init__(name=name)
    self._params = params.Copy(frozen=True)
    self._parent_path = getattr(BaseLayer, '_building_parent_path', '')
    self._private_children = {}
    self._private_vars = {}

  # ---- identity ------------------------------------------------------------

  @property
  def params(self):
    """The frozen params this layer was built from."""
    return self._params

  @property
  def path(self):
    """'/'-joined names from the root layer to this one, e.g. 'task/enc'."""
    if self._parent_path:
      return '%s/%s' % (self._parent_path, self._params.name)
    return self._params.name

  @property
  def fprop_dtype(self):
    return self._params.fprop_dtype or self._params.dtype

  # ---- children ------------------------------------------------------------

  def _InheritBaseParams(self, child_params):
    p = child_params.Copy(frozen=False)
    for key in ('fprop_dtype', 'params_init', 'random_seed'):
      if key in p and p.Get(key) is None and self._params.Get(key) is not None:
        p.Set(**{key: self._params.Get(key)})
    if 'dtype' in p and p.dtype == tf.float32 and self._params.dtype != tf.float32:
      p.dtype = self._params.dtype
    return p

  def _Build(self, name, params):
    p = self._InheritBaseParams(params)
    if not p.name:
      p.name = name
    saved = getattr(BaseLayer, '_building_parent_path', '')
    BaseLayer._building_parent_path = self.path
    try:
      return p.Instantiate()
    finally:
      BaseLayer._building_parent_path = saved

  def CreateChild(self, name, params):
    """Builds `params` as the child `name` and returns it.

    The child's params inherit this layer's `fprop_dtype`, `params_init`,
    `random_seed` (and a non-default `dtype`) where they are unset; an empty
    `name` becomes `name`.

    Raises:
      ValueError: if `name` is taken or not an identifier.
    """
    self._CheckNewName(name)
    child = self._Build(name, params)
    self._private_children[name] = child
    return child

  def CreateChildren(self, name, params_list):
    """Builds a list (or dict) of params as children under `name`.

    List elements are named '<name>_<i>' unless their params give a name;
    dict elements by their key unless their params give a name.
    Returns the list (or dict) of layers.
    """
    self._CheckNewName(name)
    if isinstance(params_list, dict):
      built = {k: self._Build(k, p) for k, p in params_list.items()}
    else:
      built = [self._Build('%s_%d' % (name, i), p)
               for i, p in enumerate(params_list)]
    self._private_children[name] = built
    return self._private_children[name]

  def _CheckNewName(self, name):
    if not isinstance(name, str) or not _NAME_RE.match(name):
      raise ValueError('%s: child/variable name %r must be an identifier.' %
                       (self.path, name))
    if name in self._private_children or name in self._private_vars:
      raise ValueError('%s: %r is already a child or variable of this layer.'
                       % (self.path, name))

  @property
  def children(self):
    """NestedMap of the direct children (lists/dicts kept as built)."""
    out = NestedMap()
    for k, v in self._private_children.items():
      if isinstance(v, (list, tuple)):
        v = list(v)
      elif isinstance(v, dict):
        v = dict(v)
      out[k] = v
    return out

  def __getattr__(self, name):
    # Children are reachable as attributes, as in Lingvo.
    d = self.__dict__
    children = d.get('_private_children')
    if children is not None and name in children:
      return children[name]
    raise AttributeError('%r object has no attribute %r' %
                         (type(self).__name__, name))

  def GetDescendant(self, path):
    """Returns the descendant at 'a.b[1].c' (children names and list indices).

    Raises:
      KeyError: naming the missing part and the children that exist.
    """
    layer = self
    for seg in path.split('.'):
      m = _DESCENDANT_RE.match(seg)
      if not m:
        raise KeyError('Malformed descendant path %r.' % path)
      name = m.group(1)
      kids = layer._private_children  # pylint: disable=protected-access
      if name not in kids:
        raise KeyError('%r: %s has no child %r; children: %s' %
                       (path, layer.path, name, sorted(kids)))
      layer = kids[name]
      for idx in re.findall(r'\[(\d+)\]', m.group(2)):
        layer = layer[int(idx)]
    return layer

  # ---- variables -----------------------------------------------------------

  def CreateVariable(self, name, shape, init=None, trainable=True, dtype=None,
                     **kwargs):
    """Creates the variable `name` of this layer and returns it.

    Args:
      name: identifier, unique among this layer's children and variables.
      shape: list of ints.
      init: initializer: a name or config for tf.keras.initializers.get, a
        keras initializer, a number (constant), a numpy/tensor value of the
        shape; None uses params.params_init, else zeros.
      trainable: whether the learner may train it.
      dtype: variable dtype; None uses params.dtype.
      **kwargs: passed to tf.Variable (e.g. synchronization, aggregation).

    Returns:
      The tf.Variable, named '<layer path>/<name>'.

    Raises:
      ValueError: duplicate name, or an initializer Keras does not know.
    """
    self._CheckNewName(name)
    dtype = tf.as_dtype(dtype or self._params.dtype)
    init = self._params.params_init if init is None else init
    initial = _InitialValue(init, shape, dtype, self._params.random_seed)
    with tf.init_scope():
      var = tf.Variable(initial, name='%s/%s' % (self.path, name),
                        trainable=trainable, dtype=dtype, **kwargs)
    self._private_vars[name] = var
    return var

  @property
  def vars(self):
    """NestedMap of every variable of this layer and its descendants."""
    out = NestedMap()
    for k, v in self._private_vars.items():
      out[k] = v
    for k, child in self._private_children.items():
      sub = _ChildVars(child)
      if sub is not None:
        out[k] = sub
    return out

  @property
  def theta(self):
    """NestedMap like `vars` of the variables' current values.

    Floating point values are cast to `fprop_dtype`. Read this inside the
    gradient tape (or tf.function) that computes the loss.
    """
    fprop_dtype = tf.as_dtype(self.fprop_dtype)

    def _Read(v):
      value = tf.convert_to_tensor(v)
      if value.dtype.is_floating and value.dtype != fprop_dtype:
        value = tf.cast(value, fprop_dtype)
      return value

    return self.vars.Transform(_Read)

  def FProp(self, theta, *args, **kwargs):
    """Forward computation on `theta` (this layer's `theta`)."""
    raise NotImplementedError('%s does not implement FProp.' %
                              type(self).__name__)


def _ChildVars(child):
  if isinstance(child, BaseLayer):
    v = child.vars
    return v
  if isinstance(child, (list, tuple)):
    return [_ChildVars(c) for c in child]
  if isinstance(child, dict):
    return NestedMap({k: _ChildVars(c) for k, c in child.items()})
  return None


def _InitialValue(init, shape, dtype, seed):
  """Returns the initial value tensor for CreateVariable."""
  if init is None:
    return tf.zeros(shape, dtype)
  if isinstance(init, bool):
    raise ValueError('Initializer %r is not valid.' % (init,))
  if isinstance(init, (int, float)):
    return tf.fill(shape, tf.constant(init, dtype))
  if hasattr(init, 'shape') and not callable(init):
    value = tf.convert_to_tensor(init, dtype)
    if value.shape.as_list() != list(shape):
      raise ValueError('Initial value shape %s != %s.' %
                       (value.shape.as_list(), list(shape)))
    return value
  try:
    if isinstance(init, (str, dict)) and seed is not None:
      cfg = (tf.keras.initializers.serialize(tf.keras.initializers.get(init))
             if isinstance(init, str) else dict(init))
      if isinstance(cfg, dict) and 'config' in cfg and 'seed' in cfg['config']:
        cfg['config'] = dict(cfg['config'], seed=seed)
      initializer = tf.keras.initializers.get(cfg)
    else:
      initializer = tf.keras.initializers.get(init)
  except (ValueError, TypeError) as e:
    raise ValueError('Unknown initializer %r: %s' % (init, e)) from None
  return tf.convert_to_tensor(initializer(shape, dtype=dtype), dtype)
