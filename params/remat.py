"""Rematerialization: a layer's FProp recomputed in the backward pass.

With `p.remat = True` on a layer, its forward pass keeps no activations
for the gradient: only its inputs (the activations coming in and `theta`)
are kept, and the backward pass runs the forward pass again, under a local
tape, to get the activations it needs. Peak memory of a train step falls
(a stack of N rematerialized blocks keeps N block inputs plus one block's
activations, instead of every block's activations); the price is one more
forward pass of the layer per step.

Source: Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost";
Lingvo's `py_utils.RematerializeFn`; built on `tf.recompute_grad`, which
makes the recomputation wait for the incoming gradient also under XLA
(a data dependency, since XLA ignores control dependencies).

How it is wired (the one place: `BaseLayer.__init_subclass__` wraps every
`FProp` a class defines with `WrapFProp`):
  * The floating-point tensors among FProp's arguments, `theta`'s values
    included, are the inputs of the rematerialized function, so gradients
    reach them and, through `theta`'s reads, the variables. Other
    arguments (Python values, None, integer tensors) are closed over.
    Variables read directly inside FProp (a Keras layer held by the layer)
    are handled by `tf.recompute_grad`'s `variables`.
  * Random layers inside draw the same masks in the recomputation: the
    state of `params.step_seeds` is snapshotted before the forward pass and
    replayed for the recomputation (`step_seeds.Replay`). Outside a
    `StepSeeds` scope (a layer called on its own, not in a task's train
    step) a rematerialized layer opens one keyed by a random int64 drawn
    once per call, so its dropout is stateless and repeatable too.
  * Random masks are kept, not drawn again: a layer inside computes its
    mask through `Kept(compute)` (layers/dropout.py does), which the first
    run keeps (a bool mask costs 1 byte an element, a quarter of the
    float32 tensor it masks) and the recomputation reuses. Drawing is the
    costliest part of the forward pass on CPU (Philox for every element of
    the [batch, heads, time, time] attention probabilities: about 45 % of
    a CharTransformerLarge block's forward pass at window 512), so the
    recomputation without it costs about half a forward pass, not one.
  * Inside a rematerialized FProp (its first run or its recomputation),
    nested layers with `remat` and `super().FProp` calls run plainly: the
    outer recomputation already covers them.
"""

import contextlib
import functools
import threading

import tensorflow as tf

from params import step_seeds

_STATE = threading.local()


def CheckRematParam(layer, value):
  """Refuses a `remat` that is not a bool, or True on a layer without FProp.

  Args:
    layer: the BaseLayer being built (its path and class name the error).
    value: its params.remat.

  Raises:
    ValueError: `value` is not True/False, or it is True and the layer's
      class defines no FProp (nothing to rematerialize).
  """
  where = '%s (%s)' % (layer.path, type(layer).__name__)
  if not isinstance(value, bool):
    raise ValueError(
        '%s: remat=%r; expected True or False (True recomputes this layer\'s '
        'FProp in the backward pass).' % (where, value))
  if value and getattr(type(layer).FProp, 'remat_unwrapped', None) is None:
    raise ValueError(
        '%s: remat=True, but this class has no FProp to recompute; set '
        'remat on the layer whose FProp should be rematerialized (e.g. '
        'TransformerStack.Params().block.remat = True).' % where)


def _Inside():
  return getattr(_STATE, 'depth', 0) > 0


@contextlib.contextmanager
def _Within():
  _STATE.depth = getattr(_STATE, 'depth', 0) + 1
  try:
    yield
  finally:
    _STATE.depth -= 1


def Kept(compute):
  """compute() in a rematerialized FProp's first run; reused when recomputed.

  For a non-differentiable tensor that is dearer to compute than to keep
  (a dropout's keep mask, bool): the first run of the rematerialized
  FProp keeps what `compute()` returns, and its recomputation in the
  backward pass gets that same tensor back, in call order, instead of
  calling `compute` again. Outside a rematerialized FProp it is
  `compute()`.

  Args:
    compute: a zero-argument callable returning a tensor (or nest).

  Returns:
    What `compute()` returned (in the recomputation: in the first run).
  """
  kept = getattr(_STATE, 'kept', None)
  if kept is None:
    return compute()
  values, replay = kept
  if replay is None:
    values.append(compute())
    return values[-1]
  value = values[replay[0]]
  replay[0] += 1
  return value


@contextlib.contextmanager
def _Keeping(values, replay):
  previous = getattr(_STATE, 'kept', None)
  _STATE.kept = (values, replay)
  try:
    yield
  finally:
    _STATE.kept = previous


def WrapFProp(fprop):
  """Returns `fprop` that rematerializes when its layer's `params.remat`.

  Args:
    fprop: the function `FProp(self, theta, *args, **kwargs)` a BaseLayer
      subclass defines.

  Returns:
    A function with `fprop`'s signature: `fprop` itself when
    `self.params.remat` is False or when already inside a rematerialized
    FProp, else `Rematerialize(fprop bound to self, args, kwargs)`.
  """

  @functools.wraps(fprop)
  def FProp(self, *args, **kwargs):
    p = self.params
    if _Inside() or 'remat' not in p or not p.remat:
      return fprop(self, *args, **kwargs)
    return Rematerialize(functools.partial(fprop, self), args, kwargs)

  FProp.remat_unwrapped = fprop
  return FProp


def _IsDifferentiable(value):
  return ((isinstance(value, tf.Variable) or tf.is_tensor(value)) and
          value.dtype.is_floating)


def Rematerialize(fn, args, kwargs):
  """fn(*args, **kwargs), recomputed in the backward pass (tf.recompute_grad).

  Args:
    fn: a function of nests of tensors (NestedMap, lists, dicts) and Python
      values, returning a tensor or a nest of tensors; it must read the
      weights it differentiates through its arguments (`theta`) or as
      variables.
    args: tuple of positional arguments.
    kwargs: dict of keyword arguments.

  Returns:
    What `fn` returns; its gradient with respect to every floating-point
    tensor in `args`/`kwargs` (variables are read to tensors first) is
    computed by running `fn` again, with the same random seeds.
  """
  flat = tf.nest.flatten((args, kwargs))
  slots = [i for i, v in enumerate(flat) if _IsDifferentiable(v)]
  if not slots:  # Nothing to differentiate: nothing to keep either.
    return fn(*args, **kwargs)
  inputs = [tf.convert_to_tensor(flat[i]) for i in slots]
  scope = (contextlib.nullcontext() if step_seeds.Snapshot() is not None
           else step_seeds.StepSeeds(tf.random.uniform(
               [], maxval=2**62, dtype=tf.int64)))
  with scope:
    snapshot = step_seeds.Snapshot()
    calls = []
    structure = []
    kept = []  # `Kept` tensors of the first run, reused in recomputations.

    def _Run(*tensors):
      values = list(flat)
      for i, t in zip(slots, tensors):
        values[i] = t
      call_args, call_kwargs = tf.nest.pack_sequence_as((args, kwargs),
                                                        values)
      # The first run draws as the layer would without remat; every
      # recomputation replays the seeds of that run.
      seeds = step_seeds.Replay(snapshot) if calls else contextlib.nullcontext()
      keeping = _Keeping(kept, [0] if calls else None)
      calls.append(1)
      with seeds, keeping, _Within():
        out = fn(*call_args, **call_kwargs)
      if not structure:
        structure.append(out)
      return tuple(tf.nest.flatten(out))

    outputs = tf.recompute_grad(_Run)(*inputs)
  return tf.nest.pack_sequence_as(structure[0], list(outputs))
