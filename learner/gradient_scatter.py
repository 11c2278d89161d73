"""ZeRO-1's gradients reduce-scattered: each replica receives only its slice.

Under `shard_optimizer_state` with flat slices (learner/optimizers/
sharded_state.py) a replica updates only its slice [r s, (r + 1) s) of each
dtype's flat vector of weights. The whole all-reduced gradient is then more
than it needs: here each replica gets only its slice of
sum_r weight_r * grad_r (one `cross_replica.ReduceScatterSum` per dtype:
an all-to-all of the N slices and a local sum), divides it by sum_r
weight_r (which rides in the same collective), and the learner's update
step runs its pipeline on the slices (`UpdateStep.PipelineAndApply` with
`scattered`): the global norm is one scalar all-reduce of the slices'
squared norms; the NaN/Inf check reads that norm, so every replica skips
together; clipping scales by it. With the all-gather of the updated weights
after the update, a replica sends what a ring all-reduce sends, against
1.5 times that with the all-reduce (ZeRO, Rajbhandari et al. SC 2020,
section 7.2.1: reduce-scatter the gradients, all-gather the parameters).

The slices are the all-reduce's to the bit with 2 replicas (a + b), so an
update without clipping is the unsharded one bit for bit; the global norm
is summed in another order (slice by slice, then over replicas, against
variable by variable), so a clipped update may differ from the unsharded
one in the last bit of the clip scale.

Only where every stage reads nothing but whole-gradient scalars
(`ScatterReason` says what else keeps the all-reduce): no per-variable
norm metric, gradient mask, adjuster, L1/L2 term, single-norm or adaptive
clipping; the learner's optimizer is the rule itself (no accumulation, no
wrapper); not under XLA.
"""

import tensorflow as tf

from learner import cross_replica
from learner import gradient_pipeline as pipeline
from learner.optimizers import kernels
from learner.optimizers import sharded_state
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def ScatterReason(p, optimizer, gradient_mask=None, gradient_adjuster=None):
  """None when the learner's gradients can be reduce-scattered, else why not.

  Args:
    p: the Learner's params.
    optimizer: the learner's built, bound optimizer.
    gradient_mask, gradient_adjuster: as given to `Learner.Apply`.

  Returns:
    None, or a str naming the first thing that keeps the all-reduce.
  """
  state = sharded_state.StateOf(optimizer)
  checks = [
      (state is None or not state.sharded or
       not isinstance(state, sharded_state.ShardedState),
       'no flat-slice sharded state'),
      (sharded_state.Chain(optimizer)[1] is not optimizer,
       'a wrapper or accumulation around the rule'),
      (p.l1_regularizer_weight is not None or
       p.l2_regularizer_weight is not None, 'an L1/L2 regularizer'),
      (p.per_variable_norm_metrics, 'per_variable_norm_metrics'),
      (p.clip_gradient_single_norm_to_value, 'single-norm clipping'),
      (p.adaptive_clip_ratio, 'adaptive clipping'),
      (gradient_mask is not None, 'a gradient mask'),
      (gradient_adjuster is not None, 'a gradient adjuster'),
      (kernels.InXla(), 'XLA'),
  ]
  for failed, why in checks:
    if failed:
      return why
  return None


def ScatteredMean(state, var_grads, weight, losses_finite=None):
  """This replica's slices of sum(weight * grad) / sum(weight).

  As cross_replica.AllReduceMean (a replica with weight 0 contributes
  zeros; the losses' verdict rides along), with one reduce-scatter per
  dtype of the flat layout instead of the all-reduce.

  Args:
    state: the learner's ShardedState (sharded).
    var_grads: NestedMap of VarGrad, this replica's unweighted gradients,
      one for every variable of the layouts (else use the all-reduce).
    weight: float32 scalar, this replica's loss weight.
    losses_finite: None, or a bool scalar: this replica's losses are finite.

  Returns:
    (sliced, losses_finite, empty): `sliced` a NestedMap {dtype name:
    VarGrad(the rule's shard proxy of that dtype, [s] mean slice)}; None
    or the bool scalar agreed over the replicas; a bool scalar, True when
    no replica has an example.
  """
  grads = {id(vg.var): vg.grad for vg in var_grads.Flatten()}
  extras = [weight]
  if losses_finite is not None:
    extras.append(tf.where(tf.logical_and(weight > 0.0,
                                          tf.logical_not(losses_finite)),
                           1.0, 0.0))
  slices, summed = {}, None
  for dtype, layout in sorted(state.layouts.items()):
    weighted = [tf.math.multiply_no_nan(
        tf.convert_to_tensor(grads[id(v)]), tf.cast(weight, v.dtype))
                for v in layout.variables]
    if summed is None:
      slices[dtype], summed = cross_replica.ReduceScatterSum(weighted,
                                                             extras)
    else:
      slices[dtype] = cross_replica.ReduceScatterSum(weighted)
  wsum = summed[0]
  if losses_finite is not None:
    losses_finite = tf.equal(summed[1], 0.0)
  sliced = NestedMap({
      dtype: VarGrad(state.ShardProxy(dtype), tf.math.divide_no_nan(
          g, tf.cast(wsum, g.dtype))) for dtype, g in slices.items()})
  return sliced, losses_finite, wsum <= 0.0


def CoversAll(state, var_grads):
  """True when `var_grads` has a gradient for every variable `state` shards
  (a flat slice spans variables; without one, the all-reduce path raises
  the sharded state's own error)."""
  have = {id(vg.var) for vg in var_grads.Flatten() if vg.grad is not None}
  return all(id(v) in have for layout in state.layouts.values()
             for v in layout.variables)


def ScatteredNorms(grads, prescale):
  """The global gradient norm from this replica's slices (one collective).

  Args:
    grads: this replica's gradient slices (list of [s] tensors).
    prescale: None or a float32 scalar multiplying the gradient.

  Returns:
    (pipeline.GradNorms(half: the slices' own sum(g^2) / 2, norm: the
    global L2 norm, the same on every replica), {grad_norm/all: norm}).
  """
  half = pipeline.HalfSquaredNorms(grads)
  (total,) = cross_replica.AllReduceSum([tf.add_n(half + [tf.constant(0.)])])
  if prescale is not None:
    total = total * prescale * prescale
  norm = tf.sqrt(2.0 * total)
  return pipeline.GradNorms(half, norm), {pipeline.GRAD_NORM: norm}
