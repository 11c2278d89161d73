"""Symmetric eigendecompositions by LAPACK on the host, one BLAS thread.

tf.linalg.eigh on CPU is Eigen's SelfAdjointEigenSolver (Householder
tridiagonalization, then implicit QR with the eigenvectors accumulated);
LAPACK's dsyevd (numpy.linalg.eigh: divide and conquer, blocked) gives the
same decomposition, to float64 rounding, in a third to a half of the time
at 384-512 (2 CPU cores, 2026-12-07: 512 x 512, 64 vs 138-197 ms). The
roots of DistributedShampoo's statistics are such decompositions
(rules/shampoo.py `InversePthRoots`).

OpenBLAS would run each call on every core, and under TensorFlow's own
threads that oversubscribes the machine (measured: 18 decompositions of
CharTransformer's statistics, 11.8 s with its default threads against
0.45 s with one); so the calls hold one BLAS thread (threadpoolctl), under
a lock, so that two optimizers' calls at once cannot restore each other's
thread count in the middle of a call.

Under XLA (jit_compile), where a host callback does not compile, it is
tf.linalg.eigh.
"""

import threading

import numpy as np
import tensorflow as tf
import threadpoolctl

from learner.optimizers.kernels import shared_ops

# One BLAS thread count for the process: the calls below set it and put it
# back, one call at a time.
_BLAS_LOCK = threading.Lock()


def _Decompose(*mats):
  """numpy: [lam_0, q_0, lam_1, q_1, ...] of float64 symmetric arrays."""
  out = []
  with _BLAS_LOCK, threadpoolctl.threadpool_limits(1, user_api='blas'):
    for m in mats:
      lam, q = np.linalg.eigh(m)
      out.extend([lam, q])
  return out


def SymmetricEigen(mats):
  """The eigendecompositions of symmetric matrices, in one host call.

  Args:
    mats: a list of [d_i, d_i] float64 tensors, symmetric (only the lower
      triangle is read, as LAPACK and tf.linalg.eigh do); d_i Python ints.

  Returns:
    A list of (eigenvalues [d_i] ascending, eigenvectors [d_i, d_i] as
    columns), float64, as tf.linalg.eigh returns them: LAPACK dsyevd
    through numpy.linalg.eigh (one tf.numpy_function for the list), or
    tf.linalg.eigh per matrix under XLA or for an empty list.
  """
  if not mats or shared_ops.InXla():
    return [tf.linalg.eigh(m) for m in mats]
  flat = tf.numpy_function(_Decompose, list(mats),
                           [tf.float64] * (2 * len(mats)), stateful=False)
  pairs = []
  for i, m in enumerate(mats):
    lam, q = flat[2 * i], flat[2 * i + 1]
    lam.set_shape(m.shape[:1])
    q.set_shape(m.shape)
    pairs.append((lam, q))
  return pairs
