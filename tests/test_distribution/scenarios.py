"""Small training problems run single-process and under tf.distribute (issue 7).

Shared by the in-process MirroredStrategy tests and by the worker processes
of the multi-worker test (`mw_worker.py`), so both compare the same code with
the same single-process reference.

The model: y_hat = x @ w + b, w float32 [2], b float32 [], loss the mean
squared error over the batch, reported with weight = examples in the batch.
One train step follows iface.txt: forward pass under learner.GradientTape(),
then Learner.Apply(metrics, vmap).

Data: a fixed generated set; the step-k global batch is split among the
replicas by `SPLITS` (per-replica example counts, which may differ).
"""

import numpy as np
import tensorflow as tf

from params import BaseLayer
from params import NestedMap

COLLECTIVE_OPS = frozenset([
    'CollectiveReduce', 'CollectiveReduceV2', 'CollectiveReduceV3',
    'CollectiveGather', 'CollectiveGatherV2', 'CollectiveBcastSend',
    'CollectiveBcastRecv', 'CollectiveBcastSendV2', 'CollectiveBcastRecvV2',
    'CollectiveAllToAllV2', 'CollectiveAllToAllV3', 'NcclAllReduce',
    'NcclReduce', 'NcclBroadcast', 'XlaAllReduce', 'AllReduce'
])
_BRANCH_OPS = frozenset(['If', 'StatelessIf', 'Case', 'StatelessCase',
                         'While', 'StatelessWhile'])

LR = 0.1


class LinearModel(BaseLayer):
  """y_hat = x @ w + b; w [2] starts at [0.5, -0.5], b at 0.25."""

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', [2], init=tf.constant_initializer([0.5, -0.5]))
    self.CreateVariable('b', [], init=0.25)

  def FProp(self, theta, batch):
    pred = tf.linalg.matvec(batch['x'], theta.w) + theta.b
    n = tf.cast(tf.shape(batch['y'])[0], tf.float32)
    loss = tf.reduce_mean(tf.square(pred - batch['y']))
    return NestedMap(loss=(loss, n))


def MakeData(num_examples, seed=0):
  """Generated examples: x float32 [n, 2], y = 3 x0 - 2 x1 + 1 + noise."""
  rng = np.random.RandomState(seed)
  x = rng.uniform(-1, 1, size=[num_examples, 2]).astype(np.float32)
  y = (x @ np.array([3.0, -2.0]) + 1.0 +
       0.1 * rng.normal(size=[num_examples])).astype(np.float32)
  return x, y


def Batches(splits, num_steps, seed=0):
  """Per-step, per-replica batches: list over steps of list over replicas.

  Args:
    splits: list of per-replica example counts (one global batch is their
      sum); the single-process run uses one replica with all of them.
    num_steps: steps.
    seed: data seed.

  Returns:
    list [step][replica] of {'x': [n_r, 2], 'y': [n_r]} numpy arrays.
  """
  total = sum(splits)
  x, y = MakeData(total * num_steps, seed)
  out = []
  for s in range(num_steps):
    start = s * total
    per = []
    for n in splits:
      per.append({'x': x[start:start + n], 'y': y[start:start + n]})
      start += n
    out.append(per)
  return out


def GlobalBatches(batches):
  """Concatenates each step's per-replica batches into one global batch."""
  return [[{k: np.concatenate([b[k] for b in step]) for k in ('x', 'y')}]
          for step in batches]


def LearnerParams(kind):
  """Learner params: 'sgd', or 'accum_sync' / 'accum_nosync' (4 batches)."""
  from learner.optimizers import base as base_optimizer  # pylint: disable=g-import-not-at-top
  from learner.optimizers.wrappers import accumulation as gradient_accumulation  # pylint: disable=g-import-not-at-top
  from learner import learner as learner_lib  # pylint: disable=g-import-not-at-top
  opt = base_optimizer.SGD.Params()
  if kind != 'sgd':
    from learner import optimizers  # pylint: disable=g-import-not-at-top
    opt = gradient_accumulation.GradientAccumulation.Params().Set(
        optimizer=optimizers.Momentum.Params().Set(alpha=0.9),
        num_batches=4, sync_on_apply=(kind == 'accum_sync'))
  return learner_lib.Learner.Params().Set(
      name='lrn', loss_name='loss', learning_rate=LR, optimizer=opt)


