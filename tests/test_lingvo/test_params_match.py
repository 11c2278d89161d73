"""Every schedule and update rule under a Lingvo name has Lingvo's params.

For each class, the set of param names and every default equal those
recorded from Lingvo 0.14.2 in tests/data/lingvo_0_14_2_params.json (by
tools/record_lingvo_params.py; its docstring has the command), except the
rows of the allow-list table in docs/lingvo.md ("Param differences"),
which this test reads: each difference found must have a row, and each
row must still be a difference (so the page cannot go stale).
"""

import json
import os
import re

import pytest
import tensorflow as tf

from learner import optimizers
from params import Params
import schedules as sch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
DATA = os.path.join(ROOT, 'tests', 'data', 'lingvo_0_14_2_params.json')
DOC = os.path.join(ROOT, 'docs', 'lingvo.md')

SCHEDULES = [
    'BaseSchedule', 'Constant', 'ConstantOne', 'PiecewiseConstantSchedule',
    'ContinuousSchedule', 'PolynomialSchedule', 'LinearSchedule',
    'LinearRampupDecaySchedule', 'AnnealingSchedule', 'ExponentialSchedule',
    'StepwiseExponentialSchedule', 'CombinedMinimumSchedule',
    'TransformerSchedule', 'TransformerMLPerfSchedule',
    'TransformerScheduleNoWarmUp',
    'LinearRampupExponentialDecayScaledByNumSplitSchedule',
    'LinearRampupExponentialDecay', 'LinearRampupSqrtDecay',
    'LinearRampupSqrtDecayByBatchSizeAndReplicas',
    'LinearRampupPiecewiseConstantSchedule', 'LinearRampupCosineSchedule',
    'EmaDecaySchedule', 'DevBasedSchedule', 'CosineSchedule',
    'PiecewiseSchedule', 'SqrtDecay', 'SqrtDecayToZero', 'CycleSchedule',
    'InverseSigmoid']
OPTIMIZERS = ['SGD', 'Momentum', 'RMSProp', 'Adagrad', 'AdaDelta', 'Adam',
              'DistributedShampoo', 'AdaGraft', 'DynamicAccumulator']
# Issue 13 part B: lingvo/core/learner.py Learner, lingvo/core/layers.py
# GradNormTracker.
LAYERS = {'Learner': 'lingvo.core.learner.Learner',
          'GradNormTracker': 'lingvo.core.layers.GradNormTracker'}

# Lingvo 0.14.2 lingvo/core/early_stop.py MetricHistory.Params(): the nested
# default of DevBasedSchedule.metric_history (the recorder keeps it as an
# expression).
METRIC_HISTORY = dict(name='MetricHistory', jobname='eval_dev',
                      metric='log_pplx', minimize=True, logdir='',
                      tfevent_file=False, local_filesystem=False)

MISSING = object()  # A param one side does not have.


def _Lingvo():
  with open(DATA) as f:
    classes = json.load(f)['classes']
  out = {}
  for name in SCHEDULES:
    out[name] = classes['lingvo.core.schedule.' + name]
  for name in OPTIMIZERS:
    out[name] = classes['lingvo.core.optimizer.' + name]
  for name, key in LAYERS.items():
    out[name] = classes[key]
  return out


def _Ours(name):
  if name == 'Learner':
    from learner import learner as learner_lib  # pylint: disable=g-import-not-at-top
    cls = learner_lib.Learner
  elif name == 'GradNormTracker':
    from learner import grad_norm_tracker  # pylint: disable=g-import-not-at-top
    cls = grad_norm_tracker.GradNormTracker
  else:
    cls = getattr(sch, name, None) or getattr(optimizers, name)
  return cls, dict(cls.Params().IterParams())


