"""The gradient source of a Learner: symbolic in graphs, a tape when eager.

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
"""

import contextlib
import threading

import tensorflow as tf

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

  A learner that runs a second forward pass (learner/second_pass.py) opens
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
