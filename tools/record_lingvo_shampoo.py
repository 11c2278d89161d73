"""Records Lingvo 0.14.2's DistributedShampoo for tests/test_optimizers/test_shampoo.py.

Runs only in a Lingvo venv (Lingvo imported, TF 2.21 graph mode, control
flow v2); the tests read only the JSON it writes. Command, from the
repository root (the venv recipe: tests/data/README.md,
"lingvo_0_14_2_task.json"):

    /work/lingvo_venv/bin/python tools/record_lingvo_shampoo.py \\
        -o tests/data/lingvo_0_14_2_shampoo.json

How the recording is made. Lingvo's own `optimizer.DistributedShampoo`
runs inside Lingvo's own `learner.Learner` (rate `LR`, schedule Constant,
clip_gradient_norm_to_value off or 1.0) on the loss sum(w * g_t), whose
gradient is exactly the recorded g_t; the global step is incremented
after each update, as the trainer does. Lingvo takes its preconditioners
from `ApplyPostTrainingLoop()`, whose two ops (x_ops.so's
compute_preconditioners and get_preconditioners, the C++ "preconditioner
captain") are not run here; `_Captain` transcribes them from Lingvo's
preconditioner_captain.cc and preconditioner_op_kernels.cc: after every
`preconditioning_compute_steps` updates (the trainer's loop), for each
statistic (the keys, exponents -1/(2 rank) and slots exactly as
invoke_async_preconditioner_computation and
assign_preconditioner_to_host_vars list them) it runs Lingvo's own
serialized inverse-pth-root graph (the optimizer's
`_preconditioner_compute_graphdef`, imported into a session of its own
as the captain does) and keeps the result only when its `diff` is below
kEpsilon = 5e-2; the kept roots are then loaded into the
'mat_preconditioner_<i>' slots (the op's success-weighted assign). This
is the captain with sync=True (Lingvo's default is async: a root may
arrive a loop later).

Two changes to Lingvo, both needed and both labelled in the file:
  * `_Shampoo` passes block_partition_threshold_size and
    fallback_to_diagonal_dim on to distributed_shampoo.DistributedShampoo
    (Lingvo 0.14.2's GetOptimizer drops them, so there they are always
    1000000 and 4096); the cases that leave them at their defaults are
    unaffected.
  * control flow v2 (tf.compat.v1.enable_control_flow_v2()): with TF1
    control flow, statistics_computation_frequency > 1 (a tf.while_loop
    around the statistics) aborts the process under TF 2.21; v2 builds
    the same computation.

Recorded: `cases` in the format of tools/optax_reference.py (rule,
kwargs: our param names, which are Lingvo's plus
preconditioning_compute_steps; lr; shape; dtype float32; clip; init;
grads; params after each of 20 steps), plus per case `roots`: [step,
slot, diff, kept] of each root computed; and `newton`: Lingvo's
matrix_functions.inlined_matrix_inverse_pth_root (the path for dims >
4096) on small matrices.
"""

import argparse
import importlib.metadata
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lingvo_glibc_shim  # pylint: disable=g-import-not-at-top

lingvo_glibc_shim.Preload()

import numpy as np  # pylint: disable=g-import-not-at-top,g-bad-import-order
import lingvo.compat as tf  # pylint: disable=g-import-not-at-top
from lingvo.core import distributed_shampoo  # pylint: disable=g-import-not-at-top
from lingvo.core import learner as learner_lib
from lingvo.core import matrix_functions
from lingvo.core import optimizer
from lingvo.core import py_utils
from lingvo.core import schedule

STEPS = 20
LR = 0.0625
CLIP = 1.0
KEEP_BELOW = 5e-2  # preconditioner_captain.cc kEpsilon.
SHAPES = {'matrix': (4, 3), 'vector': (5,), 'conv': (3, 3, 2, 4),
          'blocks': (5, 4), 'thin': (6, 2)}
