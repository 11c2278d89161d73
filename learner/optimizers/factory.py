"""MoXing-style optimizer factories: get_optimizer_fn, get_optimizer_wrapper_fn.

A factory is a name plus keyword arguments: it has a text form (so it
round-trips through `Params.ToText` / `FromText`), gives the optimizer's
params (`.Params()`) and builds the optimizer when called.

  opt_fn = get_optimizer_fn('momentum', learning_rate=0.1, momentum=0.9)
  opt_fn = get_optimizer_wrapper_fn('lars', opt_fn, ratio=0.001,
                                    weight_decay=0.0001)
  opt_fn = get_optimizer_wrapper_fn('batch_gradients', opt_fn, num_batches=8)
  learner_p.optimizer_fn = opt_fn

`OptimizerParamsFromFn` turns a factory, or any zero-argument callable that
returns a tf.keras optimizer, into optimizer params plus the base rate the
learner uses when its own `learning_rate` is unset.
"""

import difflib

import tensorflow as tf

from learner.optimizers.wrappers import accumulation as gradient_accumulation
from learner.optimizers.wrappers import dynamic_accumulator as dynamic_lib
from learner.optimizers import base as base_optimizer
from learner.optimizers import wrapper
from learner.optimizers.wrappers import easgd as easgd_lib
from learner.optimizers.wrappers import ema as ema_lib
from learner.optimizers import keras_optimizer
from learner.optimizers.wrappers import lars as lars_lib
from learner.optimizers.wrappers import local_sgd as local_sgd_lib
from learner.optimizers.wrappers import mechanic as mechanic_lib
from learner.optimizers.wrappers import lookahead as lookahead_lib
from learner.optimizers import rules
from learner.optimizers.wrappers import sam as sam_lib
from learner.optimizers.wrappers import swa as swa_lib
from params import hyperparams
from params import text_registry
from params import value_codec

# name -> (optimizer class, {accepted keyword (MoXing/TF1/Keras): param}).
# A class's own param names are accepted too.
_OPTIMIZERS = rules.FactoryTable()  # one registration point: rules.RULES

# The one table of the wrappers get_optimizer_wrapper_fn names, as
# rules.RULES is for the rules: name -> (wrapper class, {accepted keyword
# (MoXing/optax/TF Addons spelling): param}). A class's own param names are
# accepted too.
_WRAPPERS = {
    'batch_gradients': (gradient_accumulation.GradientAccumulation, {}),
    'dynamic_accumulator': (dynamic_lib.DynamicAccumulator, {}),
    'lars': (lars_lib.Lars, {'ratio': 'eta'}),
    'ema': (ema_lib.Ema, {'ema_decay': 'decay'}),
    'lookahead': (lookahead_lib.Lookahead,
                  {'sync_period': 'k', 'slow_step_size': 'alpha'}),
    'swa': (swa_lib.SWA, {'start_averaging': 'swa_start',
                          'average_period': 'swa_freq'}),
    'sam': (sam_lib.Sam, {}),
    'easgd': (easgd_lib.Easgd,
              {'communication_period': 'tau', 'moving_rate': 'alpha'}),
    'local_sgd': (local_sgd_lib.LocalSgd,
                  {'communication_period': 'tau', 'moving_rate': 'alpha'}),
    'mechanic': (mechanic_lib.Mechanic, {'eps': 'epsilon'}),
}
_WRAPPER_NAMES = tuple(_WRAPPERS)

# Params no factory keyword may set (structure, not knobs).
_RESERVED = ('cls', 'name', 'optimizer', 'dtype', 'fprop_dtype', 'params_init',
             'random_seed')


def _UnknownName(kind, name, known):
  close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.0)
  return ValueError(
      'Unknown %s name %r. Known names: %s. Did you mean %r?' %
      (kind, name, sorted(known), close[0] if close else known[0]))


def _SetKwargs(where, p, kwargs, aliases):
  """Sets kwargs on params `p`, translating `aliases`; strict on unknowns."""
  for key, value in kwargs.items():
    param = aliases.get(key, key)
    if param in _RESERVED or param not in p:
      accepted = sorted(set(aliases) | {
          k for k, _ in p.IterParams() if k not in _RESERVED} |
                        {'learning_rate'})
      raise ValueError(
          '%s: unknown keyword argument %r. Accepted: %s.' %
          (where, key, accepted))
    p.Set(**{param: value})
  return p


