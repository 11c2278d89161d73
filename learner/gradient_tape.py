"""The gradient source of a Learner: symbolic in graphs, a tape when eager;
and the second pass at perturbed weights that SAM asks for.

This is the one place where eager and graph execution differ for gradients
(STYLE.md: "Graph/eager/XLA/strategy differences live in one small place").

  * Inside `tf.function` (including `jit_compile=True` and `strategy.run`
    inside a `tf.function`) gradients are symbolic (`tf.gradients`): nothing
    has to be recorded.
  * When running eagerly (also under `tf.config.run_functions_eagerly(True)`)
    the forward pass must run under `learner.GradientTape()`, which records
    it. The tape stays available after the `with` block ends, until the next
    `GradientTape()` is opened in the same thread, so the task's train step
    reads:

        with learner.GradientTape():
          metrics, per_example = task.FProp(task.theta, batch)
        for l in learners:
          losses, update_op, eval_metrics = l.Apply(metrics, task.vars)

The tape is thread-local, so eager `strategy.run` (one thread per replica)
works too.

The second pass (`SecondPassGradients`, docs/DESIGN.md "One training
step, as data"): an optimizer
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
  then g2 goes through the usual path: all-reduce, pipeline, update step.

`fprop_fn` is a zero-argument callable returning the task's metrics;
`BaseTask`'s train step passes `lambda: task.FProp(task.theta, batch)[0]`,
never called for a learner whose optimizer needs no second pass (so such a
learner's step has no extra op). The second pass sees the model as the
learners before this one in `p.train.learner` left it. A forward pass with
side effects (e.g. moving averages of a batch norm) has them twice.

Source: the two passes of Foret et al., "Sharpness-Aware Minimization for
Efficiently Improving Generalization", ICLR 2021, Algorithm 1.
"""

import contextlib
import threading

import tensorflow as tf

from learner import cross_replica
from learner.optimizers import base as base_optimizer
from learner.optimizers.var_grad import VarGrad

_STATE = threading.local()


@contextlib.contextmanager
def GradientTape():
  """Records the forward pass for `Learner.Apply` when running eagerly.

  A persistent `tf.GradientTape` that watches every trainable variable read
  inside the block (read `task.theta` inside it). Several learners can take
  their gradients from the same tape. Inside `tf.function` opening it is
  harmless and unnecessary.

  Yields:
    The underlying `tf.GradientTape` (persistent).
  """
  tape = tf.GradientTape(persistent=True)
  _STATE.tape = tape
  with tape:
    yield tape


@contextlib.contextmanager
def KeepCurrentTape():
  """Puts this thread's current tape back on exit.

  A learner that runs a second forward pass (`SecondPassGradients`) opens
  its own `GradientTape()` inside this block, so that the learners after it
  still take their gradients from the tape of the task's forward pass.
  """
  previous = CurrentTape()
  try:
    yield
  finally:
    _STATE.tape = previous


def CurrentTape():
  """The tape of the most recent `GradientTape()` in this thread, or None."""
  return getattr(_STATE, 'tape', None)


def ClearTape():
  """Drops this thread's tape (and the forward activations it holds)."""
  _STATE.tape = None


@contextlib.contextmanager
def SharedGradients(xs):
  """Within: learners' gradients of one loss come from one backward pass.

  Each learner asks `Gradients(loss, its variables)`; in a graph every
  call builds its own backward pass (tf.gradients), and eagerly every call
  walks the tape again. Grappler merges identical backward passes in a
  graph, but not a rematerialized layer's recomputation (params/remat.py:
  each backward pass would recompute every block again, and two blocks'
  activations would be live at once). Within this scope the first
  `Gradients(ys, ...)` without `output_gradients` computes the gradients
  of `ys` with respect to all of `xs` at once; later calls for the same
  `ys` take theirs from it (the same tensors: one backward pass per loss).

  Args:
    xs: every variable a learner of the step may ask about (the union of
      the learners' trainable variables). A call asking about a variable
      not in `xs`, or with `output_gradients`, computes its own gradients.
  """
  previous = getattr(_STATE, 'shared', None)
  xs = list(xs)
  _STATE.shared = (xs, {id(x): i for i, x in enumerate(xs)}, {})
  try:
    yield
  finally:
    _STATE.shared = previous


def _SharedGradients(ys, xs, owner):
  """Gradients of `ys` w.r.t. `xs` from the open SharedGradients scope.

  Returns None when no scope is open or `xs` is not within its variables.
  """
  shared = getattr(_STATE, 'shared', None)
  if shared is None:
    return None
  all_xs, index, cache = shared
  if not all(id(x) in index for x in xs):
    return None
  if id(ys) not in cache:  # ys is kept in the entry, so its id stays unique.
    cache[id(ys)] = (ys, _Gradients(ys, all_xs, None, owner))
  grads = cache[id(ys)][1]
  return [grads[index[id(x)]] for x in xs]


