"""Optimizers and wrappers in MirroredStrategy replica context (2 CPUs).

Every replica applies the same (already all-reduced) gradient; both copies
of the variable must equal a single-device run.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers.wrappers import composite
from learner.optimizers.wrappers import ema
from learner.optimizers import keras_optimizer
from learner.optimizers.wrappers import lars
from learner.optimizers.wrappers import lookahead
from learner.optimizers.wrappers import swa
from learner import optimizers
from learner.optimizers.var_grad import VarGrad
from params import NestedMap
from learner.training.cluster import distribution
import schedules

_CASES = {
    'adam': optimizers.Adam.Params(),
    'adamw_lazy_sparse': optimizers.AdamW.Params().Set(
        lazy_sparse_updates=True),
    'adafactor': optimizers.Adafactor.Params(),
    'adam_optax_form': optimizers.Adam.Params().Set(epsilon_form='optax'),
    # Cautious masks (learner/optimizers/cautious.py): per-tensor n / (nnz
    # + 1) on each replica's (identical) copy; the decay masked at w[1].
    'adamw_cautious_cwd': optimizers.AdamW.Params().Set(
        decoupled_weight_decay=0.1, cautious=True, cautious_weight_decay=True),
    'lion_cautious': optimizers.Lion.Params().Set(cautious=True),
    'nadam_dozat': optimizers.Nadam.Params().Set(momentum_schedule='dozat'),
    'radam': optimizers.RAdam.Params(),
    'adamax_keras_sparse': optimizers.Adamax.Params().Set(
        epsilon_form='keras'),
    'amsgrad': optimizers.AMSGrad.Params(),
    'adopt': optimizers.ADOPT.Params().Set(use_nesterov=True),
    'schedule_free_adamw': optimizers.ScheduleFreeAdamW.Params().Set(
        warmup_steps=1, decoupled_weight_decay=0.1),
    'adam_bf16_stochastic_slots': optimizers.Adam.Params().Set(
        slot_dtype=tf.bfloat16, slot_stochastic_rounding=True),
    'momentum_bf16_slots': optimizers.Momentum.Params().Set(
        slot_dtype=tf.bfloat16),
    'lars_momentum': lars.Lars.Params().Set(
        optimizer=optimizers.Momentum.Params(), exclude_1d=False),
    'ema': ema.Ema.Params().Set(optimizer=optimizers.SGD.Params(), decay=0.5),
    # k = 2 and swa_start 0: both change their copies at the 2 steps.
    'lookahead': lookahead.Lookahead.Params().Set(
        optimizer=optimizers.Momentum.Params(), k=2, alpha=0.5),
    'swa': swa.SWA.Params().Set(optimizer=optimizers.Momentum.Params()),
    'composite': composite.Composite.Params().Set(optimizer_map={
        'default_optimizer': (optimizers.Adam.Params(), 2.0)}),
    'keras': keras_optimizer.KerasOptimizerParams(
        lambda: tf.keras.optimizers.Adam(0.1)),
    # hyper_schedules (issue 24.6): schedules read the replicated counter.
    'adamw_scheduled_beta1_wd': optimizers.AdamW.Params().Set(
        hyper_schedules={
            'beta1': schedules.LinearSchedule.Params().Set(
                start=(0, 0.5), limit=(2, 0.9)),
            'decoupled_weight_decay': schedules.LinearSchedule.Params().Set(
                start=(0, 0.0), limit=(1, 0.1))}),
    'ema_scheduled_decay': ema.Ema.Params().Set(
        optimizer=optimizers.Momentum.Params().Set(hyper_schedules={
            'alpha': schedules.LinearSchedule.Params().Set(
                start=(0, 0.5), limit=(1, 0.9))}),
        hyper_schedules={'decay': schedules.LinearSchedule.Params().Set(
            start=(0, 0.0), limit=(1, 0.5))}),
}


@pytest.fixture(scope='module')
def strategy():
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) < 2:
    pytest.skip('needs 2 logical CPU devices (tests/conftest.py)')
  return distribution.CreateStrategy('mirrored')


def _Grad(sparse):
  if sparse:
    return tf.IndexedSlices(tf.constant([0.5]), tf.constant([0]),
                            tf.constant([2]))
  return tf.constant([0.5, -1.0])


@pytest.mark.parametrize('name', sorted(_CASES))
def test_replicas_apply_identically_to_a_single_device_run(strategy, name):
  p = _CASES[name].Copy().Set(name='opt')
  sparse = name.endswith('sparse')
  with strategy.scope():
    w = tf.Variable([1.0, 2.0], name='w')
    opt = p.Instantiate().Bind([w])
  w_ref = tf.Variable([1.0, 2.0], name='w')
  ref = p.Instantiate().Bind([w_ref])

  @tf.function
  def Step():
    strategy.run(lambda: opt.Apply(0.1, NestedMap(w=VarGrad(w, _Grad(sparse)))))

  for _ in range(2):
    Step()
    ref.Apply(0.1, NestedMap(w=VarGrad(w_ref, _Grad(sparse))))
  for value in strategy.experimental_local_results(w):
    # Keras' replica-context apply differs in the last float32 bits.
    np.testing.assert_allclose(value.numpy(), w_ref.numpy(), rtol=2e-6)
  for count in strategy.experimental_local_results(opt.num_updates):
    assert int(count.numpy()) == 2
  if opt.EvalAverages():  # Ema, Lookahead, SWA: every copy of the copies.
    for value in strategy.experimental_local_results(opt.GetAverage(w)):
      np.testing.assert_allclose(value.numpy(), ref.GetAverage(w_ref).numpy(),
                                 rtol=2e-6)
