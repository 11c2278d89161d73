"""MNIST-1D generated offline (Greydanus 2020; mnist1d's make_dataset)."""

import numpy as np
import pytest

from configs import mnist1d_data


def test_sizes_dtypes_and_labels():
  d = mnist1d_data.Load()
  assert d['x'].shape == (4000, 40) and d['x'].dtype == np.float32
  assert d['x_test'].shape == (1000, 40)
  assert d['y'].dtype == np.int32
  # 500 per class over the whole set.
  counts = np.bincount(np.concatenate([d['y'], d['y_test']]))
  np.testing.assert_array_equal(counts, [500] * 10)


def test_standardised_over_the_whole_set():
  d = mnist1d_data.Load()
  xs = np.concatenate([d['x'], d['x_test']]).astype(np.float64)
  assert abs(xs.mean()) < 1e-5 and abs(xs.std() - 1.0) < 1e-5


def test_equals_the_mnist1d_package_with_seed_42():
  # Values printed by mnist1d 0.0.2.post1 (PyPI), make_dataset(
  # get_dataset_args()) with its default seed 42, run once offline.
  d = mnist1d_data.Load()
  np.testing.assert_allclose(
      d['x'][0, :6], [-0.33200567, -0.47191037, -0.77869708, -1.00974083,
                      -0.88235257, 0.10393481], rtol=1e-5, atol=1e-6)
  assert d['y'][:12].tolist() == [2, 6, 4, 5, 6, 6, 6, 0, 3, 1, 6, 9]
  np.testing.assert_allclose(
      d['x_test'][-1, -4:], [0.44723289, 0.65987565, 0.87773435, 1.19315184],
      rtol=1e-5, atol=1e-6)
  assert d['y_test'][-12:].tolist() == [3, 9, 8, 3, 3, 6, 1, 2, 5, 9, 6, 4]


def test_gaussian_filter_matches_scipy():
  ndimage = pytest.importorskip('scipy.ndimage')
  x = np.random.default_rng(0).normal(size=72)
  np.testing.assert_allclose(mnist1d_data._GaussianFilter1D(x, 2),
                             ndimage.gaussian_filter(x, 2), atol=1e-12)


def test_templates_start_at_zero_and_are_distinct():
  t = mnist1d_data.Templates()
  assert t['x'].shape == (10, 12)
  np.testing.assert_allclose(t['x'][:, 0], 0.0)
  assert len({tuple(np.round(r, 6)) for r in t['x']}) == 10


def test_unknown_arg_raises():
  with pytest.raises(ValueError, match='Unknown MNIST-1D args'):
    mnist1d_data.MakeDataset(num_sample=10)
