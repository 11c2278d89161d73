"""MNIST-1D, generated offline: 4,000 train / 1,000 test 1-D "digits".

Greydanus 2020, "Scaling down Deep Learning" (arXiv:2011.14439), the
MNIST-1D dataset: ten hand-made 12-point templates (one per digit), each
example a template transformed at random: padded with 36..60 zeros,
stretched to 72 points, scaled by 1 + 0.4 (u - 0.5), circularly translated
by 0..47 points, its zero points replaced by correlated noise (Gaussian,
0.25, smoothed by a Gaussian filter of sigma 2), iid noise (0.02) added,
sheared by a linear ramp 0.75 (u - 0.5) * linspace(-0.5, 0.5), and linearly
interpolated to 40 points. 500 examples per class, shuffled, standardised
over the whole set, the first 80 % for training. Published accuracies: a
CNN ~94 %, an MLP ~68 % (the dataset separates models with and without
translation invariance, which is what it is for).

Why our own generator and not the `mnist1d` package from PyPI (0.0.2): the
package's `get_dataset` downloads a pickle from GitHub by default (the
network is not available at run time, and unpickling is not allowed here),
and it requires `requests`, `scipy` and `matplotlib` (imported at package
import) for what is 60 lines of numpy. This module follows the package's
`make_dataset` (Apache 2.0; templates and arguments copied from
mnist1d/data.py, transformations from mnist1d/transform.py) step by step,
drawing from one `np.random.RandomState(seed)` in the same order, so with
seed 42 it reproduces the package's regenerated dataset
(`get_dataset(args, download=False, regenerate=True)`) to float rounding;
only scipy's `gaussian_filter` and `interp1d` are replaced by numpy
equivalents (`_GaussianFilter1D`, `np.interp`).

  * `Templates()`: {'x': [10, 12], 't': [12], 'y': [10]}.
  * `MakeDataset(seed=42, ...)`: {'x', 'y', 'x_test', 'y_test', 't'}
  (float32 [n, 40], int32 [n]).
  * `Load()`: the default dataset (cached).
"""

import functools

import numpy as np

# The package's get_dataset_args(), without the download url.
DEFAULT_ARGS = dict(
  num_samples=5000,
  train_split=0.8,
  template_len=12,
  padding=(36, 60),
  scale_coeff=0.4,
  max_translation=48,
  corr_noise_scale=0.25,
  iid_noise_scale=2e-2,
  shear_scale=0.75,
  final_seq_length=40,
)


def Templates():
  """The ten 12-point digit templates, whitened, starting at 0 (as mnist1d)."""
  d = np.asarray([
    [5, 6, 6.5, 6.75, 7, 7, 7, 7, 6.75, 6.5, 6, 5],
    [5, 3, 3, 3.4, 3.8, 4.2, 4.6, 5, 5.4, 5.8, 5, 5],
    [5, 6, 6.5, 6.5, 6, 5.25, 4.75, 4, 3.5, 3.5, 4, 5],
    [5, 6, 6.5, 6.5, 6, 5, 5, 6, 6.5, 6.5, 6, 5],
    [5, 4.4, 3.8, 3.2, 2.6, 2.6, 5, 5, 5, 5, 5, 5],
    [5, 3, 3, 3, 3, 5, 6, 6.5, 6.5, 6, 4.5, 5],
    [5, 4, 3.5, 3.25, 3, 3, 3, 3, 3.25, 3.5, 4, 5],
    [5, 7, 7, 6.6, 6.2, 5.8, 5.4, 5, 4.6, 4.2, 5, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 4, 3.5, 3.5, 4, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 5, 5, 4.7, 4.3, 5],
  ], dtype=np.float64)
  x = d - d.mean(1, keepdims=True)
  x /= x.std(1, keepdims=True)
  x -= x[:, :1]
  return {'x': x / 6.0, 't': np.linspace(-5, 5, d.shape[1]) / 6.0,
      'y': np.arange(10)}


