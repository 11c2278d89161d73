"""Transformer building blocks: feed-forward layer, pre-norm block, stack.

Vaswani et al. 2017, "Attention Is All You Need" (section 3.3: the
position-wise feed-forward network; 5.4: residual dropout), with the layer
norm moved in front of each sub-layer ("pre-norm": Xiong et al. 2020, "On
Layer Normalization in the Transformer Architecture"; as GPT-2, Radford et
al. 2019), which trains without the post-norm model's long warm-up and
needs a final layer norm after the last block.
"""

import tensorflow as tf

from params import BaseLayer
from params import checks
from layers import activations
from layers import attention
from layers import dropout
from layers import matmul
from layers import normalization


class FeedForwardLayer(BaseLayer):
  """y = act(x @ w1 + b1) @ w2 + b2, position-wise (Vaswani et al. 3.3).

  FProp(theta, x, training=False): x float [..., input_dim] -> float
  [..., output_dim] (output_dim defaults to input_dim). Dropout on the
  hidden activations when training. Variables 'w1' [input_dim, hidden_dim],
  'b1' [hidden_dim], 'w2' [hidden_dim, output_dim], 'b2' [output_dim]
  (Glorot-uniform weights, zero biases).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Input width; > 0.')
    p.Define('hidden_dim', 0, 'Hidden width (4 x input_dim in the paper).')
    p.Define('output_dim', 0, 'Output width; 0 means input_dim.')
    p.Define('activation', 'relu',
             'Hidden activation, one of %s.' % list(activations.NAMES))
    p.Define('activation_dropout_prob', 0.0,
             'Dropout probability on the hidden activations when training.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(input_dim=checks.Int(1, example=128),
                 hidden_dim=checks.Int(1, example=512),
                 output_dim=checks.Int(0, example=128,
                                       why='0 means input_dim'),
                 activation_dropout_prob=checks.Real(0, 1, high_open=True,
                                                     example=0.1))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._act = activations.GetActivation(p.activation, self.path)
    out_dim = p.output_dim or p.input_dim
    init = 'glorot_uniform' if p.params_init is None else p.params_init
    self.CreateVariable('w1', [p.input_dim, p.hidden_dim], init=init)
    self.CreateVariable('b1', [p.hidden_dim], init=0.0)
    self.CreateVariable('w2', [p.hidden_dim, out_dim], init=init)
    self.CreateVariable('b2', [out_dim], init=0.0)
    self.CreateChild('activation_dropout', dropout.DropoutLayer.Params().Set(
        keep_prob=1.0 - p.activation_dropout_prob))

  def FProp(self, theta, x, training=False):
    """x [..., input_dim] -> [..., output_dim]."""
    h = self._act(matmul.MatMulLastDim(x, theta.w1) + theta.b1)
    h = self.activation_dropout.FProp(theta.activation_dropout, h,
                                      training=training)
    return matmul.MatMulLastDim(h, theta.w2) + theta.b2


class TransformerBlock(BaseLayer):
  """A pre-norm Transformer block (decoder-only by default: causal).

    x = x + dropout(atten(LN(x)))
    x = x + dropout(ffn(LN(x)))

  FProp(theta, x, paddings=None, training=False): x float [batch, time,
  model_dim] -> same shape and dtype; `paddings` float [batch, time] as in
  MultiHeadedAttention. Children 'atten_ln', 'atten', 'ffn_ln', 'ffn',
  'residual_dropout'.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('model_dim', 0, 'Width of the block; > 0.')
    p.Define('num_heads', 1, 'Attention heads; must divide model_dim.')
    p.Define('hidden_dim', 0,
             'Feed-forward hidden width; 0 means 4 * model_dim.')
    p.Define('activation', 'relu',
             'Feed-forward activation, one of %s.' % list(activations.NAMES))
    p.Define('causal', True, 'Causal (decoder) attention.')
    p.Define('atten_dropout_prob', 0.0,
             'Dropout probability on the attention probabilities.')
    p.Define('activation_dropout_prob', 0.0,
             'Dropout probability on the feed-forward hidden activations.')
    p.Define('residual_dropout_prob', 0.0,
             'Dropout probability on each sub-layer\'s output before it is '
             'added to the residual (Vaswani et al. 5.4).')
    p.Define('ln_epsilon', 1e-6, 'LayerNorm epsilon.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(model_dim=checks.Int(1, example=128),
                 num_heads=checks.Int(1, example=4),
                 hidden_dim=checks.Int(0, example=512,
                                       why='0 means 4 x model_dim'),
                 ln_epsilon=checks.Real(0, low_open=True, example=1e-6))
    for key in ('atten_dropout_prob', 'activation_dropout_prob',
                'residual_dropout_prob'):
      specs[key] = checks.Real(0, 1, high_open=True, example=0.1)
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    ln = normalization.LayerNorm.Params().Set(input_dim=p.model_dim,
                                              epsilon=p.ln_epsilon)
    self.CreateChild('atten_ln', ln)
    self.CreateChild('atten', attention.MultiHeadedAttention.Params().Set(
        model_dim=p.model_dim, num_heads=p.num_heads, causal=p.causal,
        atten_dropout_prob=p.atten_dropout_prob))
    self.CreateChild('ffn_ln', ln)
    self.CreateChild('ffn', FeedForwardLayer.Params().Set(
        input_dim=p.model_dim, hidden_dim=p.hidden_dim or 4 * p.model_dim,
        activation=p.activation,
        activation_dropout_prob=p.activation_dropout_prob))
    self.CreateChild('residual_dropout', dropout.DropoutLayer.Params().Set(
        keep_prob=1.0 - p.residual_dropout_prob))

  def FProp(self, theta, x, paddings=None, training=False):
    """x [batch, time, model_dim] -> [batch, time, model_dim]."""
    drop = self.residual_dropout
    y = self.atten_ln.FProp(theta.atten_ln, x)
    y = self.atten.FProp(theta.atten, y, paddings=paddings, training=training)
    x = x + drop.FProp(theta.residual_dropout, y, training=training)
    y = self.ffn_ln.FProp(theta.ffn_ln, x)
    y = self.ffn.FProp(theta.ffn, y, training=training)
    return x + drop.FProp(theta.residual_dropout, y, training=training)


class TransformerStack(BaseLayer):
  """num_layers TransformerBlocks, then a final LayerNorm (pre-norm needs it).

  FProp(theta, x, paddings=None, training=False): x float [batch, time,
  model_dim] -> same shape. Children 'blocks' (a list, 'blocks_0', ...) and
  'final_ln'.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('num_layers', 1, 'Number of blocks; > 0.')
    p.Define('block', TransformerBlock.Params(),
             'Params of every block (model_dim etc. are set here).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['num_layers'] = checks.Int(1, example=2)
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self.CreateChildren('blocks', [p.block.Copy() for _ in range(p.num_layers)])
    self.CreateChild('final_ln', normalization.LayerNorm.Params().Set(
        input_dim=p.block.model_dim, epsilon=p.block.ln_epsilon))

  def FProp(self, theta, x, paddings=None, training=False):
    """x [batch, time, model_dim] -> [batch, time, model_dim]."""
    for block, block_theta in zip(self.blocks, theta.blocks):
      x = block.FProp(block_theta, x, paddings=paddings, training=training)
    return self.final_ln.FProp(theta.final_ln, x)
