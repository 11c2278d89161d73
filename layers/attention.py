"""Multi-headed (causal) self-attention.

Vaswani et al. 2017, "Attention Is All You Need", section 3.2: scaled
dot-product attention softmax(q k^T / sqrt(d_k)) v over `num_heads` heads
of width model_dim / num_heads, then an output projection. With `causal`,
position t attends to positions <= t only (the decoder's masking, 3.2.3),
so an output never depends on a later input.
"""

import tensorflow as tf

from params import BaseLayer
from params import checks
from layers import dropout
from layers import matmul


class MultiHeadedAttention(BaseLayer):
  """Multi-headed self-attention (Vaswani et al. 2017), causal by default.

  FProp(theta, x, paddings=None, training=False):
    x: float [batch, time, model_dim].
    paddings: optional float [batch, time], 1.0 at padded positions (which
      are never attended to), 0.0 elsewhere.
    training: apply attention dropout (see layers/dropout.py).
    Returns float [batch, time, model_dim], x's dtype.

  Variables: 'w_qkv' [model_dim, 3 * model_dim] (queries, keys, values of
  all heads in one matmul; Glorot-uniform), 'b_qkv' [3 * model_dim],
  'w_post' [model_dim, model_dim], 'b_post' [model_dim] (biases zeros,
  present if `use_bias`). Child 'atten_dropout' on the attention
  probabilities.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('model_dim', 0, 'Width of the input and output; > 0.')
    p.Define('num_heads', 1,
             'Number of heads; must divide model_dim.')
    p.Define('causal', True,
             'Mask attention to later positions (a decoder / language '
             'model). False attends everywhere (an encoder).')
    p.Define('atten_dropout_prob', 0.0,
             'Probability of dropping an attention probability when '
             'training (Lingvo\'s name), in [0, 1).')
    p.Define('use_bias', True, 'Biases on the projections.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(model_dim=checks.Int(1, example=128),
                 num_heads=checks.Int(1, example=4),
                 atten_dropout_prob=checks.Real(0, 1, high_open=True,
                                                example=0.1))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.model_dim % p.num_heads:
      raise ValueError('%s: num_heads (%r) must be > 0 and divide model_dim '
                       '(%r).' % (self.path, p.num_heads, p.model_dim))
    init = 'glorot_uniform' if p.params_init is None else p.params_init
    d = p.model_dim
    self.CreateVariable('w_qkv', [d, 3 * d], init=init)
    self.CreateVariable('w_post', [d, d], init=init)
    if p.use_bias:
      self.CreateVariable('b_qkv', [3 * d], init=0.0)
      self.CreateVariable('b_post', [d], init=0.0)
    self.CreateChild('atten_dropout', dropout.DropoutLayer.Params().Set(
        keep_prob=1.0 - p.atten_dropout_prob))

  def FProp(self, theta, x, paddings=None, training=False):
    """x [batch, time, model_dim] -> [batch, time, model_dim]."""
    p = self.params
    h = p.num_heads
    dh = p.model_dim // h
    batch, time = tf.shape(x)[0], tf.shape(x)[1]
    qkv = matmul.MatMulLastDim(x, theta.w_qkv)
    if p.use_bias:
      qkv = qkv + theta.b_qkv
    qkv = tf.reshape(qkv, [batch, time, 3, h, dh])
    q, k, v = tf.unstack(qkv, axis=2)  # each [batch, time, heads, dh]
    q = q * tf.cast(dh**-0.5, q.dtype)
    logits = tf.einsum('bqhd,bkhd->bhqk', q, k)
    logits = tf.cast(logits, tf.float32)  # softmax in float32
    # Large negative rather than -inf: a fully masked row stays finite.
    very_negative = -1e9
    if p.causal:
      allowed = tf.linalg.band_part(tf.ones([time, time], tf.bool), -1, 0)
      logits = tf.where(allowed[None, None], logits, very_negative)
    if paddings is not None:
      keep = tf.cast(paddings, tf.float32) < 0.5  # [batch, time (keys)]
      logits = tf.where(keep[:, None, None, :], logits, very_negative)
    probs = tf.cast(tf.nn.softmax(logits, axis=-1), x.dtype)
    probs = self.atten_dropout.FProp(theta.atten_dropout, probs,
                                     training=training)
    ctx = tf.einsum('bhqk,bkhd->bqhd', probs, v)
    ctx = tf.reshape(ctx, [batch, time, p.model_dim])
    y = matmul.MatMulLastDim(ctx, theta.w_post)
    if p.use_bias:
      y = y + theta.b_post
    return y
