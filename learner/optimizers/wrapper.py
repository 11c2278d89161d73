"""BaseWrapper: an optimizer that hands its update to one inner optimizer.

And BaseAveraging: a BaseWrapper that keeps the weights to evaluate.

What a wrapper (Lars, Ema, GradientAccumulation, or a new one) gets here:
  * `p.optimizer`, the inner optimizer's params, checked at construction
    (BaseOptimizer params, not a gradient accumulation: accumulation must be
    the outermost wrapper), and the wrapper's own `decoupled_weight_decay`
    refused (the inner optimizer applies decay);
  * the inner optimizer built as the child 'optimizer' (`self.optimizer`,
    also `self.inner`), so its variables are saved under '.../optimizer/...'
    in a checkpoint;
  * `Bind(vmap)` binding this wrapper and the inner optimizer to the same
    variables;
  * `Apply(lr, var_grads)`: refuses variables that were not bound, calls the
    subclass's `_ApplyWrapped`, then counts the update in `num_updates` and
    returns the update op (None when eager);
  * `EvalAverages()` / `EvalAverageClasses(p)` delegated to the inner
    optimizer, so an Ema, Lookahead or SWA anywhere below is found (those
    three derive from `BaseAveraging` below, which adds itself).

A subclass adds its own params and state and implements
`_ApplyWrapped(lr, var_grads)` (the default passes the gradients through
unchanged). A wrapper schedules no hyperparameter (`SCHEDULABLE_PARAMS`
is `()`, so its `hyper_schedules` must stay {}); one with a coefficient of
its own lists it (Ema: 'decay'; Lookahead's 'alpha' the same way) and
reads `self.Hyper(name)` in `_ApplyWrapped`, which `Apply` runs inside
`HyperScope()` (each schedule evaluated once per update).

BaseAveraging keeps a second copy of the weights to evaluate: Ema (an
exponential moving average), Lookahead (the slow weights) and SWA (an
equal-weight average of sampled weights) each keep, per bound variable,
one more variable of the same shape and dtype: the weights evaluation uses.
What they share lives here, so the jobs find and use all three the same way:

  * the copies are created at `Bind` (starting at the variables' values
    then), one per bound variable, in the dict attribute `_averages`, so a
    `tf.train.Checkpoint` saves each under
    '<path to the wrapper>/_averages/<sanitized variable name>/...';
  * `AverageCheckpointKeySuffix(var)` (a classmethod) names that key's end,
    so the read-only jobs (eval, evaler, export) load the copies from a
    checkpoint without building any optimizer
    (learner/training/jobs/eval_restore.py);
  * `EvalAverages()` / `EvalAverageClasses(p)` list this wrapper (and any
    averaging optimizer inside it), so the trainer and the read-only jobs
    find it through the optimizer tree, whatever its class is named;
  * `GetAverage(var)` returns the copy of a bound variable;
  * `SwapAverages()` puts the copies into the variables for evaluation and
    the trained values back on exit (train_and_eval's evaluations);
  * under ZeRO-1 (`SHARDS_WITH_RULE`, `ShardCopiesWith`; sharded_wrappers.py)
    the copies are views of per-replica flat shards, saved under the same
    keys, read gathered by `GetAverage(var).read_value()` and the swap.

A subclass of BaseAveraging implements `_ApplyWrapped(lr, var_grads)`: the
inner update, then how its copies (and, for Lookahead, the variables) move,
given elementwise to `_ApplyAndMove` (whole copies, or ZeRO-1 shards).

Composite (several groups, each bound to a subset of the variables, params
in `optimizer_map`) and KerasOptimizer (a Keras optimizer, no inner
BaseOptimizer) are not wrappers in this sense; they share the counted-update
convention and the tree methods, which live on BaseOptimizer.
"""

import contextlib

import tensorflow as tf

from learner.optimizers import base as base_optimizer
from learner.optimizers import var_grad as var_grad_lib


