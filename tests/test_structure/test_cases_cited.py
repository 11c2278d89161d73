"""Every case id a test cites has an entry in docs/cases/ (issue 11, item 6).

How tests cite a case (docs/cases/README.md):
  * in a test function's name: `test_<id>_...`, the id in lower case with
    `-` written `_` (`test_s3_...` cites S3, `test_c_accum_reset` cites
    C-accum-reset);
  * in the text of a test file (comment, docstring, string): the id itself,
    `O9`, `C-decay-exclusion`.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES_DIR = ROOT / 'docs' / 'cases'
TESTS_DIR = ROOT / 'tests'

# A case's entry: a Markdown heading whose whole text is the id.
HEADING = re.compile(r'^#{2,4} ([A-Z][A-Za-z0-9-]*)\s*$', re.M)
# The two id families: a letter and a number (L1, O9, P5, S30), or C- and
# lower-case words joined by '-' (C-accum-weighted).
NUMBERED_ID = re.compile(r'(?<![\w/.-])([LOPS][0-9]{1,2})(?![\w/-])')
NAMED_ID = re.compile(r'(?<![\w.-])(C(?:-[a-z0-9]+)+)(?![\w-])')
# "L1" and "L2" are also the regularisers' names ("L1/L2", "an L2 penalty"):
# those uses are not citations.
REGULARISER_USE = re.compile(
    r'\s+(?:regulari[sz]|norm|penalt|decay|loss|weight)', re.I)
TEST_NAME_NUMBERED = re.compile(r'^\s*def (test_([lops][0-9]{1,2}))_', re.M)
TEST_NAME_NAMED = re.compile(r'^\s*def (test_c_\w+)\s*\(', re.M)


def DefinedIds():
  """{id: file name} of every heading in docs/cases/*.md."""
  ids = {}
  for md in sorted(CASES_DIR.glob('*.md')):
    for cid in HEADING.findall(md.read_text(encoding='utf-8')):
      assert cid not in ids, 'case %s is defined in %s and %s' % (
          cid, ids[cid], md.name)
      ids[cid] = md.name
  return ids


def TestFiles():
  return sorted(p for p in TESTS_DIR.rglob('*.py')
                if 'data' not in p.relative_to(TESTS_DIR).parts)


def TextCitations(text):
  """Case ids written out in `text`, as (id, line number)."""
  found = []
  for m in NAMED_ID.finditer(text):
    found.append((m.group(1), text.count('\n', 0, m.start()) + 1))
  for m in NUMBERED_ID.finditer(text):
    if REGULARISER_USE.match(text, m.end()):
      continue
    found.append((m.group(1), text.count('\n', 0, m.start()) + 1))
  return found


def NameCitations(text, slugs):
  """Case ids cited by test names; an unresolved `test_c_` name gives None."""
  found = []
  for m in TEST_NAME_NUMBERED.finditer(text):
    found.append((m.group(2).upper(), text.count('\n', 0, m.start()) + 1))
  for m in TEST_NAME_NAMED.finditer(text):
    name = m.group(1)[len('test_'):]
    matches = [cid for slug, cid in slugs.items()
               if name == slug or name.startswith(slug + '_')]
    cid = max(matches, key=len) if matches else 'C-' + name[2:].replace(
        '_', '-') + ' (from the name %s)' % m.group(1)
    found.append((cid, text.count('\n', 0, m.start()) + 1))
  return found


def Citations():
  slugs = {cid.lower().replace('-', '_'): cid for cid in DefinedIds()
           if cid.startswith('C-')}
  out = []
  for path in TestFiles():
    text = path.read_text(encoding='utf-8')
    rel = path.relative_to(ROOT)
    for cid, line in TextCitations(text) + NameCitations(text, slugs):
      out.append((cid, '%s:%d' % (rel, line)))
  return out


def test_every_case_has_one_heading_and_the_folder_is_not_empty():
  ids = DefinedIds()
  # The three families each file holds (a floor, not the exact count).
  for prefix, md in (('L', 'learner.md'), ('O', 'optimizers.md'),
                     ('S', 'schedules.md')):
    assert any(c.startswith(prefix) and f == md for c, f in ids.items()), (
        prefix, md)
  assert len(ids) >= 60, sorted(ids)


def test_every_cited_case_id_has_an_entry_in_docs_cases():
  ids = DefinedIds()
  missing = ['%s cites %s' % (where, cid) for cid, where in Citations()
             if cid not in ids]
  assert not missing, (
      'These tests cite case ids with no heading in docs/cases/*.md; add '
      'the case (a heading "### <id>") or fix the citation:\n  '
      + '\n  '.join(missing))


def test_the_scan_finds_the_citations_it_should():
  # The patterns themselves: a known citation of each form is found, and
  # the regulariser's name is not taken for case L2.
  text = ('def test_s3_piecewise():\n'
          '  # O9: a = -3.0; C-accum-weighted: w = -0.15; like L1.\n'
          '  # an L2 penalty, L1/L2 regularisation, not cases.\n'
          'def test_c_decay_exclusion_misspelt():\n'
          'def test_c_no_such_case():\n')
  slugs = {'c_decay_exclusion': 'C-decay-exclusion'}
  cited = [c for c, _ in TextCitations(text) + NameCitations(text, slugs)]
  assert sorted(cited[:-1]) == ['C-accum-weighted', 'C-decay-exclusion',
                                'L1', 'O9', 'S3']
  # An unresolved test_c_ name is reported under the id it spells.
  assert cited[-1].startswith('C' + '-no-such-case (from the name ')


# The cases used to live outside the repository, in the sibling folder
# named below (spelt in two pieces so that this file does not match).
@pytest.mark.parametrize('old', ['shared' + '/cases', '../' + 'shared'])
def test_tests_point_at_the_cases_in_the_repository(old):
  stale = [str(p.relative_to(ROOT)) for p in TestFiles()
           if old in p.read_text(encoding='utf-8')]
  assert not stale, ('%s is not in the repository; cite docs/cases/ '
                     'instead in: %s' % (old, stale))
