"""BaseLayer: a `tf.Module` built from Params, owning children and variables.

After Lingvo's `lingvo/core/base_layer.py`, in TF2 form:
  * `Params()` is a classmethod returning `InstantiableParams` with `cls` set.
  * `__init__(params)` keeps a frozen copy in `self.params`.
  * `CreateChild` / `CreateChildren` build sub-layers, which inherit the unset
    base params (`dtype`, `fprop_dtype`, `params_init`) of their parent.
  * `CreateVariable` makes a `tf.Variable` named '<layer path>/<name>'.
  * Lingvo's variable collections, for the one collection that changes a
    number: `SKIP_LP_REGULARIZATION`. A variable in it gets no L1/L2 term
    from the learner. It is put there by `CreateVariable(...,
    collections=[SKIP_LP_REGULARIZATION])`, by the layer param
    `skip_lp_regularization=True` (inherited by children left at None, as
    Lingvo's CopyBaseParams does), or by `AddToCollection(
    SKIP_LP_REGULARIZATION, var)` for any variable (e.g. a Keras layer's).
  * `vars` is a NestedMap of every variable (children included), `theta` the
    values of the trainable and non-trainable variables, cast to
    `fprop_dtype` for floating point ones.
  * tf.Module tracking: `tf.train.Checkpoint(model=layer)` saves every child
    and variable.
  * Keras layers and models held in public attributes (`self.dense =
    tf.keras.layers.Dense(8)`) are part of the tree: their variables appear
    in `vars` (under the attribute name) named '<layer path>/<attribute>/...'
    like `CreateVariable`'s, and are checkpointed (see `__setattr__`).
"""

import functools
import re
import zlib

import tensorflow as tf

from params import checks
from params import hyperparams
from params import remat
from params.nested_map import NestedMap

# Lingvo 0.14.2 py_utils.SKIP_LP_REGULARIZATION: the collection of variables
# that the learner's L1/L2 regularizers skip (same string as Lingvo's).
SKIP_LP_REGULARIZATION = '__lingvo_skip_lp_regularization'
# The attribute of a tf.Variable holding its collections (a tuple of str).
_COLLECTIONS_ATTR = '_lingvo_collections'

_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_DESCENDANT_RE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$')