BASE = dict(start_preconditioning_steps=4, preconditioning_compute_steps=3)
RULES = (
    # Lingvo's defaults (momentum 0.9, ...) but start and loop length.
    ('shampoo', BASE, ('matrix', 'vector', 'conv')),
    # Blocks: dim 5 -> [2, 2, 1], dim 4 -> [2, 2]; blocks with a dim of 1
    # have one root (rank 1) and transpose past the other dim.
    ('shampoo_blocks', dict(
        start_preconditioning_steps=2, preconditioning_compute_steps=2,
        block_partition_threshold_size=3, block_size=2, momentum=0.0,
        second_moment_averaging=0.95, initial_accumulator_value=0.1),
     ('blocks', 'matrix')),
    # The diagonal fallback: dims > 3 get no root (per dim), and a variable
    # with a dim > max_any_dim is diagonal AdaGrad (whole).
    ('shampoo_fallback', dict(BASE, fallback_to_diagonal_dim=3),
     ('matrix', 'conv')),
    ('shampoo_max_any_dim', dict(BASE, max_any_dim=3), ('matrix', 'conv')),
    # Statistics every 2nd step; roots every 4.
    ('shampoo_stats_every_2', dict(
        start_preconditioning_steps=4, preconditioning_compute_steps=4,
        statistics_computation_frequency=2, matrix_epsilon=1e-4),
     ('matrix', 'conv')),
    # Roots from the first update on, of 6 x 6 statistics of rank <= 2 per
    # gradient, with a negligible epsilon: a null eigenvalue that rounds
    # below zero gives U != V there, and the captain drops that root.
    ('shampoo_rejects', dict(
        start_preconditioning_steps=1, preconditioning_compute_steps=1,
        matrix_epsilon=1e-12), ('thin',)),
)


class _Shampoo(optimizer.DistributedShampoo):
  """Lingvo's DistributedShampoo, with block_partition_threshold_size and
  fallback_to_diagonal_dim passed on (CHANGED from Lingvo 0.14.2, whose
  GetOptimizer drops them); otherwise its GetOptimizer verbatim."""

  def GetOptimizer(self, lr):
    params = self.params
    return distributed_shampoo.DistributedShampoo(
        learning_rate=lr,
        momentum=params.momentum,
        start_preconditioning_steps=params.start_preconditioning_steps,
        initial_accumulator_value=params.initial_accumulator_value,
        matrix_epsilon=params.matrix_epsilon,
        statistics_computation_frequency=(
            params.statistics_computation_frequency),
        second_moment_averaging=params.second_moment_averaging,
        max_any_dim=params.max_any_dim,
        block_size=params.block_size,
        block_partition_threshold_size=params.block_partition_threshold_size,
        fallback_to_diagonal_dim=params.fallback_to_diagonal_dim,
        global_step=py_utils.GetGlobalStep())


class _Captain:
  """preconditioner_captain.cc + preconditioner_op_kernels.cc, sync.

  compute_preconditioners: for each (key, statistics, exponent) not yet
  computed at this global step, run the serialized graph (inputs 'input',
  'exponent'; outputs 'output', 'diff') and keep 'output' under the key
  when diff < kEpsilon. get_preconditioners: each key's kept value (ok)
  or zeros (not ok); the Python side assigns (1 - ok) var + ok value.
  """

  def __init__(self, graphdef):
    self._graph = tf.Graph()
    with self._graph.as_default():
      gdef = tf.GraphDef()
      gdef.ParseFromString(graphdef)
      tf.import_graph_def(gdef, name='')
    self._sess = tf.Session(graph=self._graph)
    self._kept = {}
    self._step = {}

  def Compute(self, items, global_step, log):
    """items: [(key, statistics ndarray, exponent float)]."""
    for key, stat, exponent in items:
      if self._step.get(key) == global_step:
        continue
      self._step[key] = global_step
      out, diff = self._sess.run(
          ['output:0', 'diff:0'],
          {'input:0': stat, 'exponent:0': np.float32(exponent)})
      kept = bool(diff < KEEP_BELOW)
      if kept:
        self._kept[key] = out
      log.append([global_step, key, float(diff), kept])

  def Get(self, key):
    return self._kept.get(key)


def _Entries(opt):
  """[(key, statistics slot, preconditioner slot, rank)], in the order of
  invoke_async_preconditioner_computation."""
  out = []
  for var in opt._all_vars_for_preconditioning:  # pylint: disable=protected-access
    shape = var.get_shape()
    parts = distributed_shampoo.TensorPartitioner.partition_tensor(
        var, opt._partition_info)  # pylint: disable=protected-access
    n = len(parts)
    for pt_idx, pt in enumerate(parts):
      has = opt._preconditioner_available_for_dims(pt.get_shape())  # pylint: disable=protected-access
      rank = sum(has)
      for i in range(len(pt.get_shape())):
        if has[i]:
          out.append((
              opt._key_for_var(var, i, pt_idx),  # pylint: disable=protected-access
              opt.get_slot(var, opt._statistics_key_for_partition_and_dim(  # pylint: disable=protected-access
                  i, pt_idx, n)),
              opt.get_slot(var, opt._preconditioner_key_for_partition_and_dim(  # pylint: disable=protected-access
                  i, pt_idx, n)),
              rank))
    del shape
  return out


