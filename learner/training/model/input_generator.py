"""Input generators: layers whose params say where batches come from.

An input generator is a `BaseLayer` whose params name the data source, the
split, the batch size and the shuffling seed; `GetDataset()` returns a
`tf.data.Dataset` of batches (dicts of tensors). Datasets are built
deterministically from the params, so a resumed run continues at the same
batch: the trainer either saves the iterator in the checkpoint (one device)
or rebuilds the dataset and skips the batches already consumed
(`GetDataset(skip_batches=global_step, input_context)`, needed under
tf.distribute, whose iterators TF 2.21 cannot checkpoint). Batching, the
per-worker shard and the skip are written once, in
`distribution.WorkerDataset`.

`DatasetInput` wraps the user's own tf.data factory of examples (one device
or any strategy). The experiments' datasets (digits, diabetes, generated
regression, MNIST-1D, the pydoc text) live with
the experiments, in `configs/inputs.py`.
"""

import inspect

import numpy as np
import tensorflow as tf

from learner.training.cluster import distribution
from params import BaseLayer
from params import checks

_SPLITS = ('train', 'dev', 'test', 'all')


class BaseInputGenerator(BaseLayer):
  """Batches from in-memory arrays, split, shuffled and repeated by params.

  Subclasses implement `_LoadAllArrays()` -> {name: np.ndarray} (all
  examples, same first dimension); this class splits them deterministically
  (a permutation drawn from `split_seed`: its last `test_fraction` is
  'test', the `dev_fraction` before that 'dev' (Lingvo's Dev() set), the
  rest 'train'), shuffles the training order with `seed`, repeats and
  batches.

  Raises:
    ValueError: at construction, for a bad split, or a batch size, seed,
      test fraction, num_epochs or max_examples that is a bool, not an int
      (test_fraction: not a finite number) or out of range (the message
      names the param; see `ValueChecks`); split 'dev' with dev_fraction
      0; dev_fraction + test_fraction >= 1.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'input'
    p.Define('batch_size', 32,
             'Examples per batch (the global batch, over all replicas).')
    p.Define('split', 'train',
             "Which examples: 'train', 'dev', 'test' or 'all'.")
    p.Define('seed', 1234,
             'Seed of the shuffling order (and of generated data); the same '
             'seed gives the same batches in every run.')
    p.Define('shuffle', True, 'Shuffle the examples (reshuffled each epoch).')
    p.Define('num_epochs', None,
             'Passes over the split; None repeats forever (training). An '
             'evaluation input uses 1.')
    p.Define('drop_remainder', True,
             'Drop the last partial batch of each pass (keeps every batch the '
             'same shape, which jit_compile and tf.distribute like).')
    p.Define('test_fraction', 0.2,
             "Fraction of the examples held out as the 'test' split.")
    p.Define('dev_fraction', 0.0,
             "Fraction of the examples held out as the 'dev' split (taken "
             "from what 'train' would have; 0: no dev split).")
    p.Define('split_seed', 0,
             'Seed of the permutation that assigns examples to splits; keep '
             'it equal in the train and eval inputs.')
    p.Define('max_examples', None,
             'If set, use only the first max_examples of the split.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        batch_size=checks.Int(1, example=32),
        seed=checks.Int(0, example=1234),
        num_epochs=checks.Int(1, none_ok=True, example=1,
                              why='None repeats forever'),
        test_fraction=checks.Real(0, 1, low_open=True, high_open=True,
                                  example=0.2),
        dev_fraction=checks.Real(0, 1, high_open=True, example=0.1),
        split_seed=checks.Int(0, 2**32 - 1, example=0),
        max_examples=checks.Int(0, none_ok=True, example=1000,
                                why='None or 0 uses every example'))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.split not in _SPLITS:
      raise ValueError('%s: split %r is not one of %s.' %
                       (self.path, p.split, list(_SPLITS)))
    if p.split == 'dev' and not p.dev_fraction:
      raise ValueError(
          "%s: split 'dev' needs dev_fraction > 0 (the held-out share of "
          "the examples), e.g. dev_fraction=0.1." % self.path)
    if p.dev_fraction + p.test_fraction >= 1:
      raise ValueError(
          '%s: dev_fraction %r + test_fraction %r leave no training '
          'example; keep their sum below 1.' %
          (self.path, p.dev_fraction, p.test_fraction))
    self._arrays = None

  def _LoadAllArrays(self):
    """Returns {name: np.ndarray} of all examples; subclasses implement."""
    raise NotImplementedError('%s must implement _LoadAllArrays().' %
                              type(self).__name__)

  def LoadArrays(self):
    """Returns {name: np.ndarray} of this split's examples (cached)."""
    if self._arrays is not None:
      return self._arrays
    p = self.params
    arrays = self._LoadAllArrays()
    n = len(next(iter(arrays.values())))
    for k, v in arrays.items():
      if len(v) != n:
        raise ValueError('%s: array %r has %d examples, expected %d.' %
                         (self.path, k, len(v), n))
    if p.split != 'all':
      order = np.random.RandomState(p.split_seed).permutation(n)
      n_test = max(1, int(round(n * p.test_fraction)))
      n_dev = int(round(n * p.dev_fraction))
      bounds = {'train': (0, n - n_test - n_dev),
                'dev': (n - n_test - n_dev, n - n_test),
                'test': (n - n_test, n)}[p.split]
      idx = order[bounds[0]:bounds[1]]
      idx = np.sort(idx)
      arrays = {k: v[idx] for k, v in arrays.items()}
    if p.max_examples:
      arrays = {k: v[:p.max_examples] for k, v in arrays.items()}
    self._arrays = arrays
    return arrays

  @property
  def num_examples(self):
    """Number of examples in this split (an int)."""
    return len(next(iter(self.LoadArrays().values())))

  def GetExampleDataset(self):
    """Returns a tf.data.Dataset of single examples, shuffled and repeated.

    The same params give the same order in every call and every process
    (shuffling uses `seed`), which makes resume-by-skip exact.
    """
    p = self.params
    arrays = self.LoadArrays()
    ds = tf.data.Dataset.from_tensor_slices(arrays)
    if p.shuffle:
      ds = ds.shuffle(self.num_examples, seed=p.seed,
                      reshuffle_each_iteration=True)
    return ds.repeat(p.num_epochs)

  def GetDataset(self, skip_batches=0, input_context=None):
    """Returns a tf.data.Dataset of batches: dicts {name: Tensor[batch, ...]}.

    Args:
      skip_batches: global batches to skip from the start (a resumed run
        that could not restore its iterator skips the global steps already
        taken).
      input_context: optional tf.distribute.InputContext: this input
        pipeline's shard of the examples, in per-replica batches
        (`distribution.WorkerDataset`). None: one pipeline of one replica,
        batches of `batch_size`.

    Raises:
      ValueError: if batch_size exceeds the split's size with drop_remainder.
    """
    p = self.params
    self.CheckBatchSize()
    return distribution.WorkerDataset(
        self.GetExampleDataset, input_context or tf.distribute.InputContext(),
        p.batch_size, skip_batches=int(skip_batches),
        drop_remainder=p.drop_remainder)

  def CheckBatchSize(self):
    """Raises ValueError if batch_size exceeds the split with drop_remainder."""
    p = self.params
    n = self.num_examples
    if p.drop_remainder and p.batch_size > n:
      raise ValueError(
          '%s: batch_size %d is larger than the %r split (%d examples); '
          'lower batch_size or set drop_remainder=False.' %
          (self.path, p.batch_size, p.split, n))


