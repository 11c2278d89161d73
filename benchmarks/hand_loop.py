"""A hand-written `tf.function` training loop: the floor for the trainer.

`benchmarks.trainer`'s `loop` side (issue 27.2). It trains the registered
experiment's own model (the task's `FProp` on the experiment's input
pipeline, the same batches and initial weights as ours) with the least a
user would write by hand: one `tf.GradientTape`, per group of variables
`tf.clip_by_global_norm` and TF's fused `ResourceApplyAdam`, and the rate of
that group's schedule at the step. No learner, no metrics beyond the loss,
no summaries, checkpoints or progress lines. The groups are the
experiment's learners' variable selections with their optimizer's
hyperparameters (Adam only: the experiments it is run on use Adam; anything
else is refused by name), so the update is the experiment's.

The gap between this side and `ours` is what the trainer costs over the
model and the update themselves.
"""

import time

import numpy as np
import tensorflow as tf

from learner import optimizers
from params import NestedMap


def _AdamGroup(learner, variables):
  """(variables, slots m and v, hyperparameters) of one learner's group.

  Raises:
    ValueError: the learner's optimizer is not Adam (naming it).
  """
  p = learner.params.optimizer
  if p.cls is not optimizers.Adam:
    raise ValueError('benchmarks.hand_loop: learner %r uses %s; the loop '
                     'writes Adam only.' % (learner.params.name,
                                            p.cls.__name__))
  slots = [(tf.Variable(tf.zeros_like(v), trainable=False),
            tf.Variable(tf.zeros_like(v), trainable=False))
           for v in variables]
  return dict(variables=variables, slots=slots, beta1=p.beta1,
              beta2=p.beta2, epsilon=p.epsilon,
              clip=learner.params.clip_gradient_norm_to_value,
              base_lr=learner.params.learning_rate,
              schedule=learner.lr_schedule)


def Build(params, jit_compile):
  """Builds the model and the step; returns (step_fn, dataset, variables).

  Args:
    params: the experiment's params (task and train_input).
    jit_compile: compile the step with XLA.

  Returns:
    step_fn(batch) -> the loss (float32 scalar) after one update; the
    dataset of the experiment's training batches; the model's variables
    (list of tf.Variable).
  """
  task = params.task.Instantiate()
  model_vars = task.ModelVars()
  groups = [_AdamGroup(l, l.GetTrainableVariables(model_vars).Flatten())
            for l in task.CreateLearners()]
  step = tf.Variable(0, dtype=tf.int64, trainable=False)
  everything = [v for g in groups for v in g['variables']]

  def _Step(batch):
    with tf.GradientTape() as tape:
      metrics, _ = task.FProp(task.theta, NestedMap(batch))
      loss = metrics['loss'][0]
    grads = tape.gradient(loss, everything)
    t = tf.cast(step + 1, tf.float32)
    start = 0
    for g in groups:
      n = len(g['variables'])
      group_grads = grads[start:start + n]
      start += n
      if g['clip']:
        group_grads, _ = tf.clip_by_global_norm(group_grads, g['clip'])
      lr = g['base_lr'] * g['schedule'].Value(step)
      for v, (m, s), grad in zip(g['variables'], g['slots'], group_grads):
        tf.raw_ops.ResourceApplyAdam(
            var=v.handle, m=m.handle, v=s.handle,
            beta1_power=tf.pow(g['beta1'], t),
            beta2_power=tf.pow(g['beta2'], t), lr=lr, beta1=g['beta1'],
            beta2=g['beta2'], epsilon=g['epsilon'],
            grad=tf.convert_to_tensor(grad))
    step.assign_add(1)
    return loss

  return (tf.function(_Step, jit_compile=jit_compile),
          params.train_input.Instantiate().GetDataset(),
          model_vars.Flatten())


def Run(params, steps, warmup, jit_compile):
  """Trains `steps` steps; returns (wall_s, steady_steps_per_s, final_loss).

  The clock starts before the model is built (as ours starts before the
  Trainer builds the task); steady/s is (steps - warmup) over the time
  between the end of step `warmup` and the end of step `steps`, each read
  after the loss of that step is fetched (so the queued work is done).
  """
  start = time.perf_counter()
  step_fn, dataset, _ = Build(params, jit_compile)
  at_warmup = None
  loss = None
  for i, batch in enumerate(dataset.take(steps), start=1):
    loss = step_fn(batch)
    if i == warmup:
      float(loss)
      at_warmup = time.perf_counter()
  final = float(loss)
  end = time.perf_counter()
  steady = ((steps - warmup) / (end - at_warmup)
            if at_warmup is not None and warmup < steps else None)
  return end - start, steady, final if np.isfinite(final) else None
