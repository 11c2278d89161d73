"""Lookahead: k steps forward with the inner optimizer, one step back.

  fast weights = the variables, updated by the inner optimizer each update;
  slow weights = one kept copy per variable (starting at the variable);
  after every k-th update (num_updates before it, i, with (i + 1) % k == 0):
    slow <- slow + alpha * (fast - slow)
    fast <- slow
Evaluation uses the slow weights.

Source: Zhang, Lucas, Hinton & Ba, "Lookahead Optimizer: k steps forward,
1 step back", NeurIPS 2019 (Algorithm 1); the same steps as optax's
`lookahead(fast_optimizer, sync_period=k, slow_step_size=alpha)` with
reset_state=False (tests/data/optax_lookahead.json).
"""

import tensorflow as tf

from learner.optimizers import wrapper
from params import checks


class Lookahead(wrapper.BaseAveraging):
  """Lookahead around an inner optimizer (`p.optimizer`), slow weights kept.

  Each `Apply` hands the update to the inner optimizer (which updates the
  variables, the fast weights); after every `k`-th update the slow copy of
  every bound variable (with or without a gradient this step) moves
  `alpha` of the way to the variable, and the variable is set to it. The
  inner optimizer's slots are kept across a synchronization (optax's
  reset_state=False; the paper's default). `k` counts this wrapper's
  `num_updates` (applied updates), so under gradient accumulation it counts
  windows, and a resumed run synchronizes at the same updates. `alpha` may
  follow a schedule (`hyper_schedules={'alpha': <schedule params>}`,
  evaluated at the learner's step before the update that synchronizes).

  The slow weights are evaluated: found through `EvalAverages()` /
  `EvalAverageClasses(p)`, swapped in by `SwapAverages()` and read from a
  checkpoint by `AverageCheckpointKeySuffix` (see `wrapper.BaseAveraging`);
  `GetAverage(var)` is the slow copy of `var` (same shape and dtype).

  Raises:
    ValueError: at construction, if k is not an int >= 1 or alpha is
      outside [0, 1], or as `BaseWrapper` (inner params, an accumulation
      inside, this wrapper's own decoupled_weight_decay).
  """

  AVERAGE_NAME = 'slow'
  EVAL_WEIGHTS_LABEL = 'Lookahead slow copies'
  SCHEDULABLE_PARAMS = ('alpha',)  # hyper_schedules={'alpha': ...}
  SHARDS_WITH_RULE = True  # ZeRO-1 shards the slow weights (elementwise).
  INNER_OPTIMIZER_DOC = ('Params of the inner (fast) optimizer: it updates '
                         'the variables at every update.')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'lookahead'
    p.Define('k', 5,
             'Synchronization period, in updates (this wrapper\'s '
             'num_updates): the slow weights move after every k-th update; '
             'an int >= 1 (1: every update).')
    p.Define('alpha', 0.5,
             'Slow step size in [0, 1]: slow <- slow + alpha * (fast - '
             'slow) at each synchronization (1: the slow weights take the '
             'fast ones; 0: the fast weights go back to the slow ones).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['k'] = checks.Int(1, example=5)
    specs['alpha'] = checks.Real(0, 1, example=0.5)
    return specs

  def SyncNext(self):
    """bool scalar: whether the next update ends with a synchronization."""
    k = tf.constant(self.params.k, tf.int64)
    return tf.equal(tf.math.floormod(self.num_updates + 1, k), 0)

  def _ApplyWrapped(self, lr, var_grads):
    """The inner update, then after every k-th the synchronization
    slow <- slow + alpha * (fast - slow); fast <- slow (`_ApplyAndMove`:
    whole, or on this replica's shards under ZeRO-1)."""
    sync = self.SyncNext()
    alpha = self.Hyper('alpha')  # At the learner's step before the update.

    def _Synchronize(fast, slow):
      new_slow = slow + tf.cast(alpha, slow.dtype) * (fast - slow)
      return new_slow, new_slow

    return self._ApplyAndMove(lr, var_grads, _Synchronize, pred=sync)