class _Factory(text_registry.TextSerializable, text_constructor=False):
  """Shared behaviour of the factories: text form, equality, learning_rate.

  The subclasses, and the two factory functions their text form names, are
  registered as text constructors: `Object('...get_optimizer_fn', ...)` in
  params text builds a factory (its Params(), never an optimizer).
  """

  def __init__(self, name, kwargs):
    self._name = name
    self._kwargs = dict(kwargs)

  @property
  def name(self):
    """The optimizer or wrapper name, e.g. 'momentum'."""
    return self._name

  @property
  def kwargs(self):
    """A copy of the keyword arguments given to the factory."""
    return dict(self._kwargs)

  def __call__(self):
    """Builds the optimizer; returns a BaseOptimizer."""
    opt = self.Params().Instantiate()
    opt.factory_learning_rate = self.learning_rate
    return opt

  def __eq__(self, other):
    return type(self) is type(other) and self.TextSpec() == other.TextSpec()

  def __ne__(self, other):
    return not self == other

  def __hash__(self):
    return hash(value_codec.EncodeValue(self))

  def __repr__(self):
    return value_codec.EncodeValue(self)


class OptimizerFn(_Factory):
  """A named optimizer factory; see `get_optimizer_fn`."""

  def __init__(self, name, **kwargs):
    if name not in _OPTIMIZERS:
      raise _UnknownName('optimizer', name, list(_OPTIMIZERS))
    super().__init__(name, kwargs)
    self.Params()  # Validates the keyword arguments now.

  @property
  def learning_rate(self):
    """The factory's `learning_rate` keyword, or None."""
    return self._kwargs.get('learning_rate')

  def Params(self):
    """Returns a fresh copy of the optimizer's InstantiableParams."""
    cls, aliases = _OPTIMIZERS[self._name]
    p = cls.Params()
    kwargs = {k: v for k, v in self._kwargs.items() if k != 'learning_rate'}
    if self._name == 'nesterov':
      p.use_nesterov = True
    return _SetKwargs('get_optimizer_fn(%r)' % self._name, p, kwargs, aliases)

  def TextSpec(self):
    """Returns ('learner.optimizers.factory.get_optimizer_fn', kwargs)."""
    return ('learner.optimizers.factory.get_optimizer_fn',
            dict(name=self._name, **self._kwargs))


@text_registry.TextFactory
def get_optimizer_fn(name, **kwargs):  # pylint: disable=invalid-name
  """Returns a factory that builds the optimizer `name` (MoXing's API).

  Args:
    name: one of sgd, momentum, nesterov, adam, adamw, adagrad, rmsprop,
      adadelta, adafactor, lamb, lion, nadam, radam, adamax, amsgrad, adopt,
      schedule_free_sgd, schedule_free_adamw, muon, normuon, ademamix,
      simplified_ademamix, soap, dog, dowg, cocob, madgrad, prodigy,
      dadapt_adamw, distributed_shampoo (alias shampoo) (the factory names
      of `rules.RULES`).
    **kwargs: `learning_rate` (the base rate, float; the learner uses it when
      its own learning_rate is unset), the optimizer's param names, and the
      MoXing/TF1/Keras names: `momentum` for Momentum's alpha, `beta_1` /
      `beta_2`, `rho` (RMSProp's and AdaDelta's decay), `weight_decay`
      (AdamW, Lion, Muon: decoupled_weight_decay); `momentum` is Muon's
      beta.

  Returns:
    An `OptimizerFn`: callable (builds the optimizer), with `.Params()`,
    `.learning_rate` and a text form.

  Raises:
    ValueError: unknown name (listing the known names and the closest) or
      unknown keyword (naming it and listing the accepted ones).
  """
  return OptimizerFn(name, **kwargs)


def _InnerParams(inner):
  """(params, learning_rate or None) of a wrapper's inner optimizer."""
  if isinstance(inner, _Factory):
    return inner.Params(), inner.learning_rate
  if isinstance(inner, base_optimizer.BaseOptimizer):
    return inner.params.Copy(frozen=False), getattr(
        inner, 'factory_learning_rate', None)
  if isinstance(inner, hyperparams.InstantiableParams):
    return inner.Copy(frozen=False), None
  raise TypeError(
      'get_optimizer_wrapper_fn: inner must be an optimizer built by a '
      'factory, a factory from get_optimizer_fn / get_optimizer_wrapper_fn, '
      'or optimizer params; got %r (a %s).' % (inner, type(inner).__name__))


