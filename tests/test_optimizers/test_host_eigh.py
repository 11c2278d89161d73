"""LAPACK's symmetric eigensolver on the host (learner/optimizers/kernels/
host_eigh.py): the decomposition tf.linalg.eigh gives, in a graph and
under XLA, with OpenBLAS's thread count put back after each call."""

import numpy as np
import tensorflow as tf
import threadpoolctl

from learner.optimizers.kernels import host_eigh


def _Mats():
  rng = np.random.RandomState(0)
  out = []
  for d in (5, 3):
    g = rng.normal(size=(d, 2 * d))
    out.append(g @ g.T)
  q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
  out.append((q * [2., 0.5, -1.]) @ q.T)  # indefinite
  return [tf.constant(m) for m in out]


def _CheckDecomposes(pairs, mats, tol=1e-11):
  for (lam, q), m in zip(pairs, mats):
    lam, q, m = lam.numpy(), q.numpy(), m.numpy()
    # Eigen values ascending, as numpy's own eigvalsh; Q orthonormal; Q L Q^T.
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(m), rtol=tol,
                               atol=tol)
    np.testing.assert_allclose(q.T @ q, np.eye(len(m)), atol=tol)
    np.testing.assert_allclose((q * lam) @ q.T, m, atol=tol * 10)


def test_in_a_graph_it_decomposes_like_tf_eigh():
  mats = _Mats()
  pairs = tf.function(host_eigh.SymmetricEigen)(mats)
  _CheckDecomposes(pairs, mats)
  for (lam, _), (want, _) in zip(pairs, [tf.linalg.eigh(m) for m in mats]):
    np.testing.assert_allclose(lam.numpy(), want.numpy(), atol=1e-12)


def test_the_graph_knows_the_shapes():
  mats = _Mats()
  seen = []

  @tf.function
  def Shapes(ms):
    pairs = host_eigh.SymmetricEigen(ms)
    seen.extend((lam.shape.as_list(), q.shape.as_list()) for lam, q in pairs)
    return pairs

  Shapes(mats)
  assert seen == [([5], [5, 5]), ([3], [3, 3]), ([3], [3, 3])]


def test_under_xla_it_is_tf_eigh():
  mats = _Mats()
  pairs = tf.function(host_eigh.SymmetricEigen, jit_compile=True)(mats)
  # XLA's eigh (Jacobi sweeps) stops at ~1e-7 of the norm (measured 5.4e-7
  # on Q L Q^T here), not at float64 rounding.
  _CheckDecomposes(pairs, mats, tol=1e-6)


def test_an_empty_list_is_empty():
  assert host_eigh.SymmetricEigen([]) == []


def _BlasThreads():
  return [i['num_threads'] for i in threadpoolctl.threadpool_info()
          if i['user_api'] == 'blas']


def test_the_blas_thread_count_is_one_in_the_call_and_put_back(monkeypatch):
  before = _BlasThreads()
  seen = []
  orig = np.linalg.eigh

  def Spy(m):
    seen.append(_BlasThreads())
    return orig(m)

  monkeypatch.setattr(np.linalg, 'eigh', Spy)
  tf.function(host_eigh.SymmetricEigen)(_Mats()[:2])
  assert seen == [[1] * len(before)] * 2 and before
  assert _BlasThreads() == before
