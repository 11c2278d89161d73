"""Token embeddings (with a tied softmax) and sinusoidal positions.

  * `EmbeddingLayer`: ids -> vectors by `tf.gather` on the table, so the
    table's gradient is a `tf.IndexedSlices` (only the rows looked up), and
    `Logits(theta, x)` = x @ emb^T (+ bias): the same table as the output
    projection, i.e. input and output embeddings tied (Press & Wolf 2017,
    "Using the Output Embedding to Improve Language Models"; Inan et al.
    2017). One variable, used twice.
  * `PositionalEmbeddingLayer`: the fixed sinusoids of Vaswani et al. 2017,
    "Attention Is All You Need", section 3.5 (as Lingvo's
    layers.PositionalEmbeddingLayer: sin in the first half of the
    dimensions, cos in the second).
"""

import math

import tensorflow as tf

from params import BaseLayer
from params import checks
from layers import matmul


class EmbeddingLayer(BaseLayer):
  """An embedding table [vocab_size, embedding_dim] with a tied softmax.

  `EmbLookup(theta, ids)` (also `FProp`): ids int [...] -> float
  [..., embedding_dim] in fprop_dtype, multiplied by sqrt(embedding_dim) if
  `scale_sqrt_depth` (Vaswani et al. 2017, section 3.4). The table's
  gradient is a tf.IndexedSlices when the table is used only for lookups.

  `Logits(theta, x)`: x float [..., embedding_dim] -> float [...,
  vocab_size] = x @ emb^T (+ 'softmax_bias' if `softmax_bias`). Used
  together with the lookup, the table's gradient is the (dense) sum of both
  uses.

  Variables: 'emb' [vocab_size, embedding_dim], Gaussian with stddev
  embedding_dim**-0.5 unless params_init says otherwise (so logits of
  unit-variance inputs start with unit variance); 'softmax_bias'
  [vocab_size] (zeros) if `softmax_bias`.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('vocab_size', 0, 'Number of ids (rows of the table); > 0.')
    p.Define('embedding_dim', 0, 'Width of an embedding; > 0.')
    p.Define('scale_sqrt_depth', False,
             'Multiply looked-up embeddings by sqrt(embedding_dim), as in '
             'the Transformer (Vaswani et al. 2017, 3.4).')
    p.Define('softmax_bias', False,
             'Create a [vocab_size] bias that `Logits` adds.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(vocab_size=checks.Int(1, example=1000),
                 embedding_dim=checks.Int(1, example=128))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    init = p.params_init
    if init is None:
      init = {'class_name': 'RandomNormal',
              'config': {'mean': 0.0, 'stddev': p.embedding_dim**-0.5}}
    self.CreateVariable('emb', [p.vocab_size, p.embedding_dim], init=init)
    if p.softmax_bias:
      self.CreateVariable('softmax_bias', [p.vocab_size], init=0.0)

  def EmbLookup(self, theta, ids):
    """ids int [...] -> embeddings float [..., embedding_dim]."""
    p = self.params
    y = tf.gather(theta.emb, ids)
    if p.scale_sqrt_depth:
      y = y * tf.cast(math.sqrt(p.embedding_dim), y.dtype)
    return y

  def FProp(self, theta, ids):
    """Same as EmbLookup."""
    return self.EmbLookup(theta, ids)

  def Logits(self, theta, x):
    """x float [..., embedding_dim] -> logits float [..., vocab_size]."""
    logits = matmul.MatMulLastDim(x, theta.emb, transpose_w=True)
    if self.params.softmax_bias:
      logits = logits + theta.softmax_bias
    return logits


class PositionalEmbeddingLayer(BaseLayer):
  """Sinusoidal position embeddings (Vaswani et al. 2017, section 3.5).

  FProp(theta, seq_length) -> float [seq_length, embedding_dim] (fprop
  dtype): for position t and i < embedding_dim / 2, with
  timescale_i = min_timescale * (max_timescale / min_timescale)
  ** (i / (embedding_dim / 2 - 1)), element i is sin(t / timescale_i) and
  element embedding_dim / 2 + i is cos(t / timescale_i). With the default
  timescales (1, 10^4) this is the paper's sin(t / 10000^(2i / d)) up to the
  order of the dimensions (Lingvo / tensor2tensor order). No variables.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('embedding_dim', 0, 'Width; must be even and >= 4.')
    p.Define('min_timescale', 1.0, 'Shortest wavelength / (2 pi).')
    p.Define('max_timescale', 1.0e4, 'Longest wavelength / (2 pi).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(embedding_dim=checks.Int(4, example=128),
                 min_timescale=checks.Real(0, low_open=True, example=1.0),
                 max_timescale=checks.Real(0, low_open=True, example=1.0e4))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.embedding_dim < 4 or p.embedding_dim % 2:
      raise ValueError('%s: embedding_dim must be even and >= 4, got %r.' %
                       (self.path, p.embedding_dim))

  def FProp(self, theta, seq_length):
    """seq_length int scalar -> [seq_length, embedding_dim]."""
    p = self.params
    half = p.embedding_dim // 2
    log_increment = (math.log(p.max_timescale / p.min_timescale) /
                     max(half - 1, 1))
    inv_timescales = (1.0 / p.min_timescale) * tf.exp(
        tf.range(half, dtype=tf.float32) * -log_increment)
    position = tf.cast(tf.range(seq_length), tf.float32)
    scaled = position[:, None] * inv_timescales[None, :]
    signal = tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=1)
    return tf.cast(signal, self.fprop_dtype)
