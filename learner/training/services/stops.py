"""Clean stops: SIGINT and SIGTERM end a training run at a step boundary.

While `SignalStop` is active (the trainer holds it around training), SIGINT
(Ctrl-C) and SIGTERM (e.g. from a job scheduler) do not interrupt Python:
the handler only records the signal. The trainer looks at it after every
train loop (loops end at every summary, log, eval and save step), saves a
checkpoint of the steps done and raises `StopRequested`; the command prints
its one line and exits with 128 + the signal number (130 for SIGINT, 143
for SIGTERM), as a shell reports a process stopped by that signal. No
KeyboardInterrupt can then land inside a checkpoint save, so a save is never
left half-written (a `.data` file without its `.index`).

In a multi-worker group (the trainer passes `group`,
`distribution.GroupStopSignals`) the workers exchange their signals at
every loop's end, so a SIGTERM to any one worker (a cluster preempting it)
stops every worker after the same step: each saves that step (the chief
writes the checkpoint) and exits with the same status, 128 + the largest
signal number received (143 when any worker got SIGTERM), which says
"preempted: run the same command again". docs/distributed.md, "Preemption
on a cluster".

A signal that arrives while a stop is already under way is noted and
otherwise ignored until the save is done. Handlers can only be installed in
the main thread; elsewhere `SignalStop` does nothing and signals behave as
usual.
"""

import signal
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(Exception):
  """Training stopped on a signal after saving; `exit_code` = 128 + signum.

  Attributes:
    signum: the signal number.
    exit_code: 128 + signum (130 SIGINT, 143 SIGTERM).
  """

  def __init__(self, signum, message):
    super().__init__(message)
    self.signum = signum
    self.exit_code = 128 + signum


class SignalStop:
  """Context manager: SIGINT/SIGTERM are recorded, not raised, while active.

  Args:
    report: callable(str) for the note printed when a signal arrives.
  """

  def __init__(self, report=None):
    self._report = report
    self._previous = {}
    self.signum = None

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for s in _SIGNALS:
        self._previous[s] = signal.signal(s, self._Handle)
    return self

  def __exit__(self, *unused_exc):
    for s, handler in self._previous.items():
      signal.signal(s, handler)
    self._previous = {}
    return False

  def _Handle(self, signum, unused_frame):
    first = self.signum is None
    if first:
      self.signum = signum
    if self._report:
      self._report('%s received: %s' % (
          signal.Signals(signum).name,
          'finishing the current step, then saving a checkpoint and '
          'stopping.' if first else 'already stopping; the checkpoint is '
          'being saved.'))

  @property
  def requested(self):
    """True once SIGINT or SIGTERM arrived."""
    return self.signum is not None

  def StopIfRequested(self, step, save, group=None):
    """Saves and raises StopRequested if a signal arrived; else returns.

    Args:
      step: the global step reached (all its updates are done).
      save: zero-argument callable that saves a checkpoint of this step if
        none exists and returns its path.
      group: optional callable(own signal number or 0) -> list of int, one
        signal number (0: none) per worker of a multi-worker run, the same
        list on every worker (`distribution.StopAgreement(...).Signals`).
        With it this worker also stops when only a peer received a signal,
        and every worker stops at the same step with the same exit code
        (128 + the largest signal number received). It must be called at
        the same steps on every worker, so it is called every time.

    Raises:
      StopRequested: with the line to print.
    """
    if group is None:
      if self.signum is None:
        return
      signum, line = self.signum, 'Stopped by %s' % signal.Signals(
          self.signum).name
    else:
      signals = group(self.signum or 0)
      if not any(signals):
        return
      signum = max(signals)
      line = 'Stopped by %s to %s of the group' % (
          signal.Signals(signum).name, ', '.join(
              'worker %d' % i for i, s in enumerate(signals) if s))
    path = save()
    raise StopRequested(signum, (
        '%s at global step %d; checkpoint %s saved. Run the same command '
        'again%s to resume.' % (line, step, path, '' if group is None else
                                ' on every worker')))
