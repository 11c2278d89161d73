"""MoXing-style entry point: `learner.run(model_fn=..., input_fn=..., ...)`.

For people who do not want registry classes: give a model function, an
input function and an optimizer function, and `run` trains or evaluates
with the same trainer, checkpoints, summaries and rules as
`python -m learner.trainer`:

    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])

    def input_fn(mode):
      return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)

    def model_fn(inputs, mode):
      x, y = inputs
      loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
          y, model(x), from_logits=True))
      return learner.ModelSpec(loss=loss, log_info={'xent': loss})

    learner.run(model_fn=model_fn, input_fn=input_fn,
                optimizer_fn=learner.get_optimizer_fn('momentum',
                                                      learning_rate=0.1),
                run_mode=learner.ModeKeys.TRAIN, log_dir='/tmp/run',
                max_number_of_steps=100)

The rules (MoXing's): an optimizer is required to train and not needed to
evaluate; `optimizer_fn` must be a callable (a factory, or
`lambda: tf.keras.optimizers.Adam(1e-3)`), and an optimizer instance gets a
TypeError showing the fix; EVAL ignores `optimizer_fn`.

The model's variables are those `model_fn` creates or reads (trainable ones)
on its first call, made once, eagerly, on the first batch, then reused; any
tf.Variable or Keras layer works, as long as their names are distinct.
"""

import collections

import tensorflow as tf

from params import BaseLayer
from params import NestedMap
from params import checks
from params import hyperparams
from learner import learner as learner_lib
from learner.optimizers import factory as optimizer_factory
from learner.training.model import task as task_lib
from learner.training.jobs import trainer as trainer_lib
from learner.optimizers import var_grad
from learner.training.jobs.mode_keys import ModeKeys
from schedules.base_schedule import ConstantOne

class ModelSpec(collections.namedtuple('ModelSpec', ['loss', 'log_info'])):
  """What `model_fn(inputs, mode)` returns (MoXing's `mox.ModelSpec`).

  Fields:
    loss: float scalar Tensor, the loss to minimise (mean over the batch).
    log_info: optional dict {name: float scalar Tensor} of metrics to report
      (summaries, logs, eval results), each averaged over the batch.
  """
  __slots__ = ()

  def __new__(cls, loss, log_info=None):
    return super().__new__(cls, loss, dict(log_info or {}))


def _BatchSize(inputs):
  first = tf.nest.flatten(inputs)[0]
  return tf.cast(tf.shape(first)[0], tf.float32)


class FnTask(task_lib.BaseTask):
  """A task around a MoXing-style `model_fn(inputs, mode) -> ModelSpec`.

  Metrics: 'loss' and every `log_info` entry, weighted by the batch size
  (the first dimension of the first input tensor).

  The model's variables: every variable model_fn creates on its first call
  plus every trainable variable it reads then (created before, e.g. a Keras
  model built outside).

  Raises:
    ValueError: if model_fn creates no variable, creates two with the same
      name, or log_info uses the name 'loss'.
    TypeError: if model_fn does not return a ModelSpec.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('model_fn', None, 'Callable (inputs, mode) -> ModelSpec.')
    p.Define('input_fn', None,
             'Callable (mode) -> tf.data.Dataset of batches; its first batch '
             'builds the model\'s variables.')
    p.Define('mode', ModeKeys.TRAIN, 'The mode passed to model_fn.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if not callable(p.model_fn) or not callable(p.input_fn):
      raise TypeError('FnTask: model_fn and input_fn must be callables, got '
                      '%r and %r.' % (p.model_fn, p.input_fn))
    batch = next(iter(p.input_fn(p.mode)))
    made = []

    def _Creator(next_creator, **kwargs):
      v = next_creator(**kwargs)
      made.append(v)
      return v

    with tf.variable_creator_scope(_Creator):
      with tf.GradientTape() as tape:
        self._Call(batch)
    known = {id(v) for v in made}
    for v in tape.watched_variables():  # trainable variables read, made before
      if id(v) not in known:
        made.append(v)
        known.add(id(v))
    if not made:
      raise ValueError('model_fn created no variable on its first call; it '
                       'must create (or first use) its layers/variables.')
    names = [var_grad.VarName(v) for v in made]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
      raise ValueError('model_fn created several variables named %s; give '
                       'layers distinct names.' % dups)
    self._fn_vars = list(made)

  def _Call(self, inputs):
    spec = self.params.model_fn(inputs, self.params.mode)
    if not isinstance(spec, ModelSpec):
      raise TypeError('model_fn must return learner.ModelSpec(loss=..., '
                      'log_info={...}), got %r.' % (type(spec).__name__,))
    if 'loss' in spec.log_info:
      raise ValueError("model_fn: log_info must not use the name 'loss' "
                       '(it is the ModelSpec loss); rename it.')
    return spec

  def ModelVars(self):
    """NestedMap {sanitized variable name: variable} of model_fn's variables."""
    return NestedMap({
        var_grad.SanitizedName(var_grad.VarName(v)): v for v in self._fn_vars})

  def ComputePredictions(self, theta, batch):
    return self._Call(batch)

  def ComputeLoss(self, theta, predictions, batch):
    n = _BatchSize(batch)
    metrics = NestedMap(loss=(predictions.loss, n))
    for k, v in predictions.log_info.items():
      metrics[k] = (v, n)
    return metrics, NestedMap()

  def FProp(self, theta, batch):
    # model_fn reads its own variables; theta is not used.
    return self.ComputeLoss(theta, self.ComputePredictions(theta, batch), batch)


