"""The task's train and eval params: Lingvo 0.14.2's keys, then ours.

`TrainParams()` is Lingvo's `BaseTask.Params().train`
(lingvo/core/base_model.py) key for key, in its order and with its
defaults (recorded in tests/data/lingvo_0_14_2_task.json; docs/lingvo.md,
"Param differences", lists where ours differ and why), followed by the
keys only this project has. The legacy learner keys (learning_rate,
optimizer, lr_schedule, clipping, ...) are read only when `learner` is
None: `ExtractLearnerFromLegacyParams` (below) builds the task's one
learner from them, as Lingvo does.

Each Lingvo key means what it means in Lingvo, or is refused by name
(`CheckLingvoKnobs`), or, when it only steers Lingvo's TPU / executor
runtime, is accepted and warned about once by name when it is not
Lingvo's default (`RUNTIME_ONLY_KEYS`).
"""

import functools
import re

from absl import logging
import tensorflow as tf

import schedules
from learner import learner as learner_lib
from learner.optimizers.wrappers import ema as ema_lib
from learner.optimizers import base as base_optimizer
from learner.optimizers import factory as optimizer_factory
from learner.optimizers.rules import adam as adam_rule
from learner.training.services import checkpointer as checkpointer_lib
from learner.training.services import early_stop as early_stop_lib
from learner.training.services import warm_start
from params import hyperparams
from schedules import durations

DEV_METRIC_MODES = ('min', 'max')

# Lingvo train keys that steer only Lingvo's TPU graph runtime or its
# executor: accepted, and warned about once by name when not Lingvo's
# default (they change nothing here). {key: (Lingvo default, why)}.
RUNTIME_ONLY_KEYS = {
    'start_up_delay_steps': (
        200, 'delays the start of asynchronous replicas; every replica '
        'here is synchronous'),
    'tpu_device_order_mode': (None, 'a TPU device-assignment option'),
    'tpu_computation_shape': (None, 'a TPU device-assignment option'),
    'enqueue_max_steps': (-1, 'limits the TPU infeed enqueue loop'),
    'async_checkpointing': (
        True, 'a Lingvo executor option; checkpoints are written '
        'synchronously here, so a checkpoint on disk is always complete'),
    'checkpoint_finite_check': (
        False, 'every checkpoint is checked finite here before it is '
        'written, whatever this says'),
    'keep_per_example_loss': (
        False, 'copies a per-example loss into the metrics of Lingvo\'s '
        'decoder jobs, which do not exist here'),
}


# ---- Lingvo's legacy learner params on a task's p.train --------------------

# lingvo/core/learner.py _LEGACY_LEARNER_PARAMS (0.14.2), in its order: the
# keys ExtractLearnerFromLegacyParams moves from p.train to the learner.
LEGACY_LEARNER_PARAMS = (
    'bprop_variable_filter', 'bprop_variable_exclusion',
    'clip_gradient_norm_to_value', 'clip_gradient_single_norm_to_value',
    'colocate_gradients_with_ops', 'gate_gradients', 'scale_gradients',
    'grad_aggregation_method', 'grad_norm_to_clip_to_zero',
    'grad_norm_tracker', 'l1_regularizer_weight', 'l2_regularizer_weight',
    'learning_rate', 'lr_schedule', 'optimizer', 'learner_use_variable_scope')

# Of those, the TF1 graph arguments our Learner has no param for, with
# Lingvo's defaults (docs/lingvo.md, "Param differences", class Learner).
TF1_GRADIENT_ARGS = {
    'grad_aggregation_method': tf.AggregationMethod.EXPERIMENTAL_TREE,
    'gate_gradients': False,
    'colocate_gradients_with_ops': True,
    'learner_use_variable_scope': True,
}


