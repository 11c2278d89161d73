"""Import paths that moved, so params text written before a move still loads.

`learner/` was split into `learner/` (the step), `learner/optimizers/` and
`learner/training/` (since then in model/, jobs/, services/, cluster/), and
the experiments' datasets moved to `configs/inputs.py`. A params file or a logdir's `params.txt` written before
that names classes by their old paths; `Resolve(path)` maps such a path to
the new one (the reader then warns once per path, naming the new path).
Only strings are held here: nothing is imported.
"""

# Whole names that moved to different places than the rest of their module.
_MOVED_NAMES = {
    'learner.input_generator.DigitsInput': 'configs.inputs.DigitsInput',
    'learner.input_generator.DiabetesInput': 'configs.inputs.DiabetesInput',
    'learner.input_generator.LinearRegressionInput':
        'configs.inputs.LinearRegressionInput',
}

# Modules that moved whole: old module path -> new module path.
_MOVED_MODULES = {
    'learner.var_grad': 'learner.optimizers.var_grad',
    'learner.base_optimizer': 'learner.optimizers.base',
    'learner.lars': 'learner.optimizers.wrappers.lars',
    'learner.ema': 'learner.optimizers.wrappers.ema',
    'learner.composite': 'learner.optimizers.wrappers.composite',
    'learner.keras_optimizer': 'learner.optimizers.keras_optimizer',
    'learner.gradient_accumulation': 'learner.optimizers.wrappers.accumulation',
    'learner.optimizer_factory': 'learner.optimizers.factory',
    'learner.task': 'learner.training.model.task',
    'learner.input_generator': 'learner.training.model.input_generator',
    'learner.checkpointer': 'learner.training.services.checkpointer',
    'learner.summary': 'learner.training.services.summary',
    'learner.progress': 'learner.training.services.progress',
    'learner.run': 'learner.training.jobs.run',
    'learner.mode_keys': 'learner.training.jobs.mode_keys',
    'learner.distribution': 'learner.training.cluster.distribution',
}


# Model layers that moved into layers/, their one home (issue 22, item 6).
# A separate block, so other moves merge beside it.
_MOVED_NAMES.update({
    'configs.model_tasks.DenseLayer': 'layers.dense.DenseLayer',
})
_MOVED_MODULES.update({
    'params.demo': 'layers.demo',
})


# The update rules, split from learner/optimizers/update_rules.py into one
# module per family under learner/optimizers/rules/ (issue 22, item 2).
# A separate block, so other moves merge beside it.
_OLD_RULES = 'learner.optimizers.update_rules.'
_MOVED_NAMES.update({
    _OLD_RULES + 'SGD': 'learner.optimizers.base.SGD',
    _OLD_RULES + 'Momentum': 'learner.optimizers.rules.momentum.Momentum',
    _OLD_RULES + 'Adam': 'learner.optimizers.rules.adam.Adam',
    _OLD_RULES + 'AdamW': 'learner.optimizers.rules.adam.AdamW',
    _OLD_RULES + 'Adagrad': 'learner.optimizers.rules.adagrad.Adagrad',
    _OLD_RULES + 'RMSProp': 'learner.optimizers.rules.rmsprop.RMSProp',
    _OLD_RULES + 'AdaDelta': 'learner.optimizers.rules.adadelta.AdaDelta',
    _OLD_RULES + 'Adafactor': 'learner.optimizers.rules.adafactor.Adafactor',
    _OLD_RULES + 'LAMB': 'learner.optimizers.rules.lamb.LAMB',
    _OLD_RULES + 'Lion': 'learner.optimizers.rules.lion.Lion',
})


# learner/training/ given a floor plan (issue 22, item 4): model/, jobs/,
# services/, cluster/. A separate block, so other moves merge beside it.
_MOVED_MODULES.update({
    'learner.training.task': 'learner.training.model.task',
    'learner.training.task_params': 'learner.training.model.task_params',
    'learner.training.input_generator': 'learner.training.model.input_generator',
    'learner.training.model_analysis': 'learner.training.model.model_analysis',
    'learner.training.trainer': 'learner.training.jobs.trainer',
    'learner.training.evaler': 'learner.training.jobs.evaler',
    'learner.training.export': 'learner.training.jobs.export',
    'learner.training.eval_restore': 'learner.training.jobs.eval_restore',
    'learner.training.run': 'learner.training.jobs.run',
    'learner.training.mode_keys': 'learner.training.jobs.mode_keys',
    'learner.training.validate': 'learner.training.jobs.validate',
    'learner.training.checkpointer': 'learner.training.services.checkpointer',
    'learner.training.logdir': 'learner.training.services.logdir',
    'learner.training.summary': 'learner.training.services.summary',
    'learner.training.progress': 'learner.training.services.progress',
    'learner.training.early_stop': 'learner.training.services.early_stop',
    'learner.training.skipped_steps': 'learner.training.services.skipped_steps',
    'learner.training.stops': 'learner.training.services.stops',
    'learner.training.distribution': 'learner.training.cluster.distribution',
    'learner.training.launcher': 'learner.training.cluster.launcher',
})


# The optimizer wrappers moved into learner/optimizers/wrappers/ (issue 24:
# room for the new ones). A separate block, so other moves merge beside it.
_MOVED_MODULES.update({
    'learner.optimizers.' + name: 'learner.optimizers.wrappers.' + name
    for name in ('lars', 'ema', 'composite', 'accumulation', 'lookahead',
                 'swa', 'sam')})

def Resolve(path):
  """Returns the current import path for `path`, or None if it did not move.

  Args:
    path: str, 'package.module.Name[.Inner]' as written in params text.

  Returns:
    str, the path under the new layout, or None when `path` names no moved
    module or class.
  """
  if path in _MOVED_NAMES:
    return _MOVED_NAMES[path]
  for old, new in _MOVED_MODULES.items():
    if path.startswith(old + '.'):
      return new + path[len(old):]
  return None