class BaseLayer(tf.Module):
  """Base class of every configurable component.

  Subclasses define their knobs in `Params()` and their structure in
  `__init__` (children with `CreateChild`, variables with `CreateVariable`).

  Differs from Lingvo's BaseLayer (docs/lingvo.md): `params_init` defaults
  to None (the initializer of each CreateVariable call; Lingvo: Xavier);
  Lingvo's inference_driver_name, vn, add_name_to_theta, is_inference,
  allow_implicit_capture, device_mesh, weight_split_dims_mapping,
  activation_split_dims_mapping and child_variable_scope_override are
  absent (inference export, variational noise, TPU capture, GShard and TF1
  scopes are not offered). `skip_lp_regularization` is Lingvo's.

  Raises:
    ValueError: on a layer name that is not an identifier, a duplicate child
      or variable name, a bad initializer, a `dtype` / `fprop_dtype` that
      is not a floating dtype, or a value refused by `ValueChecks()` (the
      message names the key).
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
    p.Define(
        'skip_lp_regularization', None,
        'If True, every variable this layer creates is put in the '
        'SKIP_LP_REGULARIZATION collection: the learner adds no L1/L2 term '
        'for it. None inherits the parent\'s; None/False leaves only the '
        'variables put there explicitly (Lingvo\'s param).')
    p.Define(
        'remat', False,
        'If True, this layer\'s FProp keeps no activations for the gradient: '
        'the backward pass recomputes them (one more forward pass of the '
        'layer per step, for less peak memory; params/remat.py). Not '
        'inherited by children. Only for a class that defines FProp.')
    return p

  def __init_subclass__(cls, **kwargs):
    """Wraps an FProp the subclass defines so `p.remat` can recompute it.

    The one place rematerialization is wired (params/remat.py, `WrapFProp`):
    with `p.remat` False the wrapper calls the FProp unchanged.
    """
    super().__init_subclass__(**kwargs)
    fprop = cls.__dict__.get('FProp')
    if fprop is not None and getattr(fprop, 'remat_unwrapped', None) is None:
      cls.FProp = remat.WrapFProp(fprop)

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
    self._private_keras = {}
    self._CheckDtypes()
    if 'remat' in self._params:
      remat.CheckRematParam(self, self._params.remat)
    checks.CheckValues(self, self._params, self.ValueChecks())

  @classmethod
  def ValueChecks(cls):
    """{param key: checks.Spec} of the numeric params `__init__` checks.

    Subclasses extend the dict of `super().ValueChecks()`. Each value is
    checked for its type (a bool is not a number), finiteness and range
    before the subclass's `__init__` body runs; a refusal is a one-line
    ValueError naming the key (params/checks.py). Dotted keys
    ('train.max_steps') reach nested params.
    """
    return {}

  def _CheckDtypes(self):
    """Refuses a `dtype` or `fprop_dtype` that is not floating (issue 12):
    an int32 computation has no gradient, so it would fail only at the first
    step, with a message about the loss instead of the key."""
    p = self._params
    if 'dtype' in p:
      checks.CheckFloatDtype(self, 'dtype', p.dtype, none_ok=False)
    if 'fprop_dtype' in p:
      checks.CheckFloatDtype(self, 'fprop_dtype', p.fprop_dtype)

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
    for key in ('fprop_dtype', 'params_init', 'random_seed',
                'skip_lp_regularization'):
      if key in p and p.Get(key) is None and self._params.Get(key) is not None:
        p.Set(**{key: self._params.Get(key)})
    if 'dtype' in p and p.dtype == tf.float32 and self._params.dtype != tf.float32:
      p.dtype = self._params.dtype
    return p

  def _Build(self, name, params):
    _CheckChildParams(self.path, name, params)
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
      TypeError: if `params` is not InstantiableParams (e.g. a class, an
        unbound `X.Params` or an object); the message says what to pass.
    """
    self._CheckNewName(name)
    child = self._Build(name, params)
    self._private_children[name] = child
    return child

  def CreateChildren(self, name, params_list):
    """Builds a list (or dict) of params as children under `name`.

    List elements are named '<name>_<i>' unless their params give a name;
    dict elements by their key unless their params give a name. Either way
    the element names must be unique among this layer's children, elements
    and variables, because they are parts of variable names.

    Returns:
      The list of layers, or for a dict a NestedMap {key: layer} (the same
      thing `getattr(self, name)` returns).

    Raises:
      ValueError: if `name` or an element name is taken or not an identifier.
    """
    self._CheckNewName(name)
    if isinstance(params_list, dict):
      items = list(params_list.items())
    else:
      items = [('%s_%d' % (name, i), p) for i, p in enumerate(params_list)]
    # Element names become path parts ('<self>/<element>/w'); two siblings
    # with one name would give two variables one name.
    taken = set(self._private_children) | set(self._private_vars) | {name}
    for child_list in self._private_children.values():
      if isinstance(child_list, (list, tuple, dict)):
        values = (child_list.values() if isinstance(child_list, dict)
                  else child_list)
        taken |= {c.params.name for c in values}
    for key, p in items:
      element_name = p.name or key
      if element_name in taken:
        raise ValueError(
            '%s: CreateChildren(%r): element %r would be named %r, which is '
            'already a child, variable or element of this layer. Give the '
            'element params distinct names or leave name empty.' %
            (self.path, name, key, element_name))
      taken.add(element_name)
    if isinstance(params_list, dict):
      built = {k: self._Build(k, p) for k, p in items}
    else:
      built = [self._Build(k, p) for k, p in items]
    self._private_children[name] = built
    return _ChildView(self._private_children[name])

  def _CheckNewName(self, name):
    if not isinstance(name, str) or not _NAME_RE.match(name):
      raise ValueError('%s: child/variable name %r must be an identifier.' %
                       (self.path, name))
    if (name in self._private_children or name in self._private_vars or
        name in self.__dict__.get('_private_keras', ())):
      raise ValueError('%s: %r is already a child or variable of this layer.'
                       % (self.path, name))

  @property
  def children(self):
    """NestedMap of the direct children: layers, lists, NestedMaps of layers."""
    out = NestedMap()
    for k, v in self._private_children.items():
      if isinstance(v, (list, tuple)):
        v = list(v)
      else:
        v = _ChildView(v)
      out[k] = v
    return out

  def OwnVariables(self):
    """{name: tf.Variable} made by this layer's `CreateVariable` (not its
    children's), in creation order: `tf.train.Checkpoint` keys them
    '<layer key>/_private_vars/<name>'."""
    return dict(self._private_vars)

  def OwnChildren(self):
    """{name: layer, or list of layers} from this layer's `CreateChild` /
    `CreateChildren`, in creation order: keyed
    '<layer key>/_private_children/<name>[/<index>]' in a checkpoint."""
    return dict(self._private_children)

  def Descendants(self):
    """Yields this layer and every layer below it (children and lists of
    children, at any depth), parents before their children."""
    stack = [self]
    while stack:
      obj = stack.pop()
      if isinstance(obj, BaseLayer):
        yield obj
        stack.extend(reversed(list(obj.OwnChildren().values())))
      elif isinstance(obj, (list, tuple)):
        stack.extend(reversed(obj))

  def __setattr__(self, name, value):
    """Records a Keras layer (or model) set as a public attribute.

    `self.<name> = <keras layer>` makes the Keras layer part of this layer's
    tree: its variables appear in `vars[name]` (and so in `theta`, in the
    learners' selection, in `task.vars`) and are saved by
    `tf.train.Checkpoint` (tf.Module tracks the attribute). If the Keras
    layer is not built yet, it is renamed `name` and will build inside this
    layer's name scope, so its variables are named
    '<self.path>/<name>/<keras variable path>', e.g. 'task/dense/kernel',
    like `CreateVariable`'s. Build it in `__init__` (`layer.build(shape)`
    or one call on an example) so the learners see its variables when they
    bind. A Keras layer already built keeps the variable names Keras gave it.

    A list, tuple or dict of Keras layers is taken the same way: its
    variables are `vars[name][i]` (or `vars[name][key]`), trained like an
    attribute's; an unbuilt layer in it is named '<name>_<i>' (or
    '<name>_<key>').

    A Keras layer set `trainable=False` (in its constructor, or later) is
    frozen: no learner selects its variables (`IsTrainable`), and
    model_analysis.txt counts them as not trainable. Learners select when
    they bind (when the task is built) and when an Apply is traced; set the
    flag before either.

    Raises:
      ValueError: if `name` is already a child or variable of this layer;
        a list, tuple or dict that mixes Keras layers with other values.
    """
    keras = _KerasContainer(name, value) if not name.startswith('_') else None
    if keras is not None and '_private_keras' in self.__dict__:
      if self._private_keras.get(name) is not value:
        self._CheckNewName(name)
        for child_name, layer in keras:
          _AdoptKerasLayer(layer, child_name, self.path)
        self._private_keras[name] = value
    elif '_private_keras' in self.__dict__:
      self._private_keras.pop(name, None)
    super().__setattr__(name, value)

  def __getattr__(self, name):
    # Children are reachable as attributes, as in Lingvo.
    d = self.__dict__
    children = d.get('_private_children')
    if children is not None and name in children:
      return _ChildView(children[name])
    raise AttributeError('%r object has no attribute %r' %
                         (type(self).__name__, name))

  def GetDescendant(self, path):
    """Returns the descendant at 'a.b[1].c' (children names and list indices).

    Raises:
      KeyError: naming the missing part and the children that exist.
    """
    layer = self
    where = self.path
    for seg in path.split('.'):
      m = _DESCENDANT_RE.match(seg)
      if not m:
        raise KeyError('Malformed descendant path %r (segment %r); expected '
                       'e.g. \'a.b[1].c\'.' % (path, seg))
      name = m.group(1)
      if isinstance(layer, BaseLayer):
        kids = layer._private_children  # pylint: disable=protected-access
      elif isinstance(layer, dict):  # a dict built by CreateChildren
        kids = layer
      else:
        raise KeyError('%r: %s is a list of layers; index it with [i] before '
                       '%r.' % (path, where, name))
      if name not in kids:
        raise KeyError('%r: %s has no child %r; children: %s' %
                       (path, where, name, sorted(kids)))
      layer = kids[name]
      where = '%s.%s' % (where, name)
      for idx in re.findall(r'\[(\d+)\]', m.group(2)):
        idx = int(idx)
        if not isinstance(layer, (list, tuple)) or idx >= len(layer):
          raise KeyError('%r: %s[%d] does not exist (%s).' %
                         (path, where, idx, 'has %d elements' % len(layer)
                          if isinstance(layer, (list, tuple)) else
                          'not a list'))
        layer = layer[idx]
        where = '%s[%d]' % (where, idx)
    return layer

  # ---- variables -----------------------------------------------------------

  def CreateVariable(self, name, shape, init=None, trainable=True, dtype=None,
                     collections=None, **kwargs):
    """Creates the variable `name` of this layer and returns it.

    Args:
      name: identifier, unique among this layer's children and variables.
      shape: list of ints.
      init: initializer: a name or config for tf.keras.initializers.get, a
        keras initializer, a number (constant), a numpy/tensor value of the
        shape; None uses params.params_init, else zeros. With
        params.random_seed set, a name or config initializer that takes a
        seed gets random_seed + crc32(variable name), so same-shape
        variables differ and rebuilding the tree reproduces the values.
      trainable: whether the learner may train it.
      dtype: variable dtype; None uses params.dtype.
      collections: None or a list of collection names the variable joins
        (Lingvo's WeightParams.collections); the one that acts here is
        SKIP_LP_REGULARIZATION, which params.skip_lp_regularization=True
        also adds. Read with `VarCollections(var)`.
      **kwargs: passed to tf.Variable (e.g. synchronization, aggregation).

    Returns:
      The tf.Variable, named '<layer path>/<name>'.

    Raises:
      ValueError: duplicate name, or an initializer Keras does not know.
    """
    self._CheckNewName(name)
    dtype = tf.as_dtype(dtype or self._params.dtype)
    init = self._params.params_init if init is None else init
    var_name = '%s/%s' % (self.path, name)
    seed = self._params.random_seed
    if seed is not None:
      # One seed per variable, so two same-shape variables differ and a
      # rebuilt tree gets the same values (Lingvo mixes in the name too).
      seed = (int(seed) + zlib.crc32(var_name.encode('utf-8'))) % (2**31 - 1)
    try:
      initial = _InitialValue(init, shape, dtype, seed)
    except ValueError as e:
      raise ValueError('%s: CreateVariable(%r): %s' % (self.path, name, e)
                      ) from None
    with tf.init_scope():
      var = tf.Variable(initial, name=var_name,
                        trainable=trainable, dtype=dtype, **kwargs)
    collections = list(collections or [])
    if (self._params.skip_lp_regularization and
        SKIP_LP_REGULARIZATION not in collections):
      collections.append(SKIP_LP_REGULARIZATION)
    for c in collections:
      AddToCollection(c, var)
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
    for k, keras_value in self._private_keras.items():
      out[k] = _KerasContainerVars(keras_value, '%s.%s' % (self.path, k))
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