def ExtractLearnerFromLegacyParams(tp, cls=learner_lib.Learner,
                                   remove_legacy_params=True):
  """Learner params from the legacy learner keys of a task's `p.train`.

  Lingvo's `learner.ExtractLearnerFromLegacyParams`: the learner is named
  'loss' (so it minimizes the metric 'loss'); each key of
  `LEGACY_LEARNER_PARAMS` is copied to it and, with `remove_legacy_params`,
  set to None on `tp`; every other key stays. The learner counts its
  schedule in global steps (`lr_schedule_step='global_step'`), as Lingvo's
  does. The TF1 gradient arguments (`TF1_GRADIENT_ARGS`) have no learner
  param here: a value other than Lingvo's default is warned about by name.

  Args:
    tp: the task's train params (hyperparams.Params, mutable if
      `remove_legacy_params`).
    cls: the Learner class whose Params() are filled.
    remove_legacy_params: clear the moved keys on `tp` (Lingvo's default).

  Returns:
    The learner's Params.

  Raises:
    ValueError: `scale_gradients` is False (clipping and the finite check
      are always on here).
  """
  lp = cls.Params().Set(name='loss', lr_schedule_step='global_step')
  for k in LEGACY_LEARNER_PARAMS:
    v = tp.Get(k)
    if k in TF1_GRADIENT_ARGS:
      if v is not None and v != TF1_GRADIENT_ARGS[k]:
        logging.warning(
            'task.train.%s : %r is a TF1 graph argument of Lingvo with no '
            'effect under TF2; it is ignored.', k, v)
    elif k == 'scale_gradients':
      if v is False:
        raise ValueError(
            'task.train.scale_gradients : False would skip clipping and the '
            'finite check, which are always on here; remove it (clipping '
            'is off when the clip values are 0).')
    else:
      lp.Set(**{k: v})
    if remove_legacy_params:
      tp.Set(**{k: None})
  return lp


def EarlyStopParams():
  """Lingvo's `early_stop.EarlyStop.Params()` (lingvo/core/early_stop.py).

  `window` > 0 turns it on, as in Lingvo: in train_and_eval, training stops
  when `metric_history.metric` (an eval metric; lower is better if
  `minimize`) has not improved by more than `tolerance` for more than
  `window` global steps, at a step >= `min_steps`
  (learner/training/services/early_stop.py). `jobname`, `logdir`, `tfevent_file`,
  `local_filesystem`, `verbose` and `logging_interval` steer Lingvo's
  history file and logs: not used here (the history is early_stop.json).
  """
  p = hyperparams.InstantiableParams(early_stop_lib.EarlyStop)
  p.Define('name', 'EarlyStop', 'Name of the early stop.')
  mh = hyperparams.Params()
  mh.Define('name', 'MetricHistory', 'Name.')
  mh.Define('jobname', 'eval_dev', 'Job whose metric is watched.')
  mh.Define('metric', 'log_pplx', 'Metric watched.')
  mh.Define('minimize', True, 'True if lower is better.')
  mh.Define('logdir', '', 'Lingvo\'s history file directory.')
  mh.Define('tfevent_file', False, 'Lingvo: read the metric from events.')
  mh.Define('local_filesystem', False, 'Lingvo: history on local disk.')
  p.Define('metric_history', mh, 'Lingvo\'s MetricHistory params.')
  p.Define('tolerance', 0.0, 'Minimum improvement that counts.')
  p.Define('window', 0, 'Global steps without improvement before '
           'stopping; 0 = off.')
  p.Define('verbose', True, 'Lingvo: log each check.')
  p.Define('min_steps', 0, 'Never stop before this global step.')
  p.Define('logging_interval', 100, 'Lingvo: steps between logs.')
  return p


def TrainParams():
  """The task's `p.train`: Lingvo 0.14.2's keys and defaults, then ours."""
  tp = hyperparams.Params()
  _DefineLingvoStepKeys(tp)
  _DefineLingvoCheckpointKeys(tp)
  tp.Define(
      'learner', None,
      'Learner params (learner.Learner.Params()), or a list of them for '
      'several learners; each is built as a child of the task named by its '
      '`name` (names must differ). None (Lingvo\'s default): one learner '
      'named \'loss\' built from the legacy keys below (learning_rate, '
      'optimizer, lr_schedule, clipping, ...) by '
      'learner.ExtractLearnerFromLegacyParams, as Lingvo does. Not used to '
      'evaluate.')
  DefineLegacyLearnerParams(tp)
  _DefineOurKeys(tp)
  return tp.SetHints(TrainHints(tp))


