"""Cautious updates and cautious weight decay: two masks every rule gets.

Cautious update (`cautious=True`), on a tensor of n elements:

  mask = [u * g > 0];   u <- u * mask * n / (sum(mask) + 1)

  u: the rule's update (`_Step`'s delta = lr * direction, so the mask is
  the direction's for lr > 0), g: this step's (clip-scaled) gradient.
  Components whose sign disagrees with the gradient are zeroed and the
  kept ones rescaled by n / (nnz + 1) (about 1 / the kept fraction).
Source: Liang, Chen, Liu & Liu, "Cautious Optimizers: Improving Training
with One Line of Code", arXiv:2411.16085, Algorithm 1 and its C-AdamW
reference code (mask.numel() / (mask.sum() + 1)); the same formula as
pytorch-optimizer 4.1's `BaseOptimizer.apply_cautious` (recorded:
tools/record_torch_cautious.py). heavyball 3.2's `caution` rescales by
n / max(n - n_masked, 1) instead (not this formula).

Cautious weight decay (`cautious_weight_decay=True`, with
`decoupled_weight_decay` wd > 0), elementwise:

  w <- w - u - lr * wd * [u * w_old >= 0] * w_old

  The decay acts only where the update and the weight have the same sign
  (both pull towards 0); u is the update after the cautious mask above.
Source: Chen, Li, Liang et al., "Cautious Weight Decay",
arXiv:2510.12402, eq. (CWD): x <- x - eta (u + lambda I(u x >= 0) x);
heavyball 3.2's `cautious_weight_decay` (sign bits; the same away from
exact zeros; recorded: tools/record_torch_cautious.py).

Both run on the base's pure-TF path (`_ApplyStep`: no fused or raw TF
kernel; a sparse gradient is densified). The cautious update's n / (nnz +
1) reads the whole tensor, so a ZeRO-1 flat shard (sharded_state.py) would
normalise per shard: `cautious=True` is refused there; cautious weight
decay is elementwise and shards.
"""

import tensorflow as tf


def DefineParams(p):
  """Defines `cautious` and `cautious_weight_decay` on optimizer params `p`."""
  p.Define(
      'cautious', False,
      'Cautious update (Liang et al. 2024): zero the update where its sign '
      'disagrees with the gradient, rescale the rest by n / (nnz + 1) per '
      'tensor (learner/optimizers/cautious.py). Update rules only; not with '
      'ZeRO-1 sharding.')
  p.Define(
      'cautious_weight_decay', False,
      'Cautious weight decay (Chen et al. 2025): the decoupled weight decay '
      'acts only where sign(update) == sign(w) (u * w >= 0). Needs '
      'decoupled_weight_decay > 0 (or scheduled). Update rules only.')
  return p


def Reason(p):
  """Why the update takes the pure-TF path for a mask, or None (no mask)."""
  on = [k for k in ('cautious', 'cautious_weight_decay') if p.Get(k)]
  return ('%s (a mask on _Step\'s update; no kernel holds it)' %
          ' and '.join(k + '=True' for k in on)) if on else None


def CheckParams(opt, has_step):
  """Refuses the masks where they cannot apply, at construction.

  Args:
    opt: the optimizer (a BaseOptimizer); its params have `cautious`,
      `cautious_weight_decay`, `decoupled_weight_decay`.
    has_step: True if it updates through a rule's `_Step`.

  Raises:
    ValueError (one line, naming the key, the value and the fix): a value
      that is not a bool; either mask on a class without `_Step` (a
      wrapper: set it on the inner rule) or on a rule whose `_Step` gives
      the new weights (schedule-free); cautious_weight_decay=True with no
      decoupled weight decay, or on a rule that decays inside its step.
  """
  p, cls = opt.params, type(opt)
  where = '%s %r' % (cls.__name__, opt.path)
  for key in ('cautious', 'cautious_weight_decay'):
    value = p.Get(key)
    if not isinstance(value, bool):
      raise ValueError('%s: %s=%r is not a bool. Set %s to True or False.'
                       % (where, key, value, key))
    if not value:
      continue
    if not has_step or cls.STEP_GIVES_WEIGHTS or (
        key == 'cautious_weight_decay' and cls.DECAY_IN_STEP):
      if not has_step:
        why, fix = ('a wrapper, or a rule with its own update: nothing to '
                    'mask', 'for a wrapper set it on its inner optimizer')
      elif cls.STEP_GIVES_WEIGHTS:
        why, fix = ('its step gives the new weights, not an update to mask',
                    'use a rule such as adamw, lion or muon')
      else:
        why, fix = ('it decays the weights inside its own step',
                    'use a rule such as adamw, lion or muon')
      raise ValueError('%s: %s=True is not supported by %s (%s); %s, or set '
                       '%s=False.' % (where, key, cls.__name__, why, fix, key))
  if p.cautious_weight_decay and not opt.WeightDecayOn():
    raise ValueError(
        '%s: cautious_weight_decay=True with decoupled_weight_decay=0 has '
        'nothing to mask; set decoupled_weight_decay > 0 (e.g. 0.01) or '
        'cautious_weight_decay=False.' % where)


def CheckShardable(opt):
  """Refuses ZeRO-1 sharding of a cautious rule (per-tensor n / (nnz+1)).

  Raises:
    ValueError: `opt.params.cautious` is True.
  """
  if opt.params.cautious:
    raise ValueError(
        '%s %r: cautious=True rescales by n / (nnz + 1) over the whole '
        'tensor, which a ZeRO-1 flat shard does not hold; set '
        'shard_optimizer_state=False or cautious=False.' %
        (type(opt).__name__, opt.path))


def Masked(p, delta, grad, decay):
  """The masked update: `delta` after the cautious mask, plus `decay`.

  Args:
    p: the optimizer's params (`cautious`, `cautious_weight_decay`).
    delta: `_Step`'s update (w <- w - delta), a tensor of the variable's
      dtype and shape (a whole variable).
    grad: the gradient `_Step` saw, same shape (dense, clip-scaled).
    decay: None, or lr * wd * w_old (same shape), the decoupled weight
      decay to add (masked where sign(delta) * sign(w_old) < 0 when
      `cautious_weight_decay`).

  Returns:
    The total to subtract from the weights (same shape and dtype).
  """
  delta = tf.convert_to_tensor(delta)
  if p.cautious:
    agree = tf.cast(tf.sign(delta) * tf.sign(tf.cast(grad, delta.dtype)) > 0,
                    delta.dtype)
    n = tf.cast(tf.size(agree), delta.dtype)
    delta = delta * (agree * (n / (tf.reduce_sum(agree) + 1)))
  if decay is None:
    return delta
  decay = tf.cast(decay, delta.dtype)
  if p.cautious_weight_decay:
    decay *= tf.cast(tf.sign(delta) * tf.sign(decay) >= 0, delta.dtype)
  return delta + decay
