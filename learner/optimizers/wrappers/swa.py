"""SWA: an equal-weight average of the weights sampled along training.

  After the update numbered i (0-based: this wrapper's num_updates before
  it), the weights are sampled when
    i >= swa_start and (i - swa_start) % swa_freq == 0;
  with n the number of samples so far (this one included):
    n == 1:  avg <- w                       (the first sample is copied)
    n > 1:   avg <- avg + (w - avg) / n     (the running mean)
  so avg is the mean of the n sampled weights. Before the first sample avg
  follows the weights (avg <- w after every update), so an evaluation
  before swa_start sees the trained weights. Evaluation uses avg.

Source: Izmailov, Podoprikhin, Garipov, Vetrov & Wilson, "Averaging Weights
Leads to Wider Optima and Better Generalization", UAI 2018 (Algorithm 1);
the running mean and first-sample copy of PyTorch's
torch.optim.swa_utils.AveragedModel (update_parameters with its default
averaging function); the sampling steps of TF Addons' tfa.optimizers.SWA
(start_averaging, average_period).
"""

import tensorflow as tf

from learner.optimizers import wrapper
from params import checks


class SWA(wrapper.BaseAveraging):
  """Stochastic Weight Averaging around an inner optimizer (`p.optimizer`).

  Each `Apply` hands the update to the inner optimizer, then samples the
  variables into their average at the updates `swa_start`, `swa_start +
  swa_freq`, ... (0-based, counted in this wrapper's `num_updates`, so a
  resumed run samples at the same updates; under gradient accumulation
  they count windows). `num_averaged` (int64, checkpointed) counts the
  samples. The average is evaluated: found through `EvalAverages()` /
  `EvalAverageClasses(p)`, swapped in by `SwapAverages()` and read from a
  checkpoint by `AverageCheckpointKeySuffix` (see `wrapper.BaseAveraging`);
  `GetAverage(var)` is the average of `var` (same shape and dtype).

  The paper pairs SWA with a constant or cyclic learning rate from
  swa_start on: that is the learner's `lr_schedule` (e.g.
  `schedules.PiecewiseConstantSchedule` to drop to a constant at
  swa_start, or a `CycleSchedule` whose period is swa_freq), not a param
  here.
  BatchNorm statistics are not recomputed for the averaged weights (the
  paper's extra pass over the training data, PyTorch's
  swa_utils.update_bn): a model with batch normalization is evaluated with
  the moving statistics of the trained weights.

  Raises:
    ValueError: at construction, if swa_start is not an int >= 0 or
      swa_freq not an int >= 1, or as `BaseWrapper` (inner params, an
      accumulation inside, this wrapper's own decoupled_weight_decay).
  """

  AVERAGE_NAME = 'swa_average'
  EVAL_WEIGHTS_LABEL = 'SWA averages'
  SHARDS_WITH_RULE = True  # ZeRO-1 shards the average (elementwise move).

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'swa'
    p.Define('swa_start', 0,
             'The first update sampled into the average, 0-based in this '
             'wrapper\'s num_updates (0: the weights after the first '
             'update); an int >= 0.')
    p.Define('swa_freq', 1,
             'Updates between two samples from swa_start on; an int >= 1 '
             '(e.g. the number of updates of an epoch, or of a cycle of a '
             'cyclic rate).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['swa_start'] = checks.Int(0, example=1000)
    specs['swa_freq'] = checks.Int(1, example=100)
    return specs

  def __init__(self, params):
    super().__init__(params)
    self._num_averaged = self.CreateVariable(
        'num_averaged', [], init=0, trainable=False, dtype=tf.int64)

  @property
  def num_averaged(self):
    """int64 variable: the samples taken into the average so far."""
    return self._num_averaged

  def SampleNext(self):
    """bool scalar: whether the weights after the next update are sampled."""
    p = self.params
    i = self.num_updates.read_value()
    start = tf.constant(p.swa_start, tf.int64)
    return tf.logical_and(
        i >= start,
        tf.equal(tf.math.floormod(i - start, tf.constant(p.swa_freq,
                                                         tf.int64)), 0))

  def _ApplyWrapped(self, lr, var_grads):
    """The inner update, then the average's sample (or follow) step
    (`_ApplyAndMove`: whole, or on this replica's shards under ZeRO-1);
    the average moves when sampling or while no sample was taken."""
    sample = self.SampleNext()
    n_old = self._num_averaged.read_value()
    n = n_old + tf.cast(sample, tf.int64)
    moves = tf.logical_or(sample, tf.equal(n_old, 0))

    def _Average(w, a):
      mean = a + (w - a) / tf.cast(tf.maximum(n, 1), a.dtype)
      # No sample yet, or the first now: the average is the weights.
      return tf.where(n <= 1, w, mean), None

    ops = self._ApplyAndMove(lr, var_grads, _Average, pred=moves)
    with tf.control_dependencies([o for o in ops if o is not None]):
      return ops + [self._num_averaged.assign(n)]