class OptimizerWrapperFn(_Factory):
  """A wrapper factory around an inner optimizer; see get_optimizer_wrapper_fn."""

  def __init__(self, name, inner, **kwargs):
    if name not in _WRAPPER_NAMES:
      raise _UnknownName('optimizer wrapper', name, list(_WRAPPER_NAMES))
    inner_params, self._inner_lr = _InnerParams(inner)
    # The text form holds the inner factory, or the inner params.
    self._inner = inner if isinstance(inner, _Factory) else inner_params
    if (not isinstance(inner, _Factory) and self._inner_lr is not None and
        'learning_rate' not in kwargs):
      # An instance's factory rate would be lost from the text form.
      kwargs = dict(kwargs, learning_rate=self._inner_lr)
    super().__init__(name, kwargs)
    self.Params()  # Validates now (names, keywords, wrapper order).

  @property
  def inner(self):
    """The inner factory or inner params."""
    return self._inner

  @property
  def learning_rate(self):
    """This factory's `learning_rate` keyword, else the inner one's, or None."""
    if 'learning_rate' in self._kwargs:
      return self._kwargs['learning_rate']
    return self._inner_lr

  def Params(self):
    """Returns the wrapper's InstantiableParams holding the inner params."""
    inner_params, _ = _InnerParams(self._inner)
    where = 'get_optimizer_wrapper_fn(%r)' % self._name
    wrapper.CheckInnerOptimizerParams(
        where, 'optimizer', inner_params,
        fix='Wrap the other optimizers first and apply \'batch_gradients\' '
        'last.')
    kwargs = {k: v for k, v in self._kwargs.items() if k != 'learning_rate'}
    cls, aliases = _WRAPPERS[self._name]
    p = cls.Params()
    p.optimizer = inner_params
    return _SetKwargs(where, p, kwargs, dict(aliases))

  def TextSpec(self):
    """Returns ('...get_optimizer_wrapper_fn', kwargs with name, inner)."""
    return ('learner.optimizers.factory.get_optimizer_wrapper_fn',
            dict(name=self._name, inner=self._inner, **self._kwargs))


@text_registry.TextFactory
def get_optimizer_wrapper_fn(name, inner, **kwargs):  # pylint: disable=invalid-name
  """Returns a factory that wraps `inner` in the wrapper `name` (MoXing's API).

  Args:
    name: 'batch_gradients' (GradientAccumulation: num_batches,
      sync_on_apply), 'dynamic_accumulator' (DynamicAccumulator:
      min_accum_weight, weight_key, sync_on_apply), 'lars' (Lars: `ratio` for eta, weight_decay, epsilon,
      exclude, exclude_1d), 'ema' (Ema: decay / `ema_decay`,
      decay_schedule), 'lookahead' (Lookahead: k / optax's `sync_period`,
      alpha / `slow_step_size`), 'swa' (SWA: swa_start / TF Addons'
      `start_averaging`, swa_freq / `average_period`), 'sam' (Sam: rho,
      adaptive, adaptive_eta), 'easgd' (Easgd: tau /
      `communication_period`, alpha / `moving_rate`, mode='sync'; 'async'
      is refused), 'local_sgd' (LocalSgd: tau / `communication_period`) or
      'mechanic' (Mechanic: weight_decay, epsilon / optax's `eps`,
      s_init, num_betas).
    inner: an optimizer instance (as in MoXing's example; its params are
      used), a factory from get_optimizer_fn / get_optimizer_wrapper_fn, or
      optimizer params.
    **kwargs: the wrapper's params (and aliases above); `learning_rate`
      overrides the inner factory's base rate.

  Returns:
    An `OptimizerWrapperFn` (callable, `.Params()`, `.learning_rate`, text
    form).

  Raises:
    ValueError: unknown name or keyword, or `inner` is a gradient
      accumulation (accumulation must be the outermost wrapper).
    TypeError: `inner` is none of the accepted kinds.
  """
  return OptimizerWrapperFn(name, inner, **kwargs)


