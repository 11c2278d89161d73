"""Input generators: splits, determinism, resume by iterator or by skip."""

import numpy as np
import pytest
import tensorflow as tf

from configs import inputs
from learner.training.model import input_generator


def _Digits(**kw):
  return inputs.DigitsInput.Params().Set(**kw).Instantiate()


def test_digits_splits_are_disjoint_and_cover_all():
  train = _Digits(split='train').LoadArrays()
  test = _Digits(split='test').LoadArrays()
  # 1797 examples, 20% held out: round(359.4) = 359 test, 1438 train.
  assert len(test['labels']) == 359
  assert len(train['labels']) == 1438
  assert train['features'].shape == (1438, 64)
  assert train['features'].max() == 1.0  # pixels / 16
  rows = {r.tobytes() for r in train['features']}
  overlap = sum(r.tobytes() in rows for r in test['features'])
  # A few digit images are exact duplicates in the raw data; far from all.
  assert overlap < 5


def test_same_params_give_the_same_batches_and_skip_matches():
  a = [b['labels'].numpy() for b in _Digits(batch_size=8).GetDataset().take(5)]
  b = [b['labels'].numpy() for b in _Digits(batch_size=8).GetDataset().take(5)]
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)
  skipped = next(iter(_Digits(batch_size=8).GetDataset(skip_batches=3)))
  np.testing.assert_array_equal(skipped['labels'].numpy(), a[3])
  # Different seed: a different order.
  c = next(iter(_Digits(batch_size=8, seed=7).GetDataset()))['labels'].numpy()
  assert not np.array_equal(c, a[0])


def test_skip_across_epochs_matches_the_continuous_stream():
  # 1438 train examples / 700 per batch: batch 2 starts the second epoch
  # (reshuffled), and skipping to it gives the same batch as iterating.
  gen = _Digits(batch_size=700)
  full = [b['labels'].numpy() for b in gen.GetDataset().take(4)]
  for k in (2, 3):
    got = next(iter(gen.GetDataset(skip_batches=k)))['labels'].numpy()
    np.testing.assert_array_equal(got, full[k])


def test_iterator_checkpoint_resumes_at_the_same_batch(tmp_path):
  gen = _Digits(batch_size=16)
  it = iter(gen.GetDataset())
  next(it), next(it)
  ckpt = tf.train.Checkpoint(iterator=it)
  path = ckpt.save(str(tmp_path / 'it'))
  expected = next(it)['labels'].numpy()
  it2 = iter(_Digits(batch_size=16).GetDataset())
  tf.train.Checkpoint(iterator=it2).restore(path)
  np.testing.assert_array_equal(next(it2)['labels'].numpy(), expected)


def test_eval_pass_is_one_ordered_epoch_with_remainder():
  gen = _Digits(split='test', batch_size=100, shuffle=False, num_epochs=1,
                drop_remainder=False)
  sizes = [int(b['labels'].shape[0]) for b in gen.GetDataset()]
  assert sizes == [100, 100, 100, 59]


def test_linear_regression_data_follows_5x_plus_2():
  gen = inputs.LinearRegressionInput.Params().Set(
      split='all', num_examples=2000).Instantiate()
  d = gen.LoadArrays()
  resid = d['y'] - 5.0 * d['x'] - 2.0
  assert abs(resid.mean()) < 0.01
  assert 0.09 < resid.std() < 0.11
  w, b = np.polyfit(d['x'], d['y'], 1)
  assert abs(w - 5.0) < 0.02 and abs(b - 2.0) < 0.01


def test_diabetes_targets_are_standardised():
  d = inputs.DiabetesInput.Params().Set(split='all').Instantiate()
  y = d.LoadArrays()['targets']
  assert d.num_examples == 442
  assert abs(y.mean()) < 1e-3 and abs(y.std() - 1.0) < 1e-3


@pytest.mark.parametrize('key,value', [('split', 'dev'), ('batch_size', 0),
                                       ('test_fraction', 1.5),
                                       ('num_epochs', 0)])
def test_bad_params_raise_naming_the_key(key, value):
  with pytest.raises(ValueError, match=key):
    _Digits(**{key: value})


def test_batch_larger_than_split_raises_naming_batch_size():
  gen = inputs.DiabetesInput.Params().Set(
      split='test', batch_size=1000).Instantiate()
  with pytest.raises(ValueError, match='batch_size 1000'):
    gen.GetDataset()
