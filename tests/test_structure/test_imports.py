"""Imports point one way, have no cycles and are not hidden in functions.

docs/DESIGN.md, "The house": configs -> learner.training -> learner (the
step) -> learner.optimizers -> schedules -> params, and configs -> layers ->
params beside them. A module may import its own layer and any layer below
it. The test reads every product module's import statements with `ast`
(nothing is imported) and checks four rules:

  1. no upward import (top level or deferred);
  2. no cycle among the top-level imports between modules;
  3. no deferred import (inside a function) of a project module unless it
     breaks a cycle, i.e. the same import at top level would close one.
     A deferred import hides what depends on what.
  4. learner/ (all of it) and schedules/ never import layers/: model layers
     are the experiments' business, the step does not depend on one.

Exceptions, each for a stated reason:
  * learner/trainer.py and learner/launcher.py: thin entry modules that keep
    `python -m learner.trainer` and `python -m learner.launcher` working; they
    sit on top of every layer (they import learner.training).
  * schedules/__init__.py imports learner.tf_log, a module that imports
    nothing of the project and no TensorFlow (learner/__init__.py is lazy):
    `python -m schedules.plot` runs this package's __init__, which loads
    TensorFlow, before the command's own module, so that is the last moment
    to quiet TensorFlow's start-up lines (UPWARD_ALLOWED). layers/__init__.py
    does the same for `python -m layers.demo`, for the same reason.
  * learner/__init__.py: its lazy export table maps names to module paths as
    strings (PEP 562); it has no import statement of a project module, but
    `from learner import X` is read as an import of the module the table
    names for X (that is what runs when X is used).
  * params/registry.py loads experiment modules of configs/ by name with
    importlib when an experiment is asked for: a call, not an import
    statement, so it is not an edge here.
Third-party and standard-library imports are not checked.
"""

import ast
import collections
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ('params', 'layers', 'schedules', 'learner', 'configs')

# Lowest first; a module's layer is the longest prefix of its name.
# layers/ (model layers) needs only params; its place second here keeps it
# from importing anything else. It is not a floor under schedules/ and
# learner/: KEPT_APART forbids those to import it (rule 4).
LAYERS = ('params', 'layers', 'schedules', 'learner.optimizers', 'learner',
          'learner.training', 'configs')
# {package: packages that must never import it, at any depth}.
KEPT_APART = {'layers': ('schedules', 'learner')}
# Violations on main when this test was written, in files other engineers
# are changing at the same time (issue 11, items 2-5). Each is (file, the
# module it imports) for a deferred import, or the modules of a cycle. A
# violation not listed here fails; a listed one that is gone fails too, so
# that the list only shrinks: delete its line when the fix lands.
KNOWN_DEFERRED = set()
KNOWN_CYCLES = set()

ENTRY_MODULES = {
    'learner.trainer': 'thin entry module of `python -m learner.trainer`',
    'learner.launcher': 'thin entry module of `python -m learner.launcher`',
}


def ModuleName(path):
  rel = path.relative_to(ROOT).with_suffix('')
  parts = list(rel.parts)
  if parts[-1] == '__init__':
    parts.pop()
  return '.'.join(parts)


def ProductModules():
  """{module name: path} of every product module."""
  out = {}
  for pkg in PACKAGES:
    for path in sorted((ROOT / pkg).rglob('*.py')):
      out[ModuleName(path)] = path
  return out


def LazyExports(modules):
  """learner/__init__.py's _EXPORTS table: {name: module path}."""
  tree = ast.parse(modules['learner'].read_text(encoding='utf-8'))
  for node in tree.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        getattr(node.targets[0], 'id', None) == '_EXPORTS'):
      return ast.literal_eval(node.value)
  return {}


def Layer(module):
  """Index in LAYERS of the module's layer (the longest matching prefix)."""
  best = None
  for i, layer in enumerate(LAYERS):
    if module == layer or module.startswith(layer + '.'):
      if best is None or len(layer) > len(LAYERS[best]):
        best = i
  return best


Import = collections.namedtuple('Import', 'source target line deferred')


