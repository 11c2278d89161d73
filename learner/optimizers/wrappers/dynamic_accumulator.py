"""DynamicAccumulator: apply once the accumulated weight reaches a minimum.

Lingvo 0.14.2's `optimizer.DynamicAccumulator` (lingvo/core/optimizer.py):
every train step adds `weight * grad` and `weight` (the loss metric's
weight, e.g. the examples of the batch, summed over the replicas) into
accumulators; on the step where the accumulated weight W = sum(weight)
reaches `min_accum_weight`, the inner optimizer applies once with the
weighted mean sum(weight * grad) / W, and the accumulators and W go back to
0. On the other steps nothing moves but the accumulators. So each update
sees at least `min_accum_weight` examples whatever the batch sizes.

This is GradientAccumulation (wrappers/accumulation.py) with another end of
window: the same accumulators, the same weighted mean, the same learner
pipeline on the window (clip, regularize, check once per update), the same
checkpointed partial window; only `IsApplyStep` reads the window's weight
instead of its micro-step count. The differences from Lingvo are rows of
docs/lingvo.md ("DynamicAccumulator").

Under tf.distribute the window ends on the global weight: each micro-step's
step weight is summed over the replicas (one scalar all-reduce per
micro-step, also with sync_on_apply=True, whose gradient sums are still
all-reduced only on the applying micro-step), so every replica takes the
same decision; the window's weighted mean is over every replica's shards,
as in GradientAccumulation.
"""

import tensorflow as tf

from learner.optimizers.base import DefineLingvoBaseParams
from learner.optimizers.rules import adam as adam_lib
from learner.optimizers.wrappers import accumulation
from params import checks