def _DefineLingvoStepKeys(tp):
  """Lingvo's keys from start_up_delay_steps to ema_schedule."""
  tp.Define('start_up_delay_steps', 200,
            'Lingvo: replica i starts after i*(i+1)/2*this steps (its '
            'asynchronous trainers). Accepted; replicas here are '
            'synchronous.')
  tp.Define('max_steps', 4 * 10**6,
            'Global steps (batches) to train for (Lingvo\'s default).')
  tp.Define('tpu_steps_per_loop', 1000,
            'Train steps run per tf.function call when steps_per_loop is '
            'None (Lingvo\'s TPU loop; the same thing here on every '
            'device).')
  tp.Define('tpu_device_order_mode', None,
            'Lingvo: TPU device order. Accepted; warned about when set.')
  tp.Define('tpu_computation_shape', None,
            'Lingvo: TPU computation shape. Accepted; warned about when '
            'set.')
  tp.Define('vn_start_step', 200000000,
            'Global step from which variational noise (vn_std) is added '
            'to the weights in training.')
  tp.Define('vn_std', 0.0,
            'Std of Lingvo\'s variational noise on the weights. Not '
            'offered yet: a value > 0 is refused.')
  tp.Define('early_stop', EarlyStopParams(),
            'Lingvo\'s early stop: window > 0 stops train_and_eval when '
            'metric_history.metric has not improved for window global '
            'steps (task.eval.early_stop_patience counts evaluations '
            'instead).')
  tp.Define('ema_decay', 0.0,
            'If > 0 (and < 1), keep an exponential moving average of the '
            'weights (TF\'s ExponentialMovingAverage with Lingvo\'s '
            'num_updates = global step: decay min(ema_decay, (1 + step) / '
            '(10 + step))) by wrapping each learner\'s optimizer in Ema; '
            'evaluation and export use the averages, as in Lingvo.')
  tp.Define('ema_decay_moving_vars', None,
            'Lingvo: also average the "moving_vars" collection (batch-norm '
            'statistics). There is no such collection here: True is '
            'accepted when it changes nothing (no EMA, or no non-trainable '
            'model variable) and refused otherwise (CheckEmaMovingVars).')
  tp.Define('ema_schedule', None,
            'Schedule params of the EMA decay over steps (overrides '
            'ema_decay; capped at 1).')


def _DefineLingvoCheckpointKeys(tp):
  """Lingvo's keys from init_from_checkpoint_rules to summary_interval."""
  tp.Define(
      'init_from_checkpoint_rules', [],
      'Warm start (when the run has no checkpoint of its own). Lingvo\'s '
      'form: {checkpoint path: ([(regex, format)], [ignore regex])}: a '
      'model variable whose name re.match-es a regex takes the checkpoint '
      'variable named format % groups, unless an ignore regex matches it. '
      'Or ours: a list of (regex, replacement) pairs mapping names from '
      'init_from_checkpoint (re.sub on the first rule whose regex '
      're.search-es the name); empty: names as they are. The default is '
      'ours ([], not Lingvo\'s {}): params texts of earlier runs hold [].')
  tp.Define('init_from_checkpoint_override', None,
            'If set, the one key of a dict init_from_checkpoint_rules is '
            'replaced by this path (Lingvo\'s override for the command '
            'line).')
  tp.Define('pruning_hparams_dict', None,
            'Lingvo: model pruning hyperparameters. Not offered: a dict is '
            'refused.')
  tp.Define('enqueue_max_steps', -1,
            'Lingvo: TPU enqueue steps (tests only). Accepted; warned about '
            'when set.')
  tp.Define('save_interval_seconds', 60 * 10,
            'Save a checkpoint when this many seconds have passed since the '
            'last one (checked at the end of each train loop); used when '
            'save_interval_steps is None.')
  tp.Define('save_interval_steps', None,
            'Save a checkpoint every this many global steps (and at the '
            'end); supersedes save_interval_seconds when not None.')
  tp.Define('save_max_to_keep', 100,
            'Most recent checkpoints kept on disk; None keeps every one.')
  tp.Define('save_keep_checkpoint_every_n_hours', 0.5,
            'Also keep one checkpoint per this many hours for good (beyond '
            'save_max_to_keep; tf.train.CheckpointManager\'s '
            'keep_checkpoint_every_n_hours); 0 or None: off.')
  tp.Define('async_checkpointing', True,
            'Lingvo executor option. Accepted; checkpoints are written '
            'synchronously here.')
  tp.Define('checkpoint_finite_check', False,
            'Lingvo: check the weights finite before saving. Always done '
            'here.')
  tp.Define('keep_per_example_loss', False,
            'Lingvo: copy the per-example loss into the metrics of its '
            'decoder jobs. Accepted; warned about when set.')
  tp.Define('summary_interval_steps', 100,
            'Write training summaries every this many global steps.')


