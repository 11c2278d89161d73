"""The datasets the registered experiments read, as input generators.

Each is a `BaseInputGenerator` (learner/training/model/input_generator.py) over
in-memory arrays: the data comes from packages (scikit-learn's bundled
datasets) or is generated; nothing is downloaded.
"""

import numpy as np
import tensorflow as tf
from sklearn import datasets as sklearn_datasets

from configs import char_data
from configs import mnist1d_data
from learner.training.model.input_generator import BaseInputGenerator
from params import checks


class DigitsInput(BaseInputGenerator):
  """scikit-learn's bundled 8x8 digits (1797 images, 10 classes).

  Batches: 'features' float32 [batch, 64] in [0, 1] (pixels / 16),
  'labels' int32 [batch].
  """

  def _LoadAllArrays(self):
    d = sklearn_datasets.load_digits()
    return {'features': (d.data / 16.0).astype(np.float32),
            'labels': d.target.astype(np.int32)}


class DiabetesInput(BaseInputGenerator):
  """scikit-learn's bundled diabetes regression (442 patients, 10 features).

  Batches: 'features' float32 [batch, 10], sklearn's centred features divided
  by their standard deviation over the whole set (unit variance), and
  'targets' float32 [batch]: the disease progression standardised with the
  mean 152.13 and standard deviation 77.01 of the whole set, so a model that
  predicts the mean has a mean squared error near 1.
  """

  TARGET_MEAN = 152.13348
  TARGET_STD = 77.00574

  def _LoadAllArrays(self):
    d = sklearn_datasets.load_diabetes()
    y = (d.target - self.TARGET_MEAN) / self.TARGET_STD
    x = d.data / d.data.std(axis=0)
    return {'features': x.astype(np.float32),
            'targets': y.astype(np.float32)}


class LinearRegressionInput(BaseInputGenerator):
  """Generated data y = w*x + b + noise, x ~ U(-1, 1) (the seeds' example).

  Batches: 'x' float32 [batch], 'y' float32 [batch]. The data is drawn once
  from `data_seed`, so every split and run sees the same examples.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('num_examples', 1000, 'Examples generated.')
    p.Define('w', 5.0, 'True slope.')
    p.Define('b', 2.0, 'True intercept.')
    p.Define('noise_stddev', 0.1, 'Standard deviation of the Gaussian noise.')
    p.Define('data_seed', 0, 'Seed of the generated examples.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(num_examples=checks.Int(1, example=1000),
                 w=checks.Real(example=5.0), b=checks.Real(example=2.0),
                 noise_stddev=checks.Real(0, example=0.1),
                 data_seed=checks.Int(0, 2**32 - 1, example=0))
    return specs

  def _LoadAllArrays(self):
    p = self.params
    rng = np.random.RandomState(p.data_seed)
    x = rng.uniform(-1.0, 1.0, size=[p.num_examples])
    y = p.w * x + p.b + p.noise_stddev * rng.normal(size=[p.num_examples])
    return {'x': x.astype(np.float32), 'y': y.astype(np.float32)}


class CharLmInput(BaseInputGenerator):
  """Character windows of the pydoc text (configs/char_data.py).

  split 'train': windows starting at every position of the first 90 % of
  the text (stride 1; shuffled, so batches are random windows); split
  'test': the held-out last 10 % in non-overlapping windows, in order.
  Batches: 'ids' int32 [batch, seq_len], 'labels' int32 [batch, seq_len]
  (ids shifted by one character). The vocabulary is the whole text's
  (char_data.Vocab(): 103 characters on CPython 3.11). `test_fraction` is
  the held-out fraction; `split_seed` is not used (the split is by
  position, not random).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('seq_len', 64, 'Characters per window.')
    p.test_fraction = 0.1
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['seq_len'] = checks.Int(1, example=64)
    return specs

  def LoadArrays(self):
    """{'start': int32 [num_windows]}: the first character of each window."""
    if self._arrays is None:
      p = self.params
      train, test, _ = char_data.Split(p.test_fraction)
      ids = test if p.split == 'test' else train
      stride = p.seq_len if p.split == 'test' else 1
      n = (len(ids) - 1 - p.seq_len) // stride + 1
      self._ids = ids
      starts = (np.arange(n) * stride).astype(np.int32)
      self._arrays = {'start': starts[:p.max_examples or None]}
    return self._arrays

  def GetExampleDataset(self):
    """Single windows {'ids', 'labels'} int32 [seq_len], shuffled by seed."""
    p = self.params
    ds = super().GetExampleDataset()
    text = tf.constant(self._ids)
    offsets = tf.range(p.seq_len + 1, dtype=tf.int32)

    def _Window(ex):
      w = tf.gather(text, ex['start'] + offsets)
      return {'ids': w[:-1], 'labels': w[1:]}

    return ds.map(_Window, num_parallel_calls=tf.data.AUTOTUNE,
                  deterministic=True)


class Mnist1dInput(BaseInputGenerator):
  """MNIST-1D (configs/mnist1d_data.py): 4,000 train / 1,000 test examples.

  The package's own split (split 'train' / 'test'; 'all' is refused):
  batches 'features' float32 [batch, 40] (standardised), 'labels' int32
  [batch] in 0..9. `split_seed` and `test_fraction` are not used.
  """

  def LoadArrays(self):
    if self._arrays is None:
      p = self.params
      if p.split == 'all':
        raise ValueError("%s: split 'all' is not offered by MNIST-1D; use "
                         "'train' or 'test'." % self.path)
      d = mnist1d_data.Load()
      suffix = '_test' if p.split == 'test' else ''
      arrays = {'features': d['x' + suffix], 'labels': d['y' + suffix]}
      if p.max_examples:
        arrays = {k: v[:p.max_examples] for k, v in arrays.items()}
      self._arrays = arrays
    return self._arrays
