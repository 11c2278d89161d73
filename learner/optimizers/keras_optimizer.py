"""KerasOptimizer: any tf.keras optimizer as a BaseOptimizer."""

import tensorflow as tf

from learner.optimizers import base as base_optimizer
from learner.optimizers import var_grad as var_grad_lib


def _IsKerasOptimizer(obj):
  return isinstance(obj, tf.keras.optimizers.Optimizer)


def _IsKerasSchedule(obj):
  return isinstance(obj, tf.keras.optimizers.schedules.LearningRateSchedule)


def BuildKerasOptimizer(optimizer_fn, where='optimizer_fn'):
  """Calls the zero-argument `optimizer_fn` and checks it gave an optimizer.

  Args:
    optimizer_fn: a zero-argument callable returning a tf.keras optimizer.
    where: the parameter's name, for messages.

  Returns:
    The tf.keras.optimizers.Optimizer.

  Raises:
    TypeError: if `optimizer_fn` is an optimizer instance (not a callable),
      not callable, or returns something else than a Keras optimizer.
  """
  if _IsKerasOptimizer(optimizer_fn) or not callable(optimizer_fn):
    raise TypeError(
        '%s must be a zero-argument callable that returns an optimizer, got '
        'the %s instance %r. Wrap it: %s=lambda: %s(...).' %
        (where, type(optimizer_fn).__name__, optimizer_fn, where,
         type(optimizer_fn).__name__))
  opt = optimizer_fn()
  if not _IsKerasOptimizer(opt):
    raise TypeError(
        '%s() returned %r (a %s); expected a tf.keras.optimizers optimizer, '
        'e.g. %s=lambda: tf.keras.optimizers.Adam(1e-3).' %
        (where, opt, type(opt).__name__, where))
  return opt


class KerasOptimizer(base_optimizer.BaseOptimizer):
  """Adapts a zero-argument callable returning a tf.keras optimizer.

  The Keras optimizer is built at construction and its slots are created at
  `Bind` (`optimizer.build(variables)`), so a checkpoint restores them
  before training; it is a tracked attribute of this layer, so
  `tf.train.Checkpoint` saves its variables (slots, iterations). Each
  `Apply(lr, ...)` first sets the Keras optimizer's learning rate to `lr`
  (the learner's scheduled rate, whose base rate defaults to the Keras
  optimizer's own rate: see `optimizer_factory.OptimizerParamsFromFn`),
  then calls `optimizer.apply(grads, variables)` with every gradient of the
  step at once. Keras handles sparse gradients itself. This layer's
  `decoupled_weight_decay` is applied on top of whatever the Keras
  optimizer does (prefer one or the other).
  An adapter, not a `wrapper.BaseWrapper`: there is no inner BaseOptimizer
  to delegate to, so `EvalAverages()` is empty (a Keras optimizer's own
  `use_ema` averages are not swapped in for evaluation).

  Raises:
    TypeError: at construction, if `optimizer_fn` is not a zero-argument
      callable returning a tf.keras optimizer.
    ValueError: at construction, if the Keras optimizer's learning rate is a
      LearningRateSchedule (use the learner's lr_schedule instead).
  """

  # The Keras optimizer's hyperparameters are its own; nothing here reads
  # `Hyper` (a schedule for decoupled_weight_decay is refused).
  SCHEDULABLE_PARAMS = ()

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'keras_optimizer'
    p.Define('optimizer_fn', None,
             'Zero-argument callable returning a tf.keras optimizer, e.g. '
             'lambda: tf.keras.optimizers.Lion(1e-4).')
    return p

  def __init__(self, params):
    super().__init__(params)
    opt = BuildKerasOptimizer(self.params.optimizer_fn,
                              'KerasOptimizer.Params().optimizer_fn')
    if _IsKerasSchedule(getattr(opt, '_learning_rate', None)):
      raise ValueError(
          '%s: the Keras optimizer\'s learning_rate is a schedule (%s); give '
          'it a number and set the learner\'s lr_schedule instead, which '
          'counts applied updates.' %
          (self.path, type(opt._learning_rate).__name__))  # pylint: disable=protected-access
    self.keras_optimizer = opt

  @property
  def keras_learning_rate(self):
    """float: the learning rate the Keras optimizer was built with."""
    return float(self.keras_optimizer.learning_rate.numpy())

  def Bind(self, vmap):
    """Builds the Keras optimizer's slots for every variable of `vmap`."""
    super().Bind(vmap)
    with tf.init_scope():
      self.keras_optimizer.build(list(self.bound_variables.values()))
    return self

  def Apply(self, lr, var_grads):
    """Sets the Keras rate to `lr` and applies every gradient at once.

    Args, return value and errors as `BaseOptimizer.Apply` (lr: the
    learner's scheduled rate; an unbound variable raises ValueError).
    """
    lr = tf.convert_to_tensor(lr, tf.float32)
    self._CheckAllBound(var_grads)
    pairs = [vg for vg in var_grads.Flatten() if vg.grad is not None]
    wd = self.params.decoupled_weight_decay
    decays = []
    for vg in pairs:
      if wd and self._decay_mask.get(var_grad_lib.VarName(vg.var), True):
        decays.append((vg.var, tf.cast(lr * wd, vg.var.dtype) *
                       tf.identity(vg.var.read_value())))
    self.keras_optimizer.learning_rate.assign(lr)
    if pairs:
      self.keras_optimizer.apply([vg.grad for vg in pairs],
                                 [vg.var for vg in pairs])
    return self._FinishApply([var.assign_sub(d) for var, d in decays])


def KerasOptimizerParams(optimizer_fn):
  """Returns KerasOptimizer params holding `optimizer_fn`."""
  return KerasOptimizer.Params().Set(optimizer_fn=optimizer_fn)

