"""The Keras twin of lm.CharTransformer, for benchmarks/trainer.py.

The same computation as configs/lm.py's CharTransformerTask, built from
Keras 3 layers as a Keras user would write it:

  ids int32 [batch, time]
  x = emb[ids] * sqrt(model_dim) + sinusoids[time]   (_TiedEmbedding)
  num_layers x (pre-norm):
    x += MultiHeadAttention(LN(x), causal)           (keras.layers)
    x += Dense(model_dim)(Dense(hidden_dim, relu)(LN(x)))
  logits = LN(x) @ emb^T + softmax_bias              (the same table: tied)

keras.layers.MultiHeadAttention keeps separate query/key/value kernels
[model_dim, heads, model_dim / heads] (+ biases [heads, model_dim / heads])
and an output kernel [heads, model_dim / heads, model_dim]: the same
numbers of parameters as our 'w_qkv' [model_dim, 3 model_dim] and 'w_post'
(`CopyWeights` maps one onto the other). LayerNormalization(epsilon=1e-6)
as ours; no dropout anywhere.

The optimizer is ours twice over: two learners ('embedding': the table;
'body': everything else), each Adam(0.9, 0.98, 1e-9) at 1.0 x Lingvo's
TransformerSchedule (model_dim 128, warmup 200) with its gradients clipped
to a global norm of 1.0 over its own variables. Keras's `fit` takes one
optimizer and `global_clipnorm` clips over all variables together, so the
twin overrides `train_step` (Keras's documented way to customise `fit`):
Keras's own train_step, with the gradients clipped per group before one
keras.optimizers.Adam applies them (Adam is elementwise and both learners
apply every step with the same schedule, so one Adam over both groups is
the two learners' update).
"""

import math

import keras
import numpy as np
import tensorflow as tf