def DefineLegacyLearnerParams(tp):
  """Defines Lingvo's 16 legacy learner keys on a task's train params.

  The keys, order and defaults of Lingvo 0.14.2's `BaseTask.Params().train`
  (lingvo/core/base_model.py), e.g. `learning_rate` 0.0, `optimizer`
  Adam.Params(), `lr_schedule` ContinuousSchedule.Params(). They are read
  only when `tp.learner` is None (`ExtractLearnerFromLegacyParams`).

  Args:
    tp: a hyperparams.Params (the task's `train`) without these keys.
  """
  lp = learner_lib.Learner.Params()
  for k in ('l2_regularizer_weight', 'l1_regularizer_weight'):
    tp.Define(k, None, lp.GetDoc(k) + ' Legacy: read when learner is None.')
  tp.Define('learning_rate', 0.0,
            'Legacy (read when learner is None): the learner\'s '
            'learning_rate. Lingvo\'s default 0.0 trains nothing.')
  for k in ('clip_gradient_norm_to_value',
            'clip_gradient_single_norm_to_value', 'grad_norm_to_clip_to_zero',
            'grad_norm_tracker'):
    tp.Define(k, lp.Get(k), lp.GetDoc(k) + ' Legacy: read when learner is '
              'None.')
  tp.Define('optimizer', adam_rule.Adam.Params(),
            'Legacy (read when learner is None): the learner\'s optimizer; '
            'Lingvo\'s default Adam.')
  tp.Define('lr_schedule', schedules.ContinuousSchedule.Params(),
            lp.GetDoc('lr_schedule') + ' Legacy: read when learner is None.')
  for k in ('bprop_variable_filter', 'bprop_variable_exclusion'):
    tp.Define(k, None, lp.GetDoc(k) + ' Legacy: read when learner is None.')
  for k in ('grad_aggregation_method', 'gate_gradients',
            'colocate_gradients_with_ops'):
    tp.Define(k, TF1_GRADIENT_ARGS[k],
              'Lingvo\'s TF1 tf.gradients argument; TF2\'s tape has none. '
              'Accepted and not used (a warning names it when it is not '
              'Lingvo\'s default).')
  tp.Define('scale_gradients', True,
            'Lingvo: False skips clipping and the NaN check. Always on '
            'here: False is refused.')
  tp.Define('learner_use_variable_scope', True,
            'Lingvo\'s TF1 variable scope of the learner\'s children. '
            'Accepted and not used (a warning names it when False).')


def _DefineOurKeys(tp):
  """The keys only this project has."""
  tp.Define('log_interval_steps', 50,
            'Plain log line every this many global steps (when stdout is not '
            'a terminal; a terminal gets a progress bar).')
  tp.Define(
      'max_consecutive_skipped_steps', 100,
      'Stop training with an error when a learner has skipped this many '
      'updates in a row (non-finite loss, gradient or weights, or rejected '
      'by grad_norm_to_clip_to_zero / the grad_norm_tracker); nothing is '
      'saved of that state, so the last checkpoint stays the last good '
      'one. Counted within one run of the trainer. 0 = no limit.')
  tp.Define(
      'replicas_to_aggregate', None,
      'Replicas whose gradients each update aggregates; None means all the '
      'replicas of the distribution strategy.')
  tp.Define(
      'steps_per_loop', None,
      'Train steps run per tf.function call (None: tpu_steps_per_loop) (Keras: steps_per_execution), '
      'batches taken from the iterator inside the graph (also under a '
      'distribution strategy). A loop also ends at every save, summary, log '
      'and eval step and at max_steps, so checkpoints, summaries and '
      'resumed runs are the same as with 1; larger values only save '
      'per-call Python overhead (about 0.5 ms per call). A terminal '
      'progress bar is redrawn once per loop.')
  tp.Define(
      'checkpoint_input_iterator', True,
      'On one device, save the train input iterator in every checkpoint: a '
      'resume continues at the next batch even if the input pipeline is '
      'not deterministic. False: checkpoints hold no input state and a '
      'resume rebuilds the dataset, skipping the global steps already taken '
      '(as under every strategy; exact when the pipeline gives the same '
      'order every time, as every input generator here does). tf.data '
      'saves a shuffle buffer element by element: lm.CharTransformer\'s '
      '(418,000 windows) made every checkpoint 83 MB and 18 s. A rerun may '
      'change it: a checkpoint written with the other value resumes by '
      'skip, with one warning line.')
  tp.Define(
      'autograph', False,
      'Trace the train and eval steps with AutoGraph. Not needed unless '
      'the task branches on tensors with Python `if`/`for`; such a task is '
      'retraced with AutoGraph automatically (with a warning).')
  tp.Define(
      'jit_compile', False,
      'Compile each replica\'s train step with XLA (tf.function('
      'jit_compile=True)). Refused under a strategy with several replicas '
      'on CPU devices: XLA cannot compile their all-reduce on CPU (TF '
      '2.21); see BaseTask.CreateLearners.')
  tp.Define(
      'init_from_checkpoint', '',
      'Checkpoint (a prefix, or a directory holding one) to warm-start the '
      'model weights from when the run has no checkpoint of its own. '
      'Optimizer state is not taken.')