def _GaussianFilter1D(x, sigma, truncate=4.0):
  """scipy.ndimage.gaussian_filter(x, sigma) for 1-D x (mode 'reflect')."""
  radius = int(truncate * float(sigma) + 0.5)
  offsets = np.arange(-radius, radius + 1)
  kernel = np.exp(-0.5 * (offsets / sigma)**2)
  kernel /= kernel.sum()
  # scipy's 'reflect' (d c b a | a b c d | d c b a) is numpy's 'symmetric'.
  padded = np.pad(x, radius, mode='symmetric')
  return np.convolve(padded, kernel, mode='valid')


def _Interpolate(x, n):
  """Linear resampling of x to n points over [0, 1] (interp1d 'linear')."""
  return np.interp(np.linspace(0, 1, n), np.linspace(0, 1, len(x)), x)


def _Transform(x, t, rng, a, eps=1e-8):
  """One random example from template x (mnist1d.transform.transform)."""
  low, high = a['padding']
  p = low + int(rng.rand() * (high - low + 1))
  new_x = np.concatenate([x + eps, np.zeros(p)])  # pad
  length = a['template_len'] + high
  new_x = _Interpolate(new_x, length)  # dilate
  new_t = _Interpolate(t, length)
  new_x = new_x * (1 + a['scale_coeff'] * (rng.rand() - 0.5))  # scale
  k = rng.choice(a['max_translation'])  # translate (circularly)
  new_x = np.concatenate([new_x[-k:], new_x[:-k]])
  mask = new_x != 0
  corr = _GaussianFilter1D(a['corr_noise_scale'] *
                             rng.randn(*new_x.shape), 2)
  new_x = mask * new_x + (1 - mask) * corr
  new_x = new_x + a['iid_noise_scale'] * rng.randn(*new_x.shape)
  coeff = a['shear_scale'] * (rng.rand() - 0.5)  # shear
  new_x = new_x - coeff * np.linspace(-0.5, 0.5, len(new_x))
  n = a['final_seq_length']
  return _Interpolate(new_x, n), _Interpolate(new_t, n)


def MakeDataset(seed=42, **overrides):
  """Generates MNIST-1D (mnist1d.data.make_dataset, same random draws).

  Args:
      seed: seed of the one RandomState every draw comes from.
      **overrides: changes to DEFAULT_ARGS (e.g. num_samples=1000).

  Returns:
      dict: 'x' float32 [n_train, 40], 'y' int32 [n_train], 'x_test',
      'y_test' likewise for the rest, 't' float32 [40] (the x axis of a
      plot).
  """
  unknown = set(overrides) - set(DEFAULT_ARGS)
  if unknown:
    raise ValueError('Unknown MNIST-1D args %s; known: %s.' %
                         (sorted(unknown), sorted(DEFAULT_ARGS)))
  a = dict(DEFAULT_ARGS, **overrides)
  rng = np.random.RandomState(seed)
  templates = Templates()
  per_class = a['num_samples'] // len(templates['y'])
  xs, ys = [], []
  for label in templates['y']:
    for _ in range(per_class):
      x, new_t = _Transform(templates['x'][label], templates['t'], rng,
                                  a)
      xs.append(x)
      ys.append(label)
  order = rng.permutation(len(ys))
  xs = np.stack(xs)[order]
  ys = np.stack(ys)[order]
  new_t = new_t / xs.std()
  xs = (xs - xs.mean()) / xs.std()
  cut = int(len(ys) * a['train_split'])
  return {'x': xs[:cut].astype(np.float32),
      'y': ys[:cut].astype(np.int32),
      'x_test': xs[cut:].astype(np.float32),
      'y_test': ys[cut:].astype(np.int32),
      't': new_t.astype(np.float32)}


@functools.lru_cache(maxsize=1)
def Load():
  """The default MNIST-1D (seed 42; 4,000 train, 1,000 test), cached."""
  return MakeDataset()
