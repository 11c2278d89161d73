"""Save after k steps, build fresh, restore before any step, continue.

The result must equal an uninterrupted run: weights and every slot (case
C-restore-slots for Adam's numbers; every optimizer and wrapper for the rule).
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
from learner.optimizers.wrappers import sam
from learner import optimizers
from learner.optimizers.var_grad import VarGrad
from params import NestedMap


def test_c_restore_slots_adam(tmp_path):
  p = optimizers.Adam.Params().Set(name='adam', epsilon=1e-7)
  w = tf.Variable([1.0], name='w')
  opt = p.Instantiate().Bind([w])
  opt.Apply(0.1, NestedMap(w=VarGrad(w, tf.constant([0.5]))))
  path = tf.train.Checkpoint(opt=opt, w=w).save(str(tmp_path / 'ckpt'))

  w2 = tf.Variable([1.0], name='w')
  opt2 = p.Instantiate().Bind([w2])
  tf.train.Checkpoint(opt=opt2, w=w2).restore(path).assert_consumed()
  # C-restore-slots: num_updates 1, m 0.05, v 0.00025, w ~ 0.9.
  assert int(opt2.num_updates.numpy()) == 1
  np.testing.assert_allclose(opt2.GetSlots(w2)['m'].numpy(), [0.05], rtol=1e-6)
  # float32 (1 - 0.999) is 0.00100005: v lands 1.3e-5 (relative) off.
  np.testing.assert_allclose(opt2.GetSlots(w2)['v'].numpy(), [0.00025],
                             rtol=5e-5)
  np.testing.assert_allclose(w2.numpy(), [0.9], rtol=1e-5)
  opt2.Apply(0.1, NestedMap(w=VarGrad(w2, tf.constant([-0.25]))))
  np.testing.assert_allclose(opt2.GetSlots(w2)['m'].numpy(), [0.02], rtol=1e-5)
  np.testing.assert_allclose(opt2.GetSlots(w2)['v'].numpy(), [0.00031225],
                             rtol=5e-5)
  np.testing.assert_allclose(w2.numpy(), [0.873367], rtol=1e-5)


def _Sgd():
  return optimizers.SGD.Params()


_PARAMS = {
    'momentum': optimizers.Momentum.Params(),
    'adam': optimizers.Adam.Params(),
    'adam_bf16_slots': optimizers.Adam.Params().Set(slot_dtype=tf.bfloat16),
    'adam_bf16_stochastic': optimizers.Adam.Params().Set(
        slot_dtype=tf.bfloat16, slot_stochastic_rounding=True),
    # bfloat16 variables (_DTYPES) with a float32 master slot (issue 38.3).
    'adam_master_weights': optimizers.Adam.Params().Set(
        master_weights=True, master_stochastic_rounding=True),
    'momentum_bf16_slots': optimizers.Momentum.Params().Set(
        slot_dtype=tf.bfloat16),
    'adam_int8_slots': optimizers.Adam.Params().Set(slot_dtype=tf.int8,
                                                    slot_block_size=4),
    'lion_int8_slots': optimizers.Lion.Params().Set(slot_dtype=tf.int8),
    'adamw': optimizers.AdamW.Params(),
    'adamw_cautious_cwd': optimizers.AdamW.Params().Set(
        decoupled_weight_decay=0.1, cautious=True, cautious_weight_decay=True),
    'adagrad': optimizers.Adagrad.Params(),
    'rmsprop': optimizers.RMSProp.Params().Set(centered=True, momentum=0.5),
    'adadelta': optimizers.AdaDelta.Params(),
    'adafactor': optimizers.Adafactor.Params().Set(beta1=0.9,
                                                   min_dim_size_to_factor=2),
    'lamb': optimizers.LAMB.Params(),
    'lion': optimizers.Lion.Params(),
    'ademamix': optimizers.AdEMAMix.Params().Set(beta3=0.99),
    'simplified_ademamix': optimizers.SimplifiedAdEMAMix.Params().Set(
        alpha=2.0),
    'dog': optimizers.DoG.Params().Set(init_step_value=0.1),
    'dowg': optimizers.DoWG.Params(),
    'cocob': optimizers.COCOB.Params(),
    'madgrad': optimizers.MADGRAD.Params(),
    'dadapt_adamw': optimizers.DAdaptAdamW.Params().Set(d0=1e-2),
    'prodigy': optimizers.Prodigy.Params().Set(d0=1e-2),
    'mechanic': optimizers.Mechanic.Params().Set(
        s_init=0.05, optimizer=optimizers.Adam.Params()),
    # Frequency 2: a QR refresh at update 2, the first after the restore.
    'soap': optimizers.SOAP.Params().Set(precondition_frequency=2),
    # Roots at update 3, after the restore, from statistics saved at 2.
    'distributed_shampoo': optimizers.DistributedShampoo.Params().Set(
        start_preconditioning_steps=1, preconditioning_compute_steps=3),
    'adagraft': optimizers.AdaGraft.Params().Set(
        magnitude_optimizer=optimizers.Adam.Params(),
        direction_optimizer=optimizers.Momentum.Params()),
    'nadam': optimizers.Nadam.Params().Set(momentum_schedule='dozat'),
    'radam': optimizers.RAdam.Params().Set(beta2=0.9, threshold=4.0),
    'adamax': optimizers.Adamax.Params(),
    'amsgrad': optimizers.AMSGrad.Params(),
    'adopt': optimizers.ADOPT.Params().Set(use_nesterov=True),
    'schedule_free_sgd': optimizers.ScheduleFreeSGD.Params().Set(
        warmup_steps=3),
    'schedule_free_adamw': optimizers.ScheduleFreeAdamW.Params().Set(
        warmup_steps=3, decoupled_weight_decay=0.1),
    'muon': optimizers.Muon.Params(),
    'normuon': optimizers.NorMuon.Params().Set(decoupled_weight_decay=0.1),
    'lars': lars.Lars.Params().Set(optimizer=optimizers.Adam.Params(),
                                   eta=0.01, weight_decay=0.01),
    'ema': ema.Ema.Params().Set(optimizer=optimizers.Momentum.Params(),
                                decay=0.5),
    # k = 3: the synchronization at update 3 comes after the restore.
    'lookahead': lookahead.Lookahead.Params().Set(
        optimizer=optimizers.Adam.Params(), k=3, alpha=0.5),
    # Samples at updates 1 and 3: one before the save, one after.
    'swa': swa.SWA.Params().Set(optimizer=optimizers.Momentum.Params(),
                                swa_start=1, swa_freq=2),
    # Sam keeps no state of its own: the inner Momentum's slots are saved.
    'sam': sam.Sam.Params().Set(optimizer=optimizers.Momentum.Params(),
                                rho=0.1),
    # One replica: the paper's formulas with N = 1; tau = 3, the sync at
    # update 3 comes after the restore (the center, copies and slots saved).
    'easgd': optimizers.Easgd.Params().Set(
        optimizer=optimizers.Momentum.Params(), tau=3, alpha=0.3),
    'local_sgd': optimizers.LocalSgd.Params().Set(
        optimizer=optimizers.Adam.Params(), tau=3),
    'composite': composite.Composite.Params().Set(optimizer_map={
        'w0': (optimizers.Adam.Params(), 2.0),
        'default_optimizer': (optimizers.Momentum.Params(), 0.5)}),
    'keras': keras_optimizer.KerasOptimizerParams(
        lambda: tf.keras.optimizers.Adam(0.5)),
}


# Rules that update matrices only (Muon, NorMuon refuse a vector at Bind).
_SHAPES = {'muon': ((2, 3), (3, 1)), 'normuon': ((2, 3), (3, 1))}
# Variables in another dtype than float32 (master_weights needs 16-bit ones).
_DTYPES = {'adam_master_weights': tf.bfloat16}


def _Run(p, steps, restore_from=None, save_to=None, shapes=((2, 3), (3,)),
         dtype=tf.float32):
  rng = np.random.RandomState(1)
  values = [rng.randn(*shape).astype(np.float32) for shape in shapes]
  grads = [[rng.randn(*v.shape).astype(np.float32) for v in values]
           for _ in range(4)]
  variables = [tf.Variable(tf.constant(v, dtype), name='w%d' % i)
               for i, v in enumerate(values)]
  opt = p.Copy().Set(name='opt').Instantiate().Bind(variables)
  ckpt = tf.train.Checkpoint(opt=opt, w=variables)
  first = 0
  if restore_from:
    ckpt.restore(restore_from).assert_consumed()
    first = int(opt.num_updates.numpy())
  for t in range(first, first + steps):
    opt.Apply(0.1, NestedMap({'w%d' % i: VarGrad(v, tf.constant(g))
                              for i, (v, g) in enumerate(zip(variables,
                                                             grads[t]))}))
  path = ckpt.save(save_to) if save_to else None
  state = [v.numpy() for v in tf.nest.flatten(opt.variables)]
  if isinstance(opt, keras_optimizer.KerasOptimizer):
    # Keras variables are not tf.Variables that tf.Module collects.
    state += [v.numpy() for v in opt.keras_optimizer.variables]
  state += [v.numpy() for v in variables]
  return state, path


@pytest.mark.parametrize('name', sorted(_PARAMS))
def test_restore_before_any_step_then_continue_equals_uninterrupted(
    name, tmp_path):
  p = _PARAMS[name]
  kw = {'shapes': _SHAPES[name]} if name in _SHAPES else {}
  if name in _DTYPES:
    kw['dtype'] = _DTYPES[name]
  uninterrupted, _ = _Run(p, 4, **kw)
  _, path = _Run(p, 2, save_to=str(tmp_path / 'ckpt'), **kw)
  resumed, _ = _Run(p, 2, restore_from=path, **kw)
  assert len(resumed) == len(uninterrupted)
  for a, b in zip(resumed, uninterrupted):
    np.testing.assert_array_equal(a, b)
