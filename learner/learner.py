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
                 with weight 0 adds 0, the losses' verdict rides along;
                 none for a replica-local optimizer (Easgd, LocalSgd)
  var_grads   <- learner/gradient_pipeline.py: regularize (L1/L2) -> mask
                 -> norms -> adjust -> check finite -> track -> clip by
                 norm -> scale -> clip by value
  lr          <- learning_rate * lr_schedule.Value(num_updates | global_step)
                 (the same step every optimizer below evaluates its
                 hyper_schedules at: Bind gives it through UseScheduleStep)
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
from learner import update_step
from learner import loss_scale as loss_scale_lib
from learner.update_step import SKIP_REASONS  # pylint: disable=unused-import
from learner.optimizers import kernels
from learner.optimizers.base import BaseOptimizer
from learner.optimizers import resolve
from learner.optimizers import sharded_wrappers
from learner.optimizers import sharded_state
from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers.var_grad import VarGrad
from learner.optimizers.wrappers import replica_local
from params import BaseLayer
from params import IsTrainable
from params import NestedMap
from params import checks
from schedules import exponential
from schedules.base_schedule import BaseSchedule

_CLIP_KEYS = ('clip_gradient_norm_to_value',
              'clip_gradient_single_norm_to_value', 'clip_gradient_value',
              'grad_norm_to_clip_to_zero', 'l1_regularizer_weight',
              'l2_regularizer_weight')
