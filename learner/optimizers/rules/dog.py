"""DoG and DoWG: SGD whose step size is a distance over gradient norms.

Both read two GLOBAL norms over all the variables of the update (one
tree, as optax's `optax.tree.norm`): the distance travelled from the
first weights x0 and the gradient norm. t counts updates from 1.

  DoG:   r_t = ||x_t - x0||,  rbar_t = max(r_eps, r_1, ..., r_t),
         G_t = sum_{k<=t} ||g_k||^2,  eta_t = rbar_t / sqrt(G_t + epsilon)
         w <- w - lr eta_t g_t
  r_eps (`init_step`): 'heuristic' init_step_value (1 + ||x0||),
  'distance' init_step_value, or 'learning_rate' (eta_1 =
  init_step_value, r_eps = 0).
  DoWG:  rbar2_t = max(rbar2_{t-1}, ||x_t - x0||^2), rbar2_0 =
         init_estim_sq_dist (None: epsilon),
         v_t = v_{t-1} + rbar2_t ||g_t||^2,  eta_t = rbar2_t / (sqrt(v_t)
         + epsilon),   w <- w - lr eta_t g_t
  With decoupled weight decay (the base's): also w <- w - lr wd w_old.

Sources: Ivgi, Hinder & Carmon, "DoG is SGD's Best Friend: A Parameter-
Free Dynamic Step Size Schedule", ICML 2023 (arXiv:2302.12022); Khaled,
Mishchenko & Jin, "DoWG Unleashed: An Efficient Universal Parameter-Free
Gradient Descent Method", NeurIPS 2023 (arXiv:2305.16284). optax.contrib.
dog / dowg (0.2.8) give the same numbers (tests/test_optimizers/
test_dog.py); their `weight_decay` (an L2 term added to the gradient) is
the learner's `l2_regularizer_weight` here, not offered on the rule.
"""

import tensorflow as tf

from learner.optimizers.base import BaseOptimizer
from params import NestedMap
from params import checks

# The rate's scalars (norms, distances, their running max and sums) are
# kept and computed in float64, whatever the variables' dtype.
_SCALAR_DTYPE = tf.float64

_GLOBAL_NORM_REASON = (
    'reads global norms over all variables (||x - x0||, ||g||)')


def _SquaredNorm(x):
  """sum(x^2) of one tensor as a float64 scalar (low precision: summed in
  float32 first)."""
  wide = tf.float64 if x.dtype == tf.float64 else tf.float32
  return tf.cast(tf.reduce_sum(tf.square(tf.cast(x, wide))), _SCALAR_DTYPE)


