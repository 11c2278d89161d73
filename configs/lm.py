"""A character language model on the pydoc text: a small decoder Transformer.

  lm.CharTransformer   2 pre-norm blocks, model_dim 128, tied embedding;
                       two learners (the embedding; the rest).
  lm.CharTransformerScheduleFree
                       the same model, data and seed; schedule-free AdamW,
                       a constant rate (no decay schedule).
  lm.CharTransformerMuon  the same model: Muon on the stack's matrices,
                       AdamW on the rest (optimizers.Muon.TwoLearners).

The data is configs/char_data.py's (CPython's pydoc topics, ~465,000
characters, the last 10 % held out); the baselines a model must beat are
4.69 bits/char (unigram) and 3.55 (bigram) on the held-out text.
"""

import math

import tensorflow as tf

import layers
from params import NestedMap
from params import checks
from params import registry
from learner import learner as learner_lib
from learner import optimizers
from learner.training.model import task as task_lib
from schedules.base_schedule import ConstantOne
from schedules.composite import PiecewiseSchedule
from schedules.polynomial import PolynomialSchedule
from schedules.transformer import TransformerSchedule
from schedules.wsd import WarmupStableDecay
from configs import inputs

_LN2 = math.log(2.0)


class CharTransformerTask(task_lib.BaseTask):
  """A decoder-only Transformer over characters, input/output tied.

  Batch: 'ids' int32 [batch, time], 'labels' int32 [batch, time] (the next
  characters). Children: 'emb' (layers.EmbeddingLayer: the table 'emb'
  [vocab_size, model_dim], looked up scaled by sqrt(model_dim), and the
  softmax 'softmax_bias' [vocab_size]), 'pos' (sinusoids), 'stack'
  (layers.TransformerStack: pre-norm blocks with causal self-attention and a
  final LayerNorm). Logits = stack output @ emb^T + softmax_bias.

  The table is used twice, so its gradient is the sum of the lookup's part
  (a tf.IndexedSlices: only the rows of the batch's characters) and the
  softmax's part (dense: every row); TF's tape adds them into one dense
  [vocab_size, model_dim] gradient, and the one learner that trains 'emb'
  applies that sum once per step.

  `dropout_prob` (default 0: none) drops, in train steps only, the input
  (embedding + positions), the attention probabilities and each block's
  sub-layer outputs before the residual add (Vaswani et al. 2017, 5.4);
  evaluation is deterministic. The task knows a train step by its own
  `_ReplicaStep`, which traces FProp with `training=True`.

  `remat_blocks` (default False) recomputes each block's activations in the
  backward pass instead of keeping them (`BaseLayer`'s `remat`): the same
  gradients, less peak memory, one more forward pass of the blocks without
  drawing their dropout masks again (benchmarks/remat.py).

  Metrics (weight = target characters in the batch): 'loss', the mean
  cross-entropy in nats; 'bits_per_char' = loss / ln 2; 'accuracy', the
  fraction of next characters predicted exactly (argmax).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('vocab_size', 103, 'Characters in the vocabulary.')
    p.Define('model_dim', 128, 'Width of embeddings and blocks.')
    p.Define('num_layers', 2, 'Transformer blocks.')
    p.Define('num_heads', 4, 'Attention heads per block.')
    p.Define('hidden_dim', 512, 'Feed-forward hidden width (ReLU).')
    p.Define('dropout_prob', 0.0,
             'Dropout probability, in training steps only, on the input '
             '(embedding + positions), the attention probabilities and '
             'each sub-layer output before its residual add; 0: none.')
    p.Define('remat_blocks', False,
             'Rematerialize every Transformer block (its `remat` param, '
             'params/remat.py): the backward pass recomputes each block\'s '
             'activations instead of keeping them, for less peak memory at '
             'the cost of one more forward pass of the blocks per step.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    for key, example in (('vocab_size', 103), ('model_dim', 128),
                         ('num_layers', 2), ('num_heads', 4),
                         ('hidden_dim', 512)):
      specs[key] = checks.Int(1, example=example)
    specs['dropout_prob'] = checks.Real(0, 1, high_open=True, example=0.1)
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self.CreateChild('emb', layers.EmbeddingLayer.Params().Set(
        vocab_size=p.vocab_size, embedding_dim=p.model_dim,
        scale_sqrt_depth=True, softmax_bias=True))
    self.CreateChild('pos', layers.PositionalEmbeddingLayer.Params().Set(
        embedding_dim=p.model_dim))
    sp = layers.TransformerStack.Params().Set(num_layers=p.num_layers)
    sp.block.Set(model_dim=p.model_dim, num_heads=p.num_heads,
                 hidden_dim=p.hidden_dim, atten_dropout_prob=p.dropout_prob,
                 residual_dropout_prob=p.dropout_prob, remat=p.remat_blocks)
    self.CreateChild('stack', sp)
    self.CreateChild('input_dropout', layers.DropoutLayer.Params().Set(
        keep_prob=1.0 - p.dropout_prob))
    self._training = False

  def _ReplicaStep(self, batch):
    """BaseTask's train step, traced with dropout on (`training=True`).

    Evaluation (EvalStep) traces FProp with the flag off: no dropout.
    """
    self._training = True
    try:
      return super()._ReplicaStep(batch)
    finally:
      self._training = False

  def ComputePredictions(self, theta, batch):
    ids = tf.cast(batch.ids, tf.int32)
    x = self.emb.EmbLookup(theta.emb, ids)
    x += self.pos.FProp(theta.pos, tf.shape(ids)[1])[None]
    x = self.input_dropout.FProp(theta.input_dropout, x,
                                 training=self._training)
    x = self.stack.FProp(theta.stack, x, training=self._training)
    return NestedMap(logits=self.emb.Logits(theta.emb, x))

  def ComputeLoss(self, theta, predictions, batch):
    logits = tf.cast(predictions.logits, tf.float32)
    labels = tf.cast(batch.labels, tf.int32)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits)
    correct = tf.cast(tf.equal(
        tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
    n = tf.cast(tf.size(labels), tf.float32)
    loss = tf.reduce_mean(xent)
    metrics = NestedMap(loss=(loss, n), bits_per_char=(loss / _LN2, n),
                        accuracy=(tf.reduce_mean(correct), n))
    return metrics, NestedMap(xent=xent)


def CharLmInput(split, batch_size, seq_len):
  """Train: random windows, repeated; test: one ordered pass."""
  p = inputs.CharLmInput.Params().Set(
      name='%s_input' % split, split=split, batch_size=batch_size,
      seq_len=seq_len, seed=1)
  if split == 'test':
    p.Set(shuffle=False, num_epochs=1, drop_remainder=False)
  return p


@registry.Register
class CharTransformer:
  """Char Transformer LM on the pydoc text: 2 blocks, tied emb, two learners.

  model_dim 128, 4 heads, FFN 512 (ReLU), sinusoidal positions, pre-norm,
  final LayerNorm, embedding tied to the softmax (input scaled by
  sqrt(128); softmax bias), no dropout; windows of 64 characters, batch 64.
  Learner 'embedding' (bprop_variable_filter 'emb/emb$', the table only): Adam
  on the summed lookup + softmax gradient. Learner 'body' (every other
  variable): Adam. Both: beta1 0.9, beta2 0.98, epsilon 1e-9,
  learning_rate 1.0 x Lingvo's TransformerSchedule (model_dim 128, warmup
  200: peak 6.25e-3 at update 200, then 1/sqrt decay), gradients clipped to
  a global norm of 1.0 (each learner over its own variables). Checkpoints
  hold no input iterator (a resume skips the batches already taken).

  Measured (full run, see README): held-out bits_per_char in the table of
  the README; a unigram model scores 4.69, a bigram 3.55.
  """

  BATCH_SIZE = 64
  SEQ_LEN = 64
  MAX_STEPS = 400
  WARMUP = 200
  MODEL_DIM = 128
  EMB_FILTER = 'emb/emb$'

  def _Learner(self, name, **kwargs):
    return learner_lib.Learner.Params().Set(
        name=name, loss_name='loss', learning_rate=1.0,
        lr_schedule=TransformerSchedule.Params().Set(
            model_dim=self.MODEL_DIM, warmup_steps=self.WARMUP),
        optimizer=optimizers.Adam.Params().Set(beta1=0.9, beta2=0.98,
                                               epsilon=1e-9),
        clip_gradient_norm_to_value=1.0, var_norm_metrics=False, **kwargs)

  def Task(self):
    p = CharTransformerTask.Params().Set(name='lm', random_seed=1,
                                         model_dim=self.MODEL_DIM)
    p.train.max_steps = self.MAX_STEPS
    p.train.save_interval_steps = 300
    p.train.summary_interval_steps = 50
    p.train.save_max_to_keep = 3  # Ours, not Lingvo's 100.
    p.train.steps_per_loop = 100
    p.train.log_interval_steps = 50
    # The train input shuffles 418,000 windows in one tf.data buffer, which
    # an iterator checkpoint saves element by element (83 MB, ~18 s per
    # checkpoint); the input is deterministic, so resume by skip is exact.
    p.train.checkpoint_input_iterator = False
    p.eval.dev_metric = 'bits_per_char'
    p.train.learner = [
        self._Learner('embedding', bprop_variable_filter=self.EMB_FILTER),
        self._Learner('body', bprop_variable_exclusion=self.EMB_FILTER)]
    return p

  def Train(self):
    return CharLmInput('train', self.BATCH_SIZE, self.SEQ_LEN)

  def Eval(self):
    return CharLmInput('test', 256, self.SEQ_LEN)


@registry.Register
class CharTransformerWsd(CharTransformer):
  """lm.CharTransformer with a warmup-stable-decay schedule (issue 25).

  The same model, data order, seed, optimizers and clipping; each learner's
  rate is PEAK (the TransformerSchedule's peak, 6.25e-3) times
  WarmupStableDecay: a linear warmup over WARMUP updates, constant, then a
  1-sqrt cooldown to 0 over the last 20 % of MAX_STEPS (Haegele et al.
  2024). Measured against lm.CharTransformer at equal steps in the README.
  """

  PEAK = 6.25e-3
  WSD_WARMUP = 100
  COOLDOWN = 0.2

  def _Learner(self, name, **kwargs):
    p = super()._Learner(name, **kwargs)
    return p.Set(learning_rate=self.PEAK,
                 lr_schedule=WarmupStableDecay.Params().Set(
                     warmup_steps=self.WSD_WARMUP, total_steps=self.MAX_STEPS,
                     decay_steps=int(self.COOLDOWN * self.MAX_STEPS),
                     decay_shape='1-sqrt'))


@registry.Register
class CharTransformerScheduleFree(CharTransformer):
  """lm.CharTransformer trained by schedule-free AdamW, with no decay schedule.

  The same model, data order, seed, two learners and clipping (global norm
  1.0 per learner) as lm.CharTransformer; each learner's optimizer is
  `ScheduleFreeAdamW` (beta1 0.9, beta2 0.98, epsilon 1e-9) at a constant
  rate LEARNING_RATE after its own linear warmup of SF_WARMUP updates, and
  the evaluations (train_and_eval, eval, evaler, export) read its eval
  weights x. Source: Defazio et al., "The Road Less Scheduled", 2024.

  Measured on one machine, 400 steps, held-out bits_per_char evaluated on
  x (lm.CharTransformer: 2.042 in the same setup): the rate, tuned on this
  held-out score with warmup 100 (beta1/beta2/epsilon not tuned):
  3.125e-3: 2.211, 6.25e-3 (lm.CharTransformer's peak): 2.013, 1.25e-2:
  1.901 (warmup 50: 1.910), 2.5e-2: 1.867 (chosen), 5e-2: 1.971, 1e-1:
  2.217. At 2.5e-2, step 100/200/300: 2.606/2.141/1.964. Evaluated on y
  instead of x (1.25e-2, step 400): 1.951 against x's 1.901.
  """

  LEARNING_RATE = 2.5e-2
  SF_WARMUP = 100

  def _Learner(self, name, **kwargs):
    p = super()._Learner(name, **kwargs)
    return p.Set(
        learning_rate=self.LEARNING_RATE, lr_schedule=ConstantOne.Params(),
        optimizer=optimizers.ScheduleFreeAdamW.Params().Set(
            beta1=0.9, beta2=0.98, epsilon=1e-9,
            warmup_steps=self.SF_WARMUP))


@registry.Register
class CharTransformerMuon(CharTransformer):
  """lm.CharTransformer trained by Muon + AdamW: two learners (Muon's recipe).

  The same model, data order, seed, steps, clipping and loss as
  lm.CharTransformer; the learners are `optimizers.Muon.TwoLearners`'s:
  'muon' (bprop_variable_filter MATRICES: the stack's w_qkv, w_post, w1,
  w2) with Muon (Nesterov, beta MUON_BETA, optax's bias-corrected form,
  width scaling sqrt(max(1, fan_out / fan_in)): sqrt(3) for w_qkv and w1),
  learning_rate MUON_LR x TransformerSchedule (model_dim 128, warmup
  MUON_WARMUP); 'adamw' (every other variable: the tied embedding, which is
  also the head, the softmax bias, LayerNorms and biases) with
  lm.CharTransformer's Adam settings (beta2 0.98, epsilon 1e-9, no weight
  decay) and schedule. Measured (tools/measure_muon.py, held-out bits/char
  every 50 steps): 3.28, 2.60, 2.24, 2.12, 2.04, 1.99 at step 300, where
  lm.CharTransformer has 3.74, 3.16, 2.73, 2.52, 2.30, 2.20 (2.04 at 400):
  Adam's 400-step 2.0424 is passed at step 260 (2.0186; evaluated every
  10 steps).
  MUON_LR tried: 2 (1.994 at 300), 4 (1.993), 8 (2.222); warmup 50. Newton-
  Schulz is 7-9 % of a step (e.g. 151.9 ms with, 139.6 ms without).
  """

  MATRICES = r'/stack/.*/w\w*$'
  MUON_LR = 4.0
  MUON_BETA = 0.95
  MUON_WARMUP = 50

  def Task(self):
    p = super().Task()
    base = self._Learner('base')
    adamw = optimizers.AdamW.Params().Set(
        beta1=0.9, beta2=0.98, epsilon=1e-9, decoupled_weight_decay=0.0)
    muon, rest = optimizers.Muon.TwoLearners(
        base, self.MATRICES,
        muon=optimizers.Muon.Params().Set(beta=self.MUON_BETA), adamw=adamw,
        muon_learning_rate=self.MUON_LR)
    muon.lr_schedule.warmup_steps = self.MUON_WARMUP
    p.train.learner = [muon, rest]
    return p


@registry.Register
class CharTransformerLarge(CharTransformerMuon):
  """The compressor-bound attempt (issue 25): a wider, deeper char LM.

  lm.CharTransformerMuon's learners (Muon on the block matrices, Adam on the
  rest, TransformerSchedule at MODEL_DIM) on a model of MODEL_DIM 192,
  NUM_LAYERS 3, 6 heads, FFN 768, windows of SEQ_LEN 128 characters, batch
  BATCH_SIZE 32, dropout DROPOUT_PROB, MAX_STEPS steps; each learner's
  rate follows its TransformerSchedule until the last COOLDOWN of the run,
  then cools down to 0 by 1 - sqrt from the value it had there
  (`WithCooldown`; the cooldown is placed by MAX_STEPS: `--max_steps`
  stops the run elsewhere without moving it, and a subclass with another
  MAX_STEPS moves it). The target is the held-out bits/char `xz -9e` reaches
  given the train text (1.411: `python -m configs.char_data
  --compressor_bound`); not reached.
  Measured (the full run, 2026-12-04, a quiet 2-core machine, 1.4-1.7
  steps/s, about 28 minutes of training): held-out 2.131, 1.752, 1.716,
  1.673, 1.665 at steps 300, 900, 1200, 1500, 1800 (the cooldown starts
  at 1920), 1.633 at 2100 and 1.621 at 2400. Earlier: without dropout
  (stopped at 2400) it overfits the 418,000 train characters after about
  600 steps (best 1.791); with dropout 0.1 and no cooldown, 1.660 at
  step 1800; dropout 0.2: 2.401 at 300 (stopped).
  """

  DROPOUT_PROB = 0.1
  BATCH_SIZE = 32
  SEQ_LEN = 128
  MODEL_DIM = 192
  NUM_LAYERS = 3
  NUM_HEADS = 6
  HIDDEN_DIM = 768
  MAX_STEPS = 2400
  WARMUP = 200
  COOLDOWN = 0.2

  def Task(self):
    p = super().Task()
    p.Set(num_layers=self.NUM_LAYERS, num_heads=self.NUM_HEADS,
          hidden_dim=self.HIDDEN_DIM, dropout_prob=self.DROPOUT_PROB)
    p.train.save_interval_steps = 300
    p.train.steps_per_loop = 100
    p.train.log_interval_steps = 100
    p.eval.interval_steps = 300
    if self.COOLDOWN:
      for lp in p.train.learner:
        lp.lr_schedule = self.WithCooldown(lp.lr_schedule)
    return p

  def WithCooldown(self, schedule):
    """`schedule`, then a 1-sqrt cooldown to 0 over the last COOLDOWN.

    Args:
      schedule: schedule params (the learner's TransformerSchedule).

    Returns:
      PiecewiseSchedule params: `schedule` on [0, c), then
      y(c) * (1 - sqrt((step - c) / D)) on [c, MAX_STEPS], with
      D = round(COOLDOWN * MAX_STEPS), c = MAX_STEPS - D and y(c) the
      schedule's own value at c (no jump). Source: Haegele et al. 2024
      (the 1-sqrt shape; here applied to a decaying rather than constant
      stable phase).
    """
    decay = int(round(self.COOLDOWN * self.MAX_STEPS))
    start = self.MAX_STEPS - decay
    y_c = float(schedule.Copy().Instantiate().Value(start).numpy())
    return PiecewiseSchedule.Params().Set(
        boundaries=[start],
        schedules=[schedule.Copy(), PolynomialSchedule.Params().Set(
            power=0.5, start=(0, y_c), limit=(decay, 0.0))])
