"""The files, tests and names docs/DESIGN.md and docs/cases/ point at exist.

"Where things go" tells a newcomer which file to add, what to read and which
test to copy; a renamed file or test would send them nowhere.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / 'docs' / 'DESIGN.md'] + sorted((ROOT / 'docs' / 'cases').glob(
    '*.md'))
# `learner/optimizers/base.py`, `tests/test_optimizers/test_lars.py`, ...; a
# path with a placeholder (`schedules/<name>.py`) names a file to add, and
# one after "not " is a counter-example (`learner/utils.py`).
PATH = re.compile(r'(?<!not )`((?:params|layers|schedules|learner|configs|tests|benchmarks|'
                  r'docs)/[\w/.]+\.(?:py|md))`')
TEST_NAME = re.compile(r'`(test_[a-z0-9_]+)`')
# `_PARAMS` of `tests/...py`, `STRATEGY_NAMES` ... in `learner/...py`.
NAME_IN_FILE = re.compile(r'`([A-Za-z_][A-Za-z0-9_]*)`(?: \([^)]*\))?'
                          r'(?: and [^`]*)? (?:of|in) `([\w/]+\.py)`')


def _Text(path):
  return path.read_text(encoding='utf-8')


def _AllTestSources():
  return '\n'.join(_Text(p) for p in (ROOT / 'tests').rglob('test_*.py'))


@pytest.mark.parametrize('doc', DOCS, ids=lambda p: p.name)
def test_every_cited_file_exists(doc):
  missing = [p for p in PATH.findall(_Text(doc)) if not (ROOT / p).exists()]
  assert not missing, '%s names files that do not exist: %s' % (doc.name,
                                                                 missing)


@pytest.mark.parametrize('doc', DOCS, ids=lambda p: p.name)
def test_every_cited_test_exists(doc):
  sources = _AllTestSources()
  missing = [n for n in TEST_NAME.findall(_Text(doc))
             if not re.search(r'def %s\b' % n, sources)]
  assert not missing, '%s names tests that do not exist: %s' % (doc.name,
                                                                missing)


def test_names_said_to_be_in_a_file_are_there():
  pairs = NAME_IN_FILE.findall(_Text(ROOT / 'docs' / 'DESIGN.md'))
  assert len(pairs) >= 5, pairs  # The section does name things in files.
  missing = [(n, f) for n, f in pairs
             if (ROOT / f).exists() and not re.search(
                 r'\b%s\b' % re.escape(n), _Text(ROOT / f))]
  assert not missing, missing


def test_where_things_go_covers_the_five_additions():
  text = _Text(ROOT / 'docs' / 'DESIGN.md')
  section = text[text.index('## Where things go'):]
  section = section[:section.index('\n## ', 1)]
  for what in ('optimizer (update rule)', 'learning-rate schedule',
               'optimizer wrapper', 'experiment', 'distribution strategy',
               'model layer'):
    assert '**A new %s.**' % what in section, what
