"""BaseWrapper: an optimizer that hands its update to one inner optimizer.

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
    optimizer, so an Ema anywhere below is found.

A subclass adds its own params and state and implements
`_ApplyWrapped(lr, var_grads)` (the default passes the gradients through
unchanged). A wrapper schedules no hyperparameter (`SCHEDULABLE_PARAMS`
is `()`, so its `hyper_schedules` must stay {}); one with a coefficient of
its own lists it (Ema: 'decay'; Lookahead's 'alpha' the same way) and
reads `self.Hyper(name)` in `_ApplyWrapped`, which `Apply` runs inside
`HyperScope()` (each schedule evaluated once per update).

Composite (several groups, each bound to a subset of the variables, params
in `optimizer_map`) and KerasOptimizer (a Keras optimizer, no inner
BaseOptimizer) are not wrappers in this sense; they share the counted-update
convention and the tree methods, which live on BaseOptimizer.
"""

from learner.optimizers import base as base_optimizer


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

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('optimizer', None, cls.INNER_OPTIMIZER_DOC)
    return p

  def __init__(self, params):
    super().__init__(params)
    base_optimizer.CheckInnerOptimizerParams(
        type(self).__name__, 'optimizer', self.params.optimizer,
        owner_is_accumulation=getattr(type(self), 'IS_ACCUMULATION', False))
    base_optimizer.CheckNoWrapperDecay(self)
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
