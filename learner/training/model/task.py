"""BaseTask: a model with its losses, its learners and its global step.

A task subclass builds its layers in `__init__` (after `super().__init__`) and
implements `ComputePredictions(theta, batch)` and
`ComputeLoss(theta, predictions, batch) -> (metrics, per_example)`; `FProp`
calls both. Training params live under `p.train` (the learners, step counts,
intervals), evaluation params under `p.eval`.

An optimizer is needed to train and never to evaluate (MoXing's rule): the
learners (with their optimizers, slots, schedules) are built only by
`CreateLearners()`, which the trainer calls for training; a task built for
evaluation has the model variables and the global step, nothing else.

The train step is written once, here, for one device and for every
tf.distribute strategy: the strategy is the one whose scope built the task
(`task.strategy`, as a Keras model keeps its `distribute_strategy`), and
each step runs one replica's share under `strategy.run`:

    strategy.run(replica step):           # one call per replica
      with learner.GradientTape():
        metrics, per_example = task.FProp(task.theta, batch)
      for each learner: losses, update_op, eval_metrics = learner.Apply(
          metrics, vmap, fprop_fn=<FProp again on batch>)  # Sam: 2nd pass
    global_step += 1                      # once, in cross-replica context

`TrainStep(batch)` runs one step in one `tf.function`; `TrainLoop(iterator,
n)` runs n steps in one `tf.function` call, taking each batch from the
iterator inside the graph (Keras' steps_per_execution; a distributed
dataset's iterator under a strategy). `p.train.jit_compile` compiles each
replica's step with XLA. Steps are traced without AutoGraph unless
`p.train.autograph` (or the code needs it).

Source: Lingvo's `base_model.BaseTask` (`lingvo/core/base_model.py`).
"""

from absl import logging
import tensorflow as tf

from learner import gradient_tape
from learner.training.model import task_params
from params import BaseLayer
from params import NestedMap
from params import checks
from params import step_seeds

def CheckLossOutput(task, out):
  """Returns `out` if it is ComputeLoss's (metrics, per_example) pair.

  A plain loss tensor (or any other value) is refused here, at trace time,
  with the return contract, instead of the error of whatever unpacks it
  first (AutoGraph's "Iterating over a symbolic tf.Tensor is not allowed").

  Args:
    task: the task (named in the message).
    out: what its ComputeLoss returned.

  Raises:
    TypeError: if `out` is not a pair whose first item is a dict (or
      NestedMap) of metrics.
  """
  if (isinstance(out, (tuple, list)) and len(out) == 2 and
      isinstance(out[0], dict)):
    return out
  if isinstance(out, (tf.Tensor, tf.Variable)):
    got = 'a tf.Tensor'
  elif isinstance(out, (tuple, list)):
    got = 'a %s of %d items' % (type(out).__name__, len(out))
  else:
    got = 'a %s' % type(out).__name__
  raise TypeError(
      '%s.ComputeLoss returned %s; it must return (metrics, per_example): '
      'metrics a dict {name: (value, weight)} (weight: the examples averaged '
      'over), e.g. return {\'loss\': (loss, batch_size)}, {}.' %
      (type(task).__name__, got))