def AddToCollection(name, var):
  """Puts the variable `var` in the collection `name` (a str).

  Lingvo's `tf.add_to_collection(name, var)` for variables; TF2 has no graph
  collections, so the names are kept on the variable itself. E.g.
  `AddToCollection(SKIP_LP_REGULARIZATION, keras_layer.bias)` exempts that
  variable from the learner's L1/L2.

  Raises:
    TypeError: if `name` is not a str (naming the value).
  """
  if not isinstance(name, str):
    raise TypeError('AddToCollection: name=%r; expected a str such as '
                    'SKIP_LP_REGULARIZATION.' % (name,))
  have = VarCollections(var)
  if name not in have:
    setattr(var, _COLLECTIONS_ATTR, have + (name,))


def VarCollections(var):
  """The tuple of collection names `var` is in (empty if none)."""
  return tuple(getattr(var, _COLLECTIONS_ATTR, ()))


def _ChildView(child):
  """Dicts of children read as NestedMaps (layer.named.left); others as is."""
  if isinstance(child, dict) or (hasattr(child, 'keys') and
                                 not isinstance(child, BaseLayer)):
    return NestedMap(child.items())
  return child


def _ChildVars(child):
  if isinstance(child, BaseLayer):
    v = child.vars
    return v
  if isinstance(child, (list, tuple)):
    return [_ChildVars(c) for c in child]
  if isinstance(child, dict):
    return NestedMap({k: _ChildVars(c) for k, c in child.items()})
  return None