class BaseWrapper(base_optimizer.BaseOptimizer):
  """Base class of the wrappers around one inner optimizer (`p.optimizer`).

  Raises:
    ValueError: at construction, if `p.optimizer` is not BaseOptimizer
      params or is a gradient accumulation (accumulation must be the
      outermost wrapper), or if this wrapper's own decoupled_weight_decay is
      set; in `Apply`, for a variable with a gradient that was not bound.
  """

  # The description of `p.optimizer`; a subclass says what the inner
  # optimizer does for it.
  INNER_OPTIMIZER_DOC = 'Params of the inner optimizer.'
  # A wrapper has no decoupled weight decay of its own; a subclass lists
  # the params it reads through `Hyper` (Ema: 'decay').
  SCHEDULABLE_PARAMS = ()
  # True for a wrapper that keeps no state and changes the gradients from
  # the full weights and gradients every replica holds after the all-reduce
  # (Lars): ZeRO-1 shards its inner rule (sharded_state.RuleToShard).
  SHARDS_INNER = False
  # True when ZeRO-1 (sharded_state.py) may shard the rule below this
  # wrapper: the wrapper changes nothing before the rule's step, and its own
  # state (if any) moves elementwise after it and lives in the rule's flat
  # shards through `ShardCopiesWith(shards)` (BaseAveraging's copies, moved by
  # `_ApplyAndMove`: Ema, Lookahead, SWA; sharded_wrappers.py).
  SHARDS_WITH_RULE = False

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('optimizer', None, cls.INNER_OPTIMIZER_DOC)
    return p

  def __init__(self, params):
    super().__init__(params)
    CheckInnerOptimizerParams(
        type(self).__name__, 'optimizer', self.params.optimizer,
        owner_is_accumulation=type(self).IS_ACCUMULATION)
    CheckNoWrapperDecay(self)
    self.CreateChild('optimizer', self.params.optimizer)

  @property
  def inner(self):
    """The inner optimizer (the child 'optimizer')."""
    return self.optimizer

  @property
  def inner_optimizers(self):
    """[the inner optimizer]."""
    return [self.optimizer]

  @classmethod
  def InnerOptimizerParams(cls, p):
    """[p.optimizer] (empty if unset)."""
    return [p.optimizer] if p.optimizer is not None else []

  def Bind(self, vmap):
    """Binds this wrapper and the inner optimizer to `vmap`.

    Subclasses that keep per-variable state extend it (call this first,
    then create the state for the variables not seen before).
    """
    super().Bind(vmap)
    self.optimizer.Bind(vmap)
    return self

  def Apply(self, lr, var_grads):
    """Applies one update through the inner optimizer and counts it.

    Args:
      lr: float32 scalar, the learner's scheduled rate (passed through).
      var_grads: NestedMap of VarGrad; grad None leaves the variable alone.

    Returns:
      The update op (None when eager).

    Raises:
      ValueError: if a variable with a gradient was not bound.
    """
    self._CheckAllBound(var_grads)
    with self.HyperScope():
      return self._FinishApply(self._ApplyWrapped(lr, var_grads))

  def _ApplyWrapped(self, lr, var_grads):
    """The wrapper's update; returns a list of ops (None entries allowed).

    The default lets the inner optimizer apply `var_grads` unchanged.
    """
    return [self.optimizer.Apply(lr, var_grads)]


# The name of the attribute `BaseAveraging._averages`: it names the copies in
# a checkpoint ('<path>/_averages/<sanitized variable name>/...'), so
# renaming either breaks every checkpoint written before.
_AVERAGES_ATTR = '_averages'