# None turns these off (Lingvo's default); 0.0 computes and reports 0.
_NONE_OK_KEYS = ('l1_regularizer_weight', 'l2_regularizer_weight')

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

  Params, defaults and numbers are Lingvo 0.14.2's `learner.Learner`;
  docs/lingvo.md lists every departure and why (its "Param differences"
  and "Learner and GradNormTracker: behaviour that differs" sections).

  Raises (at construction, each message names the offending param):
    ValueError: a clipping value, regularizer weight or learning_rate that
      is negative, NaN, inf or a bool (params/checks.py), or
      `adaptive_clip_eps` <= 0; a `bprop_variable_filter` /
      `bprop_variable_exclusion` regex that does not compile; both
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
    pipeline.DefineAdaptiveClipParams(p)
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
    sharded_state.DefineParams(p)
    p.Define(
        'var_norm_metrics', True,
        'If True (default), eval_metrics has var_norm/all, the global L2 '
        'norm of the variables: one more read of every weight per applied '
        'update (4 B/param, ~1/5 of a Momentum update\'s traffic). False '
        'leaves var_norm/all out (per_variable_norm_metrics still reports '
        'var_norm/<var>).')
    return p.SetHints(_LearnerHints())

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    resolve.CheckLearnerParams(self, p)
    names = p.loss_name if p.loss_name is not None else p.name
    self._loss_names = (list(names) if isinstance(names, (list, tuple)) else
                        [names])
    schedule_params = resolve.ScheduleParams(self.path, p.lr_schedule)
    optimizer_params, base_lr = resolve.ResolveOptimizer(self, p)
    self._base_lr = base_lr
    self.CreateChild('optimizer', optimizer_params)
    sharded_wrappers.Install(self.path, self.optimizer, p,
                             cross_replica.AllGather)
    self.CreateChild('lr_schedule', schedule_params)
    if p.grad_norm_tracker is not None:
      self.CreateChild('grad_norm_tracker', p.grad_norm_tracker)
    if p.gradient_combiner is not None:
      self.CreateChild('gradient_combiner', p.gradient_combiner)
    if p.loss_scale is not None:
      self.CreateChild('loss_scale',
                       loss_scale_lib.LossScale.ParamsFor(p.loss_scale))
    self._num_updates = self.CreateVariable(
        'num_updates', [], init=0, trainable=False, dtype=tf.int64)
    self._num_skipped = self.CreateVariable(
        'num_skipped_steps', [], init=0, trainable=False, dtype=tf.int64)
    self._update_step = update_step.UpdateStep(
        self.path, self.optimizer, self._num_updates, self._num_skipped,
        p.check_finite_weights)
    self._bound = None  # frozenset of bound variable names after Bind.
    self._global_step = _Ref(None)  # Not tracked: the task checkpoints it.
    self._warned_no_grad = set()
    self._is_accum = type(self.optimizer).IS_ACCUMULATION
    self._replica_local = replica_local.Configure(  # Easgd, LocalSgd.
        checks.Where(self), self.optimizer, cross_replica)
    self._perturber = gradient_tape.FindPerturber(self.path, self.optimizer)

  # ---- construction checks --------------------------------------------------

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    for key in _CLIP_KEYS:
      specs[key] = checks.Real(0, none_ok=key in _NONE_OK_KEYS, example=1.0,
                               why='0 turns it off')
    specs.update(pipeline.AdaptiveClipChecks())
    return specs

  # ---- properties ----------------------------------------------------------

  @property
  def num_updates(self):
    """int64 variable: updates this learner applied (checkpointed)."""
    return self._num_updates

  @property
  def num_skipped_steps(self):
    """int64 variable: updates skipped (SKIP_REASONS); checkpointed."""
    return self._num_skipped

  def SkipStatistics(self):
    """What the skipped steps of this process were, as Python ints.

    Returns:
      (consecutive, {reason: count}): updates skipped in a row up to now (0
      after an applied update) and, for each of SKIP_REASONS, since this
      learner was built (not restored; num_skipped_steps is).
    """
    return self._update_step.SkipStatistics()

  @property
  def base_learning_rate(self):
    """Python float: the base rate (learning_rate, or the factory's)."""
    return self._base_lr

  @property
  def loss_names(self):
    """The metric names of this learner's losses, in order."""
    return list(self._loss_names)

  def UpdateWithDevMetric(self, value, mode):
    """Gives the dev metric (a float; `mode` 'min'/'max': which is better)
    to this learner's schedules (e.g. DevBasedSchedule's plateau decay)."""
    for layer in self.Descendants():
      if isinstance(layer, BaseSchedule):
        layer.UpdateWithMetric(self.num_updates, value, mode=mode)

  def DigestedWeights(self):
    """{id(model variable): the copy the workers compare in its place}
    (replica_local.DigestedWeights; empty unless Easgd/LocalSgd)."""
    return replica_local.DigestedWeights(self.optimizer)

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
      if not IsTrainable(var) or id(var) in seen:
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
        exclusion and the variables seen), lr_schedule_step is
        'global_step' and global_step is None, or AGC meets rank > 5.
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
    for layer in self.optimizer.Descendants():
      if isinstance(layer, BaseOptimizer):
        _GiveSteps(layer, self._ScheduleStep, global_step)
    selected = self.GetTrainableVariables(vmap)
    variables = selected.Flatten()
    if not variables:
      raise ValueError(
          'Learner %r: no variable to train. bprop_variable_filter=%r, '
          'bprop_variable_exclusion=%r; trainable variables seen: %s.' %
          (self.path, p.bprop_variable_filter, p.bprop_variable_exclusion,
           [var_grad_lib.VarName(v) for v in _AsMap(vmap).Flatten()
            if IsTrainable(v)]))
    pipeline.CheckAdaptiveClipUnits(p, variables)
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
    in_xla = kernels.InXla()
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
      hint = (' Running eagerly: was the loss computed inside `with '
              'learner.GradientTape():`?' if tf.executing_eagerly() else '')
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
  def Apply(self, metrics, vmap, gradient_mask=None, gradient_adjuster=None,
            fprop_fn=None):
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
      fprop_fn: callable () -> metrics, the forward pass again on the same
        batch; used only by an optimizer needing it (SecondPassGradients).

    Returns:
      (losses, update_op, eval_metrics): the list of loss tensors; the
      update op (None eagerly); {name: (value, weight)} with float32 scalar
      values: learning_rate, lr_schedule, grad_norm/all (before clipping),
      grad_norm/clipped, var_norm/all, grad_scale_all, has_nan_or_inf,
      num_updates, num_skipped_steps, and when used loss_scale, l1_loss,
      l2_loss, num_dropped_microbatches, grad_norm/<var>, var_norm/<var>,
      adaptive_clip/clipped_units. Metrics of the update carry weight 0 on
      a micro-step that only accumulates.

    Raises:
      see ComputeGradients; ValueError: a second pass without fprop_fn.

    Apply, ApplyGradients, ComputeGradients, ComputeActivationGradients,
    LearningRate and all they call (a gradient_adjuster too) are not
    converted by AutoGraph: tracing is fast (benchmarks/README.md, resnet50).
    """
    losses, var_grads = self.ComputeGradients(metrics, vmap)
    weight = metrics[self._loss_names[0]][1]
    var_grads = gradient_tape.SecondPassGradients(
        self, self._perturber, var_grads, weight, fprop_fn, vmap)
    update_op, eval_metrics = self.ApplyGradients(
        var_grads, weight, gradient_mask=gradient_mask,
        gradient_adjuster=gradient_adjuster, losses=losses,
        step_weight=(self.optimizer.StepWeight(metrics, weight)
                     if self._is_accum else None))
    return losses, update_op, eval_metrics

  @tf.autograph.experimental.do_not_convert
  def ApplyGradients(self, var_grads, weight=1.0, gradient_mask=None,
                     gradient_adjuster=None, losses=None, step_weight=None):
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
      step_weight: under accumulation, what the step counts toward a window
        that ends on weight (the optimizer's `StepWeight(metrics, weight)`;
        DynamicAccumulator); None counts `weight`.

    Returns:
      (update_op, eval_metrics) as in Apply.

    Raises:
      ValueError: if no VarGrad has a gradient, or a variable is not bound.
    """
    var_grads = self._PresentGradients(var_grads)
    weight = tf.cast(weight, tf.float32)
    lr, sched = self._LearningRate()

    p = self.params
    tracker = (self.grad_norm_tracker if p.grad_norm_tracker is not None
               else None)

    def _Update(vgs, applier, window_finite=None, **window):
      stats, has_nan_or_inf = self._update_step.PipelineAndApply(
          p, tracker, vgs, lr, gradient_mask, gradient_adjuster, applier,
          **window)
      if p.loss_scale is not None:
        self.loss_scale.UpdateAfterStep(has_nan_or_inf, window_finite)
      return stats

    if self._is_accum:
      stats, window_weight = self._update_step.AccumulateOrUpdate(
          p, var_grads, weight, _Update, step_weight)
    else:
      losses_finite = kernels.AllFinite(losses)
      var_grads, losses_finite, empty, scattered = update_step.MeanOverReplicas(
          p, self.optimizer, var_grads, weight, losses_finite, gradient_mask,
          gradient_adjuster, self._replica_local)
      stats = _Update(var_grads, self.optimizer, extra_skip=empty,
                      losses_finite=losses_finite, scattered=scattered)
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
    return var_grad_lib.MergeTiedGradients(present)

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



