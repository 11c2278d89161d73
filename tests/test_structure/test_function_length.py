"""No function in learner/, params/ or schedules/ is longer than 80 lines.

A Params() definition is the exception: it is a list of documented Defines,
one knob each, and splitting it would only scatter them. Length is measured
with ast as end_lineno - lineno + 1 (the `def` line to the last line of the
body, docstring included, decorators not).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ('learner', 'params', 'schedules')
MAX_LINES = 80

# Functions allowed over the limit, each with its reason: none. (Learner._Update
# and Trainer._RunTrain were, until the gradient pipeline's stages and the one
# train step split them.) A listed function back under the limit fails too.
KNOWN_LONG = set()


def LongFunctions(source, limit=MAX_LINES):
  """[(qualified name, line, length)] of functions longer than `limit`."""
  out = []

  def Visit(node, prefix):
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
        name = prefix + child.name
        length = child.end_lineno - child.lineno + 1
        if length > limit and child.name != 'Params':
          out.append((name, child.lineno, length))
        Visit(child, name + '.')
      elif isinstance(child, ast.ClassDef):
        Visit(child, prefix + child.name + '.')
      else:
        Visit(child, prefix)

  Visit(ast.parse(source), '')
  return out


def AllLongFunctions():
  found = {}
  for pkg in PACKAGES:
    for path in sorted((ROOT / pkg).rglob('*.py')):
      rel = str(path.relative_to(ROOT))
      for name, line, length in LongFunctions(path.read_text('utf-8')):
        found[(rel, name)] = '%s:%d %s is %d lines' % (rel, line, name, length)
  return found


def test_no_function_longer_than_80_lines():
  found = AllLongFunctions()
  new = [msg for key, msg in sorted(found.items()) if key not in KNOWN_LONG]
  assert not new, (
      'Functions over %d lines (split them into named steps):\n  %s' %
      (MAX_LINES, '\n  '.join(new)))


def test_the_known_long_functions_only_shrink():
  gone = sorted(k for k in KNOWN_LONG if k not in AllLongFunctions())
  assert not gone, ('Now at most %d lines: delete them from KNOWN_LONG in '
                    '%s: %s' % (MAX_LINES, pathlib.Path(__file__).name, gone))


def test_the_measure():
  # 'def' + 79 body lines = 80 lines: at the limit, allowed; one more fails.
  body = ''.join('  x%d = %d\n' % (i, i) for i in range(79))
  assert LongFunctions('def f():\n' + body) == []
  assert LongFunctions('class C:\n  def f():\n' + body.replace(
      '  ', '    ') + '    y = 0\n') == [('C.f', 2, 81)]
  # A Params() definition may be longer.
  assert LongFunctions('def Params():\n' + body + '  y = 0\n') == []


@pytest.mark.parametrize('pkg', PACKAGES)
def test_the_scan_reads_each_package(pkg):
  assert list((ROOT / pkg).rglob('*.py'))
