"""Skipped steps as the trainer reports them: a warning, a limit, a count.

A learner skips an update when the loss, the gradient or (with
`check_finite_weights`) the updated weights are not finite, or when
`grad_norm_to_clip_to_zero` or a grad-norm tracker rejects it (reasons:
`learner.learner.SKIP_REASONS`). After each train loop the trainer calls
`SkipMonitor.Check`: once per log interval it prints one warning line per
learner that skipped steps since the last line (how many, in which global
steps, why), and it stops the run with `TooManySkippedStepsError` when a
learner has skipped `task.train.max_consecutive_skipped_steps` updates in a
row, before any checkpoint of that state is written (a skipped step changes
no weight, so the last checkpoint stays the last good one).
"""

import numpy as np

from params import VariableName


class NonFiniteTrainingError(RuntimeError):
  """Training cannot go on: its updates or its weights are not finite."""


class TooManySkippedStepsError(NonFiniteTrainingError):
  """A learner skipped max_consecutive_skipped_steps updates in a row."""


def NonFiniteVariables(variables):
  """Names of the float variables holding a NaN or an Inf (numpy reads)."""
  bad = []
  for v in variables:
    if not v.dtype.is_floating:
      continue
    if not np.all(np.isfinite(np.asarray(v.numpy(), np.float64))):
      bad.append(VariableName(v))
  return bad


def _Reasons(counts):
  return ', '.join('%s: %d' % (r, n) for r, n in counts.items() if n)


class SkipMonitor:
  """Watches the learners' skipped updates during one training run.

  Args:
    learners: the task's learners (each has `SkipStatistics()` and
      `num_skipped_steps`).
    limit: int >= 0, task.train.max_consecutive_skipped_steps; 0 = no limit.
    report: callable(str) printing one line.
    start_step: the global step the run starts at.
  """

  def __init__(self, learners, limit, report, start_step):
    self._learners = list(learners)
    self._limit = int(limit)
    self._report = report
    self._since = start_step
    self._seen = {l.params.name: l.SkipStatistics()[1]
                  for l in self._learners}

  def Check(self, step, due, latest_checkpoint, model_variables):
    """After a train loop ending at global step `step`.

    Args:
      step: the global step reached.
      due: True to print the warning lines now (a log step, the end).
      latest_checkpoint: the newest checkpoint (named in the error).
      model_variables: the model's variables (checked for NaN/Inf when
        the limit is hit, to say why).

    Raises:
      TooManySkippedStepsError: when a learner's run of consecutive
        skipped updates reached the limit.
    """
    for lrn in self._learners:
      consecutive, counts = lrn.SkipStatistics()
      if self._limit and consecutive >= self._limit:
        self.Warn(step)
        raise TooManySkippedStepsError(self._LimitMessage(
            lrn, step, consecutive, counts, latest_checkpoint,
            model_variables))
    if due:
      self.Warn(step)

  def Warn(self, step):
    """Prints one line per learner that skipped updates since the last."""
    for lrn in self._learners:
      name = lrn.params.name
      consecutive, counts = lrn.SkipStatistics()
      new = {r: n - self._seen[name].get(r, 0) for r, n in counts.items()}
      self._seen[name] = counts
      total = sum(new.values())
      if not total:
        continue
      limit = (' (the run stops at %d: task.train.'
               'max_consecutive_skipped_steps)' % self._limit
               if self._limit else '')
      self._report(
          'WARNING: learner %r skipped %d update(s) in global steps %d-%d '
          '(%s); %d in a row now%s.' % (name, total, self._since + 1, step,
                                        _Reasons(new), consecutive, limit))
    self._since = step

  def _LimitMessage(self, lrn, step, consecutive, counts, latest,
                    model_variables):
    bad = NonFiniteVariables(model_variables)
    if bad:
      why = ('The weights %s are NaN/Inf: an applied update overflowed '
             'them. Lower the learning rate or set the learner\'s '
             'check_finite_weights : True, which skips such an update' %
             bad[:5])
    else:
      why = ('The weights are finite. Check the input and the loss for '
             'NaN/Inf, lower the learning rate or clip the gradients '
             '(clip_gradient_norm_to_value)')
    return (
        'learner %r skipped %d updates in a row up to global step %d (%s), '
        'the limit task.train.max_consecutive_skipped_steps : %d; stopped '
        'without saving, the last checkpoint is %s. %s.' %
        (lrn.params.name, consecutive, step, _Reasons(counts), self._limit,
         latest or 'none', why))


def SkippedCounts(names_and_counts):
  """metrics.json entries for the skipped updates of each learner.

  Args:
    names_and_counts: list of (learner name, num_skipped_steps as int).

  Returns:
    {'num_skipped_steps': the total} and, with several learners, also
    'num_skipped_steps/<learner name>' for each (the summary tags' form).
  """
  out = {'num_skipped_steps': int(sum(n for _, n in names_and_counts))}
  if len(names_and_counts) > 1:
    for name, n in names_and_counts:
      out['num_skipped_steps/%s' % name] = int(n)
  return out


def CheckpointSkippedCounts(reader):
  """(learner name, num_skipped_steps) of each learner in a checkpoint.

  Args:
    reader: tf.train.load_checkpoint(path).

  Returns:
    A list, empty if the checkpoint has no learner counter (e.g. not written
    by a training run of a task).
  """
  out = []
  for key in sorted(reader.get_variable_to_shape_map()):
    # The learner keeps the counter as `_num_skipped` (the variable named
    # num_skipped_steps): task/_private_children/<learner>/_num_skipped/...
    parts = key.split('/')
    if (len(parts) == 6 and parts[:2] == ['task', '_private_children'] and
        parts[3:] == ['_num_skipped', '.ATTRIBUTES', 'VARIABLE_VALUE']):
      out.append((parts[2], int(reader.get_tensor(key))))
  return out