def _Same(lingvo, ours):
  """True if our default equals Lingvo's recorded one (type included)."""
  if isinstance(lingvo, dict) and set(lingvo) == {'expr'}:
    expr = lingvo['expr']
    if expr == 'tf.float32':
      return ours == tf.float32
    if expr == 'schedule.ContinuousSchedule.Params()':
      return (isinstance(ours, Params) and
              ours.cls is sch.ContinuousSchedule and
              dict(ours.IterParams()) ==
              dict(sch.ContinuousSchedule.Params().IterParams()))
    if expr == '[LinearSchedule.Params()]':
      return (isinstance(ours, list) and len(ours) == 1 and
              ours[0].cls is sch.LinearSchedule)
    if expr == 'early_stop.MetricHistory.Params()':
      return (isinstance(ours, Params) and
              dict(ours.IterParams()) == METRIC_HISTORY and
              all(type(v) is type(METRIC_HISTORY[k])
                  for k, v in ours.IterParams()))
    return False  # Any other expression must be an allow-list row.
  if isinstance(ours, tuple):
    ours = list(ours)
  return type(lingvo) is type(ours) and lingvo == ours


def _Differences(name, record):
  """{param: (lingvo default or MISSING, ours or MISSING)} for one class."""
  cls, ours = _Ours(name)
  lingvo = dict(record['params'])
  lingvo.pop('cls')
  ours.pop('cls')
  out = {}
  for key in sorted(set(lingvo) | set(ours)):
    a, b = lingvo.get(key, MISSING), ours.get(key, MISSING)
    if a is MISSING or b is MISSING or not _Same(a, b):
      out[key] = (a, b)
  del cls
  return out


def _AllowList():
  """{(class name, param): kind} from the table in docs/lingvo.md.

  Rows: | classes | `param` | Lingvo | ours | why |, where classes is
  'every schedule', 'every update rule', both separated by ', ', or class
  names separated by ', '.
  kind: 'extra' (Lingvo column '—'), 'missing' (ours '—') or 'default'.
  """
  with open(DOC) as f:
    text = f.read()
  section = text.split('## Param differences', 1)[1].split('\n## ', 1)[0]
  rows = {}
  for line in section.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) < 5 or not cells[1].startswith('`'):
      continue
    who, param, lingvo, ours = cells[:4]
    kind = ('extra' if lingvo == '—' else 'missing' if ours == '—' else
            'default')
    names = []
    for n in (n.strip() for n in who.split(',')):
      names += {'every schedule': SCHEDULES,
                'every update rule': OPTIMIZERS}.get(n, [n])
    for n in names:
      rows[(n, param.strip('`'))] = kind
  return rows


def _Kind(lingvo, ours):
  return ('extra' if lingvo is MISSING else 'missing' if ours is MISSING
          else 'default')


@pytest.mark.parametrize('name', SCHEDULES + OPTIMIZERS + list(LAYERS))
def test_params_and_defaults_match_lingvo_except_documented_rows(name):
  record = _Lingvo()[name]
  allowed = _AllowList()
  diffs = _Differences(name, record)
  undocumented = {k: v for k, v in diffs.items()
                  if allowed.get((name, k)) != _Kind(*v)}
  assert not undocumented, (
      '%s differs from Lingvo 0.14.2 in %s; fix it or add a row to the '
      '"Param differences" table of docs/lingvo.md.' % (name, undocumented))
  stale = [p for (n, p) in allowed if n == name and p not in diffs]
  assert not stale, ('docs/lingvo.md lists %s.%s as a difference, but it '
                     'matches Lingvo now: remove the row.' % (name, stale))


def test_allow_list_names_only_known_classes():
  # BaseTask.train / .eval rows: tests/test_lingvo/test_lingvo_configs.py.
  unknown = {n for n, _ in _AllowList()} - set(SCHEDULES + OPTIMIZERS +
                                               list(LAYERS)) - {
                                                   'BaseTask.train',
                                                   'BaseTask.eval'}
  assert not unknown


def test_adam_presets_match_lingvo():
  """Lingvo 0.14.2 optimizer.py Adam.ParamsA / ParamsB."""
  presets = _Lingvo()['Adam']['presets']
  for preset, want in presets.items():
    p = getattr(optimizers.Adam, preset)()
    assert {k: p.Get(k) for k in want} == want, preset
    assert p.cls is optimizers.Adam


def test_recorder_command_is_in_its_docstring():
  with open(os.path.join(ROOT, 'tools', 'record_lingvo_params.py')) as f:
    text = f.read()
  assert re.search(r'python3 tools/record_lingvo_params.py /tmp/lingvo_src'
                   r' \\\n\s+-o tests/data/lingvo_0_14_2_params.json', text)
  with open(DATA) as f:
    assert json.load(f)['lingvo_version'] == '0.14.2'
