"""gradient_tape.SharedGradients: the learners of a step share one backward pass.

BaseTask's train step opens the scope around its learners, so a task with
two learners (lm.CharTransformer: 'embedding' and 'body') builds one
backward pass of its loss, not one per learner; with rematerialized blocks
each block is recomputed once per step, not once per learner (issue 38
item 4, benchmarks/remat.py). The updates are those of separate backward
passes.
"""

import contextlib

import numpy as np
import tensorflow as tf

from learner import gradient_tape
from params import NestedMap
from params import registry
from params import step_seeds


def _Task(remat_blocks):
  params = registry.GetParams(
      'lm.CharTransformer',
      overrides='task.model_dim : 16; task.num_heads : 2; '
      'task.hidden_dim : 32; task.dropout_prob : 0.1; task.remat_blocks : '
      '%s' % remat_blocks)
  task = params.task.Instantiate()
  task.CreateLearners()
  assert len(task.learners) == 2
  return task


_IDS = np.random.RandomState(0).randint(0, 103, size=(2, 9))
_BATCH = {'ids': tf.constant(_IDS[:, :-1], tf.int32),
          'labels': tf.constant(_IDS[:, 1:], tf.int32)}


def _OpCounts(task):
  graph = tf.function(task._TrainStep, autograph=False).get_concrete_function(  # pylint: disable=protected-access
      _BATCH).graph
  types = [op.type for op in graph.get_operations()]
  return {t: types.count(t) for t in ('Einsum', 'Softmax')}


def _Unshared(monkeypatch):
  monkeypatch.setattr(gradient_tape, 'SharedGradients',
                      lambda xs: contextlib.nullcontext())


def test_two_learners_build_one_backward_pass(monkeypatch):
  # 2 rematerialized blocks; per block 2 einsums and 1 softmax forward,
  # again in each recomputation, and 4 einsums in each backward pass.
  shared = _OpCounts(_Task(True))
  _Unshared(monkeypatch)
  separate = _OpCounts(_Task(True))
  assert shared == {'Einsum': 2 * (2 + 2 + 4), 'Softmax': 2 * 2}
  assert separate == {'Einsum': 2 * (2 + 2 * (2 + 4)), 'Softmax': 2 * 3}


def _LearnerGrads(task, shared):
  """Each learner's gradients (dense), in one scope or separately."""

  @tf.function
  def Grads():
    with step_seeds.StepSeeds(tf.constant(4, tf.int64)):
      metrics, _ = task.FProp(task.theta, NestedMap(_BATCH))
    vmap = task.ModelVars()
    scope = (gradient_tape.SharedGradients(task._LearnerVariables(vmap))  # pylint: disable=protected-access
             if shared else contextlib.nullcontext())
    with scope:
      return [[tf.convert_to_tensor(vg.grad)
               for vg in learner.ComputeGradients(metrics, vmap)[1].Flatten()]
              for learner in task.learners]

  return tf.nest.map_structure(lambda g: g.numpy(), Grads())


def test_shared_backward_pass_gives_the_gradients_of_separate_ones():
  task = _Task(True)
  shared = _LearnerGrads(task, True)
  separate = _LearnerGrads(task, False)
  assert [len(g) for g in shared] == [len(g) for g in separate] == [1, 27]
  for got, want in zip(tf.nest.flatten(shared), tf.nest.flatten(separate)):
    assert np.abs(want).max() > 1e-4  # Not a zero gradient.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def _Calls(monkeypatch):
  calls = []
  original = tf.gradients

  def Counting(ys, xs, **kwargs):
    calls.append(len(xs))
    return original(ys, xs, **kwargs)

  monkeypatch.setattr(tf, 'gradients', Counting)
  return calls


def test_scope_computes_once_per_loss_for_its_variables(monkeypatch):
  calls = _Calls(monkeypatch)
  a, b, c = (tf.Variable(v) for v in (2.0, 3.0, 5.0))

  @tf.function
  def Step():
    loss = a * b * c
    other = a + b
    with gradient_tape.SharedGradients([a, b]):
      ga = gradient_tape.Gradients(loss, [a])
      gb = gradient_tape.Gradients(loss, [b])
      g_other = gradient_tape.Gradients(other, [b])
      gc = gradient_tape.Gradients(loss, [c])  # c is not in the scope.
      g_up = gradient_tape.Gradients(loss, [a], output_gradients=2.0)
    return ga + gb + g_other + gc + g_up

  assert [float(g) for g in Step()] == [15.0, 10.0, 1.0, 6.0, 30.0]
  # loss once for [a, b], other once for [a, b], loss for [c] and [a].
  assert calls == [2, 2, 1, 1]


def test_scope_shares_the_eager_tape_too():
  a, b = tf.Variable(2.0), tf.Variable(3.0)
  with gradient_tape.GradientTape():
    loss = a * a * b
  with gradient_tape.SharedGradients([a, b]):
    (ga,) = gradient_tape.Gradients(loss, [a])
    (gb,) = gradient_tape.Gradients(loss, [b])
  assert (float(ga), float(gb)) == (12.0, 4.0)
