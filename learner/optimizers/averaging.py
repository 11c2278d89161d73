"""BaseAveraging: a wrapper that keeps a second copy of the weights to evaluate.

Ema (an exponential moving average), Lookahead (the slow weights) and SWA
(an equal-weight average of sampled weights) each keep, per bound variable,
one more variable of the same shape and dtype: the weights evaluation uses.
What they share lives here, so the jobs find and use all three the same way:

  * the copies are created at `Bind` (starting at the variables' values
    then), one per bound variable, in the dict attribute `_averages`, so a
    `tf.train.Checkpoint` saves each under
    '<path to the wrapper>/_averages/<sanitized variable name>/...';
  * `AverageCheckpointKeySuffix(var)` (a classmethod) names that key's end,
    so the read-only jobs (eval, evaler, export) load the copies from a
    checkpoint without building any optimizer
    (learner/training/jobs/eval_restore.py);
  * `EvalAverages()` / `EvalAverageClasses(p)` list this wrapper (and any
    averaging optimizer inside it), so the trainer and the read-only jobs
    find it through the optimizer tree, whatever its class is named;
  * `GetAverage(var)` returns the copy of a bound variable;
  * `SwapAverages()` puts the copies into the variables for evaluation and
    the trained values back on exit (train_and_eval's evaluations).

A subclass implements `_ApplyWrapped(lr, var_grads)`: the inner update, then
how its copies (and, for Lookahead, the variables) move.
"""

import contextlib

import tensorflow as tf

from learner.optimizers import var_grad as var_grad_lib
from learner.optimizers import wrapper

# The name of the attribute `BaseAveraging._averages`: it names the copies in
# a checkpoint ('<path>/_averages/<sanitized variable name>/...'), so
# renaming either breaks every checkpoint written before.
_AVERAGES_ATTR = '_averages'


class BaseAveraging(wrapper.BaseWrapper):
  """Base of the wrappers whose weights to evaluate are a kept copy.

  Class attributes: AVERAGE_NAME, the last part of the copies' TF variable
  names ('<path>/<variable name>/<AVERAGE_NAME>'; names only, the
  checkpoint keys do not depend on it); EVAL_WEIGHTS_LABEL, how the jobs'
  messages name the copies (e.g. 'Evaluating on the EMA averages of the
  weights.').

  Raises:
    ValueError: at construction, as `BaseWrapper` (inner params, an
      accumulation inside, the wrapper's own decoupled_weight_decay).
    RuntimeError: `SwapAverages()` inside a tf.function.
  """

  AVERAGE_NAME = 'average'
  EVAL_WEIGHTS_LABEL = 'averages'

  def __init__(self, params):
    super().__init__(params)
    self._averages = {}  # Named by _AVERAGES_ATTR in checkpoints.

  def Bind(self, vmap):
    """Binds the inner optimizer and creates a copy per new variable."""
    super().Bind(vmap)
    for name, var in self.bound_variables.items():
      key = var_grad_lib.SanitizedName(name)
      if key in self._averages:
        continue
      with tf.init_scope():
        self._averages[key] = tf.Variable(
            var.read_value(),
            name='%s/%s/%s' % (self.path, name, self.AVERAGE_NAME),
            trainable=False)
    return self

  @classmethod
  def AverageCheckpointKeySuffix(cls, var):
    """The end of the checkpoint key of `var`'s copy (a str).

    A `tf.train.Checkpoint` holding this wrapper saves the copy of `var`
    under '<path to it>/_averages/<sanitized name>/.ATTRIBUTES/
    VARIABLE_VALUE'; this returns everything from '/_averages/' on, so a
    checkpoint can be read without building the optimizer.

    Args:
      var: a variable (or its name, a str).
    """
    name = var if isinstance(var, str) else var_grad_lib.VarName(var)
    return '/%s/%s/.ATTRIBUTES/VARIABLE_VALUE' % (
        _AVERAGES_ATTR, var_grad_lib.SanitizedName(name))

  def EvalAverages(self):
    """[this wrapper] and any averaging optimizer inside it."""
    return [self] + super().EvalAverages()

  @classmethod
  def EvalAverageClasses(cls, p):
    """[this class] and the averaging classes inside `p.optimizer`."""
    return [cls] + super().EvalAverageClasses(p)

  def GetAverage(self, var):
    """Returns the copy (a tf.Variable) of the bound variable `var`."""
    return self._averages[var_grad_lib.SanitizedName(
        var_grad_lib.VarName(var))]

  def _VarsAndAverages(self):
    """[(bound variable, its copy)], in the order of `bound_variables`."""
    return [(var, self._averages[var_grad_lib.SanitizedName(name)])
            for name, var in self.bound_variables.items()]

  @contextlib.contextmanager
  def SwapAverages(self):
    """Context manager: variables hold their copies inside, values after.

    Eager only (call it around evaluation, outside tf.function). Swapping
    twice restores both exactly.

    Raises:
      RuntimeError: if called inside a tf.function.
    """
    if not tf.executing_eagerly():
      raise RuntimeError(
          '%s: SwapAverages() swaps values eagerly; call it outside '
          'tf.function, around the evaluation loop.' % self.path)
    self._Swap()
    try:
      yield self
    finally:
      self._Swap()

  def _Swap(self):
    for var, avg in self._VarsAndAverages():
      value = tf.identity(var.read_value())
      var.assign(avg.read_value())
      avg.assign(value)
