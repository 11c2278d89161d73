"""Schedule lengths in examples or epochs, converted to applied updates.

Any length param of a schedule (warmup_steps, total_steps, decay_steps,
first_decay_steps, boundaries, ...) may be written as a string
'<number> examples' or '<number> epochs' instead of a count of updates, as
big_vision's `{warmup,cooldown}_{steps,examples,epochs}`: the recipe then
survives a change of batch size. Before the task is built, the trainer
converts every such value with the examples one update of that learner
really consumes (global batch size x micro-batches per update under
gradient accumulation) and prints each conversion once:

  updates = round(examples / examples_per_update)
  examples = epochs * examples_per_epoch (the train split's size)

The params text keeps the strings (params.txt is the recipe; a resume with
another batch size converts again). A schedule built outside the trainer
refuses a string where it expects a count (one line naming the param).
"""

import re

from params import hyperparams
from params.value_codec import IsNegativeDuration
from schedules.base_schedule import BaseSchedule

_DURATION = re.compile(
    r'^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(examples?|epochs?)\s*$')


def ParseDuration(value):
  """(amount: float, 'examples' | 'epochs') of a duration string, or None.

  Args:
    value: any param value; only a str like '2000 examples', '1.5 epochs'
      (singular accepted) is a duration.
  """
  if not isinstance(value, str):
    return None
  m = _DURATION.match(value)
  if not m:
    return None
  unit = m.group(2)
  return float(m.group(1)), unit if unit.endswith('s') else unit + 's'


def _Schedules(p, key):
  """Yields (dotted key, params) of every schedule's params inside p."""
  for sub, sp in hyperparams.NestedParamsWithKeys(p, key):
    cls = getattr(sp, 'cls', None)
    if isinstance(cls, type) and issubclass(cls, BaseSchedule):
      yield sub, sp


def _IsDuration(value):
  """A duration string, or a negative one (which _Convert refuses)."""
  return ParseDuration(value) is not None or IsNegativeDuration(value)


def HasDurations(params):
  """True if a schedule inside `params` has a duration string.

  A negative one ('-2000 examples') counts, so that `ResolveDurations`
  refuses it by name.
  """
  for _, sp in _Schedules(params, ''):
    for _, value in sp.IterParams():
      values = value if isinstance(value, list) else [value]
      if any(_IsDuration(v) for v in values):
        return True
  return False


def _Convert(key, value, examples_per_update, examples_per_epoch,
             epoch_size_fix):
  if IsNegativeDuration(value):
    raise ValueError(
        '%s : %r is a negative duration; a duration must be positive, e.g. '
        '%r.' % (key, value, value.replace('-', '', 1).strip()))
  amount, unit = ParseDuration(value)
  examples = amount
  if unit == 'epochs':
    if callable(examples_per_epoch):
      examples_per_epoch = examples_per_epoch()
    if not examples_per_epoch:
      raise ValueError(
          '%s : %r is in epochs, but the train input does not say how many '
          'examples an epoch has; %sgive it in examples or updates.' %
          (key, value, epoch_size_fix + ', or ' if epoch_size_fix else ''))
    examples = amount * examples_per_epoch
  updates = int(round(examples / examples_per_update))
  if updates == 0 and amount > 0:
    raise ValueError(
        '%s : %r is %g examples, which rounds to 0 updates at %d examples '
        'per update; give at least %r, or the length in updates.' %
        (key, value, examples, examples_per_update,
         '%d examples' % examples_per_update))
  return updates, examples


def ResolveDurations(params, key, examples_per_update,
                     examples_per_epoch=None, epoch_size_fix=None):
  """Replaces every duration string in the schedules inside `params`.

  Args:
    params: Params (e.g. one learner's), changed in place.
    key: its dotted key, for the messages (e.g. 'task.train.learner[1]').
    examples_per_update: examples one step of these schedules consumes
      (global batch x micro-batches per applied update), an int > 0.
    examples_per_epoch: the train split's size, a callable giving it (called
      only for a duration in epochs), or None if unknown.
    epoch_size_fix: how to give the epoch size, named in the refusal of a
      duration in epochs without it (e.g. 'set train_input.num_examples');
      None: the refusal says only to give the length in examples or updates.

  Returns:
    One line per conversion: "<key> : '<value>' -> <n> updates (<examples>
    examples at <examples_per_update> per update)".

  Raises:
    ValueError: a negative duration ('-2000 examples'), a positive one that
      rounds to 0 updates, or a duration in epochs without
      examples_per_epoch (one line naming the key).
  """
  lines = []
  for skey, sp in _Schedules(params, key):
    for name, value in list(sp.IterParams()):
      full = '%s.%s' % (skey, name)
      if _IsDuration(value):
        n, examples = _Convert(full, value, examples_per_update,
                               examples_per_epoch, epoch_size_fix)
        sp.Set(**{name: n})
        lines.append('%s : %r -> %d updates (%g examples at %d per update)'
                     % (full, value, n, examples, examples_per_update))
      elif isinstance(value, list) and any(_IsDuration(v) for v in value):
        out = []
        for i, v in enumerate(value):
          if not _IsDuration(v):
            out.append(v)
            continue
          n, examples = _Convert('%s[%d]' % (full, i), v,
                                 examples_per_update, examples_per_epoch,
                                 epoch_size_fix)
          out.append(n)
          lines.append('%s[%d] : %r -> %d updates (%g examples at %d per '
                       'update)' % (full, i, v, n, examples,
                                    examples_per_update))
        sp.Set(**{name: out})
  return lines
