"""Citations of the design card in the sources resolve to docs/DESIGN.md."""

import os
import re

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_PACKAGES = ('params', 'schedules', 'learner', 'configs', 'benchmarks')


def _Citations():
  """Yields (file, section) for each 'DESIGN.md, "Section"' in the sources."""
  for package in _PACKAGES:
    for dirpath, _, names in os.walk(os.path.join(_ROOT, package)):
      for name in names:
        if name.endswith('.py'):
          path = os.path.join(dirpath, name)
          with open(path) as f:
            text = ' '.join(f.read().split())
          for m in re.finditer(r'DESIGN\.md,? "([^"]+)"', text):
            yield os.path.relpath(path, _ROOT), m.group(1)


def test_design_card_is_in_the_repo_and_has_every_cited_section():
  with open(os.path.join(_ROOT, 'docs', 'DESIGN.md')) as f:
    design = f.read()
  cited = list(_Citations())
  assert len(cited) >= 8, cited  # The sources do cite it.
  for path, section in cited:
    # A heading ('## Words with one meaning') or a paragraph label
    # ('**Optimizer**', 'Distribution:').
    assert ('## ' + section in design or '**%s**' % section in design or
            '\n%s:' % section in design), (path, section)


def test_readme_and_distributed_doc_link_the_design_card():
  with open(os.path.join(_ROOT, 'README.md')) as f:
    assert '(docs/DESIGN.md)' in f.read()
  with open(os.path.join(_ROOT, 'docs', 'distributed.md')) as f:
    assert '(DESIGN.md)' in f.read()
