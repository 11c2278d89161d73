"""Lingvo-style model layers: Params-configured BaseLayers, FProp(theta, ...).

  dense           DenseLayer (y = activation(x @ w + b))
  embedding       EmbeddingLayer (lookup with sparse gradient, tied Logits),
                  PositionalEmbeddingLayer (sinusoids)
  normalization   LayerNorm
  attention       MultiHeadedAttention (causal self-attention)
  transformer     FeedForwardLayer, TransformerBlock (pre-norm),
                  TransformerStack
  dropout         DropoutLayer (keep_prob; only when FProp(..., training=True))
  conv            Conv1DLayer, Pool1DLayer
  keras_layer     KerasLayer (any Keras layer, configured by params)
  activations     GetActivation(name)
  matmul          MatMulLastDim(x, w): x [..., i] @ w [i, o]
  demo            Linear, MlpClassifier: the demo tree of `python -m layers.demo`

Imports point one way: `configs → layers → params` (and learner.tf_log,
which imports nothing of the project and no TensorFlow: see below).
"""

from learner import tf_log as _tf_log

# `python -m layers.demo` imports this package, and TensorFlow with it,
# before layers/demo.py runs: quiet TensorFlow's start-up lines here, for
# that command only (as the trainer does; learner/tf_log.py).
with _tf_log.QuietImportFor('layers.demo'):
  import tensorflow as _tf  # noqa: F401  pylint: disable=unused-import

# pylint: disable=wrong-import-position

from layers.activations import GetActivation
from layers.attention import MultiHeadedAttention
from layers.conv import Conv1DLayer
from layers.conv import Pool1DLayer
from layers.dense import DenseLayer
from layers.dropout import DropoutLayer
from layers.embedding import EmbeddingLayer
from layers.embedding import PositionalEmbeddingLayer
from layers.keras_layer import KerasLayer
from layers.matmul import MatMulLastDim
from layers.normalization import LayerNorm
from layers.transformer import FeedForwardLayer
from layers.transformer import TransformerBlock
from layers.transformer import TransformerStack