class Problem:
  """A model and a learner built under `strategy`, with a traced step."""

  def __init__(self, strategy, kind):
    self.strategy = strategy
    with strategy.scope():
      self.model = LinearModel.Params().Set(name='model').Instantiate()
      self.learner = LearnerParams(kind).Instantiate()
      self.learner.Bind(self.model.vars)
    self._fn = tf.function(self._Step)

  def _ReplicaStep(self, batch):
    from learner import gradient_tape  # pylint: disable=g-import-not-at-top
    with gradient_tape.GradientTape():
      metrics = self.model.FProp(self.model.theta, batch)
    _, update_op, eval_metrics = self.learner.Apply(metrics, self.model.vars)
    del update_op
    return eval_metrics

  def _Step(self, batch):
    return self.strategy.run(self._ReplicaStep, args=(batch,))

  def _Distribute(self, per_replica):
    """Replica r (global id) gets per_replica[r]."""
    n = self.strategy.num_replicas_in_sync
    if n == 1:
      return {k: tf.constant(v) for k, v in per_replica[0].items()}
    if len(per_replica) != n:
      raise ValueError('%d per-replica batches for %d replicas.' %
                       (len(per_replica), n))

    def _Fn(ctx):
      b = per_replica[ctx.replica_id_in_sync_group]
      return {k: tf.constant(v) for k, v in b.items()}

    return self.strategy.experimental_distribute_values_from_function(_Fn)

  def Run(self, batches):
    """Runs one step per element of `batches` ([step][replica]).

    After every step, this worker's replicas must hold identical variables
    (distribution.AssertReplicasIdentical; across workers the test compares
    the returned weights).
    """
    from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
    for per_replica in batches:
      self._fn(self._Distribute(per_replica))
      distribution.AssertReplicasIdentical(
          self.model.vars.Flatten() + self.learner.vars.Flatten())
    return self.Weights()

  def Weights(self):
    """{'w': [2], 'b': []} numpy values (replica 0's copy)."""
    return {k: self.strategy.experimental_local_results(v)[0].numpy()
            for k, v in (('w', self.model.vars.w), ('b', self.model.vars.b))}

  def ConcreteGraphDef(self, per_replica):
    """GraphDef (with its function library) of the traced train step."""
    fn = self._fn.get_concrete_function(self._Distribute(per_replica))
    return fn.graph.as_graph_def()


def CollectiveLayout(graph_def):
  """Where the collective ops of a traced step are.

  Args:
    graph_def: GraphDef with its function library.

  Returns:
    (unconditional, conditional): unconditional is the number of collective
    ops that run every time the step runs (reachable without entering a
    branch of an If/Case/While); conditional is a list of
    (op type, [collective count of each branch]) for every If/Case/While
    whose branches contain collectives.
  """
  funcs = {f.signature.name: f for f in graph_def.library.function}
  cache = {}

  def _FuncNames(node):
    names = []
    for key, attr in node.attr.items():
      del key
      if attr.HasField('func'):
        names.append(attr.func.name)
      for f in attr.list.func:
        names.append(f.name)
    return names

  def _Count(nodes, conditional):
    n = 0
    for node in nodes:
      if node.op in COLLECTIVE_OPS:
        n += 1
      elif node.op in _BRANCH_OPS:
        counts = [_CountFunc(name, conditional) for name in _FuncNames(node)]
        if any(counts):
          conditional.append((node.op, counts))
      else:
        for name in _FuncNames(node):
          n += _CountFunc(name, conditional)
        if node.op in funcs:  # A direct call of a library function.
          n += _CountFunc(node.op, conditional)
    return n

  def _CountFunc(name, conditional):
    if name not in funcs:
      return 0
    if name not in cache:
      cache[name] = (None, [])
      inner = []
      cache[name] = (_Count(funcs[name].node_def, inner), inner)
    count, inner = cache[name]
    conditional.extend(inner)
    return count

  conditional = []
  unconditional = _Count(graph_def.node, conditional)
  return unconditional, conditional


