"""Citations of the design card in the sources resolve to docs/DESIGN.md."""

import os
import re

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_PACKAGES = ('params', 'schedules', 'learner', 'layers', 'configs',
             'benchmarks')


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


def _Readme():
  with open(os.path.join(_ROOT, 'README.md')) as f:
    return f.read()


def test_readme_has_exactly_two_set_up_commands_the_second_is_ci():
  commands = [l.strip() for l in _Readme().splitlines()
              if l.strip().startswith('python3 -m venv')]
  assert len(commands) == 2, commands
  with open(os.path.join(_ROOT, '.ci', 'run')) as f:
    ci = [l.strip() for l in f if l.strip().startswith('python3 -m venv')]
  assert ci == [commands[1]]
  assert commands[0].endswith('python -m learner.trainer '
                              '--model=digits.MlpMomentum '
                              '--logdir=logs/digits.MlpMomentum '
                              '--mode=train_and_eval')


def test_readme_standalone_learner_example_prints_what_it_says(capsys):
  text = _Readme()
  section = text[text.index('### A Learner on its own'):]
  code = re.search(r'```python\n(.*?)```', section, re.S).group(1)
  exec(compile(code, 'README.md', 'exec'), {})  # pylint: disable=exec-used
  # The README says it prints this line.
  assert 'w 3.000  b -1.000  updates 300  lr 0.00100' in capsys.readouterr().out
  assert '`w 3.000  b -1.000  updates 300  lr\n0.00100`' in text
