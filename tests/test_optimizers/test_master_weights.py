"""bfloat16 weights with a float32 master copy: `master_weights` (issue 38.3).

BaseOptimizer's one apply path: a bfloat16 (or float16) variable gets a
float32 slot 'master' made from its value; the rule updates the master
(gradient upcast) and the variable is assigned the master rounded to
nearest. Numbers: by hand (bfloat16's spacing), the numpy references of
optimizer_references.py run on the master, and bit-equality across eager /
tf.function / XLA, a checkpoint restore and MirroredStrategy (with and
without ZeRO-1). The lm.CharTransformer figure (bits/char at 400 steps, with
and without the master) is measured by tools/measure_master_weights.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import gradient_tape
from learner import optimizers
from learner.learner import Learner
from learner.optimizers.kernels import low_precision
from learner.optimizers.var_grad import VarGrad
from learner.optimizers.wrappers import ema
from learner.training.cluster import distribution
from params import BaseLayer
from params import NestedMap
from schedules import ConstantOne
import optimizer_references as refs

import configs.lm as lm


def _Bf16(x):
  """numpy float32 -> the bfloat16 value (round to nearest even), float32."""
  return tf.cast(tf.cast(tf.constant(x, tf.float32), tf.bfloat16),
                 tf.float32).numpy()


def _Sgd(mw, steps=10, lr=1e-3, g=1.0, **kw):
  """w = 1.0 bfloat16 after `steps` SGD steps of lr * g: (w, master)."""
  v = tf.Variable(tf.constant(1.0, tf.bfloat16), name='w')
  opt = optimizers.SGD.Params().Set(master_weights=mw, **kw).Instantiate()
  opt.Bind([v])
  for _ in range(steps):
    opt.Apply(lr, NestedMap(w=VarGrad(v, tf.constant(g, tf.bfloat16))))
  master = opt.GetSlots(v).get('master')
  return float(v.numpy()), None if master is None else float(master.numpy())


def test_without_master_updates_below_half_spacing_are_lost():
  # bfloat16 keeps 8 significant bits: at 1.0 the spacing below is 2^-8 =
  # 0.0039 (half: 0.00195), so 1.0 - 1e-3 rounds back to 1.0 every step.
  w, master = _Sgd(False)
  assert (w, master) == (1.0, None)


def test_with_master_the_updates_add_up_and_round_to_nearest():
  # The master (float32) takes the 10 steps: 1 - 10 * 1e-3 = 0.99 (as a
  # float32 loop gives it); w = nearest bfloat16 of 0.99: 253 * 2^-8 =
  # 0.98828125 (0.99 lies 0.0017 above it, 0.0022 below 254 * 2^-8).
  w, master = _Sgd(True)
  ref = np.float32(1.0)
  for _ in range(10):
    ref = np.float32(ref - np.float32(1e-3) * np.float32(1.0))
  assert master == ref
  assert w == 0.98828125 == _Bf16(ref)


def test_master_is_a_float32_slot_made_from_the_value_and_rule_slots_follow():
  v = tf.Variable(tf.constant([1.0, -3.0], tf.bfloat16), name='w')
  f = tf.Variable([2.0], name='f')  # float32: its own master.
  opt = optimizers.Adam.Params().Set(master_weights=True).Instantiate()
  opt.Bind([v, f])
  slots = opt.GetSlots(v)
  assert sorted(slots) == ['m', 'master', 'v']
  assert {k: s.dtype for k, s in slots.items()} == {
      'm': tf.float32, 'master': tf.float32, 'v': tf.float32}
  np.testing.assert_array_equal(slots['master'].numpy(), [1.0, -3.0])
  assert sorted(opt.GetSlots(f)) == ['m', 'v']
  assert low_precision.HasMaster(opt, v)
  assert not low_precision.HasMaster(opt, f)


def _AdamRun(mw=True, steps=4, fn=lambda f: f, **kw):
  """Adam on a bfloat16 [4] variable and a float32 [3] one, bfloat16
  gradients; returns (optimizer, bf16 var, f32 var, grads)."""
  rng = np.random.RandomState(0)
  v = tf.Variable(tf.constant(rng.randn(4), tf.bfloat16), name='w')
  f = tf.Variable(rng.randn(3).astype(np.float32), name='f')
  grads = [(rng.randn(4).astype(np.float32), rng.randn(3).astype(np.float32))
           for _ in range(steps)]
  opt = optimizers.Adam.Params().Set(master_weights=mw, **kw).Instantiate()
  opt.Bind([v, f])
  step = fn(lambda gv, gf: opt.Apply(0.01, NestedMap(
      w=VarGrad(v, tf.cast(gv, tf.bfloat16)), f=VarGrad(f, gf))) and None)
  for gv, gf in grads:
    step(tf.constant(gv), tf.constant(gf))
  return opt, v, f, grads


def test_adam_runs_on_the_master_as_numpy_adam_in_float32():
  opt, v, f, grads = _AdamRun(decoupled_weight_decay=0.1)
  p = opt.params
  ref = refs.RefAdam(p)
  rng = np.random.RandomState(0)
  w = _Bf16(rng.randn(4).astype(np.float32))  # The master starts from w.
  wf = rng.randn(3).astype(np.float32)
  s, sf = ref.slots(w), ref.slots(wf)
  for t, (gv, gf) in enumerate(grads, start=1):
    w = ref.step(t, 0.01, w, _Bf16(gv), s)  # The bfloat16 gradient, upcast.
    wf = ref.step(t, 0.01, wf, gf, sf)
  master = opt.GetSlots(v)['master'].numpy()
  np.testing.assert_allclose(master, w, rtol=2e-6)
  np.testing.assert_allclose(opt.GetSlots(v)['m'].numpy(), s['m'], rtol=2e-6)
  np.testing.assert_array_equal(v.numpy().astype(np.float32), _Bf16(master))
  # The float32 variable: Adam as without master_weights.
  np.testing.assert_allclose(f.numpy(), wf, rtol=2e-6)
  # The master moved off the bfloat16 grid (the test can fail).
  assert np.any(master != _Bf16(master))


def test_eager_tf_function_and_xla_give_the_same_bits():
  runs = [_AdamRun(fn=fn) for fn in (
      lambda f: f, tf.function, lambda f: tf.function(f, jit_compile=True))]
  for opt, v, f, _ in runs[1:]:
    np.testing.assert_array_equal(v.numpy(), runs[0][1].numpy())
    np.testing.assert_array_equal(opt.GetSlots(v)['master'].numpy(),
                                  runs[0][0].GetSlots(runs[0][1])[
                                      'master'].numpy())
    np.testing.assert_array_equal(f.numpy(), runs[0][2].numpy())


def test_weight_decay_exclude_matches_the_variable_name():
  # SGD, g = 0: only the decay moves the master: 1 - 0.1 * 0.5 * 1 = 0.95.
  out = {}
  for name in ('w', 'bias'):
    v = tf.Variable(tf.constant(1.0, tf.bfloat16), name=name)
    opt = optimizers.SGD.Params().Set(
        master_weights=True, decoupled_weight_decay=0.5,
        weight_decay_exclude=['bias']).Instantiate()
    opt.Bind([v])
    opt.Apply(0.1, NestedMap(w=VarGrad(v, tf.constant(0.0, tf.bfloat16))))
    out[name] = float(opt.GetSlots(v)['master'].numpy())
  assert out == {'w': np.float32(0.95), 'bias': 1.0}


def test_stochastic_rounding_keeps_small_updates_on_average():
  # 1.0 - 1e-3 lies 1e-3 / 2^-8 = 0.256 of a spacing below 1.0: rounded
  # stochastically, about a quarter of 4096 elements go down to 1 - 2^-8.
  v = tf.Variable(tf.ones([4096], tf.bfloat16), name='w')
  opt = optimizers.SGD.Params().Set(
      master_weights=True, master_stochastic_rounding=True).Instantiate()
  opt.Bind([v])
  opt.Apply(1e-3, NestedMap(w=VarGrad(v, tf.ones([4096], tf.bfloat16))))
  values = v.numpy().astype(np.float32)
  assert set(np.unique(values)) <= {1.0, 1.0 - 2.0**-8}
  assert abs(np.mean(values == 1.0 - 2.0**-8) - 0.256) < 0.03


def test_the_fused_path_declines_with_the_reason():
  v = tf.Variable(tf.zeros([2], tf.bfloat16), name='w')
  opt = optimizers.Adam.Params().Set(master_weights=True).Instantiate()
  opt.Bind([v])
  reason = opt.FusedApplyReason([VarGrad(v, tf.zeros([2], tf.bfloat16))])
  assert reason.startswith('master_weights=True')


@pytest.mark.parametrize('kw, words', [
    (dict(master_weights=1), 'master_weights=1; expected True or False'),
    (dict(master_stochastic_rounding=True),
     'master_stochastic_rounding=True needs master_weights=True'),
])
def test_bad_values_are_refused_in_one_line(kw, words):
  with pytest.raises(ValueError, match=words) as e:
    optimizers.Adam.Params().Set(**kw).Instantiate()
  assert '\n' not in str(e.value)


def test_float32_variables_only_are_refused_at_bind():
  opt = optimizers.Adam.Params().Set(master_weights=True).Instantiate()
  with pytest.raises(ValueError, match=r'no bound variable is bfloat16 or '
                     r'float16 .*\'f:0\': \'float32\'.*dtype=tf.bfloat16'):
    opt.Bind([tf.Variable([1.0], name='f')])


def test_stochastic_rounding_to_float16_is_refused_at_bind():
  opt = optimizers.SGD.Params().Set(
      master_weights=True, master_stochastic_rounding=True).Instantiate()
  with pytest.raises(ValueError, match='bfloat16 only'):
    opt.Bind([tf.Variable(tf.zeros([1], tf.float16), name='h')])


def test_a_wrapper_refuses_it_and_its_inner_rule_takes_it():
  with pytest.raises(ValueError, match='set it on the inner update rule'):
    ema.Ema.Params().Set(optimizer=optimizers.SGD.Params(),
                         master_weights=True).Instantiate()
  v = tf.Variable(tf.constant(1.0, tf.bfloat16), name='w')
  opt = ema.Ema.Params().Set(optimizer=optimizers.SGD.Params().Set(
      master_weights=True), decay=0.5).Instantiate()
  opt.Bind([v])
  for _ in range(10):
    opt.Apply(1e-3, NestedMap(w=VarGrad(v, tf.constant(1.0, tf.bfloat16))))
  assert float(v.numpy()) == 0.98828125  # As the rule alone (above).


def test_checkpoint_holds_the_master_and_resume_is_bit_identical(tmp_path):
  def Run(steps, save=None, restore=None):
    rng = np.random.RandomState(3)
    v = tf.Variable(tf.constant(rng.randn(5), tf.bfloat16), name='w')
    grads = [rng.randn(5).astype(np.float32) for _ in range(6)]
    opt = optimizers.Adam.Params().Set(
        master_weights=True, master_stochastic_rounding=True,
        name='opt').Instantiate().Bind([v])
    ckpt = tf.train.Checkpoint(opt=opt, w=v)
    first = 0
    if restore:
      ckpt.read(restore).assert_consumed()
      first = int(opt.num_updates.numpy())
    for t in range(first, first + steps):
      opt.Apply(0.05, NestedMap(w=VarGrad(v, tf.constant(grads[t]))))
    return opt, v, (ckpt.write(save) if save else None)

  whole, v_whole, _ = Run(6)
  _, _, path = Run(3, save=str(tmp_path / 'ckpt'))
  keys = [k for k, _ in tf.train.list_variables(path)]
  assert 'opt/_slots/w/master/.ATTRIBUTES/VARIABLE_VALUE' in keys
  resumed, v_resumed, _ = Run(3, restore=path)
  np.testing.assert_array_equal(v_resumed.numpy(), v_whole.numpy())
  for name in ('master', 'm', 'v'):
    np.testing.assert_array_equal(resumed.GetSlots(v_resumed)[name].numpy(),
                                  whole.GetSlots(v_whole)[name].numpy())


def test_params_round_trip_as_text():
  p = optimizers.Adam.Params().Set(master_weights=True,
                                   master_stochastic_rounding=True)
  q = optimizers.Adam.Params()
  q.FromText(p.ToText())
  assert q.master_weights is True and q.master_stochastic_rounding is True
  assert q.ToText() == p.ToText()
  t = lm.CharTransformerTask.Params().Set(dtype=tf.bfloat16,
                                          fprop_dtype=tf.float32)
  u = lm.CharTransformerTask.Params()
  u.FromText(t.ToText())
  assert (u.dtype, u.fprop_dtype) == (tf.bfloat16, tf.float32)


def test_bfloat16_weights_take_half_the_bytes():
  def Bytes(**kw):
    task = lm.CharTransformerTask.Params().Set(
        name='lm', model_dim=16, hidden_dim=32, num_heads=2, **kw
    ).Instantiate()
    floats = [v for v in task.vars.Flatten() if v.dtype.is_floating]
    assert {v.dtype for v in floats} == {kw.get('dtype', tf.float32)}
    return sum(int(v.shape.num_elements()) * v.dtype.size for v in floats)

  full = Bytes()
  half = Bytes(dtype=tf.bfloat16, fprop_dtype=tf.float32)
  # 103 * 16 + 103 (emb, bias), per block 16 * 48 + 48 + 16 * 16 + 16 (attn),
  # 16 * 32 + 32 + 32 * 16 + 16 (ffn), 4 * 16 (two norms); final norm 32.
  block = 16 * 48 + 48 + 16 * 16 + 16 + 16 * 32 + 32 + 32 * 16 + 16 + 64
  assert full == 4 * (103 * 17 + 2 * block + 32)
  assert half * 2 == full


# ---- distributed: MirroredStrategy, and ZeRO-1 through the learner --------


@pytest.fixture(scope='module')
def strategy():
  s = distribution.CreateStrategy('mirrored')
  assert s.num_replicas_in_sync == 2
  return s


def test_mirrored_replicas_apply_as_one_device(strategy):
  p = optimizers.Adam.Params().Set(master_weights=True, name='opt')
  init = tf.constant([1.0, 2.0], tf.bfloat16)
  with strategy.scope():
    w = tf.Variable(init, name='w')
    opt = p.Instantiate().Bind([w])
  w_ref = tf.Variable(init, name='w')
  ref = p.Instantiate().Bind([w_ref])
  g = tf.constant([0.5, -1.0], tf.bfloat16)

  @tf.function
  def Step():
    strategy.run(lambda: opt.Apply(0.01, NestedMap(w=VarGrad(w, g))))

  for _ in range(3):
    Step()
    ref.Apply(0.01, NestedMap(w=VarGrad(w_ref, g)))
  for value, master in zip(
      strategy.experimental_local_results(w),
      strategy.experimental_local_results(opt.GetSlots(w)['master'])):
    np.testing.assert_array_equal(value.numpy(), w_ref.numpy())
    np.testing.assert_array_equal(master.numpy(),
                                  ref.GetSlots(w_ref)['master'].numpy())


class _Mlp(BaseLayer):
  """x [4, 3] -> tanh(x w1 + b1) w2, 15 + 5 + 10 = 30 elements (shards of
  15 span variables); weights in the layer's dtype, math in fprop_dtype."""

  def __init__(self, params):
    super().__init__(params)
    rng = np.random.RandomState(0)
    for name, shape in (('w1', [3, 5]), ('b1', [5]), ('w2', [5, 2])):
      self.CreateVariable(name, shape, init=rng.normal(size=shape).astype(
          np.float32) * 0.5)

  def Loss(self, x, y):
    theta = self.theta
    h = tf.tanh(tf.matmul(x, theta.w1) + theta.b1)
    return tf.reduce_mean(tf.square(tf.matmul(h, theta.w2) - y))


