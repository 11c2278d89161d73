"""The fast paths' utility room: one home for the shared graph tests.

Issue 22, item 3: `learner/optimizers/kernels/` (docs/DESIGN.md, "The
house") holds the fused C++ ops and the helpers every fast path asks for:
whether XLA compiles the graph, whether tensors are all finite, and
`scale * grad` for a dense or sparse gradient (`shared_ops.py`). A module
elsewhere that writes one of these again is caught here by its idiom.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROOM = 'learner/optimizers/kernels'
PRODUCT = ('params', 'layers', 'schedules', 'learner', 'configs')

# (what is re-implemented, the idiom that writes it).
IDIOMS = (
    ('an XLA test', re.compile(r'GraphOrParentsInXlaContext|def _?InXla\b')),
    ('a finite check over tensors', re.compile(
        r'def _?\w*AllFinite\b|reduce_all\(\s*tf\.math\.is_finite'
        r'|is_finite\(\s*tf\.add_n\(')),
    ('gradient scaling', re.compile(
        r'IndexedSlices\(\s*\w+\.values\s*\*|def _?Scale(Gradient|Values)\b')),
)


def Offences(path, text):
  """[(path, line, what)] for each idiom of IDIOMS in `text`."""
  out = []
  for number, line in enumerate(text.splitlines(), 1):
    for what, pattern in IDIOMS:
      if pattern.search(line):
        out.append((path, number, what))
  return out


def _ProductModules():
  for package in PRODUCT:
    for path in sorted((ROOT / package).rglob('*.py')):
      rel = path.relative_to(ROOT).as_posix()
      if not rel.startswith(ROOM + '/'):
        yield rel, path.read_text()


def test_only_the_utility_room_writes_the_shared_graph_tests():
  found = [o for rel, text in _ProductModules() for o in Offences(rel, text)]
  assert not found, found


def test_the_room_has_each_of_them():
  text = (ROOT / ROOM / 'shared_ops.py').read_text()
  for name in ('InXla', 'AllFinite', 'SumOfSquaresFinite', 'ScaleGradient'):
    assert '\ndef %s(' % name in text, name
  for what, _ in IDIOMS:
    assert any(o[2] == what for o in Offences('room', text)), what


@pytest.mark.parametrize('line, what', [
    ('  return control_flow_util.GraphOrParentsInXlaContext(g)',
     'an XLA test'),
    ('def _InXla():', 'an XLA test'),
    ('def _AllFinite(grads):', 'a finite check over tensors'),
    ('  ok = tf.reduce_all(tf.math.is_finite(t))',
     'a finite check over tensors'),
    ('  return tf.math.is_finite(tf.add_n(halves))',
     'a finite check over tensors'),
    ('    return tf.IndexedSlices(grad.values * f, grad.indices, s)',
     'gradient scaling'),
    ('def _ScaleValues(grad, factor):', 'gradient scaling'),
])
def test_each_idiom_is_caught(line, what):
  assert Offences('m.py', 'x = 1\n' + line + '\n') == [('m.py', 2, what)]


def test_a_scalar_check_is_not_an_offence():
  # A loss scale or a norm checked alone is not a re-implementation.
  assert not Offences('m.py', 'bad = tf.logical_not(tf.math.is_finite(n))\n')


# Issue 22, item 4: the runtime (learner/training/) asks learners,
# optimizers and layers through their methods: the dev metric
# (BaseSchedule.UpdateWithMetric over Descendants()), the schedule steps
# (MicroBatchesPerUpdate), variable names and checkpoint keys
# (checkpointer.VariableName, OwnVariables, OwnChildren); never another
# object's protected name, nor `hasattr` to find out what a layer can do.
_PRIVATE_READ = re.compile(r'(?<![\w.])(?!self\.|cls\.)([A-Za-z_]\w*)\._[A-Za-z]')
_HASATTR = re.compile(r'\bhasattr\(')


def RuntimeOffences(path, text):
  """[(path, line, what)]: another object's protected name, or hasattr."""
  out = []
  for number, line in enumerate(text.splitlines(), 1):
    code = line.split('#', 1)[0]
    if _PRIVATE_READ.search(code):
      out.append((path, number, 'a protected name of another object'))
    if _HASATTR.search(code):
      out.append((path, number, 'hasattr'))
  return out


def test_the_runtime_asks_through_methods():
  found = []
  for path in sorted((ROOT / 'learner/training').rglob('*.py')):
    found += RuntimeOffences(path.relative_to(ROOT).as_posix(),
                             path.read_text())
  assert not found, found


@pytest.mark.parametrize('line, caught', [
    ('  for name, var in obj._private_vars.items():', True),
    ("  name = checkpointer_lib._VarName(v)", True),
    ("  if hasattr(l, 'UpdateWithMetric'):", True),
    ('  self._best = None', False),
    ('  return cls._Build()', False),
    ('  x = a.b_c', False),
    ("  key = 'task/_private_vars/w'", False),
])
def test_runtime_offences_are_caught(line, caught):
  assert bool(RuntimeOffences('m.py', line)) == caught