class _ImportVisitor(ast.NodeVisitor):
  """Collects the project imports of one module, noting deferred ones."""

  def __init__(self, source, is_package, modules, exports):
    self.source, self.is_package = source, is_package
    self.modules, self.exports = modules, exports
    self.depth = 0
    self.found = []

  def _Function(self, node):
    self.depth += 1
    self.generic_visit(node)
    self.depth -= 1

  visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _Function

  def _Add(self, target, node):
    if target is not None and target != self.source:
      self.found.append(Import(self.source, target, node.lineno,
                               self.depth > 0))
    elif target == self.source and self.depth > 0:
      # A module importing itself inside a function: deferred, no cycle.
      self.found.append(Import(self.source, target, node.lineno, True))

  def _Project(self, name):
    """The project module `name` stands for, or None (third party)."""
    while name and name not in self.modules:
      name = name.rpartition('.')[0]
    return name or None

  def visit_Import(self, node):
    for alias in node.names:
      self._Add(self._Project(alias.name), node)

  def visit_ImportFrom(self, node):
    base = node.module or ''
    if node.level:
      pkg = self.source if self.is_package else self.source.rpartition('.')[0]
      for _ in range(node.level - 1):
        pkg = pkg.rpartition('.')[0]
      base = pkg + ('.' + base if base else '')
    if base.split('.')[0] not in PACKAGES:
      return
    for alias in node.names:
      full = base + '.' + alias.name
      if full in self.modules:
        self._Add(full, node)
      elif base == 'learner' and alias.name in self.exports:
        self._Add(self.exports[alias.name], node)
      else:
        self._Add(self._Project(base), node)


def AllImports():
  modules = ProductModules()
  exports = LazyExports(modules)
  out = []
  for name, path in modules.items():
    visitor = _ImportVisitor(name, path.name == '__init__.py', modules,
                             exports)
    visitor.visit(ast.parse(path.read_text(encoding='utf-8')))
    out.extend(visitor.found)
  return modules, out


def Where(imp, modules):
  return '%s:%d' % (modules[imp.source].relative_to(ROOT), imp.line)


def Reaches(graph, start, goal):
  """True if `goal` can be reached from `start` along `graph`'s edges."""
  seen, todo = set(), [start]
  while todo:
    node = todo.pop()
    if node == goal:
      return True
    if node not in seen:
      seen.add(node)
      todo.extend(graph.get(node, ()))
  return False


def TopLevelGraph(imports):
  graph = collections.defaultdict(set)
  for imp in imports:
    if not imp.deferred:
      graph[imp.source].add(imp.target)
  return graph


UPWARD_ALLOWED = {
    ('schedules', 'learner.tf_log'):
        'the plot command quiets TensorFlow before this package loads it',
    ('layers', 'learner.tf_log'):
        'the demo command quiets TensorFlow before this package loads it',
}


def UpwardImports(modules, imports):
  out = []
  for imp in imports:
    if (imp.source in ENTRY_MODULES or
        (imp.source, imp.target) in UPWARD_ALLOWED):
      continue
    src, dst = Layer(imp.source), Layer(imp.target)
    if dst > src:
      out.append('%s: %s (layer %s) imports %s (layer %s, above it)' % (
          Where(imp, modules), imp.source, LAYERS[src], imp.target,
          LAYERS[dst]))
  return out


def _Within(module, package):
  return module == package or module.startswith(package + '.')


def ImportsKeptApart(modules, imports):
  """Imports (top level or deferred) that KEPT_APART forbids, as messages."""
  out = []
  for imp in imports:
    for package, importers in KEPT_APART.items():
      if _Within(imp.target, package) and any(
          _Within(imp.source, i) for i in importers):
        out.append('%s: %s imports %s, but %s never import %s/' % (
            Where(imp, modules), imp.source, imp.target,
            ' and '.join('%s/' % i for i in importers), package))
  return out


def Cycles(imports):
  """Every cycle of the top-level import graph, each as a list of modules."""
  graph = TopLevelGraph(imports)
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def Visit(node):  # Tarjan's strongly connected components.
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for nxt in sorted(graph.get(node, ())):
      if nxt not in index:
        Visit(nxt)
        low[node] = min(low[node], low[nxt])
      elif nxt in on_stack:
        low[node] = min(low[node], index[nxt])
    if low[node] == index[node]:
      component = []
      while True:
        top = stack.pop()
        on_stack.discard(top)
        component.append(top)
        if top == node:
          break
      if len(component) > 1:
        out.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      Visit(node)
  return out


def NeedlessDeferredImports(modules, imports):
  """{(file, target): message} of deferred imports that break no cycle."""
  graph = TopLevelGraph(imports)
  out = {}
  for imp in imports:
    if not imp.deferred:
      continue
    if imp.target == imp.source or not Reaches(graph, imp.target, imp.source):
      key = (str(modules[imp.source].relative_to(ROOT)), imp.target)
      out.setdefault(key, []).append(
          '%s: %s imports %s inside a function, but at top level it would '
          'close no cycle: move it to the top' % (
              Where(imp, modules), imp.source, imp.target))
  return out