def _LearnerRun(strategy, shard, steps=6):
  """Weights {name: [replica copies]} and the learner after `steps`."""
  with strategy.scope():
    task = _Mlp.Params().Set(name='mlp', dtype=tf.bfloat16,
                             fprop_dtype=tf.float32).Instantiate()
    lrn = Learner.Params().Set(
        name='loss', learning_rate=0.05, lr_schedule=ConstantOne.Params(),
        optimizer=optimizers.Adam.Params().Set(master_weights=True),
        shard_optimizer_state=shard).Instantiate()
    lrn.Bind(task.vars)

  def _Replica(x, y):
    with gradient_tape.GradientTape():
      loss = task.Loss(x, y)
    lrn.Apply({'loss': (loss, tf.constant(4.0))}, task.vars)

  @tf.function
  def _Step(x, y):
    strategy.run(_Replica, args=(x, y))

  dist = strategy.experimental_distribute_values_from_function
  for step in range(steps):
    def _Value(ctx, k, step=step):
      rng = np.random.RandomState(100 * step + ctx.replica_id_in_sync_group)
      return tf.constant(rng.normal(size=[[4, 3], [4, 2]][k]).astype(
          np.float32))
    _Step(dist(lambda ctx: _Value(ctx, 0)), dist(lambda ctx: _Value(ctx, 1)))
  return {k: [x.numpy() for x in strategy.experimental_local_results(v)]
          for k, v in task.vars.items()}, lrn


