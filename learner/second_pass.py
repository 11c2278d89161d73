"""The second forward/backward pass of a learner whose optimizer needs one.

The protocol (docs/DESIGN.md, "One training step, as data"): an optimizer
class that sets `NEEDS_SECOND_PASS = True` (learner.optimizers.Sam) and has
`Perturbation(var_grads) -> [(variable, e)]` asks its learner, on every
`Learner.Apply`, for the gradient at perturbed weights instead of the
gradient at the weights:

  g1      <- the gradient of the task's forward pass (Learner.Apply)
  g1      <- all-reduced: sum(weight*g1) / sum(weight) under several
             replicas (one more collective), so every replica perturbs the
             same weights the same way
  w_saved <- a copy of each perturbed variable
  w       <- w + e, e = Perturbation(g1)
  metrics <- fprop_fn(): the task's forward pass again, on the same batch
             (eagerly under its own `learner.GradientTape()`; the task's
             tape is put back afterwards for the learners that follow)
  g2      <- the learner's gradients of those metrics (loss scale, combiner)
  w       <- w_saved (assigned, so the weights come back bit for bit)
  then g2 goes through the usual path: all-reduce, pipeline, guarded update.

`fprop_fn` is a zero-argument callable returning the task's metrics;
`BaseTask`'s train step passes `lambda: task.FProp(task.theta, batch)[0]`,
never called for a learner whose optimizer needs no second pass (so such a
learner's step has no extra op). The second pass sees the model as the
learners before this one in `p.train.learner` left it. A forward pass with
side effects (e.g. moving averages of a batch norm) has them twice.

Source: the two passes of Foret et al., "Sharpness-Aware Minimization for
Efficiently Improving Generalization", ICLR 2021, Algorithm 1.
"""

import tensorflow as tf

from learner import cross_replica
from learner import gradient_tape
from learner.optimizers.var_grad import VarGrad


def FindPerturber(learner_path, optimizer):
  """The one optimizer in `optimizer`'s tree that needs a second pass.

  Args:
    learner_path: the learner's path, for the messages.
    optimizer: the learner's built optimizer.

  Returns:
    That optimizer (e.g. a Sam), or None when none needs a second pass.

  Raises:
    ValueError: two of them in one tree, or a gradient accumulation
      around one (SAM's second pass is not run per micro-batch).
  """
  found = [o for o in optimizer.Descendants()
           if getattr(type(o), 'NEEDS_SECOND_PASS', False)]
  if not found:
    return None
  names = [o.path for o in found]
  if len(found) > 1:
    raise ValueError(
        'Learner %r: optimizer holds %d optimizers that need a second pass '
        '(%s); keep one Sam per learner.' % (learner_path, len(found), names))
  if getattr(type(optimizer), 'IS_ACCUMULATION', False):
    raise ValueError(
        'Learner %r: optimizer : a gradient accumulation around %s (%s) is '
        'not supported: the second pass is not run per micro-batch; drop '
        '\'batch_gradients\' or the Sam.' % (learner_path,
                                             type(found[0]).__name__, names[0]))
  return found[0]


def _Flat(tensors):
  return [t for t in tf.nest.flatten(tensors, expand_composites=True)
          if t is not None]


def Gradients(learner, perturber, var_grads, weight, fprop_fn, vmap):
  """The learner's gradients at the weights moved by `perturber`.

  Args:
    learner: the Learner (its `ComputeGradients` and `path` are used).
    perturber: its optimizer that needs a second pass (`FindPerturber`), or
      None.
    var_grads: NestedMap of VarGrad, the first pass's gradients (this
      replica's, not yet all-reduced).
    weight: float32 scalar, this replica's loss weight.
    fprop_fn: zero-argument callable that reruns the forward pass on the
      same batch and returns its metrics {name: (value, weight)}.
    vmap: NestedMap of variables (as given to Apply).

  Returns:
    `var_grads` itself when `perturber` is None (a single-pass learner: no
    op is added). Else a NestedMap of VarGrad like `ComputeGradients`
    returns, taken at w + e; the variables hold w again before any of them
    is read.

  Raises:
    ValueError: `fprop_fn` is None (naming the learner and the fix).
  """
  if perturber is None:
    return var_grads
  if fprop_fn is None:
    raise ValueError(
        'Learner %r: optimizer %s needs a second forward pass, but Apply got '
        'no fprop_fn; pass Apply(metrics, vmap, fprop_fn=lambda: '
        'task.FProp(task.theta, batch)[0]) (BaseTask\'s train step does).' %
        (learner.path, type(perturber).__name__))
  mean = var_grads
  if cross_replica.NumReplicas() > 1:
    mean, _, _ = cross_replica.AllReduceMean(var_grads, weight)
  pairs = perturber.Perturbation(mean)
  saved = [tf.identity(var.read_value()) for var, _ in pairs]
  with tf.control_dependencies(saved):
    moved = _Flat([var.assign_add(e, read_value=False) for var, e in pairs])
  with gradient_tape.KeepCurrentTape():
    with tf.control_dependencies(moved), gradient_tape.GradientTape():
      metrics = fprop_fn()
    _, second = learner.ComputeGradients(metrics, vmap)
  with tf.control_dependencies(_Flat([vg.grad for vg in second.Flatten()])):
    restored = _Flat([var.assign(w, read_value=False)
                      for (var, _), w in zip(pairs, saved)])
  with tf.control_dependencies(restored):
    return second.Transform(lambda vg: VarGrad(vg.var, tf.nest.map_structure(
        tf.identity, vg.grad, expand_composites=True)))