def _IsKerasLayer(value):
  return isinstance(value, tf.keras.layers.Layer)


def _KerasContainer(name, value):
  """[(name for an unbuilt layer, Keras layer)] of `value`, or None.

  `value` is a Keras layer, or a non-empty list/tuple/dict of them; None
  for anything else.

  Raises:
    ValueError: a list, tuple or dict holding Keras layers and other
      values, which no learner could train as one attribute.
  """
  if _IsKerasLayer(value):
    return [(name, value)]
  if isinstance(value, dict):
    items = [('%s_%s' % (name, k), v) for k, v in value.items()]
  elif isinstance(value, (list, tuple)):
    items = [('%s_%d' % (name, i), v) for i, v in enumerate(value)]
  else:
    return None
  keras = [_IsKerasLayer(v) for _, v in items]
  if not any(keras):
    return None
  if not all(keras):
    raise ValueError(
        '%r holds Keras layers and other values (%s); a learner trains a '
        'list, tuple or dict of Keras layers only. Keep the Keras layers in '
        'their own attribute.' % (name, sorted({
            type(v).__name__ for _, v in items if not _IsKerasLayer(v)})))
  return items


def _KerasContainerVars(value, where):
  """`_KerasVars` of a Keras layer, or a list / NestedMap of them."""
  if _IsKerasLayer(value):
    return _KerasVars(value, where)
  if isinstance(value, dict):
    return NestedMap({_KerasKey(str(k)): _KerasVars(v, '%s[%r]' % (where, k))
                      for k, v in value.items()})
  return [_KerasVars(v, '%s[%d]' % (where, i)) for i, v in enumerate(value)]