def RunAll(strategy, splits, num_steps_sgd=3, num_steps_accum=8):
  """Runs every scenario under `strategy`; returns a dict of results.

  Three problems (each traces one train step; tracing dominates the cost):
  'sgd_unequal' (weights after num_steps_sgd SGD steps with the unequal
  per-replica `splits`), 'accum_sync' / 'accum_nosync' (weights after
  num_steps_accum micro-steps with batch_gradients(4, sync_on_apply=True /
  False) around Momentum), 'layout_sync' / 'layout_nosync'
  (CollectiveLayout of their traced steps).
  """
  n = strategy.num_replicas_in_sync
  local = splits if n > 1 else [sum(splits)]
  out = {}
  out['sgd_unequal'] = Problem(strategy, 'sgd').Run(
      Batches(local, num_steps_sgd, seed=2))
  sync = Problem(strategy, 'accum_sync')
  data = Batches(local, num_steps_accum, seed=4)
  out['layout_sync'] = CollectiveLayout(sync.ConcreteGraphDef(data[0]))
  out['accum_sync'] = sync.Run(data)
  nosync = Problem(strategy, 'accum_nosync')
  out['layout_nosync'] = CollectiveLayout(nosync.ConcreteGraphDef(data[0]))
  out['accum_nosync'] = nosync.Run(data)
  return out


def Reference(splits, num_steps_sgd=3, num_steps_accum=8):
  """The single-process results of RunAll on the same global batches."""
  strategy = tf.distribute.get_strategy()
  out = {}
  out['sgd_unequal'] = Problem(strategy, 'sgd').Run(
      GlobalBatches(Batches(splits, num_steps_sgd, seed=2)))
  out['accum_sync'] = Problem(strategy, 'accum_sync').Run(
      GlobalBatches(Batches(splits, num_steps_accum, seed=4)))
  return out


def _NumpyGrad(w, b, batch):
  """Gradient of the mean squared error (float64)."""
  x = batch['x'].astype(np.float64)
  y = batch['y'].astype(np.float64)
  r = x @ w + b - y
  n = len(y)
  return 2.0 * x.T @ r / n, 2.0 * r.sum() / n


def _Weights0():
  return np.array([0.5, -0.5]), 0.25


def NumpyReference(splits, num_steps_sgd=3, num_steps_accum=8):
  """RunAll's expected results, computed independently in numpy (float64).

  SGD: w <- w - lr * g on the global batch's mean gradient. Accumulation:
  every 4
  micro-batches, g = sum(n_i g_i) / sum(n_i), then TF1 Momentum(0.9):
  v <- 0.9 v + g, w <- w - lr v.
  """
  out = {}
  w, b = _Weights0()
  for step in GlobalBatches(Batches(splits, num_steps_sgd, seed=2)):
    gw, gb = _NumpyGrad(w, b, step[0])
    w, b = w - LR * gw, b - LR * gb
  out['sgd_unequal'] = {'w': w, 'b': b}
  w, b = _Weights0()
  vw, vb = np.zeros(2), 0.0
  sw, sb, sn = np.zeros(2), 0.0, 0.0
  for i, step in enumerate(
      GlobalBatches(Batches(splits, num_steps_accum, seed=4))):
    gw, gb = _NumpyGrad(w, b, step[0])
    m = len(step[0]['y'])
    sw, sb, sn = sw + m * gw, sb + m * gb, sn + m
    if (i + 1) % 4 == 0:
      vw, vb = 0.9 * vw + sw / sn, 0.9 * vb + sb / sn
      w, b = w - LR * vw, b - LR * vb
      sw, sb, sn = np.zeros(2), 0.0, 0.0
  out['accum_sync'] = {'w': w, 'b': b}
  out['accum_nosync'] = {'w': w, 'b': b}
  return out
