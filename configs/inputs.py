"""The datasets the registered experiments read, as input generators.

Each is a `BaseInputGenerator` (learner/training/input_generator.py) over
in-memory arrays: the data comes from packages (scikit-learn's bundled
datasets) or is generated; nothing is downloaded.
"""

import numpy as np
from sklearn import datasets as sklearn_datasets

from learner.training.input_generator import BaseInputGenerator


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

  def _LoadAllArrays(self):
    p = self.params
    rng = np.random.RandomState(p.data_seed)
    x = rng.uniform(-1.0, 1.0, size=[p.num_examples])
    y = p.w * x + p.b + p.noise_stddev * rng.normal(size=[p.num_examples])
    return {'x': x.astype(np.float32), 'y': y.astype(np.float32)}