def EvalParams():
  """The task's `p.eval` (ours; docs/lingvo.md lists Lingvo's keys)."""
  ep = hyperparams.Params().SetHints(EvalHints())
  ep.Define(
      'interval_steps', 0,
      'In train_and_eval mode, evaluate every this many global steps; 0 '
      'means only at the end of training.')
  ep.Define('samples', 0,
            'Examples to evaluate on (rounded up to whole batches); 0 means '
            'one pass over the evaluation input.')
  ep.Define(
      'dev_metric', None,
      'Name of the eval metric that picks the best checkpoint and drives any '
      'DevBasedSchedule; None disables both.')
  ep.Define('dev_metric_mode', 'min',
            "'min' if a lower dev_metric is better (a loss), 'max' if higher "
            'is better (an accuracy).')
  ep.Define(
      'early_stop_patience', 0,
      'In train_and_eval mode, stop training when dev_metric has not beaten '
      'its best for this many evaluations in a row (every interval_steps; '
      'learner/training/services/early_stop.py); 0 means never stop early.')
  return ep


def CheckLegacyKeysUnused(tp):
  """Refuses a legacy learner key of p.train set beside p.train.learner.

  Lingvo reads the legacy keys only when `learner` is None and otherwise
  ignores them without a word; here a key that is neither its default nor
  None (what Lingvo's extraction leaves) is refused, naming both.

  Raises:
    ValueError: naming every such key, its value and the two fixes.
  """
  if tp.learner is None:
    return
  defaults = TrainParams()
  set_keys = []
  for k in LEGACY_LEARNER_PARAMS:
    v = tp.Get(k)
    if v is None or v == defaults.Get(k):
      continue
    set_keys.append((k, 'task.train.%s : %s' % (k, _Short(v))))
  if not set_keys:
    return
  where = ('task.train.learner[i]' if isinstance(tp.learner, (list, tuple))
           else 'task.train.learner')
  raise ValueError(
      '%s %s set together with task.train.learner, and the legacy learner '
      'keys of task.train are read only when task.train.learner is None '
      '(Lingvo ignores them). Set %s on the learner (%s), or leave '
      'task.train.learner None.' % (
          '; '.join(t for _, t in set_keys),
          'is' if len(set_keys) == 1 else 'are',
          'it' if len(set_keys) == 1 else 'them',
          ', '.join('%s.%s' % (where, k) for k, _ in set_keys)))


def _Short(v):
  text = repr(v) if not isinstance(v, hyperparams.Params) else (
      '%s.Params()' % getattr(v.Get('cls'), '__name__', 'Params')
      if 'cls' in v else 'Params()')
  return text if len(text) <= 60 else text[:57] + '...'


def CheckLingvoKnobs(tp):
  """Refuses Lingvo train knobs not offered; warns about runtime-only ones.

  Args:
    tp: the task's train params.

  Raises:
    ValueError: one line naming the key, the value and the fix, for
      `vn_std` > 0 (variational noise is not offered yet),
      `ema_decay_moving_vars` not None or a bool (True is checked
      against the variables by `CheckEmaMovingVars`), a
      `pruning_hparams_dict`, or `ema_decay` outside [0, 1).
  """
  if tp.vn_std:
    raise ValueError(
        'task.train.vn_std : %r: Lingvo\'s variational noise on the weights '
        'is not offered here yet; set task.train.vn_std : 0.0 (or add the '
        'noise in the task\'s FProp).' % (tp.vn_std,))
  if not isinstance(tp.ema_decay_moving_vars, (type(None), bool)):
    raise ValueError(
        'task.train.ema_decay_moving_vars : %r is not None, False or True; '
        'set it to None (Lingvo\'s default).' % (tp.ema_decay_moving_vars,))
  if tp.pruning_hparams_dict:
    raise ValueError(
        'task.train.pruning_hparams_dict : set: model pruning is not offered '
        'here; set it to None.')
  if (isinstance(tp.ema_decay, bool) or
      not isinstance(tp.ema_decay, (int, float)) or
      not 0.0 <= tp.ema_decay < 1.0):
    raise ValueError(
        'task.train.ema_decay : %r is not in [0, 1): 0 turns the moving '
        'average off, e.g. 0.9999 turns it on.' % (tp.ema_decay,))
  for key, (default, why) in RUNTIME_ONLY_KEYS.items():
    value = tp.Get(key)
    if value != default:
      logging.warning('task.train.%s : %r is accepted and has no effect '
                      'here: it %s (docs/lingvo.md).', key, value, why)


