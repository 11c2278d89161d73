"""Every class a behaviour row of docs/lingvo.md names says so in its docstring.

docs/lingvo.md's rule: each kept difference from Lingvo 0.14.2 is a row
there and a line in the docstring of the class concerned. This test reads
the three behaviour tables ("Schedules", "Update rules", "Learner and
GradNormTracker") and checks that each class a row names points to
docs/lingvo.md from its docstring ('every schedule' is BaseSchedule,
'every update rule' BaseOptimizer, a Learner row without a class name the
Learner). The words of the line are checked by review, not here.
"""

import os
import re

import pytest

from learner import grad_norm_tracker
from learner import learner as learner_lib
from learner import optimizers
from learner.optimizers import base as base_optimizer
import schedules as sch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
DOC = os.path.join(ROOT, 'docs', 'lingvo.md')
SECTIONS = ('Schedules: behaviour that differs',
            'Update rules: behaviour that differs',
            'Learner and GradNormTracker: behaviour that differs')
ALIASES = {'every schedule': sch.BaseSchedule,
           'every update rule': base_optimizer.BaseOptimizer}


def _Rows(section):
  with open(DOC) as f:
    text = f.read()
  body = text.split('## ' + section, 1)[1].split('\n## ', 1)[0]
  rows = []
  for line in body.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) >= 4 and cells[0] not in ('class', 'item') and not set(
        cells[0]) <= set('-'):
      rows.append(cells[0])
  return rows


def _Classes(cell, section):
  """The classes a row's first cell names."""
  out = []
  for name in (n.strip() for n in cell.split(',')):
    if name in ALIASES:
      out.append(ALIASES[name])
      continue
    word = re.match(r'`?([A-Za-z]+)', name)
    word = word.group(1) if word else ''
    cls = (getattr(sch, word, None) or getattr(optimizers, word, None) or
           {'GradNormTracker': grad_norm_tracker.GradNormTracker}.get(word))
    if isinstance(cls, type):
      out.append(cls)
  if not out and section.startswith('Learner'):
    out.append(learner_lib.Learner)
  return out


def _Cases():
  cases = []
  for section in SECTIONS:
    for cell in _Rows(section):
      for cls in _Classes(cell, section):
        cases.append((section, cell, cls))
  return cases


def test_the_tables_are_found():
  # Guards the parser: the page has many rows in each table.
  for section in SECTIONS:
    assert len(_Rows(section)) >= 5, section


@pytest.mark.parametrize('section,cell,cls', _Cases(),
                         ids=lambda x: getattr(x, '__name__', str(x)[:40]))
def test_row_class_docstring_points_to_docs_lingvo(section, cell, cls):
  doc = cls.__doc__ or ''
  assert 'docs/lingvo.md' in doc, (
      '%s: docs/lingvo.md row %r (%s) names it, but its docstring has no '
      'line about the difference (with "docs/lingvo.md").' %
      (cls.__name__, cell, section))
