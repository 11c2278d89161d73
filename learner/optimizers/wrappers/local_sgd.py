"""LocalSgd: each replica trains its own copy; every tau updates, the average.

Local SGD (periodic model averaging; Stich, "Local SGD Converges Fast and
Communicates Little", ICLR 2019; the inner loop of DiLoCo, Douillard et
al. 2023, with plain averaging as the outer step). With N replicas:

  every update:        x_r <- inner optimizer step on replica r's gradient
                       (no gradient all-reduce)
  after every tau-th:  a  <- (sum_r x_r) / N          (one all-reduce)
                       x_r <- a, for every r

The inner optimizer's slots stay per replica (they are not averaged).
Evaluation reads `a`, this wrapper's BaseAveraging copy: on a sync step the
copies equal it; between syncs it is the average of the LAST sync (the
starting weights before the first one), not of the current copies, which
would need a collective at evaluation. With tau = 1 and plain SGD this is
synchronous data-parallel SGD with the gradients averaged equally per
replica. The copies and slots are checkpointed per replica
(replica_local.py).

MoXing-style asynchronous mode is refused (mode='async' raises).
"""

import tensorflow as tf

from learner.optimizers.wrappers import replica_local


class LocalSgd(replica_local.BaseReplicaLocal):
  """Local SGD around an inner optimizer (`p.optimizer`); see module doc.

  Raises:
    ValueError: at construction, if tau is not an int >= 1, mode is not
      'sync', or as `BaseWrapper`.
  """

  AVERAGE_NAME = 'average'
  EVAL_WEIGHTS_LABEL = 'local SGD averages'

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'local_sgd'
    return p

  def _Synchronize(self):
    """Every copy (and the kept average) <- the mean of the copies."""
    pairs = self._VarsAndAverages()
    n = self._NumReplicas()
    sums = self._AllReduceSum([var.read_value() for var, _ in pairs])
    ops = []
    for (var, avg), s in zip(pairs, sums):
      mean = s / tf.constant(n, s.dtype)
      ops.append(var.assign(mean))
      ops.append(avg.assign(mean))
    return tf.group(ops)