class DistanceOverGradients(BaseOptimizer):
  """The machinery DoG and DoWG share (module docstring): the x0 slot and
  the per-update global norms; a subclass writes `_Rate`.

  Slot 'x0': the weights at the first update (taken then, not at Bind, so
  weights restored or initialised after Bind count). Per update, once
  over every variable with a gradient (`_BeginUpdate`): sq_dist =
  ||w - x0||^2, sq_grad = ||c g||^2 (c the learner's clip scale), and at
  the first update sq_x0 = ||x0||^2; `_Rate` turns them into eta (float64)
  and the new values of the rule's float64 state variables, which
  `_EndUpdate` stores. `_Step` is w <- w - lr eta g for each variable.

  Not elementwise: the state cannot be sharded (ZeRO-1), nor stored in a
  `slot_dtype` (x0 rounded to bfloat16 would add 2^-9 |x0| to the distance,
  far above its first values); both are refused in one line (ZeRO-1 by
  sharded_state.RuleToShard, as every rule that is not ELEMENTWISE).
  """

  # Subclass: {state variable name: initial value} (float64 scalars).
  STATE = {}
  DEFAULT_LEARNING_RATE = 1.0  # Rate-free: the rate multiplies eta.

  def __init__(self, params):
    p = params
    if p.slot_dtype is not None:
      raise ValueError(
          '%s %r: slot_dtype=%s is not supported: %s %s, and its slot x0 '
          'rounded to %s would make ||x - x0|| wrong. Leave slot_dtype None.'
          % (type(self).__name__, p.name, tf.as_dtype(p.slot_dtype).name,
             type(self).__name__, _GLOBAL_NORM_REASON,
             tf.as_dtype(p.slot_dtype).name))
    super().__init__(params)
    self._state = {
        name: self.CreateVariable(name, [], init=float(init),
                                  trainable=False, dtype=_SCALAR_DTYPE)
        for name, init in self._InitialState().items()}

  def _InitialState(self):
    """{state variable name: initial float}."""
    raise NotImplementedError

  @property
  def state(self):
    """{name: float64 scalar variable} of the rule's running state."""
    return dict(self._state)

  def _CreateSlots(self, var):
    return {'x0': None}  # Taken at the first update (`_Step`).

  def _BeginUpdate(self, lr, vgs, grad_scale):
    """The global norms and the rate of this update (class docstring).

    Returns the base's NestedMap plus `first` (bool: the first update),
    `rate` (float64 lr * eta) and `new_state` ({name: float64 scalar}).
    """
    update = super()._BeginUpdate(lr, vgs, grad_scale)
    first = tf.equal(self.num_updates, 0)
    sq_dist, sq_grad, sq_x0 = [], [], []
    for vg in vgs:
      w = vg.var.read_value()
      x0 = tf.where(first, w, tf.cast(self.GetSlots(vg.var)['x0'], w.dtype))
      sq_dist.append(_SquaredNorm(w - x0))
      sq_grad.append(_SquaredNorm(tf.convert_to_tensor(vg.grad)))
      sq_x0.append(_SquaredNorm(x0))
    sq_grad = tf.add_n(sq_grad)
    if grad_scale is not None:
      sq_grad *= tf.square(tf.cast(grad_scale, _SCALAR_DTYPE))
    eta, update.new_state = self._Rate(
        first, tf.add_n(sq_dist), sq_grad, tf.add_n(sq_x0))
    update.first = first
    update.rate = tf.cast(lr, _SCALAR_DTYPE) * eta
    return update

  def _Rate(self, first, sq_dist, sq_grad, sq_x0):
    """(eta, {state name: new value}): float64 scalars of this update.

    Args:
      first: bool scalar, the first update; sq_dist: ||w - x0||^2;
        sq_grad: ||g||^2 (scaled); sq_x0: ||x0||^2 (float64 scalars).
    """
    raise NotImplementedError

  def _EndUpdate(self, update, ops):
    """Stores the rule's state after the update."""
    with tf.control_dependencies([o for o in ops if o is not None]):
      return [self._state[k].assign(v, read_value=False)
              for k, v in sorted(update.new_state.items())]

  def _Scalars(self, update, dtype):
    return NestedMap(lr=tf.cast(update.rate, dtype), first=update.first)

  def _Step(self, s, w, g, slots):
    w = tf.convert_to_tensor(w)
    return s.lr * g, {'x0': tf.where(s.first, w, slots['x0'])}


