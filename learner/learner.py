"""Learner: turns a task's metrics into one optimizer update of its variables.

After Lingvo's `lingvo/core/learner.py`, in TF2 form. The data flow of one
`Apply` is docs/DESIGN.md's "One training step, as data":

  losses      <- metrics[loss_name]        (several names need a combiner)
  var_grads   <- gradients of the (scaled) losses w.r.t. the bound variables,
                 unscaled; a combiner merges several losses' gradients
  accumulate? <- GradientAccumulation.AccumulateOrApply, once per micro-step:
                 add weight*grad; unless this micro-step completes the
                 window, stop (window metrics get weight 0); else the
                 window's sums go on below, 1 / sum(weight) folded in
  all-reduce  <- under tf.distribute: sum(weight*grad) / sum(weight), once
                 per applied update (learner/cross_replica.py); a replica
                 with weight 0 adds 0, the losses' verdict rides along
  var_grads   <- learner/gradient_pipeline.py: regularize (L1/L2) -> mask
                 -> norms -> adjust -> check finite -> track -> clip by
                 norm -> scale -> clip by value
  lr          <- learning_rate * lr_schedule.Value(num_updates | global_step)
  update      <- optimizer.Apply(lr, var_grads), inside tf.cond: a skipped
                 step changes no model variable and no optimizer slot;
                 under several replicas the skip flags are ORed over them
                 first (one small all-reduce), so all skip or all apply

The gradient source (symbolic in tf.function, `learner.GradientTape()`
eagerly) lives in learner/gradient_tape.py; the all-reduce in
learner/cross_replica.py.
"""

import re

from absl import logging
import tensorflow as tf

from learner import cross_replica
from learner import gradient_pipeline as pipeline
from learner import gradient_tape
from learner import loss_scale as loss_scale_lib
from learner.optimizers import base as base_optimizer
from learner.optimizers import factory as optimizer_factory
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.var_grad import VarGrad
from params import BaseLayer
from params import NestedMap
from params import checks
from schedules import base_schedule
from schedules import exponential
from schedules import keras_adapter

_CLIP_KEYS = ('clip_gradient_norm_to_value',
              'clip_gradient_single_norm_to_value', 'clip_gradient_value',
              'grad_norm_to_clip_to_zero', 'l1_regularizer_weight',
              'l2_regularizer_weight')
# None turns these off (Lingvo's default); 0.0 computes and reports 0.
_NONE_OK_KEYS = ('l1_regularizer_weight', 'l2_regularizer_weight')

# Why an update was skipped, as `Learner.SkipStatistics` counts it. A loss
# that is not finite wins over its gradient; 'other' is
# grad_norm_to_clip_to_zero, the grad_norm_tracker or an empty window.
SKIP_NON_FINITE_LOSS = 'non-finite loss'
SKIP_NON_FINITE_GRADIENT = 'non-finite gradient'
SKIP_NON_FINITE_WEIGHTS = 'non-finite updated weights'
SKIP_OTHER = 'other'
SKIP_REASONS = (SKIP_NON_FINITE_LOSS, SKIP_NON_FINITE_GRADIENT,
                SKIP_NON_FINITE_WEIGHTS, SKIP_OTHER)


