"""The training runtime, in four rooms (docs/DESIGN.md, "The house"):

  model/     the model API: BaseTask, its p.train / p.eval, input base
             classes, model analysis
  jobs/      the trainer and its command line, the evaler, the export,
             validation, the modes, `learner.run`
  services/  checkpoints, the logdir, summaries, progress, early stopping,
             skipped steps, stops by signal
  cluster/   tf.distribute strategies and the multi-worker launcher

Imports go downwards only: jobs -> model -> services -> cluster.

The public names below are loaded when first used (PEP 562), as in
learner/__init__.py: importing one room (e.g. the launcher,
`learner.training.cluster.launcher`, which needs the standard library
only) does not import TensorFlow and the others with it.
"""

import importlib

_EXPORTS = {
    'BaseTask': 'learner.training.model.task',
    'BaseInputGenerator': 'learner.training.model.input_generator',
    'ModeKeys': 'learner.training.jobs.mode_keys',
    'ModelSpec': 'learner.training.jobs.run',
    'CreateStrategy': 'learner.training.cluster.distribution',
    'CheckReplicasToAggregate': 'learner.training.cluster.distribution',
    'DistributeDataset': 'learner.training.cluster.distribution',
    'PeerFailureError': 'learner.training.cluster.distribution',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
  module = _EXPORTS.get(name)
  if module is None:
    raise AttributeError('module %r has no attribute %r' % (__name__, name))
  value = getattr(importlib.import_module(module), name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(_EXPORTS))