def test_zero1_shards_the_master_and_matches_unsharded(strategy, tmp_path):
  ref, plain = _LearnerRun(strategy, False)
  got, lrn = _LearnerRun(strategy, True)
  for k in ref:
    assert got[k][0].dtype == tf.bfloat16.as_numpy_dtype
    np.testing.assert_array_equal(got[k][0], got[k][1], err_msg=k)
    np.testing.assert_array_equal(got[k][0], ref[k][0], err_msg=k)
  zero = lrn.optimizer.state_sharding
  master = zero.shard_slots['bfloat16']['master']
  assert [c.shape for c in master.values] == [[15], [15]]
  assert master.dtype == tf.float32
  # The checkpoint holds each variable's full master, as unsharded.
  a = tf.train.Checkpoint(learner=plain).write(str(tmp_path / 'a'))
  b = tf.train.Checkpoint(learner=lrn).write(str(tmp_path / 'b'))
  keys = sorted(k for k, _ in tf.train.list_variables(a) if 'master' in k)
  assert [k.split('/')[4] for k in keys] == ['mlp_b1', 'mlp_w1', 'mlp_w2']
  assert keys == sorted(k for k, _ in tf.train.list_variables(b)
                        if 'master' in k)
  shapes = {'mlp_w1': (3, 5), 'mlp_b1': (5,), 'mlp_w2': (5, 2)}
  for key in keys:
    full = tf.train.load_checkpoint(b).get_tensor(key)
    assert full.dtype == np.float32
    assert full.shape == shapes[key.split('/')[4]]
    np.testing.assert_array_equal(
        tf.train.load_checkpoint(a).get_tensor(key), full, err_msg=key)
