"""benchmarks/hand_loop.py: the hand-written loop makes the experiment's update.

The `loop` side of benchmarks.trainer is a floor for the trainer only if it
trains the same model with the same update: three steps of the loop on the
experiment's first batches give the weights of three steps of our task's
TrainStep from the same initial weights (both use TF's ResourceApplyAdam
with each learner's rate, clip and hyperparameters).
"""

import numpy as np
import pytest

from benchmarks import hand_loop
from benchmarks import trainer
from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs import cli as cli_lib
from params import NestedMap


@pytest.mark.parametrize('model', [trainer.CHAR_LM, trainer.CONVNET])
def test_three_loop_steps_give_the_weights_of_three_trainer_steps(model):
  params = cli_lib.LoadExperimentParams(model, max_steps=3)
  step_fn, dataset, variables = hand_loop.Build(params, jit_compile=False)
  batches = list(dataset.take(3))
  for b in batches:
    step_fn(b)
  loop_task_vars = {v.name: v.numpy() for v in variables}
  task = params.task.Instantiate()
  task.CreateLearners()
  for b in batches:
    task.TrainStep(NestedMap(b))
  ours = {v.name: v.numpy() for v in task.ModelVars().Flatten()}
  assert sorted(ours) == sorted(loop_task_vars)
  for name, want in ours.items():
    np.testing.assert_allclose(loop_task_vars[name], want, rtol=2e-5,
                               atol=2e-6, err_msg=name)


def test_an_optimizer_other_than_adam_is_refused_by_name():
  params = cli_lib.LoadExperimentParams(trainer.DIGITS, max_steps=3)
  with pytest.raises(ValueError, match=r"learner 'learner' uses Momentum; the "
                     'loop writes Adam only'):
    hand_loop.Build(params, jit_compile=False)


def test_bad_sides_are_refused():
  with pytest.raises(SystemExit):
    trainer.ParseArgs(['--sides=ours,fast'])