class BaseAveraging(BaseWrapper):
  """Base of the wrappers whose weights to evaluate are a kept copy.

  Class attributes: AVERAGE_NAME, the last part of the copies' TF variable
  names ('<path>/<variable name>/<AVERAGE_NAME>'; names only, the
  checkpoint keys do not depend on it); EVAL_WEIGHTS_LABEL, how the jobs'
  messages name the copies (e.g. 'Evaluating on the EMA averages of the
  weights.').

  Raises:
    ValueError: at construction, as `BaseWrapper` (inner params, an
      accumulation inside, the wrapper's own decoupled_weight_decay).
    RuntimeError: `SwapAverages()` inside a tf.function.
  """

  AVERAGE_NAME = 'average'
  EVAL_WEIGHTS_LABEL = 'averages'

  def __init__(self, params):
    super().__init__(params)
    self._averages = {}  # Named by _AVERAGES_ATTR in checkpoints.

  def ShardCopiesWith(self, shards):
    """Keeps the copies as flat shards (ZeRO-1; not tracked) once `shards`
    (sharded_wrappers.WrapperShards of the rule below) shards: from `Bind`
    on, its `CreateCopies` makes them and its `AfterStep` moves them."""
    self.__dict__['_copy_sharding'] = shards

  def _CopyShards(self):
    """The WrapperShards that hold the copies, or None (whole copies)."""
    shards = self.__dict__.get('_copy_sharding')
    return shards if shards is not None and shards.sharded else None

  def Bind(self, vmap):
    """Binds the inner optimizer and creates a copy per new variable
    (under ZeRO-1, views of the replicas' flat shards of the copies)."""
    super().Bind(vmap)
    sharding = self._CopyShards()
    if sharding is not None and not self._averages:
      self.__dict__['_shards'], views = sharding.CreateCopies(
          self.path, self.AVERAGE_NAME)
      self._averages.update(views)
    for name, var in self.bound_variables.items():
      key = var_grad_lib.SanitizedName(name)
      if key in self._averages:
        continue
      with tf.init_scope():
        self._averages[key] = tf.Variable(
            var.read_value(),
            name='%s/%s/%s' % (self.path, name, self.AVERAGE_NAME),
            trainable=False)
    return self

  @classmethod
  def AverageCheckpointKeySuffix(cls, var):
    """The end of the checkpoint key of `var`'s copy (a str).

    A `tf.train.Checkpoint` holding this wrapper saves the copy of `var`
    under '<path to it>/_averages/<sanitized name>/.ATTRIBUTES/
    VARIABLE_VALUE'; this returns everything from '/_averages/' on, so a
    checkpoint can be read without building the optimizer.

    Args:
      var: a variable (or its name, a str).
    """
    name = var if isinstance(var, str) else var_grad_lib.VarName(var)
    return '/%s/%s/.ATTRIBUTES/VARIABLE_VALUE' % (
        _AVERAGES_ATTR, var_grad_lib.SanitizedName(name))

  def EvalAverages(self):
    """[this wrapper] and any averaging optimizer inside it."""
    return [self] + super().EvalAverages()

  @classmethod
  def EvalAverageClasses(cls, p):
    """[this class] and the averaging classes inside `p.optimizer`."""
    return [cls] + super().EvalAverageClasses(p)

  def GetAverage(self, var):
    """Returns the copy (a tf.Variable) of the bound variable `var`."""
    return self._averages[var_grad_lib.SanitizedName(
        var_grad_lib.VarName(var))]

  def _ApplyAndMove(self, lr, var_grads, move, pred=None):
    """The inner update, then every copy moves: ops (a list).

    `move(w, copy)` -> (new copy, new weights or None), elementwise, on
    the variables' values after the inner update (or, under ZeRO-1, on this
    replica's flat shards of both, before the weights' all-gather:
    sharded_wrappers.py); only when `pred` (bool scalar) is true, if given.
    """
    sharding = self._CopyShards()
    if sharding is not None:
      with sharding.AfterStep(self.__dict__['_shards'], move, pred):
        return [self.optimizer.Apply(lr, var_grads)]
    op = self.optimizer.Apply(lr, var_grads)

    def _Move():
      ops = []
      for var, avg in self._VarsAndAverages():
        new_avg, new_w = move(var.read_value(), tf.convert_to_tensor(avg))
        ops.append(avg.assign(new_avg))
        if new_w is not None:
          ops.append(var.assign(new_w))
      return ops

    with tf.control_dependencies([op] if op is not None else []):
      if pred is None:
        return [op] + _Move()
      return [op, tf.cond(pred, lambda: tf.group(_Move()), tf.no_op)]

  def _VarsAndAverages(self):
    """[(bound variable, its copy)], in the order of `bound_variables`."""
    return [(var, self._averages[var_grad_lib.SanitizedName(name)])
            for name, var in self.bound_variables.items()]

  def SwapAverages(self):
    """Context manager: variables hold their copies inside, values after.

    Eager only (call it around evaluation, outside tf.function). Swapping
    twice restores both exactly.

    Raises:
      RuntimeError: if called inside a tf.function.
    """
    return SwapEagerly(self, self._Swap)

  def _Swap(self):
    for var, avg in self._VarsAndAverages():
      value = tf.identity(var.read_value())
      var.assign(avg.read_value())
      avg.assign(value)


