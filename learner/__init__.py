"""Learning: the Learner's step, its optimizers and the training runtime.

  learner/             the step: Learner, gradient tape, cross-replica reduce,
                       gradient combiners, grad-norm tracker, loss scale
  learner/optimizers/  update rules, wrappers and factories
  learner/training/    tasks, inputs, trainer, checkpoints, distribution

Imports point one way: learner.training -> learner -> learner.optimizers.
The public names below are loaded when first used (PEP 562), so importing
`learner.optimizers` does not import the step or the training runtime; so
is every registered update rule (`learner.Adam`), found in rules.RULES.
"""

import importlib

_EXPORTS = {
    # The step.
    'Learner': 'learner.learner',
    'GradientTape': 'learner.gradient_tape',
    'GradNormTracker': 'learner.grad_norm_tracker',
    'BaseGradientCombiner': 'learner.gradient_combiner',
    'GradientSum': 'learner.gradient_combiner',
    'PCGrad': 'learner.gradient_combiner',
    'LossScale': 'learner.loss_scale',
    # Optimizers.
    'VarGrad': 'learner.optimizers.var_grad',
    'BaseOptimizer': 'learner.optimizers.base',
    'SGD': 'learner.optimizers.base',
    'Lars': 'learner.optimizers.wrappers.lars',
    'Ema': 'learner.optimizers.wrappers.ema',
    'Lookahead': 'learner.optimizers.wrappers.lookahead',
    'SWA': 'learner.optimizers.wrappers.swa',
    'Sam': 'learner.optimizers.wrappers.sam',
    'Composite': 'learner.optimizers.wrappers.composite',
    'AdaGraft': 'learner.optimizers.wrappers.composite',
    'Easgd': 'learner.optimizers.wrappers.easgd',
    'LocalSgd': 'learner.optimizers.wrappers.local_sgd',
    'Mechanic': 'learner.optimizers.wrappers.mechanic',
    'KerasOptimizer': 'learner.optimizers.keras_optimizer',
    'GradientAccumulation': 'learner.optimizers.wrappers.accumulation',
    'get_optimizer_fn': 'learner.optimizers.factory',
    'get_optimizer_wrapper_fn': 'learner.optimizers.factory',
    'OptimizerParamsFromFn': 'learner.optimizers.factory',
    # The training runtime.
    'BaseTask': 'learner.training.model.task',
    'BaseInputGenerator': 'learner.training.model.input_generator',
    'DatasetInput': 'learner.training.model.input_generator',
    'ModeKeys': 'learner.training.jobs.mode_keys',
    'ModelSpec': 'learner.training.jobs.run',
    'run': 'learner.training.jobs.run',
    'CreateStrategy': 'learner.training.cluster.distribution',
    'CheckReplicasToAggregate': 'learner.training.cluster.distribution',
    'DistributeDataset': 'learner.training.cluster.distribution',
    'PeerFailureError': 'learner.training.cluster.distribution',
}

__all__ = sorted(_EXPORTS)


def _RuleNames():
  """The registered update rules' class names (rules.RULES, the one place a
  rule is registered), exported from learner.optimizers. Asked only for
  capitalised names: `from learner import tf_log` (a submodule, lower case)
  must not import the optimizers while they are being imported."""
  rules = importlib.import_module('learner.optimizers.rules')
  return set(rules.ExportedNames())


def __getattr__(name):
  module = _EXPORTS.get(name)
  if module is None and name[:1].isupper() and name in _RuleNames():
    module = 'learner.optimizers'
  if module is None:
    raise AttributeError('module %r has no attribute %r' % (__name__, name))
  value = getattr(importlib.import_module(module), name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(_EXPORTS) | _RuleNames())