def _CheckAgainstKnown(found, known, what):
  """Fails on a violation not in `known`, and on a `known` one now gone."""
  new = {k: v for k, v in found.items() if k not in known}
  gone = sorted(str(sorted(k)) if isinstance(k, frozenset) else str(k)
                for k in known if k not in found)
  lines = [m for k in sorted(new, key=str) for m in new[k]]
  assert not lines, '\n  '.join(['%s:' % what] + lines)
  assert not gone, ('These known violations are fixed: delete them from '
                    'KNOWN_* in %s:\n  %s' % (pathlib.Path(__file__).name,
                                              '\n  '.join(gone)))


def test_every_product_module_has_a_layer():
  modules, _ = AllImports()
  assert not [m for m in modules if Layer(m) is None]
  # The scan sees the packages it should (a floor, not the exact count).
  assert len(modules) >= 60, len(modules)


def test_no_upward_import():
  modules, imports = AllImports()
  bad = UpwardImports(modules, imports)
  assert not bad, ('Imports must point down: configs -> learner.training -> '
                   'learner -> learner.optimizers -> schedules -> params.\n  '
                   + '\n  '.join(bad))


def test_learner_and_schedules_never_import_layers():
  modules, imports = AllImports()
  bad = ImportsKeptApart(modules, imports)
  assert not bad, ('Model layers are for experiments (configs/): '
                   'DESIGN.md, "The house".\n  ' + '\n  '.join(bad))


def test_no_import_cycle():
  _, imports = AllImports()
  found = {frozenset(c): ['import cycle: %s' % ' -> '.join(c)]
           for c in Cycles(imports)}
  _CheckAgainstKnown(found, KNOWN_CYCLES, 'Top-level import cycles')


def test_no_deferred_import_that_breaks_no_cycle():
  modules, imports = AllImports()
  _CheckAgainstKnown(NeedlessDeferredImports(modules, imports),
                     KNOWN_DEFERRED, 'Deferred imports to move to the top')


def test_the_checks_catch_what_they_should():
  # A small graph by hand: a -> b at top level, b -> a deferred (breaks the
  # cycle, allowed), a -> c deferred (no cycle: reported).
  modules = {m: ROOT / (m.replace('.', '/') + '.py')
             for m in ('params.a', 'params.b', 'params.c')}
  imports = [Import('params.a', 'params.b', 1, False),
             Import('params.b', 'params.a', 2, True),
             Import('params.a', 'params.c', 3, True)]
  assert Cycles(imports) == []
  bad = NeedlessDeferredImports(modules, imports)
  assert list(bad) == [('params/a.py', 'params.c')]
  assert 'params.a imports params.c inside a function' in bad[
      ('params/a.py', 'params.c')][0]
  assert Cycles(imports[:1] + [imports[1]._replace(deferred=False)]) == [
      ['params.a', 'params.b']]
  up = [Import('schedules.x', 'learner.learner', 1, False),
        Import('learner.learner', 'learner.optimizers.base', 1, False),
        Import('learner.trainer', 'learner.training.jobs.cli', 1, False)]
  modules.update({i.source: ROOT / 'x.py' for i in up})
  bad = UpwardImports(modules, up)
  assert len(bad) == 1 and 'schedules.x (layer schedules)' in bad[0]
  assert Layer('learner.optimizers.base') == LAYERS.index('learner.optimizers')
  assert Layer('learner') == LAYERS.index('learner')
  # Rule 4: the rank alone lets learner/ and schedules/ import layers/.
  apart = [Import('learner.training.model.task', 'layers.dense', 4, True),
           Import('schedules.cosine', 'layers', 5, False),
           Import('configs.lm', 'layers.transformer', 6, False),
           Import('layers.dense', 'params.base_layer', 7, False)]
  modules.update({i.source: ROOT / 'x.py' for i in apart})
  assert not UpwardImports(modules, apart)
  bad = ImportsKeptApart(modules, apart)
  assert len(bad) == 2, bad
  assert 'learner.training.model.task imports layers.dense' in bad[0]
  assert 'schedules.cosine imports layers,' in bad[1]


def test_the_known_list_only_shrinks():
  with pytest.raises(AssertionError, match='a.py:3: new'):
    _CheckAgainstKnown({('a.py', 'x'): ['a.py:3: new']}, set(), 'what')
  with pytest.raises(AssertionError, match='are fixed: delete them'):
    _CheckAgainstKnown({}, {('a.py', 'x')}, 'what')
  _CheckAgainstKnown({('a.py', 'x'): ['a.py:3: known']}, {('a.py', 'x')},
                     'what')