class DatasetInput(BaseLayer):
  """The user's own tf.data pipeline as an input: a factory of examples.

      def MyExamples():
        x, y = np.load('x.npy'), np.load('y.npy')
        ds = tf.data.Dataset.from_tensor_slices({'x': x, 'y': y})
        return ds.shuffle(len(x), seed=1).repeat()

      p.train_input = DatasetInput.Params().Set(dataset_fn=MyExamples,
                                                batch_size=64)

  `dataset_fn` returns an *unbatched* tf.data.Dataset of examples, each a
  dict {name: Tensor} (the batch keys the task reads), in the same order
  every time it is called (fixed shuffle seeds): this class batches it, so
  the same code runs on one device and under every strategy. Either form:
    * `dataset_fn()`: all examples; under a strategy each input pipeline
      (one per worker) keeps its shard (every k-th example), and each
      replica gets batch_size / num_replicas of them per step, so one step
      sees the examples of the single-device run's batch.
    * `dataset_fn(input_context)`: a tf.distribute.InputContext; the
      function returns this pipeline's own examples (e.g. reads its own
      files: `input_context.input_pipeline_id` of
      `input_context.num_input_pipelines`), which are not sharded again.
  Resume is exact: the dataset is rebuilt and the consumed batches skipped
  (or the iterator restored from the checkpoint on one device), as for
  every input generator.

  Batches: the example dict with a leading batch dimension of
  batch_size / num_replicas per replica.

  Epochs: the dataset is not counted. A schedule length in epochs
  ('3 epochs') needs `num_examples`, the examples in one pass, e.g.
  num_examples=len(x) above; with batch_size 64 and 6400 examples,
  '3 epochs' is 3 * 6400 / 64 = 300 updates.

  Raises:
    TypeError: at construction if dataset_fn is not callable; in GetDataset
      if it returns something else than a tf.data.Dataset of dicts.
    ValueError: at construction if batch_size is not an int >= 1 or
      num_examples is neither None nor an int >= 1 (one line naming it).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'input'
    p.Define('dataset_fn', None,
             'Callable () or (tf.distribute.InputContext) -> unbatched, '
             'deterministic tf.data.Dataset of dict examples.')
    p.Define('batch_size', 32,
             'Examples per step (the global batch, over all replicas).')
    p.Define('drop_remainder', True,
             'Drop the last partial batch (a finite dataset, e.g. for '
             'evaluation, keeps it with False).')
    p.Define('num_examples', None,
             'Examples in one epoch (one pass over the examples of '
             'dataset_fn, all input pipelines together), an int >= 1; '
             'None: unknown. Only a schedule length in epochs reads it '
             "('3 epochs' = 3 * num_examples examples).")
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['batch_size'] = checks.Int(1, example=32)
    specs['num_examples'] = checks.Int(1, none_ok=True, example=1000,
                                       why='None: the epoch size is unknown')
    return specs

  @property
  def num_examples(self):
    """Examples per epoch (an int), as the params say; None if unknown.

    The dataset is not counted (it may be infinite or expensive to read):
    this is `params.num_examples` as given.
    """
    return self.params.num_examples

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if not callable(p.dataset_fn):
      raise TypeError('%s: dataset_fn must be a callable returning a '
                      'tf.data.Dataset of dict examples, got %r; e.g. '
                      'dataset_fn=lambda: tf.data.Dataset.from_tensor_slices('
                      '{\'x\': x, \'y\': y}).' % (self.path, p.dataset_fn))
    try:
      sig = inspect.signature(p.dataset_fn)
      self._takes_context = bool(sig.parameters)
    except (TypeError, ValueError):
      self._takes_context = False

  def _Examples(self, input_context):
    fn = self.params.dataset_fn
    ds = fn(input_context) if self._takes_context else fn()
    if not isinstance(ds, tf.data.Dataset) or not isinstance(ds.element_spec,
                                                             dict):
      raise TypeError(
          '%s: dataset_fn must return an unbatched tf.data.Dataset of dicts '
          '{name: Tensor}, got %r; e.g. tf.data.Dataset.from_tensor_slices('
          '{\'x\': x, \'y\': y}).' % (self.path, getattr(ds, 'element_spec',
                                                         ds)))
    return ds

  def CheckBatchSize(self):
    """Nothing to check: the dataset's size is not known in advance."""

  def GetDataset(self, skip_batches=0, input_context=None):
    """Per-replica batches of dataset_fn's examples, skip_batches skipped.

    Args and result as BaseInputGenerator.GetDataset.
    """
    p = self.params
    ctx = input_context or tf.distribute.InputContext()
    if not self._takes_context:
      return distribution.WorkerDataset(
          lambda: self._Examples(None), ctx, p.batch_size,
          skip_batches=int(skip_batches), drop_remainder=p.drop_remainder)
    # The function shards itself: batch and skip as WorkerDataset does.
    ds = self._Examples(ctx).batch(ctx.get_per_replica_batch_size(
        p.batch_size), drop_remainder=p.drop_remainder)
    local_replicas = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    return ds.skip(int(skip_batches) * local_replicas) if skip_batches else ds