@contextlib.contextmanager
def SwapEagerly(owner, swap):
  """Context manager: calls `swap()` on entry and again on exit.

  What every `SwapAverages()` does (BaseAveraging's copies, schedule-free's
  x): `swap` exchanges the variables' values with the kept ones, so calling
  it twice restores both exactly. Yields `owner`.

  Raises:
    RuntimeError: if called inside a tf.function (the swap is eager, around
      an evaluation loop), naming `owner.path`.
  """
  if not tf.executing_eagerly():
    raise RuntimeError(
        '%s: SwapAverages() swaps values eagerly; call it outside '
        'tf.function, around the evaluation loop.' % owner.path)
  swap()
  try:
    yield owner
  finally:
    swap()


def CheckInnerOptimizerParams(owner, key, inner_params,
                              owner_is_accumulation=False, fix=None):
  """Raises unless `inner_params` may be wrapped by the wrapper `owner`.

  The one place of the rule "accumulation must be the outermost wrapper":
  every wrapper checks its inner params here at construction (BaseWrapper,
  Composite), and the wrapper factory (get_optimizer_wrapper_fn) when it is
  built.

  Args:
    owner: the wrapper (its class name, or where it is built), for the
      message.
    key: the param holding the inner optimizer (e.g. 'optimizer'), for the
      message.
    inner_params: InstantiableParams of the inner optimizer.
    owner_is_accumulation: True when `owner` is itself a gradient
      accumulation (the fix is then one accumulation, not a reordering).
    fix: optional sentence that ends the accumulation message (how to
      reorder); by default, how to put `owner` inside the accumulation.

  Raises:
    ValueError: if `inner_params` is not optimizer params, or its class is a
      gradient accumulation (`IS_ACCUMULATION = True`): accumulation must be
      the outermost wrapper.
  """
  cls = getattr(inner_params, 'cls', None) if inner_params is not None else None
  if cls is None or not (isinstance(cls, type) and
                         issubclass(cls, base_optimizer.BaseOptimizer)):
    raise ValueError(
        '%s: params.%s must be the params of a BaseOptimizer subclass (e.g. '
        'SGD.Params()), got %r.' % (owner, key, cls if cls else inner_params))
  if not cls.IS_ACCUMULATION:
    return
  if owner_is_accumulation:
    raise ValueError(
        '%s: params.%s is %s, another gradient accumulation; accumulation '
        'must be the outermost wrapper. Use one %s with num_batches = the '
        'product.' % (owner, key, cls.__name__, owner))
  if fix is None:
    fix = ('Put %s inside it instead: GradientAccumulation.Params().Set('
           'optimizer=%s.Params().Set(optimizer=...)).' % (owner, owner))
  raise ValueError(
      '%s: params.%s is %s, a gradient accumulation; accumulation must be '
      'the outermost wrapper. %s' % (owner, key, cls.__name__, fix))


def CheckNoWrapperDecay(layer):
  """Raises ValueError if a wrapper's own decoupled_weight_decay is set.

  A wrapper hands the update to inner optimizers, which apply decay
  themselves; setting it on the wrapper would be silently ignored.
  """
  if layer.params.decoupled_weight_decay:
    raise ValueError(
        '%s (%s): decoupled_weight_decay=%r is set on a wrapper; set it on the '
        'inner optimizer (params.optimizer.decoupled_weight_decay) instead.' %
        (layer.path, type(layer).__name__, layer.params.decoupled_weight_decay))
