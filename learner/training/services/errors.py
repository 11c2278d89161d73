"""ExperimentError: a value the jobs refuse before writing anything.

The error type of one-line refusals ('ERROR: <key> : <value> ... <fix>',
exit 2). Here, at the bottom of services/, so the logdir and checkpoint
services raise it without importing the jobs; `jobs/validate.py` re-exports
both names (`validate.ExperimentError`).
"""


class ExperimentError(ValueError):
  """A value of the experiment that the job refuses before writing anything."""


class ExperimentTypeError(ExperimentError, TypeError):
  """An ExperimentError for a value of the wrong type."""


def OneLine(text):
  """`text` with its lines joined by single spaces (an error on one line)."""
  return ' '.join(l.strip() for l in str(text).splitlines() if l.strip())
