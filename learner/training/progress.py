"""Progress reporting: a one-line bar on a terminal, log lines otherwise.

On a TTY the bar shows the step, steps/s, loss, learning rate and ETA and is
redrawn in place; when stdout is not a terminal (CI, a log file) a plain line
is printed every `log_interval_steps` steps instead, so logs stay readable.
"""

import sys
import time


def _Fmt(v):
  if v is None:
    return '-'
  return '%.4g' % v


class Progress:
  """Reports training progress.

  Args:
    max_steps: the step at which training ends.
    start_step: the step training starts (or resumes) at.
    log_interval_steps: steps between plain log lines (non-TTY output).
    stream: where to write; default sys.stdout.
    tty: force bar (True) or log lines (False); None asks `stream.isatty()`.
  """

  def __init__(self, max_steps, start_step=0, log_interval_steps=50,
               stream=None, tty=None):
    self._stream = stream or sys.stdout
    self._tty = self._stream.isatty() if tty is None else tty
    self._max_steps = max_steps
    self._start_step = start_step
    # The clock starts at the first reported step, so the one-off tracing of
    # the train step does not distort steps/s.
    self._start_time = None
    self._interval = max(1, int(log_interval_steps))

  @property
  def is_tty(self):
    return self._tty

  def Line(self, step, loss=None, lr=None):
    """Returns the progress text for `step` (steps/s measured since start)."""
    if self._start_time is None:
      self._start_time = time.time()
      self._start_step = step
    elapsed = max(time.time() - self._start_time, 1e-9)
    done = step - self._start_step
    rate = done / elapsed if done > 0 else 0.0
    eta = ('%.0fs' % ((self._max_steps - step) / rate)) if rate > 0 else '-'
    return ('step %d/%d  %.1f steps/s  loss %s  lr %s  ETA %s' %
            (step, self._max_steps, rate, _Fmt(loss), _Fmt(lr), eta))

  def WantsValues(self, step):
    """True if `Update(step, ...)` shows the loss and rate (so the caller
    fetches them from the device only then): always on a terminal, at log
    steps and the last step otherwise."""
    return (self._tty or step % self._interval == 0 or
            step == self._max_steps)

  def Update(self, step, loss=None, lr=None):
    """Reports `step` (the global step just reached)."""
    if self._start_time is None:
      self._start_time = time.time()
      self._start_step = step
    if self._tty:
      width = 20
      frac = min(1.0, step / max(self._max_steps, 1))
      bar = '#' * int(frac * width) + '.' * (width - int(frac * width))
      self._stream.write('\r[%s] %s' % (bar, self.Line(step, loss, lr)))
      self._stream.flush()
    elif step % self._interval == 0 or step == self._max_steps:
      self._stream.write(self.Line(step, loss, lr) + '\n')
      self._stream.flush()

  def Close(self):
    """Ends the bar's line (TTY only)."""
    if self._tty:
      self._stream.write('\n')
      self._stream.flush()
