"""Timing, tables and JSON shared by the benchmarks.

A benchmark row is a callable `step()` that runs one synchronous step (it
returns only when the work is done: TF's eager calls are synchronous on CPU;
JAX rows block on their outputs). `TimeRows` times several rows in the same
run, interleaved in rounds so that a change in the machine's load hits every
row alike, and reports per row the median and the 10th/90th percentiles of
the per-step wall times (warm-up excluded); the first call (tracing and
compilation included) is timed separately by `TimeFirstCall`.
"""

import json
import os
import time

import numpy as np


class Stats(dict):
  """Per-row timing in seconds: median, p10, p90, steps (a dict; JSON-able)."""

  @property
  def median(self):
    return self['median_s']


def Summarize(times):
  """Returns Stats of a list of per-step times in seconds.

  Raises:
    ValueError: for an empty list.
  """
  if not times:
    raise ValueError('Summarize: no step times; run at least one timed step '
                     '(--steps >= 1).')
  t = np.asarray(times, np.float64)
  return Stats(median_s=float(np.median(t)),
               p10_s=float(np.percentile(t, 10)),
               p90_s=float(np.percentile(t, 90)),
               steps=int(t.size))


def TimeFirstCall(fn):
  """Runs fn() once; returns (seconds, result). For the tracing time."""
  start = time.perf_counter()
  out = fn()
  return time.perf_counter() - start, out


def TimeRowsRaw(steps_by_row, steps, warmup, rounds=5):
  """Times rows interleaved; returns {row: [per-step seconds, in call order]}.

  Args:
    steps_by_row: dict {row name: step callable}; each call runs one step.
    steps: timed steps per row (>= 1), split evenly over `rounds`.
    warmup: untimed steps per row before the first round.
    rounds: number of round-robin passes over the rows.

  Returns:
    dict {row name: list of `steps` floats}; the i-th entry is the row's
    (warmup + i)-th call of this function.

  Raises:
    ValueError: if steps < 1 or rounds < 1.
  """
  if steps < 1 or rounds < 1:
    raise ValueError('TimeRows: steps=%r, rounds=%r; both must be >= 1.' %
                     (steps, rounds))
  for fn in steps_by_row.values():
    for _ in range(warmup):
      fn()
  times = {name: [] for name in steps_by_row}
  per_round = [steps // rounds + (1 if r < steps % rounds else 0)
               for r in range(rounds)]
  for n in per_round:
    for name, fn in steps_by_row.items():
      for _ in range(n):
        start = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - start)
  return times


def TimeRows(steps_by_row, steps, warmup, rounds=5):
  """As TimeRowsRaw, but returns {row name: Stats} (median, p10, p90)."""
  raw = TimeRowsRaw(steps_by_row, steps, warmup, rounds)
  return {name: Summarize(t) for name, t in raw.items()}


# Fewer timed steps than this judge no target (benchmarks.trainer counts its
# steady steps, benchmarks.update_step its timed steps per row): a side's
# first steps can still hold a retrace or a cold cache (the trainer's hand
# loop gave 7.8 steps/s over the 10 steady steps of --quick against its 156
# over 550), and a median of few steps on a shared 2-core machine moves
# with one burst of load; 100 is update_step's default --steps, where its
# --quick times 20 (benchmarks/README.md).
MIN_JUDGED_STEPS = 100


def TooFewSteps(steps, unit='timed steps', min_steps=MIN_JUDGED_STEPS):
  """Why a target is not judged on `steps` steps ('20 timed steps < 100'),
  or None when there are enough."""
  if steps >= min_steps:
    return None
  return '%d %s < %d' % (steps, unit, min_steps)


def Verdict(met, not_judged=None):
  """A target line's verdict: 'not judged (<not_judged>)' when a reason is
  given (then `met` is not looked at), else 'met' or 'MISSED'."""
  if not_judged:
    return 'not judged (%s)' % not_judged
  return 'met' if met else 'MISSED'


def FormatTable(header, rows):
  """Returns a fixed-width text table: header a list of str, rows of cells."""
  cells = [[str(c) for c in header]] + [[_Cell(c) for c in r] for r in rows]
  widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
  lines = []
  for k, r in enumerate(cells):
    lines.append('  '.join(c.ljust(w) if i == 0 else c.rjust(w)
                           for i, (c, w) in enumerate(zip(r, widths))))
    if k == 0:
      lines.append('  '.join('-' * w for w in widths))
  return '\n'.join(lines)


def _Cell(c):
  if c is None:
    return '-'
  if isinstance(c, float):
    return '%.2f' % c
  return str(c)


def Ms(seconds):
  """Seconds -> milliseconds (float), None stays None."""
  return None if seconds is None else seconds * 1e3


def DefaultOutputPath(benchmark_name):
  """benchmarks/results/<name>-<UTC time>.json next to this file."""
  stamp = time.strftime('%Y%m%d-%H%M%S', time.gmtime())
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results',
                      '%s-%s.json' % (benchmark_name, stamp))


def WriteJson(path, payload):
  """Writes `payload` as indented JSON to `path` (dirs created); returns path."""
  d = os.path.dirname(os.path.abspath(path))
  os.makedirs(d, exist_ok=True)
  with open(path, 'w') as f:
    json.dump(payload, f, indent=2, sort_keys=True, default=str)
  return path