class Learner(BaseLayer):
  """Computes gradients of a loss and applies one update (Lingvo's Learner).

  Usage:
    learner = Learner.Params().Set(
        name='loss', learning_rate=0.1,
        optimizer=SGD.Params()).Instantiate()
    learner.Bind(task.vars)                       # creates every variable
    with learner_lib.GradientTape():              # only needed eagerly
      metrics = task.FProp(task.theta, batch)     # {name: (value, weight)}
    losses, update_op, eval_metrics = learner.Apply(metrics, task.vars)

  Steps of the schedule count applied updates (`num_updates`) unless
  `lr_schedule_step='global_step'` (see docs/DESIGN.md, "Words with one meaning").

  Params, defaults and numbers are Lingvo 0.14.2's `learner.Learner`,
  except (one line each; the why is in docs/lingvo.md):
  * defaults: name 'loss' (Lingvo ''), learning_rate None (Lingvo 0.0: take
    optimizer_fn's rate), optimizer None (Lingvo Adam: set it or
    optimizer_fn);
  * absent: grad_aggregation_method, gate_gradients,
    colocate_gradients_with_ops (TF1 tf.gradients arguments),
    skip_zero_gradients (TPU only), scale_gradients (always on),
    learner_use_variable_scope (TF1 scopes);
  * extensions, off or Lingvo's by default: lr_schedule_step, optimizer_fn,
    clip_gradient_value, skip_lp_1d_vectors, loss_scale,
    per_variable_norm_metrics, var_norm_metrics;
  * a skipped step (non-finite, clip-to-zero, tracker) runs no optimizer
    and never raises; Lingvo applies a zero gradient (or raises under
    check numerics) and has no NaN zeroing on the single-norm path;
  * the schedule sees num_updates unless lr_schedule_step='global_step';
  * with GradientAccumulation the window's weighted mean is clipped and
    checked once per update (Lingvo: per micro-batch, unweighted mean);
  * grad_norm/all, var_norm/all and grad_scale_all are reported on the
    single-norm path too (Lingvo: only on the global-norm path);
  * no L1/L2 term for a skipped variable with a sparse gradient (Lingvo
    adds it); under XLA or several replicas a sparse gradient is dense, so
    L1/L2 and the update cover every row;
  * bprop_variable_filter / exclusion search names without '/var:0';
  * the norm of a sparse gradient merges duplicate rows first;
  * gradient_mask keys may omit ':0' and may leave variables out;
  * with several losses the first loss's weight is the gradient weight
    (Lingvo: their sum); a combiner may be given for one loss and returns
    no metrics;
  * grad_norm_is_nan_or_inf and has_nan_or_inf are float32 0/1 (Lingvo:
    bool); extra metrics: grad_norm/clipped, num_updates,
    num_skipped_steps, and as used loss_scale, num_dropped_microbatches,
    grad_norm/<var>, var_norm/<var>;
  * both clip norms set is refused at construction (Lingvo: at the first
    Apply); so are negative clip values, rates and regularizer weights
    (Lingvo runs them);
  * no GetVarGrads / AdjustGradients / ScaleGradients /
    ApplyPostTrainingLoop; Bind, ComputeGradients and ApplyGradients
    instead.

  Raises (at construction, each message names the offending param):
    ValueError: a clipping value, regularizer weight or learning_rate that
      is negative, NaN, inf or a bool (params/checks.py); a
      `bprop_variable_filter` / `bprop_variable_exclusion` regex that does
      not compile; both
      `clip_gradient_norm_to_value` and `clip_gradient_single_norm_to_value`
      set; several loss names without `gradient_combiner`; both or neither of
      `optimizer` and `optimizer_fn`; no learning rate anywhere; a bad
      `lr_schedule_step` or `loss_scale`.
    TypeError: `optimizer_fn` is an optimizer instance, not a callable.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'loss'
    p.Define(
        'loss_name', None,
        'Name of the loss in the metrics, or a list/tuple of names (then '
        '`gradient_combiner` is required). None means the learner\'s name.')
    p.Define('gradient_combiner', None,
             'Params of a BaseGradientCombiner (GradientSum, PCGrad) that '
             'merges the gradients of several losses.')
    p.Define(
        'learning_rate', None,
        'Base learning rate; the applied rate is learning_rate x '
        'lr_schedule.Value(step). None takes the rate of optimizer_fn (the '
        'factory\'s learning_rate, or the Keras optimizer\'s own).')
    p.Define('lr_schedule', exponential.ContinuousSchedule.Params(),
             'Params of a BaseSchedule: the multiplier of learning_rate. '
             'Lingvo\'s default, ContinuousSchedule: 1.0 until step 400000, '
             'then halving every 100000 steps down to 0.01.')
    p.Define(
        'lr_schedule_step', 'updates',
        '\'updates\': the schedule sees num_updates (applied updates; the '
        'default); \'global_step\': the task\'s global step, as in Lingvo '
        '(pass it to Bind).')
    p.Define('optimizer', None,
             'Params of the optimizer (a BaseOptimizer, possibly a wrapper). '
             'Set this or optimizer_fn, not both.')
    p.Define(
        'optimizer_fn', None,
        'A factory from get_optimizer_fn / get_optimizer_wrapper_fn, or a '
        'zero-argument callable returning a tf.keras optimizer (e.g. '
        'lambda: tf.keras.optimizers.Lion(1e-4)). Set this or optimizer.')
    p.Define('clip_gradient_norm_to_value', 0.0,
             'If > 0, scale all gradients so that their global L2 norm is at '
             'most this. 0 = off.')
    p.Define('clip_gradient_single_norm_to_value', 0.0,
             'If > 0, scale each variable\'s gradient so that its L2 norm is '
             'at most this. 0 = off. Exclusive with '
             'clip_gradient_norm_to_value.')
    p.Define('clip_gradient_value', 0.0,
             'If > 0, clip every gradient element to [-value, value], after '
             'norm clipping. 0 = off.')
    p.Define('grad_norm_to_clip_to_zero', 0.0,
             'If > 0, skip the step when the global gradient norm is >= '
             'this. 0 = off.')
    p.Define('grad_norm_tracker', None,
             'Params of a GradNormTracker that rejects outlier steps, or '
             'None.')
    p.Define('l1_regularizer_weight', None,
             'Coupled L1: wd*sign(w) is added to each gradient; l1_loss = '
             'wd*sum|w| is reported. None = off; 0.0 reports l1_loss (as '
             'Lingvo).')
    p.Define('l2_regularizer_weight', None,
             'Coupled L2: wd*w is added to each gradient; l2_loss = '
             '0.5*wd*sum(w^2) is reported. None = off; 0.0 reports l2_loss '
             '(as Lingvo).')
    p.Define('skip_lp_1d_vectors', False,
             'If True, rank-1 variables (biases, norm scales) get no L1/L2.')
    p.Define('bprop_variable_filter', None,
             'Regex (re.search on variable names): only matching trainable '
             'variables are updated. None = all.')
    p.Define('bprop_variable_exclusion', None,
             'Regex (re.search on variable names): matching variables are '
             'not updated. None = none excluded.')
    p.Define(
        'loss_scale', None,
        'None; a positive float (fixed loss scale); or \'dynamic\' (start '
        '2**15, x2 after 2000 finite steps, /2 and skip on overflow). For '
        'float16 computation.')
    p.Define('per_variable_norm_metrics', False,
             'If True, eval_metrics also has grad_norm/<var> and '
             'var_norm/<var> for every variable.')
    p.Define(
        'check_finite_weights', False,
        'If True, a step whose update would make an updated weight NaN or '
        'Inf is skipped exactly: the weights and every optimizer slot are '
        'put back as they were (reason \'non-finite updated weights\'). '
        'Costs a copy of each updated weight and slot and one read of the '
        'weights per applied update (benchmarks/README.md, "Finite '
        'weights"). False (default): such an update is applied; the '
        'following steps are skipped as non-finite, the trainer stops '
        'after task.train.max_consecutive_skipped_steps and never saves '
        'non-finite weights.')
    p.Define(
        'var_norm_metrics', True,
        'If True (default), eval_metrics has var_norm/all, the global L2 '
        'norm of the variables: one more read of every weight per applied '
        'update (4 B/param, ~1/5 of a Momentum update\'s traffic). False '
        'leaves var_norm/all out (per_variable_norm_metrics still reports '
        'var_norm/<var>).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._ValidateParams()
    self._WarnIgnoredBySingleNormClip()
    names = p.loss_name if p.loss_name is not None else p.name
    self._loss_names = (list(names) if isinstance(names, (list, tuple)) else
                        [names])
    schedule_params = _ScheduleParams(self.path, p.lr_schedule)
    optimizer_params, base_lr = self._ResolveOptimizer()
    self._base_lr = base_lr
    self.CreateChild('optimizer', optimizer_params)
    self.CreateChild('lr_schedule', schedule_params)
    if p.grad_norm_tracker is not None:
      self.CreateChild('grad_norm_tracker', p.grad_norm_tracker)
    if p.gradient_combiner is not None:
      self.CreateChild('gradient_combiner', p.gradient_combiner)
    if p.loss_scale is not None:
      ls = loss_scale_lib.LossScale.Params()
      if p.loss_scale == 'dynamic':
        ls.Set(mode='dynamic')
      else:
        ls.Set(mode='fixed', initial_scale=float(p.loss_scale))
      self.CreateChild('loss_scale', ls)
    self._num_updates = self.CreateVariable(
        'num_updates', [], init=0, trainable=False, dtype=tf.int64)
    self._num_skipped = self.CreateVariable(
        'num_skipped_steps', [], init=0, trainable=False, dtype=tf.int64)
    # Per-process statistics for the trainer's warning and its limit; not
    # checkpointed (a _Ref), so checkpoints keep their keys.
    with tf.init_scope():
      self._skip_stats = _Ref(NestedMap(
          consecutive=tf.Variable(0, dtype=tf.int64, trainable=False,
                                  name=self.path + '/consecutive_skipped'),
          by_reason=tf.Variable(
              tf.zeros([len(SKIP_REASONS)], tf.int64), trainable=False,
              name=self.path + '/skipped_by_reason')))
    self._bound = None  # frozenset of bound variable names after Bind.
    self._global_step = _Ref(None)  # Not tracked: the task checkpoints it.
    self._warned_no_grad = set()
    self._is_accum = getattr(type(self.optimizer), 'IS_ACCUMULATION', False)

  # ---- construction checks --------------------------------------------------

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    for key in _CLIP_KEYS:
      specs[key] = checks.Real(0, none_ok=key in _NONE_OK_KEYS, example=1.0,
                               why='0 turns it off')
    return specs

  def _ValidateParams(self):
    p = self.params
    checks.CheckRegex(self, 'bprop_variable_filter', p.bprop_variable_filter)
    checks.CheckRegex(self, 'bprop_variable_exclusion',
                      p.bprop_variable_exclusion)
    if p.clip_gradient_norm_to_value and p.clip_gradient_single_norm_to_value:
      raise ValueError(
          'Learner %r: clip_gradient_norm_to_value=%r and '
          'clip_gradient_single_norm_to_value=%r are both set; they are '
          'exclusive. Set one of them to 0.' %
          (self.path, p.clip_gradient_norm_to_value,
           p.clip_gradient_single_norm_to_value))
    if isinstance(p.loss_name, (list, tuple)):
      if not p.loss_name:
        raise ValueError('Learner %r: loss_name is an empty list; give at '
                         'least one metric name.' % self.path)
      if len(p.loss_name) > 1 and p.gradient_combiner is None:
        raise ValueError(
            'Learner %r: loss_name=%r names several losses but '
            'gradient_combiner is None. Set gradient_combiner='
            'GradientSum.Params() (or PCGrad.Params()).' %
            (self.path, list(p.loss_name)))
    elif p.loss_name is not None and not isinstance(p.loss_name, str):
      raise ValueError('Learner %r: loss_name=%r; expected a string, a list '
                       'of strings or None.' % (self.path, p.loss_name))
    if p.lr_schedule_step not in ('updates', 'global_step'):
      raise ValueError(
          'Learner %r: lr_schedule_step=%r; expected \'updates\' or '
          '\'global_step\'.' % (self.path, p.lr_schedule_step))
    if p.loss_scale != 'dynamic':
      checks.CheckValue(self, 'loss_scale', p.loss_scale, checks.Real(
          0, low_open=True, none_ok=True, example=128.0,
          why="a number is a fixed scale; 'dynamic' adjusts it"))
    if keras_adapter.IsKerasSchedule(p.learning_rate):
      raise TypeError(
          'Learner %r: learning_rate is the Keras schedule %r; give it as '
          'lr_schedule=<the schedule> (learning_rate=None, or 1.0: the '
          'Keras schedule holds the rate).' %
          (self.path, type(p.learning_rate).__name__))
    checks.CheckValue(self, 'learning_rate', p.learning_rate, checks.Real(
        0, none_ok=True, example=0.1,
        why='None takes the rate of optimizer_fn'))

  def _WarnIgnoredBySingleNormClip(self):
    """Lingvo ignores these with clip_gradient_single_norm_to_value; so
    do we, but we say so once."""
    p = self.params
    if not p.clip_gradient_single_norm_to_value:
      return
    ignored = [k for k in ('grad_norm_to_clip_to_zero', 'grad_norm_tracker')
               if p.Get(k)]
    if ignored:
      logging.warning(
          'Learner %r: %s have no effect with '
          'clip_gradient_single_norm_to_value=%r, as in Lingvo (only '
          'clip_gradient_norm_to_value uses them).', self.path, ignored,
          p.clip_gradient_single_norm_to_value)

  def _ResolveOptimizer(self):
    """Returns (optimizer params, base learning rate)."""
    p = self.params
    if p.optimizer is not None and p.optimizer_fn is not None:
      raise ValueError(
          'Learner %r: both optimizer and optimizer_fn are set; set only one '
          '(optimizer=<params> or optimizer_fn=<factory or callable>).' %
          self.path)
    if p.optimizer is None and p.optimizer_fn is None:
      raise ValueError(
          'Learner %r: neither optimizer nor optimizer_fn is set; e.g. '
          'optimizer=SGD.Params() or optimizer_fn=get_optimizer_fn(\'sgd\', '
          'learning_rate=0.1).' % self.path)
    fn_lr = None
    if p.optimizer_fn is not None:
      fn = p.optimizer_fn
      if isinstance(fn, (base_optimizer.BaseOptimizer,
                         tf.keras.optimizers.Optimizer)):
        raise TypeError(optimizer_factory.InstanceGivenMessage(
            fn, where='Learner %r: optimizer_fn' % self.path))
      if not callable(fn):
        raise TypeError(
            'Learner %r: optimizer_fn must be a zero-argument callable that '
            'returns an optimizer (optimizer_fn=lambda: ...), or a factory '
            'from get_optimizer_fn(...); got %r.' % (self.path, fn))
      opt_params, fn_lr = optimizer_factory.OptimizerParamsFromFn(fn)
      checks.CheckValue(self, 'learning_rate of optimizer_fn', fn_lr,
                        checks.Real(0, none_ok=True, example=0.1))
    else:
      opt_params = _OptimizerParams(self.path, p.optimizer)
    if p.learning_rate is None and keras_adapter.IsKerasSchedule(
        p.lr_schedule) and fn_lr is None:
      return opt_params, 1.0  # A Keras schedule gives the rate itself.
    if p.learning_rate is None:
      if fn_lr is None:
        raise ValueError(
            'Learner %r: learning_rate is None and the optimizer gives no '
            'rate. Set learning_rate (e.g. 0.1), or use optimizer_fn='
            'get_optimizer_fn(..., learning_rate=...).' % self.path)
      return opt_params, float(fn_lr)
    if fn_lr is not None and float(fn_lr) != float(p.learning_rate):
      logging.warning(
          'Learner %r: learning_rate=%r overrides the rate %r of '
          'optimizer_fn; the learner\'s rate is used.', self.path,
          p.learning_rate, fn_lr)
    return opt_params, float(p.learning_rate)

  # ---- properties ----------------------------------------------------------

  @property
  def num_updates(self):
    """int64 variable: updates this learner applied (checkpointed)."""
    return self._num_updates

  @property
  def num_skipped_steps(self):
    """int64 variable: updates skipped (non-finite, clipped to zero,
    rejected by the tracker, loss-scale overflow); checkpointed."""
    return self._num_skipped

  def SkipStatistics(self):
    """What the skipped steps of this process were, as Python ints.

    Returns:
      (consecutive, {reason: count}): the updates skipped in a row up to
      now (0 after an applied update) and, for each of SKIP_REASONS, the
      updates skipped for it since this learner was built. Not restored
      from a checkpoint (num_skipped_steps is).
    """
    stats = self._skip_stats.value
    counts = [int(c) for c in stats.by_reason.numpy()]
    return int(stats.consecutive.numpy()), dict(zip(SKIP_REASONS, counts))

  @property
  def base_learning_rate(self):
    """Python float: the base rate (learning_rate, or the factory's)."""
    return self._base_lr

  @property
  def loss_names(self):
    """The metric names of this learner's losses, in order."""
    return list(self._loss_names)

  # ---- Lingvo's public surface -----------------------------------------------

  def GetTrainableVariables(self, vmap):
    """The variables this learner updates.

    Args:
      vmap: NestedMap of variables (e.g. task.vars).

    Returns:
      NestedMap (a sub-structure of `vmap`) of the trainable variables whose
      names match `bprop_variable_filter` (if set) and do not match
      `bprop_variable_exclusion` (if set); re.search on the name without
      ':0'. A variable present several times (tied weights, e.g. the
      softmax reusing the embedding, or one variable under several keys)
      is kept once, at its first key in traversal order, so that it gets
      one gradient (the sum of its uses), one update and one entry in every
      norm and regularizer, as in Lingvo.
    """
    p = self.params
    seen = set()

    def _Keep(var):
      if not getattr(var, 'trainable', False):
        return False
      if id(var) in seen:
        return False
      seen.add(id(var))
      name = var_grad_lib.VarName(var)
      if p.bprop_variable_filter and not re.search(p.bprop_variable_filter,
                                                   name):
        return False
      if p.bprop_variable_exclusion and re.search(p.bprop_variable_exclusion,
                                                  name):
        return False
      return True

    vmap = vmap if isinstance(vmap, NestedMap) else NestedMap(vmap)
    return vmap.Filter(_Keep)

  def Bind(self, vmap, global_step=None):
    """Selects this learner's variables and creates every slot and counter.

    Call once when the task is built (eagerly, under the strategy's scope if
    any) so a checkpoint restores slots and accumulators before training.

    Args:
      vmap: NestedMap of variables (e.g. task.vars).
      global_step: the task's int64 global-step variable; required with
        lr_schedule_step='global_step', ignored otherwise.

    Returns:
      self.

    Raises:
      ValueError: if no variable is selected (naming the filter, the
        exclusion and the variables seen), or lr_schedule_step is
        'global_step' and global_step is None.
    """
    p = self.params
    if p.lr_schedule_step == 'global_step':
      if global_step is None:
        raise ValueError(
            'Learner %r: lr_schedule_step=\'global_step\' needs the task\'s '
            'global step: call Bind(vmap, global_step=<int64 variable>), or '
            'use lr_schedule_step=\'updates\' for a standalone learner.' %
            self.path)
      self._global_step = _Ref(global_step)
    selected = self.GetTrainableVariables(vmap)
    variables = selected.Flatten()
    if not variables:
      raise ValueError(
          'Learner %r: no variable to train. bprop_variable_filter=%r, '
          'bprop_variable_exclusion=%r; trainable variables seen: %s.' %
          (self.path, p.bprop_variable_filter, p.bprop_variable_exclusion,
           [var_grad_lib.VarName(v) for v in _AsMap(vmap).Flatten()
            if getattr(v, 'trainable', False)]))
    self.optimizer.Bind(selected)
    self._bound = frozenset(self._bound or ()) | frozenset(
        var_grad_lib.VarName(v) for v in variables)
    return self

  def ComputeLosses(self, metrics):
    """Returns [loss] for each name of loss_name, in order.

    Args:
      metrics: dict/NestedMap {name: (value, weight)}.

    Raises:
      ValueError: naming the missing key and listing the available ones.
    """
    missing = [n for n in self._loss_names if n not in metrics]
    if missing:
      raise ValueError(
          'Learner %r: loss_name %r is not in metrics.\n  Available metrics: '
          '%s.\n  Set loss_name to one of them, or report the loss under %r.'
          % (self.path, missing[0] if len(missing) == 1 else missing,
             sorted(metrics.keys()), missing[0]))
    losses = []
    for n in self._loss_names:
      entry = metrics[n]
      if not isinstance(entry, (tuple, list)) or len(entry) != 2:
        raise ValueError(
            'Learner %r: metrics[%r] is %r; expected a (value, weight) pair.'
            % (self.path, n, entry))
      losses.append(entry[0])
    return losses

  @tf.autograph.experimental.do_not_convert
  def LearningRate(self):
    """The current rate: learning_rate x lr_schedule.Value(step) (float32)."""
    lr, _ = self._LearningRate()
    return lr

  def _ScheduleStep(self):
    if self.params.lr_schedule_step == 'global_step':
      if self._global_step.value is None:
        raise ValueError(
            'Learner %r: lr_schedule_step=\'global_step\' but no global step '
            'was given; call Bind(vmap, global_step=...).' % self.path)
      return self._global_step.value.read_value()
    return self._num_updates.read_value()

  def _LearningRate(self):
    sched = self.lr_schedule.Value(self._ScheduleStep())
    return tf.constant(self._base_lr, tf.float32) * sched, sched

  @tf.autograph.experimental.do_not_convert
  def ComputeActivationGradients(self, activations, activations_grad, vmap):
    """Gradients of the variables given activations and their gradient.

    The vector-Jacobian product sum(activations_grad * d activations /
    d var): how a model split into stages trains a stage whose loss is
    computed elsewhere. Eagerly, `activations` must have been computed under
    `learner.GradientTape()`.

    Args:
      activations: a float Tensor produced from the variables.
      activations_grad: a Tensor of the same shape and dtype: the gradient
        of the final loss with respect to `activations`.
      vmap: NestedMap of variables (selected as in GetTrainableVariables).

    Returns:
      NestedMap of VarGrad for the selected variables that get a gradient.
    """
    selected = self.GetTrainableVariables(vmap)
    items = selected.FlattenItems()
    grads = gradient_tape.Gradients(
        activations, [v for _, v in items],
        output_gradients=tf.cast(activations_grad, activations.dtype),
        owner='Learner %r' % self.path)
    out = NestedMap()
    for (key, var), g in zip(items, grads):
      if g is not None:
        out.Set(key, VarGrad(var, g))
    return out

  # ---- Apply -------------------------------------------------------------

  def _SelectBound(self, vmap):
    if self._bound is None:
      raise ValueError(
          'Learner %r: Apply() before Bind(); call learner.Bind(task.vars) '
          'once when the task is built.' % self.path)
    selected = self.GetTrainableVariables(vmap)
    unbound = [var_grad_lib.VarName(v) for v in selected.Flatten()
               if var_grad_lib.VarName(v) not in self._bound]
    if unbound:
      raise ValueError(
          'Learner %r: variables %s were not bound; call Bind() with every '
          'variable before Apply() (bound: %s).' %
          (self.path, unbound, sorted(self._bound)))
    return selected

  def _LossGradients(self, loss, variables):
    upstream = None
    if self.params.loss_scale is not None:
      loss = tf.convert_to_tensor(loss)
      upstream = self.loss_scale.ScaleLoss(tf.ones_like(loss))
    grads = gradient_tape.Gradients(loss, variables, output_gradients=upstream,
                                    owner='Learner %r' % self.path)
    if upstream is not None:
      grads = [self.loss_scale.Unscale(g) for g in grads]
    in_xla = base_optimizer._InXla()  # pylint: disable=protected-access
    out = []
    for g in grads:
      if isinstance(g, tf.IndexedSlices):
        g = (tf.convert_to_tensor(g) if in_xla else
             var_grad_lib.MergeDuplicateIndices(g))
      out.append(g)
    return out

  @tf.autograph.experimental.do_not_convert
  def ComputeGradients(self, metrics, vmap):
    """Selects the losses and returns their (combined) gradients.

    Args:
      metrics: {name: (value, weight)}.
      vmap: NestedMap of variables.

    Returns:
      (losses, var_grads): the list of loss tensors, and a NestedMap of
      VarGrad over the selected variables that get a gradient (unscaled
      when a loss scale is used).

    Raises:
      ValueError: a missing loss (before any gradient is computed); Apply
        before Bind or on unbound variables; no selected variable gets a
        gradient (naming the filter and the variables).
      RuntimeError: eagerly, without `learner.GradientTape()`.
    """
    losses = self.ComputeLosses(metrics)
    selected = self._SelectBound(vmap)
    items = selected.FlattenItems()
    variables = [v for _, v in items]
    per_loss = [self._LossGradients(loss, variables) for loss in losses]
    if len(per_loss) == 1:
      grads = per_loss[0]
    else:
      lag = NestedMap()
      for name, loss, grads in zip(self._loss_names, losses, per_loss):
        lag[name] = NestedMap(
            loss_metric=tuple(metrics[name]),
            grads=selected.Pack([VarGrad(v, g)
                                 for v, g in zip(variables, grads)]))
      combined = self.gradient_combiner.Combine(selected, lag)
      grads = [vg.grad if vg is not None else None
               for vg in combined.Flatten()]
    no_grad = [var_grad_lib.VarName(v) for v, g in zip(variables, grads)
               if g is None]
    if len(no_grad) == len(variables):
      p = self.params
      hint = ''
      if tf.executing_eagerly():
        hint = (' Running eagerly: was the loss computed inside `with '
                'learner.GradientTape():`?')
      raise ValueError(
          'Learner %r: the loss %s depends on none of the selected variables '
          '%s (bprop_variable_filter=%r, bprop_variable_exclusion=%r). Check '
          'the filter, or that the loss is computed from task.theta.%s' %
          (self.path, self.loss_names, no_grad, p.bprop_variable_filter,
           p.bprop_variable_exclusion, hint))
    new = sorted(set(no_grad) - self._warned_no_grad)
    if new:
      self._warned_no_grad.update(new)
      logging.warning(
          'Learner %r: variables %s get no gradient from %s; they and their '
          'slots are left unchanged.', self.path, new, self.loss_names)
    # Pack, not Set by key: Set cannot create the lists of CreateChildren.
    var_grads = selected.Pack([
        VarGrad(v, g) if g is not None else None
        for v, g in zip(variables, grads)]).Filter(lambda vg: vg is not None)
    return losses, var_grads

  @tf.autograph.experimental.do_not_convert
  def Apply(self, metrics, vmap, gradient_mask=None, gradient_adjuster=None):
    """Computes gradients of the losses and applies one update.

    Args:
      metrics: {name: (value, weight)}: the task's metrics; the weight of
        the first loss name normalises the all-reduce and accumulation.
      vmap: NestedMap of variables (task.vars); its selected variables must
        have been bound.
      gradient_mask: optional {variable name: 0/1 (float or scalar tensor)},
        multiplied into that variable's gradient; variables absent from it
        are unchanged.
      gradient_adjuster: optional callable var_grads -> var_grads, applied
        after the norms are measured and before the non-finite check. It
        gets a NestedMap of VarGrad keyed like `vmap` (the variables'
        paths in it, e.g. `vgs.enc.w`; only variables with a gradient), as
        Lingvo's learner passes it, and returns the same structure with
        the grads it wants applied (see gradient_pipeline.Adjust).

    Returns:
      (losses, update_op, eval_metrics): the list of loss tensors; the
      update op (None eagerly); {name: (value, weight)} with float32 scalar
      values: learning_rate, lr_schedule, grad_norm/all (before clipping),
      grad_norm/clipped, var_norm/all, grad_scale_all, has_nan_or_inf,
      num_updates, num_skipped_steps, and when used loss_scale, l1_loss,
      l2_loss, num_dropped_microbatches, grad_norm/<var>, var_norm/<var>.
      Metrics of the update carry weight 0 on a micro-step that only
      accumulates.

    Raises:
      see ComputeGradients.

    Apply, ApplyGradients, ComputeGradients, ComputeActivationGradients and
    LearningRate are not converted by AutoGraph (they use tf.cond, no Python
    control flow on tensors), nor is anything they call (a
    gradient_adjuster too): tracing them inside any tf.function is fast
    (resnet50 set: see benchmarks/README.md).
    """
    losses, var_grads = self.ComputeGradients(metrics, vmap)
    weight = metrics[self._loss_names[0]][1]
    update_op, eval_metrics = self.ApplyGradients(
        var_grads, weight, gradient_mask=gradient_mask,
        gradient_adjuster=gradient_adjuster, losses=losses)
    return losses, update_op, eval_metrics

  @tf.autograph.experimental.do_not_convert
  def ApplyGradients(self, var_grads, weight=1.0, gradient_mask=None,
                     gradient_adjuster=None, losses=None):
    """Applies given gradients: accumulation, all-reduce, checks, update.

    Args:
      var_grads: NestedMap of VarGrad over bound variables (e.g. from
        ComputeGradients or ComputeActivationGradients); grads unscaled.
        Its keys are what a gradient_adjuster sees.
      weight: float scalar, the loss weight of these gradients.
      gradient_mask, gradient_adjuster: as in Apply.
      losses: optional list of the loss tensors; a non-finite one skips the
        update (reason 'non-finite loss'). Not used under accumulation,
        whose micro-batches are dropped on their gradients.

    Returns:
      (update_op, eval_metrics) as in Apply.

    Raises:
      ValueError: if no VarGrad has a gradient, or a variable is not bound.
    """
    var_grads = self._PresentGradients(var_grads)
    weight = tf.cast(weight, tf.float32)
    lr, sched = self._LearningRate()

    def _Update(vgs, applier, **window):
      return self._Update(vgs, lr, gradient_mask, gradient_adjuster, applier,
                          **window)

    if self._is_accum:
      stats, window_weight = self._AccumulateOrUpdate(var_grads, weight,
                                                      _Update)
    else:
      losses_finite, empty = _AllFinite(losses), None
      if cross_replica.NumReplicas() > 1:
        var_grads, losses_finite, empty = _AllReduceMean(var_grads, weight,
                                                         losses_finite)
      stats = _Update(var_grads, self.optimizer, extra_skip=empty,
                      losses_finite=losses_finite)
      window_weight = tf.constant(1.0)
    eval_metrics = self._EvalMetrics(lr, sched, stats, window_weight)
    if tf.executing_eagerly():
      return None, eval_metrics
    return tf.group([v for v, _ in eval_metrics.values()]), eval_metrics

  def _PresentGradients(self, var_grads):
    """`var_grads` without its None grads; raises if empty or unbound."""
    present = var_grads.Filter(lambda vg: vg.grad is not None)
    if not present.Flatten():
      raise ValueError(
          'Learner %r: var_grads has no gradient (every grad is None); '
          'nothing to apply. Keys: %s.' %
          (self.path, [k for k, _ in var_grads.FlattenItems()]))
    for vg in present.Flatten():
      name = var_grad_lib.VarName(vg.var)
      if self._bound is None or name not in self._bound:
        raise ValueError(
            'Learner %r: variable %r was not bound; call Bind() first '
            '(bound: %s).' % (self.path, name, sorted(self._bound or {})))
    return _MergeTiedGradients(present)

  def _EvalMetrics(self, lr, sched, stats, window_weight):
    """{name: (value, weight)}: the rate, the pipeline's stats, counters."""
    one = tf.constant(1.0)
    eval_metrics = {pipeline.LEARNING_RATE: (lr, one),
                    pipeline.LR_SCHEDULE: (sched, one)}
    for k, v in stats.items():
      eval_metrics[k] = (v, window_weight)
    eval_metrics[pipeline.NUM_UPDATES] = (
        tf.cast(self._num_updates.read_value(), tf.float32), one)
    eval_metrics[pipeline.NUM_SKIPPED_STEPS] = (
        tf.cast(self._num_skipped.read_value(), tf.float32), one)
    if self.params.loss_scale is not None:
      eval_metrics[pipeline.LOSS_SCALE] = (self.loss_scale.scale, one)
    if self._is_accum:
      eval_metrics[pipeline.NUM_DROPPED_MICROBATCHES] = (tf.cast(
          self.optimizer.num_dropped_microbatches.read_value(),
          tf.float32), one)
    return eval_metrics

  def _AccumulateOrUpdate(self, var_grads, weight, update):
    """One micro-step of the accumulation; returns (stats, window weight).

    The accumulation's one entry point adds the micro-batch and, on the
    micro-step that completes the window, hands back the window: `update`
    then runs the pipeline on its sums with 1 / sum(weight) folded into the
    norms and the clip scale (no averaged copy), and applies through the
    window. Other micro-steps report zeros with weight 0.
    """
    names = pipeline.MetricNames(self.params,
                                 [vg.var for vg in var_grads.Flatten()])

    def _ApplyWindow(window):
      stats = update(window.var_grads, window,
                     extra_skip=window.weight_sum <= 0.0,
                     window_finite=tf.equal(window.num_dropped, 0.0),
                     grad_prescale=window.grad_scale)
      return [stats[k] for k in names]

    all_reduce = (cross_replica.WeightedAllReduce
                  if cross_replica.NumReplicas() > 1 else None)
    values, is_apply = self.optimizer.AccumulateOrApply(
        var_grads, weight, _ApplyWindow,
        lambda: [tf.constant(0.0) for _ in names], all_reduce=all_reduce)
    if not isinstance(values, (list, tuple)):
      values = [values]
    return dict(zip(names, values)), tf.cast(is_apply, tf.float32)

  def _Update(self, var_grads, lr, gradient_mask, gradient_adjuster, applier,
              extra_skip=None, window_finite=None, grad_prescale=None,
              losses_finite=None):
    """The gradient pipeline (learner/gradient_pipeline.py), then the update.

    Args:
      var_grads: NestedMap of VarGrad (keys as in the vmap) whose grads are
        already averaged over replicas / the window, or - with
        `grad_prescale` - sums that `grad_prescale` turns into the gradient.
      lr: float32 scalar, the scheduled rate.
      gradient_mask, gradient_adjuster: as in Apply.
      applier: what applies the update: this learner's optimizer, or the
        accumulation's Window (its `Apply` / `ApplyScaled`).
      extra_skip: optional bool scalar that also skips the update.
      window_finite: optional bool scalar; False when a micro-batch of the
        window overflowed (for the loss-scale update).
      grad_prescale: optional float32 scalar: the gradient is
        `grad_prescale * grads` (accumulation: 1 / sum(weight)).
      losses_finite: optional bool scalar, False when a loss is not finite.

    Returns:
      {stat name: float32 scalar} in the order of `pipeline.MetricNames`.
    """
    p = self.params
    variables = [vg.var for vg in var_grads.Flatten()]
    grads = [vg.grad for vg in var_grads.Flatten()]
    metrics = {}
    grads, grad_prescale = pipeline.Prescale(
        grads, grad_prescale, bool(
            p.l1_regularizer_weight or p.l2_regularizer_weight or
            gradient_mask or gradient_adjuster is not None))
    grads, m = pipeline.Regularize(variables, grads, p.l1_regularizer_weight,
                                   p.l2_regularizer_weight,
                                   p.skip_lp_1d_vectors)
    metrics.update(m)
    grads = pipeline.Mask(variables, grads, gradient_mask)
    defer = pipeline.DefersVarNorm(p)
    norms, m = pipeline.Norms(variables, grads, grad_prescale,
                              p.var_norm_metrics and not defer,
                              p.per_variable_norm_metrics)
    metrics.update(m)
    grads, adjusted_finite = pipeline.Adjust(var_grads, grads,
                                             gradient_adjuster)
    has_nan_or_inf, m = pipeline.CheckFinite(norms.norm, adjusted_finite,
                                             losses_finite)
    metrics.update(m)
    # Lingvo's single-norm path (learner.py ScaleGradients) clips each
    # variable and nothing else: no clip-to-zero, no tracker. A non-finite
    # step is still skipped here (docs/lingvo.md, "Skipped step").
    single = bool(p.clip_gradient_single_norm_to_value)
    tracker = (self.grad_norm_tracker
               if p.grad_norm_tracker is not None and not single else None)
    track = (norms.norm, has_nan_or_inf,
             0.0 if single else p.grad_norm_to_clip_to_zero, tracker,
             extra_skip)
    # Several replicas decide together (_AgreeAndApply); one decides alone.
    replicated = cross_replica.NumReplicas() > 1
    skip = (pipeline.SkipFlags(*track) if replicated else
            pipeline.Track(*track))
    clip, m = pipeline.ClipByNorm(norms, has_nan_or_inf,
                                  p.clip_gradient_norm_to_value,
                                  p.clip_gradient_single_norm_to_value)
    metrics.update(m)
    scaling = pipeline.Scale(clip, grad_prescale, p.clip_gradient_value)
    metrics.update(pipeline.ClipByValue(grads, scaling))
    # Under XLA the metrics (var_norm/*, l1/l2_loss read the weights) go
    # through the update's cond, so their reads end before it writes.
    update = (lr, var_grads, grads, scaling, applier)
    kw = dict(measured=variables if defer else None,
              held=metrics if base_optimizer.InXla() else None)
    if replicated:
      out, has_nan_or_inf = self._AgreeAndApply(skip, norms.norm, tracker,
                                                losses_finite, update, **kw)
    else:
      out = self._ApplyOrSkip(
          skip, lambda: _SkipReason(has_nan_or_inf, losses_finite), *update,
          **kw)
    metrics.update(out)
    self._UpdateLossScale(has_nan_or_inf, window_finite)
    return {k: metrics[k] for k in pipeline.MetricNames(p, variables)}

  def _ApplyOrSkip(self, skip, reason, lr, var_grads, grads, scaling,
                   applier, measured=None, held=None):
    """Inside one tf.cond: applies the scaled `grads`, or counts a skip.

    A skipped step changes no model variable and no optimizer slot. When
    the scale can be folded (`scaling.foldable`), the optimizer gets it as
    a scalar (`ApplyScaled`, e.g. into Momentum's kernel). With
    check_finite_weights the update is undone if it made a weight
    non-finite (`_CheckedApply`).

    Args:
      skip: bool scalar, True skips.
      reason: zero-argument callable giving the int32 index in SKIP_REASONS
        counted on a skip (built inside the skip branch only).
      lr, var_grads, grads, scaling, applier: as `_Update` has them.
      measured: None, or the variables whose sum(w^2) / 2 before the update
        gives var_norm/all (inside a fused apply op when it can be,
        pipeline.MeasuredApply; read in the skip branch).
      held: optional {name: float32 scalar}, passed through the cond
        unchanged (one stacked vector). Under XLA the learner passes its
        metrics: var_norm/* and l1/l2_loss read the weights, and a read
        still pending when the cond writes a weight in place makes XLA
        copy every weight first (a read and a write of all of them per
        step); as inputs of the cond they are computed before it.

    Returns:
      {name: value}: `held` as the cond outputs them, and var_norm/all
      with `measured` ({} without either).
    """
    names = sorted(held) if held else []
    packed = (tf.stack([tf.cast(held[k], tf.float32) for k in names])
              if names else None)

    def _Outputs(applied, half=None):
      out = {'applied': applied}
      if packed is not None:
        out['held'] = tf.identity(packed)
      if measured is not None:
        out['var_half'] = half
      return out

    def _DoUpdate():
      _Apply, applied = _UpdateFn(lr, var_grads, grads, scaling, applier)
      if self.params.check_finite_weights:
        return _Outputs(self._CheckedApply(
            _Apply, [vg.var for vg in applied.Flatten()]))
      if measured is None:
        _Apply()
        return _Outputs(self._CountApplied())
      half = pipeline.MeasuredApply(measured, applied.Flatten(), applier,
                                    _Apply)
      return _Outputs(self._CountApplied(), half)

    def _Skip():
      half = None if measured is None else pipeline.WeightsHalf(measured)
      return _Outputs(self._CountSkipped(reason()), half)

    out = tf.cond(skip, _Skip, _DoUpdate)
    result = {}
    if packed is not None:
      result = dict(zip(names, tf.unstack(out['held'], num=len(names))))
    if measured is not None:
      result[pipeline.VAR_NORM] = tf.sqrt(2.0 * out['var_half'])
    return result

  def _CountApplied(self):
    self._num_updates.assign_add(1)
    self._skip_stats.value.consecutive.assign(0)
    return tf.constant(True)

  def _CountSkipped(self, reason):
    self._num_skipped.assign_add(1)
    stats = self._skip_stats.value
    stats.consecutive.assign_add(1)
    stats.by_reason.assign_add(
        tf.one_hot(reason, len(SKIP_REASONS), dtype=tf.int64))
    return tf.constant(False)

  def _CheckedApply(self, apply_fn, weights):
    """Applies, then undoes the update if a weight is no longer finite.

    Before the update, `weights` and every variable of the optimizer
    (slots, averages; not an accumulation's accumulators, which the window
    empties either way) are read; the update kernels then write copies
    (copy-on-write of a variable whose value is still referenced), and a
    non-finite weight afterwards puts the read values back and counts the
    reason 'non-finite updated weights'. Exact for every optimizer, at the
    price of those copies.

    Args:
      apply_fn: zero-argument callable that applies the update.
      weights: the model variables the update writes.

    Returns:
      bool scalar: True if the update stayed.
    """
    guarded = self._Guarded(weights)
    saved = [v.read_value() for v in guarded]
    with tf.control_dependencies(saved):
      apply_fn()
    finite = _AllFinite([w.read_value() for w in weights])

    def _Undo():
      for v, value in zip(guarded, saved):
        v.assign(value)
      return self._CountSkipped(
          tf.constant(SKIP_REASONS.index(SKIP_NON_FINITE_WEIGHTS)))

    return tf.cond(finite, self._CountApplied, _Undo)

  def _Guarded(self, weights):
    """`weights` and the optimizer's variables, each once: what an undo
    puts back (not an accumulation's accumulators: the window empties)."""
    inner = self.optimizer.optimizer if self._is_accum else self.optimizer
    guarded, seen = [], set()
    for v in list(weights) + list(inner.variables):
      if id(v) not in seen:
        seen.add(id(v))
        guarded.append(v)
    return guarded

  def _AgreeAndApply(self, flags, grad_norm, tracker, losses_finite, update,
                     measured=None, held=None):
    """Under several replicas: one skip decision for all, then the update.

    Each replica's `pipeline.SkipFlags` are combined over the replicas in
    one collective (cross_replica.AnyReplica): if any replica would skip,
    every replica skips, for the reason of the combined flags, and counts
    the skip once on its own copy of the counters (all copies stay equal).
    With check_finite_weights the collective comes after a tentative
    update, so that the updated weights' verdict is in it too
    (`_AgreedCheckedApply`).

    Args:
      flags: this replica's `pipeline.SkipFlags`.
      grad_norm: float32 scalar, the all-reduced gradient's norm.
      tracker: None or the GradNormTracker (it records the agreed flags).
      losses_finite: None, or a bool scalar already agreed over replicas.
      update: (lr, var_grads, grads, scaling, applier), as `_ApplyOrSkip`.
      measured, held: as `_ApplyOrSkip`.

    Returns:
      ({name: value} of `_ApplyOrSkip` plus has_nan_or_inf, the agreed
      one as float32 0/1; the agreed has_nan_or_inf, a bool scalar).
    """
    if self.params.check_finite_weights:
      out, agreed = self._AgreedCheckedApply(flags, grad_norm, tracker,
                                             losses_finite, update, held)
    else:
      agreed = cross_replica.AnyReplica(flags)
      skip = pipeline.AgreedSkip(agreed, grad_norm, tracker)
      out = self._ApplyOrSkip(
          skip, lambda: _SkipReason(agreed[0], losses_finite), *update,
          measured=measured, held=held)
    out[pipeline.HAS_NAN_OR_INF] = tf.cast(agreed[0], tf.float32)
    return out, agreed[0]

  def _AgreedCheckedApply(self, flags, grad_norm, tracker, losses_finite,
                          update, held):
    """check_finite_weights under replicas: try, agree once, keep or undo.

    Each replica reads its weights and optimizer variables (as
    `_CheckedApply`), applies the update unless its own flags skip it, and
    checks its updated weights; the flags and that verdict then go through
    one collective. If any replica skipped or got a non-finite weight,
    every replica puts the read values back and counts one skip; else
    every replica counts the update.

    Returns:
      (`held` as the first cond outputs it, the agreed flags: the 3 of
      `SkipFlags` and 'updated weights not finite').
    """
    lr, var_grads, grads, scaling, applier = update
    weights = [vg.var for vg, g in zip(var_grads.Flatten(), grads)
               if g is not None]
    guarded = self._Guarded(weights)
    saved = [v.read_value() for v in guarded]
    names = sorted(held) if held else []
    held_in = (tf.stack([tf.cast(held[k], tf.float32) for k in names])
               if names else tf.zeros([0]))

    def _Try():
      apply_fn, _ = _UpdateFn(lr, var_grads, grads, scaling, applier)
      apply_fn()
      return (_AllFinite([w.read_value() for w in weights]),
              tf.identity(held_in))

    with tf.control_dependencies(saved):
      finite, packed = tf.cond(tf.reduce_any(tf.stack(flags)),
                               lambda: (tf.constant(True),
                                        tf.identity(held_in)), _Try)
    agreed = cross_replica.AnyReplica(list(flags) +
                                      [tf.logical_not(finite)])
    skip = pipeline.AgreedSkip(agreed[:3], grad_norm, tracker)

    def _Undo():
      for v, value in zip(guarded, saved):
        v.assign(value)
      return self._CountSkipped(tf.where(
          skip, _SkipReason(agreed[0], losses_finite),
          SKIP_REASONS.index(SKIP_NON_FINITE_WEIGHTS)))

    tf.cond(tf.logical_or(skip, agreed[3]), _Undo, self._CountApplied)
    return dict(zip(names, tf.unstack(packed, num=len(names)))), agreed

  def _UpdateLossScale(self, has_nan_or_inf, window_finite):
    """Feeds the step's overflow (and the window's) to the loss scale."""
    if self.params.loss_scale is None:
      return
    finite = tf.logical_not(has_nan_or_inf)
    if window_finite is not None:
      finite = tf.logical_and(finite, window_finite)
    self.loss_scale.Update(finite)


def _UpdateFn(lr, var_grads, grads, scaling, applier):
  """(apply_fn, applied): builds the scaled gradients and the update.

  Call it inside the branch that applies: the scaled gradients are built
  there. `applied` is the NestedMap of VarGrad the update gets (grads not
  None); `apply_fn()` hands it to `applier`, with the scale folded in
  (`ApplyScaled`) when `scaling.foldable`.
  """
  fold = scaling.foldable
  applied = var_grads.Pack([
      VarGrad(vg.var, g)
      for vg, g in zip(var_grads.Flatten(),
                       scaling.Gradients(grads, fold=fold))
  ]).Filter(lambda vg: vg.grad is not None)

  def _Apply():
    if fold:
      applier.ApplyScaled(lr, applied, scaling.scale)
    else:
      applier.Apply(lr, applied)

  return _Apply, applied


def _AllFinite(tensors):
  """bool scalar: every element of every tensor is finite (None if none).

  A scalar (a loss) costs one IsFinite op; larger tensors one more (All).
  """
  if not tensors:
    return None
  out = None
  for t in tensors:
    t = tf.convert_to_tensor(t)
    finite = tf.math.is_finite(t)
    if t.shape.rank != 0:
      finite = tf.reduce_all(finite)
    out = finite if out is None else tf.logical_and(out, finite)
  return out


def _SkipReason(has_nan_or_inf, losses_finite):
  """int32 scalar: the index in SKIP_REASONS of a skip of this step."""
  reason = tf.where(has_nan_or_inf,
                    SKIP_REASONS.index(SKIP_NON_FINITE_GRADIENT),
                    SKIP_REASONS.index(SKIP_OTHER))
  if losses_finite is not None:
    reason = tf.where(losses_finite, reason,
                      SKIP_REASONS.index(SKIP_NON_FINITE_LOSS))
  return reason


def _AllReduceMean(var_grads, weight, losses_finite=None):
  """sum(weight * grad) / sum(weight) over the replicas, in one collective.

  A replica whose weight is 0 (no example: its mean loss, and maybe its
  gradient, is NaN) contributes weight 0 and a zero gradient
  (`multiply_no_nan`), and its loss is not checked. The losses' verdict
  rides in the same collective, so every replica gets the same one.

  Args:
    var_grads: NestedMap of VarGrad, this replica's (unweighted) gradients.
    weight: float32 scalar, this replica's loss weight (examples).
    losses_finite: None, or a bool scalar: this replica's losses are finite.

  Returns:
    (var_grads, losses_finite, empty): the mean gradient; None, or a bool
    scalar, True when no replica with examples has a non-finite loss; a
    bool scalar, True when no replica has an example (sum(weight) <= 0: the
    update is skipped, reason 'other').
  """
  vgs = var_grads.Flatten()
  weighted = [tf.math.multiply_no_nan(tf.convert_to_tensor(vg.grad),
                                      tf.cast(weight, vg.grad.dtype))
              for vg in vgs]
  extras = []
  if losses_finite is not None:
    extras = [tf.where(tf.logical_and(weight > 0.0,
                                      tf.logical_not(losses_finite)),
                       1.0, 0.0)]
  summed, wsum, extras = cross_replica.WeightedAllReduce(weighted, weight,
                                                         extras)
  if losses_finite is not None:
    losses_finite = tf.equal(extras[0], 0.0)
  return var_grads.Pack([
      VarGrad(vg.var, tf.math.divide_no_nan(g, tf.cast(wsum, g.dtype)))
      for vg, g in zip(vgs, summed)]), losses_finite, wsum <= 0.0


# ---- helpers ---------------------------------------------------------------


def _MergeTiedGradients(var_grads):
  """One VarGrad per variable: a variable given under several keys.

  Args:
    var_grads: NestedMap of VarGrad with grads present.

  Returns:
    `var_grads` itself if every variable appears once; else a NestedMap
    holding each variable at its first key with the sum of its grads (a
    tied variable's gradient is the sum of its uses), the other keys
    dropped.
  """
  items = var_grads.FlattenItems()
  first = {}
  for key, vg in items:
    first.setdefault(id(vg.var), []).append((key, vg))
  if len(first) == len(items):
    return var_grads
  out = NestedMap()
  for group in first.values():
    key, vg = group[0]
    grads = [g.grad for _, g in group]
    if all(isinstance(g, tf.IndexedSlices) for g in grads):
      total = var_grad_lib.MergeDuplicateIndices(tf.IndexedSlices(
          tf.concat([g.values for g in grads], 0),
          tf.concat([tf.cast(g.indices, tf.int64) for g in grads], 0),
          grads[0].dense_shape))
    else:
      total = tf.add_n([tf.convert_to_tensor(g) for g in grads])
    out.Set(key, VarGrad(vg.var, total))
  return out



class _Ref:
  """Holds a reference that tf.Module must not track (a plain object)."""

  def __init__(self, value):
    self.value = value


def _AsMap(vmap):
  return vmap if isinstance(vmap, NestedMap) else NestedMap(vmap)


# GlobalNorm is the pipeline's; kept here for `from learner.learner import GlobalNorm`.
GlobalNorm = pipeline.GlobalNorm


def _WrongParamsMessage(where, key, value, base_name, example):
  """The one-line error for a value of `key` that is not Params: the fix."""
  got = type(value).__name__
  if isinstance(value, type):
    got = 'the class %s' % value.__name__
    fix = '%s=%s.Params()' % (key, value.__name__)
  elif callable(value) and getattr(value, '__name__', '') == 'Params':
    owner = getattr(value, '__self__', None)
    owner = owner.__name__ if isinstance(owner, type) else 'X'
    got = '%s.Params (not called)' % owner
    fix = '%s=%s.Params() (with parentheses)' % (key, owner)
  else:
    got = '%s %r' % (got, value)
    fix = '%s=%s' % (key, example)
  return ('Learner %r: %s must be the Params of a %s, got %s; write %s.' %
          (where, key, base_name, got, fix))


def _OptimizerParams(where, value):
  """`value` if it is BaseOptimizer params; else TypeError with the fix."""
  cls = getattr(value, 'cls', None)
  if isinstance(cls, type) and issubclass(cls, base_optimizer.BaseOptimizer):
    return value
  if isinstance(value, tf.keras.optimizers.Optimizer):
    name = type(value).__name__
    raise TypeError(
        'Learner %r: optimizer is the Keras optimizer instance %s; give a '
        'factory: optimizer_fn=lambda: tf.keras.optimizers.%s(...), or '
        'optimizer=KerasOptimizer.Params().Set(optimizer_fn=lambda: '
        'tf.keras.optimizers.%s(...)).' % (where, name, name, name))
  if isinstance(value, base_optimizer.BaseOptimizer):
    raise TypeError('Learner %r: optimizer is the built optimizer %r; give '
                    'its params: optimizer=<instance>.params, or '
                    'optimizer=%s.Params().' % (where, value.path,
                                                type(value).__name__))
  if keras_adapter.IsKerasSchedule(value):
    raise TypeError('Learner %r: optimizer is the Keras schedule %s; give it '
                    'as lr_schedule=<the schedule>.' %
                    (where, type(value).__name__))
  raise TypeError(_WrongParamsMessage(where, 'optimizer', value,
                                      'BaseOptimizer', 'Adam.Params()'))


def _ScheduleParams(where, value):
  """Params of our schedule for `value`: a Keras schedule is wrapped.

  A Keras LearningRateSchedule becomes schedules.KerasSchedule params (its
  value is the Keras rate itself; the learner's base rate defaults to 1.0).
  Anything that is not BaseSchedule params raises TypeError with the fix.
  """
  if keras_adapter.IsKerasSchedule(value):
    return keras_adapter.KerasSchedule.FromKeras(value)
  cls = getattr(value, 'cls', None)
  if isinstance(cls, type) and issubclass(cls, base_schedule.BaseSchedule):
    return value
  if isinstance(value, base_schedule.BaseSchedule):
    raise TypeError('Learner %r: lr_schedule is the built schedule %r; give '
                    'its params: lr_schedule=<instance>.params.' %
                    (where, value.path))
  raise TypeError(_WrongParamsMessage(
      where, 'lr_schedule', value, 'BaseSchedule (or a Keras '
      'LearningRateSchedule)', 'CosineDecay.Params().Set(total_steps=...)'))