class DynamicAccumulator(accumulation.GradientAccumulation):
  """Accumulates weighted gradients until their weight reaches a minimum.

  Per train step t with loss weight w_t (scalar, e.g. examples; float32)
  and gradient g_t (each variable's shape and dtype):
    A <- A + w_t * g_t;  W <- W + w_t;  V <- V + v_t
  where v_t is the step weight: w_t, or with `weight_key` the value of
  metrics[weight_key] (summed over the replicas). When V >=
  min_accum_weight the inner optimizer applies A / W once (through the
  learner's pipeline: clipped, regularized and checked as one gradient),
  then A, W, V <- 0. The learner's rate schedule counts these updates
  (Lingvo's `param_update_step`; `lr_schedule_step='updates'`, the
  default).

  Source: Lingvo 0.14.2 lingvo/core/optimizer.py DynamicAccumulator;
  numbers recorded from it: tests/data/lingvo_0_14_2_dynamic_accumulator.json
  (tools/record_lingvo_dynamic_accumulator.py). Differences: docs/lingvo.md.

  The learner clips the window's mean A / W once per update (Lingvo's
  clips each step's gradient before it is weighted and added).
  A micro-batch with a non-finite gradient is dropped from A and W as in
  GradientAccumulation (Lingvo adds it), but its step weight still counts
  in V (its examples were seen). `MicroBatchesPerUpdate()` is 1 (the
  window's length is not known ahead); a schedule length in examples or
  epochs counted in updates is refused by the trainer (give it in updates).

  Raises:
    ValueError: at construction, if min_accum_weight is None, not a finite
      number, or <= 0; if weight_key is not a str; as GradientAccumulation
      for `optimizer`. At the first step: if weight_key names no metric
      (naming the metrics there), or is set while the gradients come
      without metrics (standalone `Apply` or Learner.ApplyGradients).
  """

  WINDOW_ENDS_ON_WEIGHT = True
  INNER_OPTIMIZER_DOC = (
      'Params of the inner optimizer that applies the weighted mean of the '
      'window once its weight reaches min_accum_weight (Lingvo\'s '
      'optimizer_tpl; Adam by default, as Lingvo).')

  @classmethod
  def Params(cls):
    p = DefineLingvoBaseParams(super().Params())
    p.Delete('num_batches', 'num_batches_schedule')
    p.name = 'dynamic_accumulator'
    p.optimizer = adam_lib.Adam.Params()
    p.Define(
        'min_accum_weight', None,
        'Minimum accumulated weight for an update to happen (Lingvo\'s '
        'param): the window ends on the train step where the sum of the '
        'step weights reaches it; > 0, in the weight\'s unit (examples or '
        'tokens).')
    p.Define(
        'weight_key', '',
        'Metric whose value is the step weight counted toward '
        'min_accum_weight (e.g. \'num_samples_in_batch\'); \'\' counts the '
        'loss metric\'s weight (Lingvo 0.14.2). The gradients are weighted '
        'by the loss metric\'s weight either way.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.pop('num_batches', None)
    specs['min_accum_weight'] = checks.Real(
        0.0, low_open=True, example=256,
        why='the accumulated weight, e.g. examples, at which to apply')
    return specs

  def __init__(self, params):
    if not isinstance(params.weight_key, str):
      raise ValueError(
          'DynamicAccumulator: weight_key=%r is not a str. Set it to a '
          'metric name, or \'\' for the loss metric\'s weight.' %
          (params.weight_key,))
    super().__init__(params)
    self._step_weight_sum = self.CreateVariable(
        'window_weight', [], init=0.0, trainable=False, dtype=tf.float32)

  @classmethod
  def MicroBatchesPerUpdateOf(cls, params):
    """1: the number of steps per update depends on the weights."""
    del params
    return 1

  @property
  def window_weight(self):
    """float32 variable: step weights summed in this window (V), over the
    replicas; 0 after each applied update."""
    return self._step_weight_sum

  def WindowLength(self):
    """Not known ahead: the window ends on weight (`IsApplyStep`)."""
    raise NotImplementedError(
        '%s: a DynamicAccumulator window ends when its weight reaches '
        'min_accum_weight, not after a number of micro-batches.' % self.path)

  def StepWeight(self, metrics, loss_weight):
    """The weight this step counts toward min_accum_weight (float32).

    Args:
      metrics: the task's {name: (value, weight)}.
      loss_weight: the loss metric's weight.

    Raises:
      ValueError: weight_key names no metric of `metrics`.
    """
    key = self.params.weight_key
    if not key:
      return tf.cast(loss_weight, tf.float32)
    if key not in metrics:
      raise ValueError(
          '%s: weight_key=%r is not a metric; metrics: %s. Set weight_key '
          'to one of them, or \'\' for the loss metric\'s weight.' %
          (self.path, key, sorted(metrics)))
    return tf.cast(metrics[key][0], tf.float32)

  def IsApplyStep(self, micro_step=None):
    """True (bool scalar) once the window's weight reaches
    min_accum_weight (after this micro-step's step weight was added)."""
    del micro_step
    return self._step_weight_sum.read_value() >= float(
        self.params.min_accum_weight)

  @tf.autograph.experimental.do_not_convert
  def AccumulateOrApply(self, var_grads, weight, apply_window,
                        when_accumulating, all_reduce=None, step_weight=None):
    """GradientAccumulation's micro-step, with the window's weight counted.

    Args as GradientAccumulation.AccumulateOrApply; `step_weight` (what
    `StepWeight` gave) defaults to `weight`, and is summed over the
    replicas through `all_reduce` before it is added.

    Raises:
      ValueError: weight_key is set and no step_weight was given.
    """
    if step_weight is None:
      if self.params.weight_key:
        raise ValueError(
            '%s: weight_key=%r is read from the metrics, which only '
            'Learner.Apply(metrics, ...) passes; train through it, or set '
            'weight_key=\'\' to count the loss weight.' %
            (self.path, self.params.weight_key))
      step_weight = weight
    step_weight = tf.cast(step_weight, tf.float32)
    if all_reduce is not None:
      _, step_weight, _ = all_reduce([], step_weight, [])
    self._step_weight_sum.assign_add(step_weight)
    return super().AccumulateOrApply(var_grads, weight, apply_window,
                                     when_accumulating, all_reduce)

  def Zero(self, accumulators=True):
    """Empties the window, its weight V included."""
    zero = self._RuntimeZero()
    out = super().Zero(accumulators)
    op = self._step_weight_sum.assign(zero)
    return None if tf.executing_eagerly() else tf.group(out, op)