class BaseTask(BaseLayer):
  """Base class of tasks: a model, its losses, its learners, a global step.

  Subclasses implement `ComputePredictions` and `ComputeLoss`.

  Raises:
    ValueError: at construction, for bad train/eval params (a count that is
      a bool, not an int or out of range, see `ValueChecks`; an
      `init_from_checkpoint_rules` regex or replacement that is not valid;
      the message names the key); from `CreateLearners`, when there is no learner or two share
      a name.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'task'
    p.Define('train', task_params.TrainParams(), 'Training params.')
    p.Define('eval', task_params.EvalParams(), 'Evaluation params.')
    return p.SetHints(task_params.TaskHints(p.train, p.eval))

  def __init__(self, params):
    super().__init__(params)
    self._ValidateParams()
    self._global_step = self.CreateVariable(
        'global_step', [], init=0, trainable=False, dtype=tf.int64,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    # The strategy whose scope builds the variables; the train step runs
    # under it (Keras: Model.distribute_strategy).
    self._strategy = tf.distribute.get_strategy()
    self._learners = None
    self._replica_step_fns = {}
    self._train_step_fn = None
    self._train_loop_fn = None
    self._eval_step_fn = None

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    for key, example in (('max_steps', 1000), ('summary_interval_steps', 10),
                         ('log_interval_steps', 50),
                         ('tpu_steps_per_loop', 100)):
      specs['train.' + key] = checks.Int(1, example=example)
    specs['train.save_interval_steps'] = checks.Int(
        1, none_ok=True, example=100, why='None saves by save_interval_seconds')
    specs['train.steps_per_loop'] = checks.Int(
        1, none_ok=True, example=100, why='None takes tpu_steps_per_loop')
    specs['train.save_interval_seconds'] = checks.Real(
        0, low_open=True, example=600, why='seconds between checkpoints')
    specs['train.save_keep_checkpoint_every_n_hours'] = checks.Real(
        0, none_ok=True, example=0.5, why='0 or None: off')
    specs['train.save_max_to_keep'] = checks.Int(
        1, none_ok=True, example=100, why='None keeps every checkpoint')
    specs['train.replicas_to_aggregate'] = checks.Int(
        1, none_ok=True, example=2, why='None means all the replicas')
    specs['train.max_consecutive_skipped_steps'] = checks.Int(
        0, example=100, why='0: no limit')
    specs['eval.interval_steps'] = checks.Int(0, example=100,
                                              why='0: only at the end')
    specs['eval.samples'] = checks.Int(0, example=1000,
                                       why='0: one pass')
    return specs

  def _ValidateParams(self):
    p = self.params
    task_params.CheckLegacyKeysUnused(p.train)
    task_params.CheckLingvoKnobs(p.train)
    if isinstance(p.train.init_from_checkpoint_rules, dict):
      task_params.InitFromCheckpoint(p.train)  # Lingvo's form: checked.
    else:
      checks.CheckRewriteRules(self, 'train.init_from_checkpoint_rules',
                               p.train.init_from_checkpoint_rules)
    if p.eval.dev_metric_mode not in task_params.DEV_METRIC_MODES:
      raise ValueError(
          "%s: eval.dev_metric_mode must be 'min' or 'max', got %r." %
          (self.path, p.eval.dev_metric_mode))

  # ---- model ---------------------------------------------------------------

  @property
  def global_step(self):
    """The int64 scalar variable counting train steps (batches)."""
    return self._global_step

  @property
  def strategy(self):
    """The tf.distribute.Strategy whose scope built this task.

    Its `run` executes each replica's share of a train step; the default
    strategy (no scope) means one device.
    """
    return self._strategy

  def ComputePredictions(self, theta, batch):
    """Returns the predictions (any nest of tensors) for `batch`.

    Args:
      theta: NestedMap of this task's variable values (`self.theta`).
      batch: NestedMap of input tensors, first dimension the batch.
    """
    raise NotImplementedError('%s must implement ComputePredictions.' %
                              type(self).__name__)

  def ComputeLoss(self, theta, predictions, batch):
    """Returns (metrics, per_example).

    metrics: NestedMap {name: (scalar value, scalar weight)}, the weight being
      the number of examples the value averages over. Every loss a learner
      optimizes must be here.
    per_example: NestedMap of tensors with first dimension the batch.
    """
    raise NotImplementedError('%s must implement ComputeLoss.' %
                              type(self).__name__)

  def FProp(self, theta, batch):
    """Runs ComputePredictions then ComputeLoss; returns (metrics, per_example)."""
    predictions = self.ComputePredictions(theta, batch)
    return CheckLossOutput(self, self.ComputeLoss(theta, predictions, batch))

  def ModelVars(self):
    """NestedMap of the model's variables: all but learners and global_step."""
    out = NestedMap(self.vars)
    out.pop('global_step', None)
    for l in self._learners or []:
      out.pop(l.params.name, None)
    return out

  # ---- learners --------------------------------------------------------------

  def LearnerParamsList(self):
    """Returns the list of learner params this task trains with.

    p.train.learner (one or a list), or, when it is None, the one learner
    Lingvo builds from the legacy keys of p.train
    (`task_params.ExtractLearnerFromLegacyParams` on a copy; p.train keeps
    them). With p.train.ema_decay > 0 each optimizer is wrapped in Ema
    (task_params.WithEma).
    """
    tp = self.params.train
    lp = tp.learner
    if lp is None:
      lps = [task_params.ExtractLearnerFromLegacyParams(
          tp.Copy(frozen=False))]
    elif isinstance(lp, (list, tuple)):
      lps = list(lp)
    else:
      lps = [lp]
    return [task_params.WithEma(tp, p) for p in lps]

  def UsesLegacyLearner(self):
    """True if the learner comes from p.train's legacy keys (learner None)."""
    return self.params.train.learner is None

  def CreateLearners(self):
    """Builds every learner as a child and binds it to the model variables.

    Call once after construction, only to train (the trainer does). Each
    learner's `Bind(vmap, global_step=...)` creates all its slots now, so a
    checkpoint restores them before the first step. Idempotent.

    Returns:
      The list of learners.

    Raises:
      ValueError: if p.train.learner is unset (training needs an optimizer),
        two learners share a name, or a name clashes with a model child.
    """
    if self._learners is not None:
      return self._learners
    lps = self.LearnerParamsList()
    if not lps:
      raise ValueError(
          '%s: cannot train without a learner: train.learner is an empty '
          'list. Set task.train.learner = learner.Learner.Params().Set('
          'name=..., optimizer=...), or None to use the legacy keys of '
          'task.train (learning_rate, optimizer, ...).' % self.path)
    if self.UsesLegacyLearner() and not self.params.train.learning_rate:
      raise ValueError(
          'task.train.learning_rate : %r trains nothing (Lingvo\'s '
          'placeholder default; task.train.learner is None, so the learner '
          'is built from task.train\'s legacy keys). Set '
          'task.train.learning_rate, or task.train.learner = '
          'learner.Learner.Params().Set(...).' %
          (self.params.train.learning_rate,))
    names = [lp.name for lp in lps]
    for i, n in enumerate(names):
      if not n:
        raise ValueError('%s: train.learner[%d] has no name; give each '
                         'learner a name.' % (self.path, i))
      if names.count(n) > 1:
        raise ValueError('%s: two learners are named %r in train.learner; '
                         'learner names must differ.' % (self.path, n))
    self._CheckJitCompile()
    model_vars = self.ModelVars()
    task_params.CheckEmaMovingVars(self.params.train, model_vars)
    learners = []
    for lp in lps:
      learner = self.CreateChild(lp.name, lp)
      learner.Bind(model_vars, global_step=self._global_step)
      learners.append(learner)
    self._learners = learners
    return learners

  def _CheckJitCompile(self):
    """Refuses jit_compile where XLA cannot compile the step's all-reduce.

    Measured with TF 2.21 (tests/test_training/test_task_strategy.py): under
    a MirroredStrategy over 2 CPU devices, an XLA-compiled replica step
    fails at its first run with "UNIMPLEMENTED: Collectives are not yet
    implemented for CPU devices when compiling with XLA". The same holds for
    MultiWorkerMirroredStrategy on CPU workers. One replica needs no
    all-reduce, and GPU collectives are compiled, so both are allowed.

    Raises:
      ValueError: jit_compile with several replicas on a CPU device.
    """
    strategy = self._strategy
    if not self.params.train.jit_compile or (
        strategy.num_replicas_in_sync <= 1):
      return
    devices = list(getattr(strategy.extended, 'worker_devices', ()))
    cpus = [d for d in devices if 'CPU' in d.upper().rsplit('/', 1)[-1]]
    if cpus:
      raise ValueError(
          '%s: train.jit_compile is True under %s with %d replicas on CPU '
          'devices (%s), but XLA cannot compile the gradient all-reduce (a '
          'collective op) on CPU in TF %s. Set task.train.jit_compile : '
          'False for this strategy, or run it on GPUs.' %
          (self.path, type(strategy).__name__,
           strategy.num_replicas_in_sync, ', '.join(cpus), tf.__version__))

  @property
  def learners(self):
    """The learners built by CreateLearners.

    Raises:
      ValueError: if CreateLearners was not called (an eval-only task).
    """
    if self._learners is None:
      raise ValueError('%s: the learners are not built; call '
                       'task.CreateLearners() to train.' % self.path)
    return self._learners

  # ---- steps -----------------------------------------------------------------

  def _ReplicaStep(self, batch):
    """One replica's share of a train step: FProp, then every learner.

    Returns the step output (see `TrainStep`); its tensors depend on every
    learner's update, so the global step that follows them counts a done
    step. Random layers draw from the global step inside it
    (`params.step_seeds`: a resumed run draws the masks of the
    uninterrupted one).
    """
    with step_seeds.StepSeeds(self._global_step.read_value()):
      return self._ReplicaStepSeeded(batch)

  def _ReplicaStepSeeded(self, batch):
    """`_ReplicaStep` inside its StepSeeds scope (random layers' masks)."""
    batch = _AsNestedMap(batch)
    with gradient_tape.GradientTape():
      metrics, _ = self.FProp(self.theta, batch)
    model_vars = self.ModelVars()
    out = {'metrics': dict(metrics), 'learners': {}}
    ops = []
    # Called only by a learner whose optimizer needs a second pass (Sam).
    fprop_fn = lambda: self.FProp(self.theta, batch)[0]
    # One backward pass per loss for all learners (gradient_tape.py).
    with gradient_tape.SharedGradients(self._LearnerVariables(model_vars)):
      for learner in self.learners:
        _, update_op, eval_metrics = learner.Apply(metrics, model_vars,
                                                   fprop_fn=fprop_fn)
        if update_op is not None:
          ops.append(update_op)
        out['learners'][learner.params.name] = dict(eval_metrics)
    with tf.control_dependencies(ops):
      return tf.nest.map_structure(tf.identity, out)

  def _LearnerVariables(self, model_vars):
    """Every variable some learner trains (each once, in learner order)."""
    seen, out = set(), []
    for learner in self.learners:
      for var in learner.GetTrainableVariables(model_vars).Flatten():
        if id(var) not in seen:
          seen.add(id(var))
          out.append(var)
    return out

  def _CompiledReplicaStep(self, *batch):
    """`_ReplicaStep` under XLA when p.train.jit_compile, for strategy.run.

    One tf.function per replica: a function traced for one replica captures
    that replica's variables and device, so another replica must not reuse
    its trace. Without jit_compile the step is traced inline into the
    caller's graph (no nested function, which would refuse the strategy's
    merge_call).
    """
    if not self.params.train.jit_compile:
      return self._ReplicaStep(*batch)
    replica_id = tf.get_static_value(
        tf.distribute.get_replica_context().replica_id_in_sync_group)
    key = int(replica_id) if replica_id is not None else 0
    if key not in self._replica_step_fns:
      self._replica_step_fns[key] = self._StepFunction(self._ReplicaStep,
                                                       jit_compile=True)
    return self._replica_step_fns[key](*batch)

  def _TrainStep(self, batch):
    """Graph body of one train step under `self.strategy`.

    Every replica runs its share on its part of `batch` (a distributed
    value under a strategy with several replicas, a dict of tensors
    otherwise); then the global step counts one step, in cross-replica
    context (once, not once per replica), after every replica's update.
    """
    out = self._strategy.run(self._CompiledReplicaStep, args=(batch,))
    done = [t for t in tf.nest.flatten(out, expand_composites=True)
            if isinstance(t, tf.Tensor)]
    with self._strategy.scope(), tf.control_dependencies(done):
      self._global_step.assign_add(1)
    return out

  def _StepFunction(self, fn, **kwargs):
    """tf.function of `fn`, traced without AutoGraph unless it needs it.

    The step code (task, learners, schedules) uses no Python control flow
    on tensors, so tracing without AutoGraph's source conversion saves about
    a second per trace. `p.train.autograph=True` forces AutoGraph; a task
    whose code does branch on a tensor (OperatorNotAllowedInGraphError) is
    retraced with AutoGraph automatically, with a warning.
    """
    if self.params.train.autograph:
      return tf.function(fn, autograph=True, **kwargs)
    plain = tf.function(fn, autograph=False, **kwargs)
    state = {'fn': plain}

    def _Call(*args):
      try:
        return state['fn'](*args)
      except tf.errors.OperatorNotAllowedInGraphError as e:
        if state['fn'] is not plain:
          raise
        logging.warning(
            '%s: the step uses Python control flow on a tensor (%s); '
            'tracing it with AutoGraph. Set task.train.autograph : True to '
            'skip this attempt.', self.path, str(e).split('\n')[0])
        state['fn'] = tf.function(fn, autograph=True, **kwargs)
        return state['fn'](*args)

    return _Call

  def _CompiledTrainStep(self):
    if self._train_step_fn is None:
      self.learners  # pylint: disable=pointless-statement
      self._train_step_fn = self._StepFunction(self._TrainStep)
    return self._train_step_fn

  def TrainStep(self, batch):
    """Runs one train step on `batch` under `self.strategy`.

    Args:
      batch: a dict of tensors; under a strategy with several replicas, a
        distributed value (an element of a distributed dataset).

    Returns:
      {'metrics': {name: (value, weight)},
       'learners': {learner name: eval_metrics {name: (value, weight)}}}
      (plain dicts: learner metric names contain '/'); under a strategy
      with several replicas the values are PerReplica (one per replica).

    Raises:
      ValueError: if the learners are not built.
    """
    self.learners  # pylint: disable=pointless-statement
    return self._CompiledTrainStep()(batch)

  def _TrainLoop(self, iterator, num_steps):
    """Graph body of TrainLoop: step 1 outside, steps 2..n in a while loop.

    The first step fixes the structure of the outputs that the loop carries
    (PerReplica values under a strategy); both call the same traced step
    function (one trace). parallel_iterations is 1: every step reads the
    variables the previous step wrote.
    """
    step_fn = self._CompiledTrainStep()
    out = step_fn(iterator.get_next())

    def _Body(i, unused_out):
      return i + 1, step_fn(iterator.get_next())

    _, out = tf.while_loop(
        lambda i, unused_out: i < num_steps, _Body,
        (tf.constant(1, dtype=num_steps.dtype), out), parallel_iterations=1)
    return out

  def TrainLoop(self, iterator, num_steps):
    """Runs `num_steps` train steps on `next(iterator)` in one call.

    The batches are taken from the iterator inside the graph (as Keras'
    `model.fit` does), so a step costs no Python work, and the iterator is
    advanced by exactly `num_steps` batches: a checkpoint of the iterator
    written after the call continues at the next batch. Under a strategy
    the iterator is a distributed dataset's and every step runs
    `strategy.run` inside the loop.

    Args:
      iterator: a tf.data iterator (`iter(dataset)`) yielding batches (dicts
        of tensors), or `iter(distributed dataset)` under `self.strategy`.
      num_steps: int >= 1 (a Python int or an int64 scalar tensor; either
        way the loop is traced once).

    Returns:
      The output of the last step, as `TrainStep` returns it.

    Raises:
      ValueError: if the learners are not built or num_steps < 1.
      tf.errors.OutOfRangeError: if the iterator ends before num_steps.
    """
    self.learners  # pylint: disable=pointless-statement
    if isinstance(num_steps, int) and num_steps < 1:
      raise ValueError('%s: TrainLoop num_steps must be >= 1, got %d.' %
                       (self.path, num_steps))
    if self._train_loop_fn is None:
      # Not jit-compiled itself: iterator ops do not compile; each
      # replica's step inside is, when p.train.jit_compile.
      self._train_loop_fn = self._StepFunction(self._TrainLoop)
    return self._train_loop_fn(iterator,
                               tf.convert_to_tensor(num_steps, tf.int64))

  def _EvalStep(self, batch):
    metrics, _ = self.FProp(self.theta, _AsNestedMap(batch))
    return NestedMap(metrics)

  def EvalStep(self, batch):
    """Runs FProp on `batch`; returns metrics {name: (value, weight)}."""
    if self._eval_step_fn is None:
      self._eval_step_fn = self._StepFunction(self._EvalStep)
    return self._eval_step_fn(batch)


def _AsNestedMap(batch):
  """A dict batch becomes a NestedMap; other structures pass through."""
  return NestedMap(batch) if isinstance(batch, dict) else batch
