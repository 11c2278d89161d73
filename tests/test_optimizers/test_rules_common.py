"""The contractions SOAP and Shampoo share (learner/optimizers/rules/common.py)
against numpy's tensordot."""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers.rules import common


@pytest.mark.parametrize('shape', [[5], [5, 3], [5, 3, 4], [5, 2, 3, 4]])
@pytest.mark.parametrize('transpose_q', [False, True])
def test_contract_first_is_tensordot_over_the_first_dim(shape, transpose_q):
  rng = np.random.default_rng(len(shape))
  x = rng.standard_normal(shape).astype(np.float32)
  q = rng.standard_normal([7, 5] if transpose_q else [5, 7]).astype(
      np.float32)
  want = np.tensordot(x.astype(np.float64), q.astype(np.float64),
                      axes=[[0], [1 if transpose_q else 0]])
  got = common.ContractFirst(tf.constant(x), tf.constant(q), transpose_q)
  assert got.shape == want.shape == tuple(shape[1:]) + (7,)
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('shape', [[5], [5, 3], [5, 3, 4], [5, 2, 3, 4]])
def test_gram_along_each_dim_is_tensordot_over_the_others(shape):
  rng = np.random.default_rng(10 + len(shape))
  g = rng.standard_normal(shape).astype(np.float32)
  for i in range(len(shape)):
    others = [j for j in range(len(shape)) if j != i]
    want = np.tensordot(g.astype(np.float64), g.astype(np.float64),
                        axes=[others, others])
    got = common.GramAlong(tf.constant(g), i).numpy()
    assert got.shape == (shape[i], shape[i])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('transpose_q', [False, True])
def test_contract_each_dim_is_q_along_every_dim_none_left_alone(transpose_q):
  rng = np.random.default_rng(20)
  x = rng.standard_normal([4, 3, 5]).astype(np.float32)
  qs = [rng.standard_normal([d, d]).astype(np.float32) for d in (4, 3, 5)]
  qs[1] = None  # Dim 1 is not contracted.
  want = x.astype(np.float64)
  for i, q in enumerate(qs):
    if q is not None:  # x_i q: sum over x's dim i with q's row (or col).
      q64 = q.astype(np.float64).T if transpose_q else q.astype(np.float64)
      want = np.moveaxis(np.tensordot(want, q64, axes=[[i], [0]]), -1, i)
  got = common.ContractEachDim(
      tf.constant(x), [None if q is None else tf.constant(q) for q in qs],
      transpose_q)
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