def VariableName(var):
  """A variable's name without TF's ':0' suffix (str), e.g. 'task/enc/w'.

  The one definition of a variable's name: checkpoints key variables by it,
  and every regex of the framework (bprop_variable_filter,
  weight_decay_exclude, Composite's map, Lars exclusions) is matched with
  re.search on it. Under tf.distribute the primary copy's name is used.

  Args:
    var: a tf.Variable (or anything with a `name`).

  Raises:
    TypeError: `var` has no name.
  """
  name = getattr(var, 'name', None)
  if name is None:
    raise TypeError('%r has no name.' % (var,))
  return name[:-2] if name.endswith(':0') else name


def IsTrainable(var):
  """True if learners may train `var`: a trainable variable, not frozen.

  A variable of a Keras layer follows the Keras flag (`layer.trainable =
  False` freezes it, as in Keras) read now; any other variable its own
  `trainable`.

  Args:
    var: a tf.Variable (or anything with `trainable`).

  Returns:
    Python bool.
  """
  keras_variable = getattr(var, 'tf_learner_keras_variable', None)
  if keras_variable is not None and not keras_variable.trainable:
    return False
  return bool(getattr(var, 'trainable', False))


def _AdoptKerasLayer(keras_layer, name, parent_path):
  """Names an unbuilt Keras layer `name`; it builds in scope `parent_path`.

  Keras names a variable '<tf name scope>/<layer name>/<variable>' when the
  layer builds; building inside the absolute scope '<parent_path>/<name>/'
  gives '<parent_path>/<name>/<variable>'. Keras itself wraps `build` per
  instance the same way (functools.wraps keeps the signature Keras reads).
  """
  if keras_layer.built:
    return
  keras_layer.name = name
  keras_build = keras_layer.build

  # wraps: Keras reads build's signature to pass the input shapes by name.
  @functools.wraps(keras_build)
  def _BuildInScope(*args, **kwargs):
    # Absolute scope '<parent_path>/<name>/'; Keras' own scope for the layer
    # (opened again inside `keras_build`, or already open when the layer
    # builds on its first call) then adds nothing: it deduplicates against
    # this one, which names the same layer.
    with tf.name_scope(parent_path + '/'):
      with tf.keras.name_scope(name, caller=keras_layer, deduplicate=False):
        return keras_build(*args, **kwargs)

  keras_layer.build = _BuildInScope