def CheckEmaMovingVars(tp, model_vars):
  """Accepts `ema_decay_moving_vars` True where it changes nothing, or refuses.

  Lingvo (base_model.py) adds its "moving_vars" collection, the moving
  statistics of its batch-norm layers (non-trainable variables updated in
  the forward pass), to the variables its EMA averages. Here the EMA
  averages the variables the learners train, and there is no such
  collection. So True is Lingvo's behaviour, and accepted, when the EMA is
  off (Lingvo ignores the flag then) or the model has no non-trainable
  variable (Lingvo's collection would be empty). Otherwise those variables
  may be moving statistics that Lingvo would average and we would not.

  Args:
    tp: the task's train params.
    model_vars: NestedMap of the task's model variables (`ModelVars()`).

  Raises:
    ValueError: one line naming the key, the non-trainable variables (up to
      5) and the fix, if `ema_decay_moving_vars` is True, the EMA is on
      (`ema_decay` > 0 or an `ema_schedule`) and the model has a
      non-trainable variable.
  """
  if tp.ema_decay_moving_vars is not True:
    return
  if not tp.ema_decay and tp.ema_schedule is None:
    return
  frozen = sorted(checkpointer_lib.VariableName(v)
                  for v in model_vars.Flatten() if not v.trainable)
  if frozen:
    raise ValueError(
        'task.train.ema_decay_moving_vars : True: Lingvo would also average '
        'its "moving_vars" collection (batch-norm statistics), which does '
        'not exist here, and this model has %d non-trainable variable(s) '
        'that could be such statistics (%s); the EMA here averages only '
        'trained variables. Set it to None to leave them un-averaged.' %
        (len(frozen), ', '.join(frozen[:5]) +
         (', ...' if len(frozen) > 5 else '')))


def StepsPerLoop(tp):
  """Train steps per tf.function call: steps_per_loop, else Lingvo's key."""
  return tp.steps_per_loop if tp.steps_per_loop is not None else (
      tp.tpu_steps_per_loop)


def WithEma(tp, lp):
  """Learner params `lp` with Lingvo's task-level EMA, if tp asks for it.

  `ema_decay` > 0 or an `ema_schedule`: the learner's optimizer is wrapped
  in our `Ema` (lp.optimizer; an `optimizer_fn` is resolved by the learner
  and cannot be wrapped here, so it is refused). The decay is Lingvo's:
  `ema_schedule` (capped at 1) if set, else
  `schedules.EmaDecaySchedule(ema_decay)` = min(ema_decay, (1 + n) /
  (10 + n)), TF's ExponentialMovingAverage with num_updates, n counting
  applied updates (Lingvo's global step when no step is skipped).

  Raises:
    ValueError: with an optimizer_fn, naming the key.
  """
  if not (tp.ema_decay or tp.ema_schedule):
    return lp
  if lp.optimizer is None:
    raise ValueError(
        'task.train.ema_decay : %r needs the learner\'s optimizer as params '
        '(optimizer=...), not optimizer_fn; or wrap the factory in '
        'get_optimizer_wrapper_fn(\'ema\', ...).' % (tp.ema_decay,))
  schedule = tp.ema_schedule or schedules.EmaDecaySchedule.Params().Set(
      ema_decay=tp.ema_decay)
  return lp.Copy(frozen=False).Set(optimizer=ema_lib.Ema.Params().Set(
      optimizer=lp.optimizer, decay_schedule=schedule))


