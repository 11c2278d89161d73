"""The training runtime, in four rooms (docs/DESIGN.md, "The house"):

  model/     the model API: BaseTask, its p.train / p.eval, input base
             classes, model analysis
  jobs/      the trainer and its command line, the evaler, the export,
             validation, the modes, `learner.run`
  services/  checkpoints, the logdir, summaries, progress, early stopping,
             skipped steps, stops by signal
  cluster/   tf.distribute strategies and the multi-worker launcher

Imports go downwards only: jobs -> model -> services -> cluster.
"""

from learner.training.model.task import BaseTask
from learner.training.model.input_generator import BaseInputGenerator
from learner.training.jobs.mode_keys import ModeKeys
from learner.training.jobs.run import ModelSpec
from learner.training.cluster.distribution import CreateStrategy
from learner.training.cluster.distribution import CheckReplicasToAggregate
from learner.training.cluster.distribution import DistributeDataset
from learner.training.cluster.distribution import PeerFailureError