class DoG(DistanceOverGradients):
  """DoG: SGD with eta_t = max distance from x0 / sqrt(sum of squared
  gradient norms + epsilon), both norms global (module docstring).

  Set the learner's `learning_rate` to 1.0 (optax's default): the rate
  multiplies eta (a schedule on it is optax's `learning_rate` schedule).
  Slot: 'x0'. State (float64, checkpointed): 'max_dist' (rbar), 'sum_sq_
  grad_norms' (G). Weight decay: the base's `decoupled_weight_decay`, w
  <- w - lr wd w_old (optax's weight_decay, an L2 term in the gradient, is
  the learner's l2_regularizer_weight). Defaults: optax.contrib.dog's
  (0.2.8: init_step ('heuristic', 1e-6), eps 1e-8). The authors advise
  averaging the weights (wrap it in Ema) and init_step_value 1e-4 for
  models with batch normalization.

  Raises:
    ValueError: at construction, if init_step is not 'heuristic',
      'distance' or 'learning_rate', init_step_value is not > 0, epsilon
      is not > 0, or slot_dtype is set; at the learner's Bind, with
      shard_optimizer_state=True (global norms).
  """

  INIT_STEPS = ('heuristic', 'distance', 'learning_rate')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('init_step', 'heuristic',
             'How the first step is set: \'heuristic\' r_eps = '
             'init_step_value (1 + ||x0||); \'distance\' r_eps = '
             'init_step_value; \'learning_rate\' eta_1 = init_step_value.')
    p.Define('init_step_value', 1e-6,
             'The value init_step reads (optax\'s init_step[1]).')
    p.Define('epsilon', 1e-8, 'Added to the sum of squared gradient norms.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        init_step_value=checks.Real(0, low_open=True, example=1e-6,
                                    why='0 never moves the weights'),
        epsilon=checks.Real(0, low_open=True, example=1e-8,
                            why='0 gives 0/0 = NaN on a zero gradient'))
    return specs

  def __init__(self, params):
    if params.init_step not in self.INIT_STEPS:
      raise ValueError(
          '%s %r: init_step=%r is not one of %s. Set init_step to one of '
          'them, e.g. \'heuristic\'.' % (type(self).__name__, params.name,
                                         params.init_step,
                                         list(self.INIT_STEPS)))
    super().__init__(params)

  def _InitialState(self):
    return {'max_dist': 0.0, 'sum_sq_grad_norms': 0.0}

  def _Rate(self, first, sq_dist, sq_grad, sq_x0):
    p = self.params
    v = tf.constant(p.init_step_value, _SCALAR_DTYPE)
    if p.init_step == 'heuristic':
      r_eps = v * (1. + tf.sqrt(sq_x0))
    elif p.init_step == 'distance':
      r_eps = v
    else:
      r_eps = tf.constant(0., _SCALAR_DTYPE)
    max_dist = tf.maximum(
        tf.where(first, r_eps, self._state['max_dist'].read_value()),
        tf.sqrt(sq_dist))
    total = self._state['sum_sq_grad_norms'].read_value() + sq_grad
    eta = max_dist / tf.sqrt(total + p.epsilon)
    if p.init_step == 'learning_rate':
      eta = tf.where(first, v, eta)
    return eta, {'max_dist': max_dist, 'sum_sq_grad_norms': total}


class DoWG(DistanceOverGradients):
  """DoWG: SGD with eta_t = rbar2_t / (sqrt(sum_k rbar2_k ||g_k||^2) +
  epsilon), rbar2 the running max of ||x - x0||^2 (module docstring).

  Set the learner's `learning_rate` to 1.0 (optax's default). Slot: 'x0'.
  State (float64, checkpointed): 'estim_sq_dist' (rbar2),
  'weighted_sq_norm_grads' (v). Weight decay: as DoG. Defaults:
  optax.contrib.dowg's (0.2.8: init_estim_sq_dist None, eps 1e-4). Note
  its first step has length about sqrt(init_estim_sq_dist) (0.01 by
  default). Measured (tools/measure_lr_free.py): it trains mnist1d.ConvNet
  (0.967) but leaves digits.MlpMomentum at chance (0.097), also with
  init_estim_sq_dist 1e-8; DoG trains both.

  Raises:
    ValueError: at construction, if init_estim_sq_dist is not None or
      > 0, epsilon is not > 0, or slot_dtype is set; at the learner's
      Bind, with shard_optimizer_state=True (global norms).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('init_estim_sq_dist', None,
             'Initial estimate of the squared distance to the solution; '
             'None: epsilon.')
    p.Define('epsilon', 1e-4,
             'Added to the rate\'s denominator; also the initial squared '
             'distance when init_estim_sq_dist is None.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        init_estim_sq_dist=checks.Real(0, low_open=True, none_ok=True,
                                       example=1e-4,
                                       why='0 never moves the weights'),
        epsilon=checks.Real(0, low_open=True, example=1e-4,
                            why='0 gives 0/0 = NaN on a zero gradient'))
    return specs

  def _InitialState(self):
    p = self.params
    init = (p.epsilon if p.init_estim_sq_dist is None else
            p.init_estim_sq_dist)
    return {'estim_sq_dist': init, 'weighted_sq_norm_grads': 0.0}

  def _Rate(self, first, sq_dist, sq_grad, sq_x0):
    del first, sq_x0
    estim = tf.maximum(self._state['estim_sq_dist'].read_value(), sq_dist)
    total = (self._state['weighted_sq_norm_grads'].read_value() +
             estim * sq_grad)
    eta = estim / (tf.sqrt(total) + self.params.epsilon)
    return eta, {'estim_sq_dist': estim, 'weighted_sq_norm_grads': total}
