"""StopAgreement / GroupStopSignals outside a cluster (fast; issue 41.2).

The two-worker behaviour is tests/test_distribution/test_group_preemption.py.
"""

import tensorflow as tf

from learner.training.cluster import distribution


def test_one_replica_exchange_returns_its_own_signal():
  agreement = distribution.StopAgreement(tf.distribute.get_strategy())
  assert agreement.Signals(15) == [15]
  assert agreement.Signals(None) == [0]
  assert agreement.Signals(2) == [2]  # The same traced function, new value.


def test_outside_a_cluster_the_trainer_gets_no_group():
  assert distribution.GroupStopSignals(tf.distribute.get_strategy()) is None