# ---- helpers ---------------------------------------------------------------

# Lingvo's task train knobs (p.train, not the learner's).
_TASK_TRAIN_KEYS = (
    'max_steps', 'save_interval_steps', 'save_interval_seconds',
    'save_max_to_keep', 'save_keep_checkpoint_every_n_hours',
    'summary_interval_steps', 'tpu_steps_per_loop', 'ema_decay',
    'ema_schedule', 'vn_std', 'vn_start_step', 'early_stop',
    'init_from_checkpoint_rules', 'start_up_delay_steps')
# Params of the update rules a Lingvo config may set on the wrong object.
_OPTIMIZER_KEYS = ('beta1', 'beta2', 'epsilon', 'alpha', 'momentum',
                   'use_nesterov', 'decay', 'initial_accumulator_value',
                   'beta1_power', 'decay_rate', 'rho')


def _GiveSteps(optimizer, schedule_step_fn, global_step):
  """Gives an optimizer the learner's schedule step (for its
  hyper_schedules) and, when there is one, the task's global step."""
  optimizer.UseScheduleStep(schedule_step_fn)
  if global_step is not None:
    optimizer.UseGlobalStep(global_step)


def _LearnerHints():
  """{name: where it belongs} for names a Lingvo config may put here."""
  hints = {k: 'a task train param: task.train.%s (p.train.%s).' % (k, k)
           for k in _TASK_TRAIN_KEYS}
  hints.update({k: 'a param of the optimizer: task.train.learner.optimizer.'
                   '%s (e.g. optimizer=Adam.Params().Set(%s=...)).' % (k, k)
                for k in _OPTIMIZER_KEYS})
  return hints



class _Ref:
  """Holds a reference that tf.Module must not track (a plain object)."""

  def __init__(self, value):
    self.value = value


def _AsMap(vmap):
  return vmap if isinstance(vmap, NestedMap) else NestedMap(vmap)


# GlobalNorm is the pipeline's; kept here for `from learner.learner import GlobalNorm`.
GlobalNorm = pipeline.GlobalNorm
