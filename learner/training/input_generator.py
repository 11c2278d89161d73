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

The experiments' datasets (digits, diabetes, generated regression) live with
the experiments, in `configs/inputs.py`.
"""

import numpy as np
import tensorflow as tf

from learner.training import distribution
from params import BaseLayer

_SPLITS = ('train', 'test', 'all')


class BaseInputGenerator(BaseLayer):
  """Batches from in-memory arrays, split, shuffled and repeated by params.

  Subclasses implement `_LoadAllArrays()` -> {name: np.ndarray} (all
  examples, same first dimension); this class splits them deterministically
  (a permutation drawn from `split_seed`, the last `test_fraction` is
  'test'), shuffles the training order with `seed`, repeats and batches.

  Raises:
    ValueError: at construction, for a bad split, batch size, test fraction
      or num_epochs (the message names the param).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'input'
    p.Define('batch_size', 32,
             'Examples per batch (the global batch, over all replicas).')
    p.Define('split', 'train', "Which examples: 'train', 'test' or 'all'.")
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
    p.Define('split_seed', 0,
             'Seed of the permutation that assigns examples to splits; keep '
             'it equal in the train and eval inputs.')
    p.Define('max_examples', None,
             'If set, use only the first max_examples of the split.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.split not in _SPLITS:
      raise ValueError('%s: split %r is not one of %s.' %
                       (self.path, p.split, list(_SPLITS)))
    if not isinstance(p.batch_size, int) or p.batch_size <= 0:
      raise ValueError('%s: batch_size must be a positive int, got %r.' %
                       (self.path, p.batch_size))
    if not 0.0 < p.test_fraction < 1.0:
      raise ValueError('%s: test_fraction must be in (0, 1), got %r.' %
                       (self.path, p.test_fraction))
    if p.num_epochs is not None and (not isinstance(p.num_epochs, int) or
                                     p.num_epochs <= 0):
      raise ValueError('%s: num_epochs must be None or a positive int, got '
                       '%r.' % (self.path, p.num_epochs))
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
      idx = order[n - n_test:] if p.split == 'test' else order[:n - n_test]
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
