"""The check the rules' MirroredStrategy tests share (Muon, NorMuon, SOAP, Prodigy,
D-Adapt AdamW, Mechanic, DistributedShampoo): under MirroredStrategy every replica applies the same
all-reduced gradient, so each replica's copy must equal a single-device
run of the same rule.
"""

import numpy as np
import tensorflow as tf

from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def MirroredEqualsOneDevice(strategy, p, init, grads, lr=0.1):
  """Runs rule params `p` on a variable 'w' both ways and compares them.

  Args:
    strategy: a MirroredStrategy over >= 2 devices.
    p: the rule's Params (name set); instantiated twice.
    init: numpy float32 array, the variable's initial value.
    grads: list of float32 Tensors shaped like `init`, one per update.
    lr: the learning rate of every update.

  Returns:
    (opt, w, ref, w_ref): the mirrored rule and variable, the single-device
    ones, after the updates; asserts (rtol 1e-6) that every replica's copy
    of w equals w_ref.
  """
  with strategy.scope():
    w = tf.Variable(init, name='w')
    opt = p.Instantiate().Bind([w])
  w_ref = tf.Variable(init, name='w')
  ref = p.Instantiate().Bind([w_ref])

  @tf.function
  def Step(g):
    strategy.run(lambda: opt.Apply(lr, NestedMap(w=VarGrad(w, g))))

  for g in grads:
    Step(g)
    ref.Apply(lr, NestedMap(w=VarGrad(w_ref, g)))
  for value in strategy.experimental_local_results(w):
    np.testing.assert_allclose(value.numpy(), w_ref.numpy(), rtol=1e-6)
  return opt, w, ref, w_ref
