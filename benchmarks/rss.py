"""Resident memory of this process, for the step-peak measurements.

`benchmarks.remat` and `benchmarks.memory --table` measure a train step's
peak as VmHWM after the step minus VmRSS before it, in child processes run
with `PEAK_ENV`:
  * `TF_ENABLE_ONEDNN_OPTS=0`: oneDNN's primitive cache would keep the
    first step's buffers resident, so later steps would show almost no
    growth;
  * `MALLOC_MMAP_THRESHOLD_=1048576` (bytes): glibc otherwise raises its
    mmap threshold to the size of each large buffer freed (up to 32 MiB)
    and serves the next ones from its heap, whose fragments stay resident;
    the RSS then tracks malloc's retained heap more than the step's tensors
    (seen here: 20 % from step to step, and cells of the memory table
    differing by 2x with the same tensors).
Linux only (/proc/self/status, /proc/self/clear_refs, glibc's malloc_trim).
"""

import ctypes

MMAP_THRESHOLD = 2**20  # Bytes; the children's MALLOC_MMAP_THRESHOLD_.
PEAK_ENV = {'TF_ENABLE_ONEDNN_OPTS': '0',
            'MALLOC_MMAP_THRESHOLD_': str(MMAP_THRESHOLD)}


def Status(key):
  """The value of `key` (e.g. 'VmHWM', 'VmRSS') in /proc/self/status, in
  bytes; raises KeyError when the kernel does not report it."""
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith(key + ':'):
        return int(line.split()[1]) * 1024
  raise KeyError('%s is not in /proc/self/status.' % key)


def ResetPeak():
  """Returns the RSS in bytes, after handing freed heap back and resetting
  VmHWM.

  The previous step's buffers are freed but may stay resident in malloc's
  heap; `malloc_trim(0)` returns them to the system, so the peak that
  follows counts the step's own allocations rather than re-used heap.
  Then VmHWM is set to the current RSS (`5` into /proc/self/clear_refs).
  """
  ctypes.CDLL('libc.so.6').malloc_trim(0)
  with open('/proc/self/clear_refs', 'w') as f:
    f.write('5')
  return Status('VmRSS')