def InstanceGivenMessage(optimizer, where='optimizer_fn'):
  """The message for an optimizer instance given where a callable is expected.

  Keeps the text `optimizer_fn=lambda: ...` (the generic fix) and suggests the
  right fix for the kind of instance: a Keras optimizer is wrapped in a
  lambda; one of our optimizers (a BaseOptimizer, built from params) is
  replaced by a factory from get_optimizer_fn / get_optimizer_wrapper_fn or
  given by its params through the learner's `optimizer` param.

  Args:
    optimizer: the instance that was given (a BaseOptimizer or a
      tf.keras.optimizers.Optimizer).
    where: the parameter's name as the user wrote it, e.g. 'optimizer_fn' or
      "Learner 'learner': optimizer_fn".

  Returns:
    A str (no trailing newline).
  """
  name = type(optimizer).__name__
  head = ('%s must be a zero-argument callable that returns an optimizer '
          '(optimizer_fn=lambda: ...), got the %s instance %r.' %
          (where, name, optimizer))
  if isinstance(optimizer, base_optimizer.BaseOptimizer):
    return head + (
        ' %s is built from params, so give its params instead: '
        'optimizer=%s.Params().Set(...) (for a built one, optimizer='
        '<instance>.params), or a factory: optimizer_fn=get_optimizer_fn('
        "'sgd', learning_rate=0.1), optimizer_fn=get_optimizer_wrapper_fn("
        "'batch_gradients', get_optimizer_fn(...), num_batches=4)." %
        (name, name))
  return head + (
      ' Wrap it in a lambda: optimizer_fn=lambda: tf.keras.optimizers.%s(...) '
      '(e.g. optimizer_fn=lambda: tf.keras.optimizers.Adam(0.1)), or use '
      "get_optimizer_fn('adam', learning_rate=0.1)." % name)


def OptimizerParamsFromFn(optimizer_fn):
  """Returns (optimizer params, base learning rate or None) for a learner.

  Args:
    optimizer_fn: a factory from get_optimizer_fn / get_optimizer_wrapper_fn,
      or any zero-argument callable returning a tf.keras optimizer (-> params
      of `KerasOptimizer` holding the callable; the base rate is the Keras
      optimizer's own learning rate) or a BaseOptimizer (-> its params, and
      its factory's rate if a factory built it).

  A callable that is not a factory is called once here, to check what it
  returns and read its rate; the learner's optimizer calls it again.

  Returns:
    (InstantiableParams of a BaseOptimizer, float or None).

  Raises:
    TypeError: if `optimizer_fn` is an optimizer instance rather than a
      callable (the message shows `optimizer_fn=lambda: ...`), not callable,
      or its result is not an optimizer.
  """
  if isinstance(optimizer_fn, _Factory):
    return optimizer_fn.Params(), optimizer_fn.learning_rate
  if isinstance(optimizer_fn, (base_optimizer.BaseOptimizer,
                               tf.keras.optimizers.Optimizer)):
    raise TypeError(InstanceGivenMessage(optimizer_fn))
  if not callable(optimizer_fn):
    raise TypeError(
        'optimizer_fn must be a zero-argument callable that returns an '
        'optimizer, got %r (a %s). Use e.g. optimizer_fn=lambda: '
        'tf.keras.optimizers.Adam(1e-3), or get_optimizer_fn(\'adam\', '
        'learning_rate=1e-3).' % (optimizer_fn, type(optimizer_fn).__name__))
  built = optimizer_fn()
  if isinstance(built, base_optimizer.BaseOptimizer):
    return (built.params.Copy(frozen=False),
            getattr(built, 'factory_learning_rate', None))
  if not isinstance(built, tf.keras.optimizers.Optimizer):
    raise TypeError(
        'optimizer_fn() returned %r (a %s); expected a tf.keras.optimizers '
        'optimizer or a BaseOptimizer, e.g. optimizer_fn=lambda: '
        'tf.keras.optimizers.Adam(1e-3).' % (built, type(built).__name__))
  try:
    # The rate as the user wrote it: Keras keeps it in float32, whose
    # shortest decimal (str) is 0.0001 for 1e-4, not 9.999999747378752e-05.
    base_lr = float(str(built.learning_rate.numpy()))
  except (AttributeError, TypeError, ValueError):
    base_lr = None
  return keras_optimizer.KerasOptimizerParams(optimizer_fn), base_lr

