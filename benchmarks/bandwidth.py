"""The memory-bandwidth limit of an update step, measured in the same run.

An optimizer update is memory-bound: its time cannot be below

    limit = bytes moved per step / memory bandwidth.

`MeasureBandwidth` measures the bandwidth with numpy on `threads` threads
(numpy's ufuncs release the GIL), each running the in-place add `a += b` over
arrays much larger than the caches: per element it reads a and b and writes a
(12 bytes for float32; write-allocate traffic is not counted, as for the
optimizer kernels, which also read what they write). The best repetition
counts, so the limit is the fastest this machine showed in this run.

`BandwidthProbe` is the same pass as a timing row, interleaved with the
rows being measured, so the limit is computed under the load they saw.

`BYTES_PER_PARAM` is the traffic model of each update, in bytes per float32
parameter, counting each array read or written once per step (the model the
issue states; a separate global-norm pass re-reads the gradient, which the
model leaves out, so a two-pass clip can reach at best (n+4)/n of the limit).
"""

import threading
import time

import numpy as np

# Bytes per float32 parameter moved by one step (reads + writes, 4 B each).
BYTES_PER_PARAM = {
    # Momentum: read w, g, v; write w, v.
    'momentum': 20,
    # Adam: read w, g, m, v; write w, m, v.
    'adam': 28,
    # Accumulation micro-step: read g, read and write the accumulator.
    'accumulate': 12,
    # Accumulation applying step with Momentum: read acc, w, v; write w, v
    # and the zeroed accumulator.
    'accumulate_apply_momentum': 24,
    # The rules of multi_tensor_rules.cc (reads + writes of w, g and slots).
    'lion': 20,  # m
    'nadam': 28,  # m, v
    'amsgrad': 36,  # m, v, v_max
    'sf_sgd': 28,  # z, x
    'sf_adamw': 36,  # z, x, v
}


class BandwidthProbe(object):
  """A timing row that measures bandwidth under the same load as the others.

  Calling it runs one `a += b` pass on `threads` threads (as
  `MeasureBandwidth`); time it like any row (e.g. with timing.TimeRows) and
  convert its median step time with `Gbps`, so the limit reflects the load
  the machine had while the other rows ran.
  """

  def __init__(self, threads=2, mbytes_per_array=64):
    if threads < 1 or mbytes_per_array <= 0:
      raise ValueError(
          'BandwidthProbe: threads=%r, mbytes_per_array=%r; expected '
          'threads >= 1 and mbytes_per_array > 0.' % (threads,
                                                     mbytes_per_array))
    self._n = int(mbytes_per_array * 2**20 // 4)
    self._arrays = [(np.ones(self._n, np.float32), np.ones(self._n, np.float32))
                    for _ in range(threads)]

  @property
  def bytes_per_call(self):
    """Counted traffic of one call: 12 bytes per element per thread."""
    return len(self._arrays) * self._n * 12

  def __call__(self):
    workers = [threading.Thread(target=np.add, args=(a, b), kwargs={'out': a})
               for a, b in self._arrays]
    for w in workers:
      w.start()
    for w in workers:
      w.join()

  def Gbps(self, seconds_per_call):
    """GB/s (1e9 B/s) for a measured time of one call in seconds."""
    return self.bytes_per_call / seconds_per_call / 1e9


def MeasureBandwidth(threads=2, mbytes_per_array=64, repeats=7):
  """Measures memory bandwidth in GB/s (1e9 bytes/s) with numpy.

  Args:
    threads: number of threads, each owning its own two arrays.
    mbytes_per_array: size of each float32 array in MiB (must exceed the
      last-level cache for a memory, not cache, figure).
    repeats: timed repetitions after one warm-up; the best one counts.

  Returns:
    float, GB/s of counted traffic (12 bytes per element of `a += b`).

  Raises:
    ValueError: if threads < 1, mbytes_per_array <= 0 or repeats < 1.
  """
  if threads < 1 or mbytes_per_array <= 0 or repeats < 1:
    raise ValueError(
        'MeasureBandwidth: threads=%r, mbytes_per_array=%r, repeats=%r; '
        'expected threads >= 1, mbytes_per_array > 0, repeats >= 1.' %
        (threads, mbytes_per_array, repeats))
  n = int(mbytes_per_array * 2**20 // 4)
  arrays = [(np.ones(n, np.float32), np.ones(n, np.float32))
            for _ in range(threads)]

  def Work(a, b, barrier):
    barrier.wait()
    np.add(a, b, out=a)

  best = float('inf')
  for r in range(repeats + 1):
    barrier = threading.Barrier(threads + 1)
    workers = [threading.Thread(target=Work, args=(a, b, barrier))
               for a, b in arrays]
    for w in workers:
      w.start()
    start = time.perf_counter()
    barrier.wait()
    for w in workers:
      w.join()
    elapsed = time.perf_counter() - start
    if r > 0:
      best = min(best, elapsed)
  return threads * n * 12 / best / 1e9


def LimitSeconds(num_params, bytes_per_param, gbytes_per_s):
  """Seconds one step needs at least: num_params * bytes_per_param / bw."""
  return num_params * bytes_per_param / (gbytes_per_s * 1e9)