def _Accumulation(lp):
  """(class, params) of the accumulation in a learner's params, or None."""
  opt = lp.Get('optimizer') if 'optimizer' in lp else None
  fn = lp.Get('optimizer_fn') if 'optimizer_fn' in lp else None
  if opt is None and fn is not None:
    opt, _ = optimizer_factory.OptimizerParamsFromFn(fn)
  while isinstance(opt, hyperparams.Params):
    cls = opt.cls if 'cls' in opt else None
    if (isinstance(cls, type) and issubclass(cls, base_optimizer.BaseOptimizer)
        and cls.IS_ACCUMULATION):
      return cls, opt
    opt = opt.Get('optimizer') if 'optimizer' in opt else None
  return None


def _MicroBatchesPerUpdate(lp, key):
  """num_batches of the GradientAccumulation in a learner's params, else 1.

  Raises:
    ValueError: the accumulation's window ends on weight (DynamicAccumulator):
      its examples per update are not known.
  """
  found = _Accumulation(lp)
  if found is None:
    return 1
  cls, opt = found
  if cls.WINDOW_ENDS_ON_WEIGHT:
    raise ValueError(
        '%s: a schedule length in examples or epochs cannot be converted to '
        'updates under %s, whose updates come when the accumulated weight '
        'reaches min_accum_weight; give the length in updates, or set '
        "lr_schedule_step='global_step' to count train steps." %
        (key, cls.__name__))
  return cls.MicroBatchesPerUpdateOf(opt)


def _EpochSizeFix(input_params):
  """How to state the epoch size of a train input, for the refusal."""
  if 'num_examples' in input_params:
    return 'set train_input.num_examples (examples per epoch)'
  return ("give the train input a 'num_examples' attribute (examples per "
          'epoch), as DatasetInput has')


def ResolveDurations(params):
  """Converts schedule lengths given in examples or epochs to updates.

  For each learner (`task.train.learner`, each of a list, or the legacy
  learner of `task.train`), every '<n> examples' / '<n> epochs' value of a
  schedule inside it becomes round(examples / examples_per_update), with
  examples_per_update = train_input.batch_size (the global batch) x the
  learner's micro-batches per applied update (1 when its schedule counts
  global steps); an epoch is the train input's `num_examples` (a
  DatasetInput's param of that name, a BaseInputGenerator's split size)
  (schedules/durations.py).

  Args:
    params: the experiment's params, changed in place (give a copy).

  Returns:
    The conversion lines (str), to print once at start; [] if none.

  Raises:
    ValueError: a duration in epochs when the train input does not know its
      size, a train input without batch_size, or a duration counted in
      updates under a DynamicAccumulator (one line naming the key).
  """
  tp = params.task.train
  if tp.learner is None:
    holders = [('task.train', tp,
                ExtractLearnerFromLegacyParams(
                    tp.Copy(frozen=False)))]
  elif isinstance(tp.learner, (list, tuple)):
    holders = [('task.train.learner[%d]' % i, lp, lp)
               for i, lp in enumerate(tp.learner)]
  else:
    holders = [('task.train.learner', tp.learner, tp.learner)]
  lines = []
  epoch_size = functools.lru_cache(maxsize=1)(
      lambda: getattr(params.train_input.Instantiate(), 'num_examples', None))
  for key, holder, lp in holders:
    if not durations.HasDurations(holder):
      continue
    ip = params.Get('train_input') if 'train_input' in params else None
    if ip is None or 'batch_size' not in ip:
      raise ValueError(
          '%s: a schedule length in examples or epochs needs '
          'train_input.batch_size to convert it; give it in updates.' % key)
    k = 1 if lp.lr_schedule_step == 'global_step' else (
        _MicroBatchesPerUpdate(lp, key))
    lines += durations.ResolveDurations(holder, key, ip.batch_size * k,
                                        epoch_size, _EpochSizeFix(ip))
  return lines