def Gradients(ys, xs, output_gradients=None, owner='Learner'):
  """Gradients of `ys` with respect to `xs`, from the right source.

  Args:
    ys: a Tensor (a scalar loss, or activations of any shape).
    xs: list of variables or tensors.
    output_gradients: None (ones), or a Tensor like `ys` (the upstream
      gradient: a loss scale, or an activation gradient for a
      vector-Jacobian product).
    owner: a name for the error message (e.g. the learner's path).

  Returns:
    A list like `xs` of gradients: Tensors, tf.IndexedSlices, or None where
    `ys` does not depend on that x.

  Raises:
    RuntimeError: when executing eagerly and no `learner.GradientTape()` has
      recorded the forward pass in this thread.
  """
  xs = list(xs)
  if output_gradients is None:
    grads = _SharedGradients(ys, xs, owner)
    if grads is not None:
      return grads
  return _Gradients(ys, xs, output_gradients, owner)


def _Gradients(ys, xs, output_gradients, owner):
  """`Gradients` without the shared scope."""
  if not tf.executing_eagerly():
    grad_ys = None if output_gradients is None else [output_gradients]
    return tf.gradients(
        [ys], xs, grad_ys=grad_ys,
        unconnected_gradients=tf.UnconnectedGradients.NONE)
  tape = CurrentTape()
  if tape is None:
    raise RuntimeError(
        '%s: gradients are needed while running eagerly, but no gradient '
        'tape recorded the forward pass. Compute the loss inside the '
        'context manager `learner.GradientTape()`:\n'
        '  with learner.GradientTape():\n'
        '    metrics = task.FProp(task.theta, batch)\n'
        '  learner.Apply(metrics, task.vars)\n'
        'or run the train step inside tf.function, where no tape is needed.'
        % owner)
  if tape._recording:  # pylint: disable=protected-access
    with tape.stop_recording():
      return tape.gradient(
          ys, xs, output_gradients=output_gradients,
          unconnected_gradients=tf.UnconnectedGradients.NONE)
  return tape.gradient(
      ys, xs, output_gradients=output_gradients,
      unconnected_gradients=tf.UnconnectedGradients.NONE)


# ---- the second pass (SAM) ---------------------------------------------------


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
           if isinstance(o, base_optimizer.BaseOptimizer)
           and type(o).NEEDS_SECOND_PASS]
  if not found:
    return None
  names = [o.path for o in found]
  if len(found) > 1:
    raise ValueError(
        'Learner %r: optimizer holds %d optimizers that need a second pass '
        '(%s); keep one Sam per learner.' % (learner_path, len(found), names))
  if type(optimizer).IS_ACCUMULATION:
    raise ValueError(
        'Learner %r: optimizer : a gradient accumulation around %s (%s) is '
        'not supported: the second pass is not run per micro-batch; drop '
        '\'batch_gradients\' or the Sam.' % (learner_path,
                                             type(found[0]).__name__, names[0]))
  return found[0]


def _Flat(tensors):
  return [t for t in tf.nest.flatten(tensors, expand_composites=True)
          if t is not None]


def SecondPassGradients(learner, perturber, var_grads, weight, fprop_fn, vmap):
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
    returns: for the perturbed variables (those bound to `perturber`) the
    gradient at w + e, for the others (a Composite's other groups) their
    `var_grads` entry, the gradient at w; the variables hold w again before
    any of them is read.

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
  # The second pass's gradients are this learner's alone: no shared scope.
  with KeepCurrentTape(), SharedGradients([]):
    with tf.control_dependencies(moved), GradientTape():
      metrics = fprop_fn()
    _, second = learner.ComputeGradients(metrics, vmap)
  with tf.control_dependencies(_Flat([vg.grad for vg in second.Flatten()])):
    restored = _Flat([var.assign(w, read_value=False)
                      for (var, _), w in zip(pairs, saved)])
  perturbed = {id(var) for var, _ in pairs}
  first = {id(vg.var): vg.grad for vg in var_grads.Flatten()}

  def _Pick(vg):
    grad = vg.grad if id(vg.var) in perturbed else first.get(id(vg.var))
    return VarGrad(vg.var, tf.nest.map_structure(
        tf.identity, grad, expand_composites=True))

  with tf.control_dependencies(restored):
    return second.Transform(_Pick)