def _KerasVars(keras_layer, where):
  """NestedMap of a Keras layer's tf.Variables, keyed by their Keras paths.

  'dense/kernel' of the layer 'dense' is `out.kernel`; a model's
  'mlp/hidden/kernel' is `out.hidden.kernel`. Values are the tf.Variables
  under the Keras variables (what optimizers update and tapes watch).
  """
  if not keras_layer.built:
    raise ValueError(
        '%s is a Keras layer that is not built, so it has no variables yet '
        'and no learner would train it. Build it in __init__, e.g. '
        '`self.%s.build(input_shape)` or one call on an example input.' %
        (where, where.rsplit('.', 1)[-1]))
  out = NestedMap()
  prefix = (keras_layer.path or keras_layer.name) + '/'
  for kv in keras_layer.variables:
    var = kv.value if not isinstance(kv, tf.Variable) else kv
    if not isinstance(var, tf.Variable):
      raise TypeError('%s: Keras variable %r does not hold a tf.Variable '
                      '(got %r).' % (where, kv.path, type(var).__name__))
    var.tf_learner_keras_variable = kv  # IsTrainable reads its flag.
    path = kv.path[len(prefix):] if kv.path.startswith(prefix) else kv.path
    keys = [_KerasKey(k) for k in path.split('/')]
    node = out
    for k in keys[:-1]:
      if k not in node:
        node[k] = NestedMap()
      node = node[k]
    node[keys[-1]] = var
  return out


def _KerasKey(part):
  """A Keras path part as a NestedMap key (identifier characters only)."""
  key = re.sub(r'[^A-Za-z0-9_]', '_', part)
  return '_' + key if not key or key[0].isdigit() else key


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
    initializer = tf.keras.initializers.get(init)
    if isinstance(init, (str, dict)) and seed is not None:
      # Re-create the named initializer with the seed, if it takes one.
      cfg = tf.keras.initializers.serialize(initializer)
      if isinstance(cfg, dict) and 'seed' in cfg.get('config', {}):
        cfg = dict(cfg, config=dict(cfg['config'], seed=seed))
        initializer = tf.keras.initializers.get(cfg)
  except (ValueError, TypeError) as e:
    raise ValueError(
        'unknown initializer %r (%s). Use a tf.keras.initializers name such '
        'as \'glorot_uniform\', a {\'class_name\': ..., \'config\': ...} '
        'dict, an initializer object, or a number.' % (init, e)) from None
  if initializer is None:
    return tf.zeros(shape, dtype)
  return tf.convert_to_tensor(initializer(shape, dtype=dtype), dtype)


def _CheckChildParams(parent_path, name, params):
  """Raises TypeError, with the fix, unless `params` can be instantiated.

  The usual mistakes: a class (`Adam` instead of `Adam.Params()`), the
  unbound method (`Adam.Params` without the call), or a built object (a Keras
  optimizer or schedule instance) where params are expected.
  """
  if isinstance(params, hyperparams.InstantiableParams):
    return
  where = '%s.%s' % (parent_path, name) if parent_path else name
  if isinstance(params, type) and callable(getattr(params, 'Params', None)):
    fix = 'pass %s.Params() (params, not the class).' % params.__name__
  elif callable(params) and getattr(params, '__name__', '') == 'Params':
    owner = getattr(getattr(params, '__self__', None), '__name__', 'X')
    fix = 'call it: %s.Params().' % owner
  else:
    fix = ('pass the Params of one of our layers (e.g. <Class>.Params()); '
           'a Keras object has its own adapter, see the param\'s doc.')
  raise TypeError('%s: expected InstantiableParams, got %s. Fix: %s' %
                  (where, _Describe(params), fix))


def _Describe(value):
  """'the class X', 'X.Params (a method)', or 'an instance of m.X'."""
  if isinstance(value, type):
    return 'the class %s' % value.__name__
  if callable(value) and getattr(value, '__name__', '') == 'Params':
    return '%s (a method, not called)' % getattr(value, '__qualname__', 'Params')
  cls = type(value)
  return 'an instance of %s.%s' % (cls.__module__, cls.__qualname__)