def InitFromCheckpoint(tp):
  """(checkpoint path, rules) of the warm start p.train asks for.

  Ours: (`init_from_checkpoint`, the list `init_from_checkpoint_rules`).
  Lingvo's dict form {path: (load rules, ignore rules)} (with
  `init_from_checkpoint_override` replacing its key): (that path,
  warm_start.LingvoInitRules). An empty dict or list: no rules.

  Raises:
    ValueError: one line naming the key, for a dict with several
      checkpoints (one here), a value that is not (load rules, ignore
      rules), a load rule that is not (regex, format) with as many '%s' as
      the regex has groups, or a regex that does not compile.
  """
  rules = tp.init_from_checkpoint_rules
  if not isinstance(rules, dict):
    return tp.init_from_checkpoint, rules
  if not rules:
    return tp.init_from_checkpoint, []
  key = 'task.train.init_from_checkpoint_rules'
  if len(rules) != 1:
    raise ValueError(
        '%s : %d checkpoints (%s): one checkpoint is warm-started from here; '
        'keep one entry {path: (load rules, ignore rules)}.' %
        (key, len(rules), ', '.join(sorted(rules))))
  (path, value), = rules.items()
  if tp.init_from_checkpoint_override is not None:
    path = tp.init_from_checkpoint_override
  if not (isinstance(value, (list, tuple)) and len(value) == 2 and
          all(isinstance(x, (list, tuple)) for x in value)):
    raise ValueError(
        '%s[%r] : %r is not (load rules, ignore rules), e.g. '
        '([(\'(.*)\', \'%%s\')], []).' % (key, path, value))
  load, ignore = value
  for i, rule in enumerate(load):
    if not (isinstance(rule, (list, tuple)) and len(rule) == 2 and
            all(isinstance(x, str) for x in rule)):
      raise ValueError('%s[%r] load rule %d : %r is not a (regex, format) '
                       'pair of strings.' % (key, path, i, rule))
    groups = _Compiled(key, path, rule[0]).groups
    if rule[1].replace('%%', '').count('%s') != groups:
      raise ValueError(
          '%s[%r] load rule %d : format %r needs one %%s per group of its '
          'regex %r (%d).' % (key, path, i, rule[1], rule[0], groups))
  for r in ignore:
    _Compiled(key, path, r)
  return path, warm_start.LingvoInitRules(
      [tuple(r) for r in load], list(ignore))


def _Compiled(key, path, regex):
  try:
    return re.compile(regex)
  except (re.error, TypeError) as e:
    raise ValueError('%s[%r] : %r is not a valid regex (%s).' %
                     (key, path, regex, e)) from None


# Lingvo's p.eval keys, and where their meaning lives here.
_LINGVO_EVAL_HINTS = {
    'samples_per_summary': (
        'Lingvo\'s examples per evaluation is task.eval.samples here (0: one '
        'pass; Lingvo\'s default is 1000).'),
    'decoder_samples_per_summary': (
        'there is no decoder job here; task.eval.samples sets the examples '
        'of each evaluation.'),
    'load_checkpoint_from': (
        'give the checkpoint to evaluate with --checkpoint=<prefix or '
        'directory> (--mode=eval).'),
    'start_eval_after': (
        'evaluation runs on every checkpoint here; in train_and_eval, set '
        'task.eval.interval_steps.'),
    'start_decoder_after': 'there is no decoder job here.',
    'eval_all_checkpoints': (
        '--mode=evaler evaluates every checkpoint the trainer writes.'),
    'decode_all_checkpoints': 'there is no decoder job here.',
}


def TrainHints(tp):
  """{name: where it belongs} for Learner-only keys set on p.train."""
  lp = learner_lib.Learner.Params()
  hints = {}
  for name, _ in lp.IterParams():
    if name not in tp:
      hints[name] = (
          'a Learner param: set task.train.learner = '
          'learner.Learner.Params().Set(%s=..., ...) (task.train.learner.%s); '
          'with task.train.learner None, task.train takes only Lingvo\'s '
          'legacy learner keys (learning_rate, optimizer, lr_schedule, '
          'clipping, regularizers, variable filters).' % (name, name))
  return hints


def EvalHints():
  """{name: where it belongs} for Lingvo's p.eval keys."""
  return dict(_LINGVO_EVAL_HINTS)


def TaskHints(tp, ep):
  """{name: where it belongs} for train or eval keys set on the task."""
  hints = {k: 'a train param: task.train.%s.' % k for k, _ in tp.IterParams()}
  hints.update({k: 'an eval param: task.eval.%s.' % k
                for k, _ in ep.IterParams()})
  hints.update({k: 'a Learner param: task.train.learner.%s.' % k
                for k in TrainHints(tp)})
  hints.update({k: (
      'a Learner param: task.train.learner.%s, or leave task.train.learner '
      'None and set it on task.train (task.train.%s, Lingvo\'s legacy '
      'key).' % (k, k)) for k in LEGACY_LEARNER_PARAMS})
  return hints
