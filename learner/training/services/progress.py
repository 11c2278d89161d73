"""Progress reporting: a one-line bar on a terminal, log lines otherwise.

On a TTY the bar shows the step, steps/s, loss, learning rate(s) and ETA and
is redrawn in place; when stdout is not a terminal (CI, a log file) a plain
line is printed every `log_interval_steps` steps instead, so logs stay
readable. With several learners each rate is labelled by its learner's name
(`lr[dec] 0.001  lr[enc] 0.002`); with several replicas the line shows their
count, and the first report says once how many replicas the strategy runs.
"""

import sys
import time


def _Fmt(v):
  if v is None:
    return '-'
  return '%.4g' % v


def FormatEta(seconds):
  """Remaining time for people: '0.4s', '12s', '3m05s', '2h07m'.

  Fast runs are not all 'ETA 0s': below 10 s the tenths are shown.
  """
  if seconds < 0.05:
    return '<0.1s'
  if seconds < 10:
    return '%.1fs' % seconds
  if seconds < 60:
    return '%.0fs' % seconds
  minutes, secs = divmod(int(round(seconds)), 60)
  if minutes < 60:
    return '%dm%02ds' % (minutes, secs)
  hours, minutes = divmod(minutes, 60)
  return '%dh%02dm' % (hours, minutes)


def LearningRates(tagged):
  """The learning rate(s) of one step's tagged metrics, for the progress line.

  Args:
    tagged: {tag: (value, weight)} from `summary.FlattenStepOutput`: one
      learner's rate is 'learning_rate', several learners' are
      'learning_rate/<learner name>'.

  Returns:
    a float (one learner), {learner name: float} (several), or None.
  """
  rates = {}
  for tag, (value, weight) in sorted(tagged.items()):
    if not weight:
      continue
    if tag == 'learning_rate':
      return value
    if tag.startswith('learning_rate/'):
      rates[tag[len('learning_rate/'):]] = value
  return rates or None


def _FmtRates(lr):
  if isinstance(lr, dict):
    return '  '.join('lr[%s] %s' % (name, _Fmt(v))
                     for name, v in sorted(lr.items()))
  return 'lr %s' % _Fmt(lr)


class Progress:
  """Reports training progress.

  Args:
    max_steps: the step at which training ends.
    start_step: the step training starts (or resumes) at.
    log_interval_steps: steps between plain log lines (non-TTY output).
    stream: where to write; default sys.stdout.
    tty: force bar (True) or log lines (False); None asks `stream.isatty()`.
    num_replicas: int, replicas computing each step together (the
      strategy's `num_replicas_in_sync`); shown when > 1.
    strategy_name: str, named in the one-off replicas line (e.g.
      'MirroredStrategy').
  """

  def __init__(self, max_steps, start_step=0, log_interval_steps=50,
               stream=None, tty=None, num_replicas=1, strategy_name=None):
    self._stream = stream or sys.stdout
    self._tty = self._stream.isatty() if tty is None else tty
    self._max_steps = max_steps
    self._start_step = start_step
    # The clock starts at the first reported step, so the one-off tracing of
    # the train step does not distort steps/s.
    self._start_time = None
    self._interval = max(1, int(log_interval_steps))
    self._num_replicas = int(num_replicas)
    self._strategy_name = strategy_name
    self._drawn = 0  # Characters of the bar's open line; 0: none open.

  @property
  def is_tty(self):
    return self._tty

  def _Start(self, step):
    """Starts the clock at the first reported step; says the replicas once."""
    if self._start_time is not None:
      return
    self._start_time = time.time()
    self._start_step = step
    if self._num_replicas > 1:
      self._stream.write('Training on %d replicas in sync%s.\n' % (
          self._num_replicas, (' (%s)' % self._strategy_name)
          if self._strategy_name else ''))
      self._stream.flush()

  def Line(self, step, loss=None, lr=None):
    """Returns the progress text for `step` (steps/s measured since start).

    Args:
      step: int, the global step reached.
      loss: float or None.
      lr: float, {learner name: float} (several learners) or None.
    """
    self._Start(step)
    elapsed = max(time.time() - self._start_time, 1e-9)
    done = step - self._start_step
    rate = done / elapsed if done > 0 else 0.0
    if step >= self._max_steps:
      eta = 'done'
    else:
      eta = FormatEta((self._max_steps - step) / rate) if rate > 0 else '-'
    replicas = ('  replicas %d' % self._num_replicas
                if self._num_replicas > 1 else '')
    # The first reported step starts the clock: no rate to show yet.
    rate_text = '%.1f' % rate if done > 0 else '-'
    return ('step %d/%d  %s steps/s%s  loss %s  %s  ETA %s' %
            (step, self._max_steps, rate_text, replicas, _Fmt(loss),
             _FmtRates(lr), eta))

  def WantsValues(self, step):
    """True if `Update(step, ...)` shows the loss and rate (so the caller
    fetches them from the device only then): always on a terminal, at log
    steps and the last step otherwise."""
    return (self._tty or step % self._interval == 0 or
            step == self._max_steps)

  def Update(self, step, loss=None, lr=None):
    """Reports `step` (the global step just reached); `lr` as in `Line`."""
    self._Start(step)
    if self._tty:
      width = 20
      frac = min(1.0, step / max(self._max_steps, 1))
      bar = '#' * int(frac * width) + '.' * (width - int(frac * width))
      text = '[%s] %s' % (bar, self.Line(step, loss, lr))
      # Blanks over what a longer previous line left ('ETA 1m21ss').
      self._stream.write('\r%s%s' % (text, ' ' * (self._drawn - len(text))))
      self._drawn = len(text)
      self._stream.flush()
    elif step % self._interval == 0 or step == self._max_steps:
      self._stream.write(self.Line(step, loss, lr) + '\n')
      self._stream.flush()

  def Close(self):
    """Ends the bar's line (TTY only), if one is open; idempotent.

    Call before anything else is written (a note, an evaluation, a stop
    message), so that it starts on a line of its own.
    """
    if self._tty and self._drawn:
      self._stream.write('\n')
      self._stream.flush()
      self._drawn = 0
