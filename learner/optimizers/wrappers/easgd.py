"""Easgd: elastic averaging SGD, synchronous form, on tf.distribute.

Source: Zhang, Choromanska & LeCun, "Deep learning with Elastic Averaging
SGD", NeurIPS 2015: the synchronous EASGD of its equations (5)-(6) with
the communication period tau of its Algorithm 1. With N replicas, replica
r's weights x_r and one center x~ (equal to the weights at the start):

  every update:        x_r <- inner optimizer step on replica r's gradient
                       (no gradient all-reduce)
  after every tau-th:  d_r = x_r - x~                 (values before it)
                       x_r <- x_r - alpha * d_r
                       x~  <- x~ + alpha * sum_r d_r  (one all-reduce)

alpha is the paper's moving rate alpha = eta * rho (learning rate times
the elastic coefficient rho); this wrapper takes alpha itself, so it does
not change when a schedule changes the learning rate. The paper's
Algorithm 1 runs the elastic step before the gradient step at t = 0, tau,
2 tau, ...; at t = 0 every x_r equals x~ (a no-op), so that is the same
sequence as the elastic step after updates tau, 2 tau, ... here. The
paper's stability condition for the center, beta = N * alpha <= 1 (it uses
beta = 0.9), is the user's to keep. With one replica this is the paper's
formulas with N = 1 (x and x~ pull toward each other every tau updates).

The center is evaluated (eval, evaler, export, train_and_eval): it is this
wrapper's BaseAveraging copy (`GetAverage(var)`, checkpoint key
'.../_averages/<name>/...'). Replica copies and the inner optimizer's slots
are checkpointed per replica (replica_local.py).

MoXing's asynchronous EASGD (workers pushing to a parameter server at
their own pace) is refused: mode='async' raises (TF2's collectives are
synchronous).
"""

import tensorflow as tf

from learner.optimizers.wrappers import replica_local
from params import checks


class Easgd(replica_local.BaseReplicaLocal):
  """Synchronous EASGD around an inner optimizer (`p.optimizer`).

  See the module docstring for the update. Variables: the center, one per
  bound variable, same shape and dtype (float32 in the all-reduce).

  Raises:
    ValueError: at construction, if tau is not an int >= 1, alpha is not
      in (0, 1), mode is not 'sync', or as `BaseWrapper`; in `Bind` /
      `Apply`, as `BaseWrapper`.
  """

  AVERAGE_NAME = 'center'
  EVAL_WEIGHTS_LABEL = 'EASGD center'

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'easgd'
    p.Define('alpha', 0.1,
             'Moving rate alpha = eta * rho in (0, 1): at a sync each copy '
             'moves alpha of the way to the center, and the center alpha '
             'times the sum of the copies\' distances to it (keep N * alpha '
             '<= 1; the paper uses N * alpha = 0.9).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['alpha'] = checks.Real(0, 1, low_open=True, high_open=True,
                                 example=0.1, why='the moving rate')
    return specs

  def _Synchronize(self):
    """The elastic step: copies and center pull toward each other."""
    pairs = self._VarsAndAverages()
    diffs = [var.read_value() - center.read_value() for var, center in pairs]
    sums = self._AllReduceSum(diffs)
    ops = []
    for (var, center), d, s in zip(pairs, diffs, sums):
      alpha = tf.constant(self.params.alpha, var.dtype)
      ops.append(var.assign_sub(alpha * d))
      ops.append(center.assign_add(alpha * s))
    return tf.group(ops)