def _Run(kwargs, init, grads, clip):
  """Weights after each step and the roots' log, one case."""
  k = kwargs.get('preconditioning_compute_steps', 1000)
  op = _Shampoo.Params().Set(**{key: v for key, v in kwargs.items()
                                if key != 'preconditioning_compute_steps'})
  lp = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=LR, optimizer=op,
      lr_schedule=schedule.Constant.Params(),
      clip_gradient_norm_to_value=clip or 0.0)
  out, log = [], []
  with tf.Graph().as_default(), tf.Session() as sess:
    gs = py_utils.GetOrCreateGlobalStepVar()
    w = tf.Variable(init.astype(np.float32), name='w')
    g = tf.placeholder(tf.float32, init.shape)
    loss = tf.reduce_sum(w * g)
    learner = lp.Instantiate()
    _, update, _ = learner.Apply({'loss': (loss, tf.constant(1.0))},
                                 py_utils.NestedMap(w=w))
    inc = tf.assign_add(gs, 1)
    opt = learner.optimizer._optimizer  # pylint: disable=protected-access
    entries = _Entries(opt)
    captain = _Captain(opt._preconditioner_compute_graphdef)  # pylint: disable=protected-access
    sess.run(tf.global_variables_initializer())
    for grad in grads:
      sess.run(update, {g: grad.astype(np.float32)})
      step = int(sess.run(inc))
      if entries and step % k == 0:  # ApplyPostTrainingLoop.
        stats = sess.run([e[1] for e in entries])
        captain.Compute([(e[0], s, -1.0 / (2.0 * e[3]))
                         for e, s in zip(entries, stats)], step, log)
        for key, _, slot, _ in entries:
          value = captain.Get(key)
          if value is not None:
            slot.load(value, sess)
        log[-len(entries):] = [
            r[:1] + [opt._name + '/' + _SlotName(opt, r[1])] + r[2:]  # pylint: disable=protected-access
            for r in log[-len(entries):]]
      out.append(sess.run(w).astype(np.float64))
  return out, log


def _SlotName(opt, key):
  """The key 'P_<block>_D_<dim>_<var>' as our slot name."""
  _, block, _, dim = key.split('_')[:4]
  n = 1
  for var in opt._all_vars_for_preconditioning:  # pylint: disable=protected-access
    n = len(distributed_shampoo.TensorPartitioner.partition_tensor(
        var, opt._partition_info))  # pylint: disable=protected-access
  name = 'mat_preconditioner_%s' % dim
  return name if n == 1 else '%s_%s' % (block, name)


def _Cases():
  cases = []
  for rule, kwargs, shapes in RULES:
    for i, name in enumerate(shapes):
      shape = SHAPES[name]
      rng = np.random.RandomState(17 + i)
      init = rng.normal(0., 1., size=shape)
      grads = rng.normal(0., 1., size=(STEPS,) + shape)
      for clip in (None, CLIP):
        params, log = _Run(kwargs, init, grads, clip)
        cases.append(dict(
            rule=rule, kwargs=kwargs, lr=LR, shape_name=name,
            shape=list(shape), dtype='float32', clip=clip,
            init=init.ravel().tolist(),
            grads=[g.ravel().tolist() for g in grads],
            params=[p.ravel().tolist() for p in params], roots=log))
        print(rule, name, clip, 'roots kept %d of %d' % (
            sum(r[3] for r in log), len(log)))
  return cases


def _Newton():
  """Lingvo's inlined_matrix_inverse_pth_root on 3 small PSD matrices."""
  out = []
  rng = np.random.RandomState(5)
  for d, p in ((6, 2), (5, 4), (7, 8)):
    a = rng.normal(size=(d, d + 2))
    mat = a @ a.T
    with tf.Graph().as_default(), tf.Session() as sess:
      root, error = matrix_functions.inlined_matrix_inverse_pth_root(
          tf.constant(mat, tf.float64), d, -1.0 / p, iter_count=40,
          ridge_epsilon=1e-6)
      root, error = sess.run([root, error])
    out.append(dict(mat=mat.tolist(), p=p, root=root.tolist(),
                    error=float(error)))
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('-o', '--output', required=True)
  args = ap.parse_args()
  tf.disable_eager_execution()
  tf.compat.v1.enable_control_flow_v2()
  data = dict(
      command=('/work/lingvo_venv/bin/python tools/record_lingvo_shampoo.py '
               '-o tests/data/lingvo_0_14_2_shampoo.json'),
      versions=dict(lingvo=importlib.metadata.version('lingvo'),
                    tensorflow=importlib.metadata.version('tensorflow'),
                    numpy=np.__version__),
      captain=('sync; kEpsilon 5e-2; roots after every '
               'preconditioning_compute_steps updates'),
      cases=_Cases(), newton=_Newton())
  with open(args.output, 'w') as f:
    json.dump(data, f, sort_keys=True)
    f.write('\n')
  print('wrote %d cases to %s' % (len(data['cases']), args.output))


if __name__ == '__main__':
  main()