class FnInput(BaseLayer):
  """Input from a MoXing-style `input_fn(mode) -> tf.data.Dataset` of batches."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'input'
    p.Define('input_fn', None, 'Callable (mode) -> tf.data.Dataset.')
    p.Define('mode', ModeKeys.TRAIN, 'The mode passed to input_fn.')
    p.Define('batch_size', None, 'Informational: examples per batch.')
    p.Define('drop_remainder', True, 'Informational.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['batch_size'] = checks.Int(1, none_ok=True, example=32)
    return specs

  def CheckBatchSize(self):
    """Nothing to check: input_fn batches itself."""

  def GetDataset(self, skip_batches=0, input_context=None):
    """input_fn(mode), with the first `skip_batches` batches skipped.

    Raises:
      ValueError: for an input_context of several replicas (input_fn's
        batches cannot be split among them).
    """
    if input_context is not None and input_context.num_replicas_in_sync > 1:
      self.GetExampleDataset()  # Raises: one device only.
    ds = self.params.input_fn(self.params.mode)
    if not isinstance(ds, tf.data.Dataset):
      raise TypeError('input_fn must return a tf.data.Dataset of batches, got '
                      '%r.' % (type(ds).__name__,))
    return ds.skip(skip_batches) if skip_batches else ds

  def GetExampleDataset(self):
    raise ValueError('learner.run supports --strategy=default only; use a '
                     'registered experiment with an input generator to '
                     'distribute.')


def run(model_fn, input_fn, optimizer_fn=None,  # pylint: disable=invalid-name
        run_mode=ModeKeys.TRAIN, log_dir=None, max_number_of_steps=100,
        learning_rate=None, eval_input_fn=None, log_every_n_steps=50,
        save_summary_steps=10, save_interval_steps=100, seed=None,
        jit_compile=False, learner_params=None, tty=None, stream=None):
  """Trains (TRAIN) or evaluates (EVAL) a model given as functions.

  Args:
    model_fn: callable (inputs, mode) -> ModelSpec; `inputs` is one batch of
      `input_fn`'s dataset, `mode` a ModeKeys value.
    input_fn: callable (mode) -> tf.data.Dataset of batches (repeat it for
      training; one finite pass for evaluation).
    optimizer_fn: required for TRAIN, ignored for EVAL: a factory from
      `get_optimizer_fn` / `get_optimizer_wrapper_fn`, or a zero-argument
      callable returning a tf.keras optimizer.
    run_mode: ModeKeys.TRAIN, ModeKeys.EVAL or ModeKeys.TRAIN_AND_EVAL.
    log_dir: output directory (checkpoints, summaries, metrics.json).
    max_number_of_steps: global steps to train.
    learning_rate: base rate; None takes optimizer_fn's.
    eval_input_fn: callable (mode) for evaluation; None uses input_fn.
    log_every_n_steps: steps between log lines.
    save_summary_steps: steps between summaries.
    save_interval_steps: steps between checkpoints (and one at the end).
    seed: optional global seed (enables op determinism).
    jit_compile: compile the train step with XLA.
    learner_params: optional dict of further Learner params (e.g.
      {'clip_gradient_norm_to_value': 1.0}).
    tty, stream: progress output, as for `Trainer`.

  Returns:
    The dict written to log_dir/metrics.json.

  Raises:
    ValueError: TRAIN without optimizer_fn, unknown run_mode, or no log_dir.
    TypeError: optimizer_fn is an optimizer instance or not callable (the
      message shows optimizer_fn=lambda: ...).
  """
  if run_mode not in ModeKeys.ALL:
    raise ValueError('run_mode %r is not one of %s (learner.ModeKeys).' %
                     (run_mode, list(ModeKeys.ALL)))
  if not log_dir:
    raise ValueError('run: log_dir is required (checkpoints and metrics go '
                     'there).')
  training = run_mode != ModeKeys.EVAL
  if training:
    if optimizer_fn is None:
      raise ValueError(
          'run_mode=%r needs an optimizer: pass optimizer_fn, e.g. '
          'optimizer_fn=learner.get_optimizer_fn(\'sgd\', learning_rate=0.1) '
          'or optimizer_fn=lambda: tf.keras.optimizers.Adam(1e-3). (EVAL '
          'needs none.)' % run_mode)
    optimizer_factory.OptimizerParamsFromFn(optimizer_fn)  # TypeError early.
  mode = ModeKeys.TRAIN if training else ModeKeys.EVAL
  tp = FnTask.Params().Set(name='task', model_fn=model_fn, input_fn=input_fn,
                           mode=mode)
  tp.train.Set(max_steps=max_number_of_steps,
               save_interval_steps=save_interval_steps,
               summary_interval_steps=save_summary_steps,
               log_interval_steps=log_every_n_steps, jit_compile=jit_compile)
  if training:
    lp = learner_lib.Learner.Params().Set(
        name='learner', loss_name='loss',
        lr_schedule=ConstantOne.Params(),  # Not Lingvo's ContinuousSchedule.
        optimizer_fn=optimizer_fn, learning_rate=learning_rate)
    for k, v in (learner_params or {}).items():
      lp.Set(**{k: v})
    tp.train.learner = lp
  p = hyperparams.Params()
  p.Define('task', tp, 'The task params.')
  p.Define('train_input', FnInput.Params().Set(
      name='train_input', input_fn=input_fn, mode=ModeKeys.TRAIN),
           'Training input.')
  p.Define('eval_input', FnInput.Params().Set(
      name='eval_input', input_fn=eval_input_fn or input_fn,
      mode=ModeKeys.EVAL), 'Evaluation input.')
  t = trainer_lib.Trainer(
      p, log_dir, mode=run_mode, seed=seed, tty=tty, stream=stream,
      resume_hint='call learner.run with the arguments of the run that '
      'wrote it (max_number_of_steps, learning_rate, learner_params, ...)')
  return t.Run()
