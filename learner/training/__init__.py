"""The training runtime: tasks, input base classes, the trainer and its jobs.

  task.py             BaseTask: the model, its losses, learners, global_step
  input_generator.py  BaseInputGenerator (the experiments' datasets are in
                      configs/inputs.py)
  trainer.py          Trainer and `python -m learner.trainer`
  evaler.py, export.py
                      the jobs that read a run's checkpoints: the continuous
                      evaler (and the eval loop) and the SavedModel export
  early_stop.py       early stopping on the dev metric
  checkpointer.py, summary.py, progress.py
                      what the trainer writes and prints
  run.py, mode_keys.py
                      the MoXing-style `learner.run` entry point
  distribution.py, launcher.py
                      tf.distribute strategies and the multi-worker launcher
"""

from learner.training.task import BaseTask
from learner.training.input_generator import BaseInputGenerator
from learner.training.mode_keys import ModeKeys
from learner.training.run import ModelSpec
from learner.training.distribution import CreateStrategy
from learner.training.distribution import CheckReplicasToAggregate
from learner.training.distribution import DistributeDataset
from learner.training.distribution import PeerFailureError