class _TiedEmbedding(keras.layers.Layer):
  """The table [vocab, dim] (N(0, dim**-0.5)), looked up and reused as softmax."""

  def __init__(self, vocab_size, dim, seq_len, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size, self.dim = vocab_size, dim
    half = dim // 2
    inv = np.exp(np.arange(half) * -(math.log(1.0e4) / (half - 1)))
    scaled = np.arange(seq_len)[:, None] * inv[None, :]
    self.positions = np.concatenate([np.sin(scaled), np.cos(scaled)],
                                    1).astype(np.float32)

  def build(self, input_shape):
    self.emb = self.add_weight(
        name='emb', shape=(self.vocab_size, self.dim),
        initializer=keras.initializers.RandomNormal(stddev=self.dim**-0.5))
    self.softmax_bias = self.add_weight(name='softmax_bias',
                                        shape=(self.vocab_size,),
                                        initializer='zeros')

  def call(self, ids):
    x = tf.gather(self.emb, ids) * math.sqrt(self.dim)
    return x + self.positions[None, :ids.shape[1]]

  def Logits(self, x):
    return tf.einsum('btd,vd->btv', x, self.emb) + self.softmax_bias


class _Block(keras.layers.Layer):
  """x += MHA(LN(x), causal); x += Dense(Dense(LN(x), relu)): pre-norm."""

  def __init__(self, model_dim, num_heads, hidden_dim, **kwargs):
    super().__init__(**kwargs)
    self.atten_ln = keras.layers.LayerNormalization(epsilon=1e-6)
    self.atten = keras.layers.MultiHeadAttention(
        num_heads=num_heads, key_dim=model_dim // num_heads)
    self.ffn_ln = keras.layers.LayerNormalization(epsilon=1e-6)
    self.ffn1 = keras.layers.Dense(hidden_dim, activation='relu')
    self.ffn2 = keras.layers.Dense(model_dim)

  def call(self, x):
    y = self.atten_ln(x)
    x = x + self.atten(y, y, use_causal_mask=True)
    return x + self.ffn2(self.ffn1(self.ffn_ln(x)))


class CharTransformerKeras(keras.Model):
  """Subclassed keras.Model: call(ids [b, t] int32) -> logits [b, t, vocab]."""

  def __init__(self, vocab_size, model_dim, num_layers, num_heads, hidden_dim,
               seq_len, clip_norm):
    super().__init__()
    self.clip_norm = clip_norm
    self.tied = _TiedEmbedding(vocab_size, model_dim, seq_len, name='tied')
    self.blocks = [_Block(model_dim, num_heads, hidden_dim, name='block_%d' % i)
                   for i in range(num_layers)]
    self.final_ln = keras.layers.LayerNormalization(epsilon=1e-6)

  def call(self, ids):
    x = self.tied(ids)
    for block in self.blocks:
      x = block(x)
    return self.tied.Logits(self.final_ln(x))

  def train_step(self, data):
    """Keras 3.15's TF train_step with the gradients clipped per learner."""
    x, y = data
    with tf.GradientTape() as tape:
      y_pred = self(x, training=True)
      loss = self._compute_loss(x=x, y=y, y_pred=y_pred, training=True)  # pylint: disable=protected-access
      self._loss_tracker.update_state(loss, sample_weight=tf.shape(x)[0])  # pylint: disable=protected-access
    weights = self.trainable_weights
    grads = tape.gradient(loss, weights)
    emb = [i for i, w in enumerate(weights) if w is self.tied.emb]
    body = [i for i in range(len(weights)) if i not in emb]
    for group in (emb, body):
      clipped, _ = tf.clip_by_global_norm([grads[i] for i in group],
                                          self.clip_norm)
      for i, g in zip(group, clipped):
        grads[i] = g
    self.optimizer.apply_gradients(zip(grads, weights))
    return self.compute_metrics(x, y, y_pred)


class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """model_dim**-0.5 * min((s + 1) * warmup**-1.5, (s + 1)**-0.5), float64.

  s = the optimizer's iterations before the update (0 at the first), as our
  learner's num_updates; computed in float64 and rounded to float32 once,
  as schedules/transformer.py.
  """

  def __init__(self, model_dim, warmup_steps):
    self.model_dim, self.warmup_steps = model_dim, warmup_steps

  def __call__(self, step):
    s = tf.cast(step, tf.float64) + 1.0
    value = self.model_dim**-0.5 * tf.minimum(
        s * float(self.warmup_steps)**-1.5, tf.math.rsqrt(s))
    return tf.cast(value, tf.float32)

  def get_config(self):
    return dict(model_dim=self.model_dim, warmup_steps=self.warmup_steps)


def Build(task_params, seq_len, warmup_steps, beta1, beta2, epsilon,
          clip_norm):
  """The compiled twin of `task_params` (CharTransformerTask.Params())."""
  tp = task_params
  model = CharTransformerKeras(tp.vocab_size, tp.model_dim, tp.num_layers,
                               tp.num_heads, tp.hidden_dim, seq_len,
                               clip_norm)
  model(tf.zeros([1, seq_len], tf.int32))  # Builds the weights.
  model.compile(
      optimizer=keras.optimizers.Adam(
          learning_rate=NoamSchedule(tp.model_dim, warmup_steps),
          beta_1=beta1, beta_2=beta2, epsilon=epsilon),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=['accuracy'])
  return model


def CopyWeights(task, model):
  """Sets `model`'s weights to `task`'s (our CharTransformerTask's) values.

  Raises:
    ValueError: if the parameter counts differ (naming both).
  """
  ours = {k: v.numpy() for k, v in task.ModelVars().FlattenItems()}
  n_ours = sum(v.size for v in ours.values())
  n_keras = model.count_params()
  if n_ours != n_keras:
    raise ValueError('CharTransformer has %d parameters, its Keras twin %d; '
                     'the twin must mirror configs/lm.py.' % (n_ours, n_keras))
  tp = task.params
  h, d = tp.num_heads, tp.model_dim
  model.tied.emb.assign(ours['emb.emb'])
  model.tied.softmax_bias.assign(ours['emb.softmax_bias'])
  for i, b in enumerate(model.blocks):
    pre = 'stack.blocks[%d].' % i
    for name, ln in (('atten_ln', b.atten_ln), ('ffn_ln', b.ffn_ln)):
      ln.gamma.assign(ours[pre + name + '.scale'])
      ln.beta.assign(ours[pre + name + '.bias'])
    w = ours[pre + 'atten.w_qkv'].reshape(d, 3, h, d // h)
    bias = ours[pre + 'atten.b_qkv'].reshape(3, h, d // h)
    att = b.atten
    for j, dense in enumerate((att.query_dense, att.key_dense,
                               att.value_dense)):
      dense.kernel.assign(w[:, j])
      dense.bias.assign(bias[j])
    att.output_dense.kernel.assign(
        ours[pre + 'atten.w_post'].reshape(h, d // h, d))
    att.output_dense.bias.assign(ours[pre + 'atten.b_post'])
    for n, dense in (('1', b.ffn1), ('2', b.ffn2)):
      dense.kernel.assign(ours[pre + 'ffn.w' + n])
      dense.bias.assign(ours[pre + 'ffn.b' + n])
  model.final_ln.gamma.assign(ours['stack.final_ln.scale'])
  model.final_ln.beta.assign(ours['stack.final_ln.bias'])
  return n_ours
