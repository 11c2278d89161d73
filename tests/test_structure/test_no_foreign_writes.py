"""No module writes into another object's insides (issue 37, item 3).

A feature attaches to an optimizer through its declared contract (a public
method such as `UseStateSharding`, a class flag), never by writing
`obj.__dict__[...]` of an object other than `self` (ZeRO-1 once replaced
`Bind` and `Apply` on a rule instance that way) or a private attribute
`obj._name` that the writing module does not define itself. Own objects:
`self`, `cls`, a class defined in the module, and a new instance the
module's own method makes (`type(self).__new__(type(self))`, `cls(...)`).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = ('params', 'layers', 'schedules', 'learner', 'configs')
_OWN = ('self', 'cls')


def _Target(node):
  """The Attribute a store goes through: `x._a = `, `x._a[k] = `."""
  while isinstance(node, ast.Subscript):
    node = node.value
  return node if isinstance(node, ast.Attribute) else None


def _OwnPrivateNames(tree):
  """Private names this module defines: stored on self/cls, through
  self.__dict__['_x'], or assigned in a class body."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ClassDef):
      for stmt in node.body:
        if isinstance(stmt, ast.Assign):
          names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    for target in _StoreTargets(node):
      attr = _Target(target)
      if (attr is not None and isinstance(attr.value, ast.Name) and
          attr.value.id in _OWN):
        names.add(attr.attr)
      if (isinstance(target, ast.Subscript) and attr is not None and
          attr.attr == '__dict__' and
          isinstance(target.slice, ast.Constant)):
        names.add(target.slice.value)
  return names


def _StoreTargets(node):
  if isinstance(node, ast.Assign):
    return list(node.targets)
  if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
    return [node.target]
  if isinstance(node, ast.Delete):
    return list(node.targets)
  return []


def _OwnObjects(tree):
  """Names that stand for the module's own objects: self, cls, its
  classes, and names bound to a new instance (`X.__new__(...)`,
  `type(self)(...)`, `cls(...)`)."""
  names = set(_OWN)
  for node in ast.walk(tree):
    if isinstance(node, ast.ClassDef):
      names.add(node.name)
    if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
      func = node.value.func
      new = ((isinstance(func, ast.Attribute) and func.attr == '__new__') or
             (isinstance(func, ast.Name) and func.id == 'cls') or
             (isinstance(func, ast.Call) and ast.unparse(func) ==
              'type(self)'))
      if new:
        names.update(t.id for t in node.targets if isinstance(t, ast.Name))
  return names


def ForeignWrites(path, text):
  """[(path, line, what)] of each write into another object's insides."""
  tree = ast.parse(text)
  own = _OwnPrivateNames(tree)
  objects = _OwnObjects(tree)
  found = []
  for node in ast.walk(tree):
    for target in _StoreTargets(node):
      attr = _Target(target)
      if attr is None:
        continue
      holder = attr.value
      mine = isinstance(holder, ast.Name) and holder.id in objects
      if attr.attr == '__dict__' and not mine:
        found.append((path, node.lineno, ast.unparse(target)))
      elif (attr.attr.startswith('_') and not attr.attr.startswith('__') and
            not mine and attr.attr not in own):
        found.append((path, node.lineno, ast.unparse(target)))
  return found


@pytest.mark.parametrize('source, caught', [
    ("rule.__dict__['Bind'] = state.Bind", True),
    ("del rule.__dict__['Bind']", True),
    ("rule._slots[key] = views", True),
    ("rule._bound = {}", True),
    ("self.__dict__['_holder'] = [step]", False),
    ("self._slots[key] = views", False),
    ("class A:\n  def f(self, other):\n    self._x = 1\n    other._x = 2",
     False),
    ("x.public = 1", False),
    ("class P:\n  def Copy(self):\n    res = type(self).__new__(type(self))"
     "\n    res.__dict__['_p'] = {}", False),
    ("class L:\n  pass\nL._building = 1", False),
])
def test_foreign_writes_are_caught(source, caught):
  assert bool(ForeignWrites('m.py', source)) == caught


def test_no_product_module_writes_into_another_object():
  found = []
  for package in PRODUCT:
    for path in sorted((ROOT / package).rglob('*.py')):
      found += ForeignWrites(path.relative_to(ROOT).as_posix(),
                             path.read_text())
  assert not found, found
