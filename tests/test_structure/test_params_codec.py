"""The params text codec imports one way and reads no private name across modules.

Issue 37, item 5. The text form of Params is three modules in a chain, top
first: params/hyperparams.py (Params) -> params/params_text.py (a Params as
'key : value' lines) -> params/value_codec.py (one value). A module may
import one below it, never one above, so the codec never needs Params'
insides: it knows a Params by its base (value_codec.ParamsBase), builds one
with the classes passed in (hyperparams.PARAMS_CLASSES) and reaches into one
through public methods. The test reads params/*.py with `ast` (nothing is
imported) and fails on:

  (a) an import, direct or through other modules of params/, of a module
      above in the chain (value_codec -> params_text or hyperparams;
      params_text -> hyperparams); the package `params` itself counts as the
      top, since its __init__ imports hyperparams;
  (b) an import of anything inside a function body in the three modules
      (it would only hide an edge);
  (c) in any module of params/: `x._name` (read, written or deleted) where x
      is not `self`/`cls` and the module does not define `_name` itself, or
      `from m import _name`. A module defines `_name` by a def, a class, an
      assignment or import of that name, `self._name = ...` /
      `cls._name = ...` / `C._name = ...` for a class C of the module, or
      `self.__dict__['_name'] = ...`. (Static, so a private name that two
      modules both define is not told apart.)
"""

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAIN = ('params.hyperparams', 'params.params_text', 'params.value_codec')
PACKAGE = 'params'  # Its __init__ imports hyperparams: the top of the chain.


def _IsPrivate(name):
  return name.startswith('_') and not (name.startswith('__') and
                                       name.endswith('__'))


def ParamsSources():
  """{module name: source} of params/*.py ('params' for __init__.py)."""
  out = {}
  for path in sorted((ROOT / 'params').glob('*.py')):
    name = PACKAGE if path.stem == '__init__' else PACKAGE + '.' + path.stem
    out[name] = path.read_text(encoding='utf-8')
  return out


Import = collections.namedtuple('Import', 'target line in_function')


def Imports(module, tree, modules):
  """[Import] of one module: params modules imported, and where.

  `target` is the params module named (PACKAGE for a name of the package
  that is not a module), or None for a module outside params/.
  """
  out = []

  def Target(name):
    while name and name not in modules:
      name = name.rpartition('.')[0]
    return name or None

  def Visit(node, in_function):
    for child in ast.iter_child_nodes(node):
      inner = in_function or isinstance(
          child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
      if isinstance(child, ast.Import):
        out.extend(Import(Target(a.name), child.lineno, in_function)
                   for a in child.names)
      elif isinstance(child, ast.ImportFrom):
        base = child.module or ''
        if child.level:
          pkg = module if module == PACKAGE else module.rpartition('.')[0]
          for _ in range(child.level - 1):
            pkg = pkg.rpartition('.')[0]
          base = pkg + ('.' + base if base else '')
        for alias in child.names:
          full = base + '.' + alias.name
          out.append(Import(full if full in modules else Target(base),
                            child.lineno, in_function))
      Visit(child, inner)

  Visit(tree, False)
  return out


def UpwardImports(sources):
  """Messages for rule (a): a chain module reaching a module above it."""
  trees = {m: ast.parse(s) for m, s in sources.items()}
  graph = {m: [i for i in Imports(m, t, sources) if i.target]
           for m, t in trees.items()}
  out = []
  for i, module in enumerate(CHAIN):
    above = set(CHAIN[:i]) | {PACKAGE}
    seen, todo = {module}, [(module, [module])]
    while todo:
      node, path = todo.pop()
      for imp in graph.get(node, ()):
        if imp.target in seen:
          continue
        route = path + [imp.target]
        if imp.target in above:
          out.append('%s imports %s, above it in hyperparams -> params_text '
                     '-> value_codec (%s, line %d of %s)' % (
                         module, imp.target, ' -> '.join(route), imp.line,
                         node))
        seen.add(imp.target)
        todo.append((imp.target, route))
  return sorted(out)


def ImportsInFunctions(sources):
  """Messages for rule (b): an import inside a function of a chain module."""
  out = []
  for module in CHAIN:
    for imp in Imports(module, ast.parse(sources[module]), sources):
      if imp.in_function:
        out.append('%s:%d imports %s inside a function; import at the top '
                   '(the chain has no cycle to break)' % (
                       module, imp.line, imp.target or 'a module'))
  return out


def _DefinedPrivateNames(tree):
  """The private names a module defines (see rule (c) above)."""
  classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
  owners = {'self', 'cls'} | classes
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      names.add(node.id)
    elif isinstance(node, ast.alias):
      names.add(node.asname or node.name.split('.')[0])
    elif (isinstance(node, ast.Attribute) and
          isinstance(node.ctx, ast.Store) and
          isinstance(node.value, ast.Name) and node.value.id in owners):
      names.add(node.attr)
    elif (isinstance(node, ast.Subscript) and
          isinstance(node.ctx, ast.Store) and
          isinstance(node.value, ast.Attribute) and
          node.value.attr == '__dict__' and
          isinstance(node.value.value, ast.Name) and
          node.value.value.id in owners and
          isinstance(node.slice, ast.Constant) and
          isinstance(node.slice.value, str)):
      names.add(node.slice.value)
  return {n for n in names if _IsPrivate(n)}


def ForeignPrivateNames(sources):
  """Messages for rule (c): another module's private name read or written."""
  out = []
  for module, source in sorted(sources.items()):
    tree = ast.parse(source)
    own = _DefinedPrivateNames(tree)
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom):
        for alias in node.names:
          if _IsPrivate(alias.name):
            out.append('%s:%d imports the private name %s from %s' % (
                module, node.lineno, alias.name, node.module))
      elif (isinstance(node, ast.Attribute) and _IsPrivate(node.attr) and
            node.attr not in own and
            not (isinstance(node.value, ast.Name) and
                 node.value.id in ('self', 'cls'))):
        out.append('%s:%d uses %s.%s, a private name it does not define' % (
            module, node.lineno, ast.unparse(node.value), node.attr))
  return out


def test_the_codec_chain_imports_only_downwards():
  bad = UpwardImports(ParamsSources())
  assert not bad, '\n  '.join(['Upward imports in the codec chain:'] + bad)


def test_the_codec_chain_imports_nothing_inside_functions():
  bad = ImportsInFunctions(ParamsSources())
  assert not bad, '\n  '.join(['Imports inside functions:'] + bad)


def test_no_module_of_params_uses_another_modules_private_names():
  bad = ForeignPrivateNames(ParamsSources())
  assert not bad, '\n  '.join(
      ['Private names used across modules (add a public method or function '
       'to the module that owns the name):'] + bad)


def test_the_chain_and_its_public_hooks_are_where_the_docs_say():
  sources = ParamsSources()
  assert set(CHAIN) <= set(sources)
  hyperparams = sources['params.hyperparams']
  assert 'class Params(value_codec.ParamsBase):' in hyperparams
  assert 'PARAMS_CLASSES = value_codec.ParamsClasses(' in hyperparams
  for method in ('IterParams', 'Get', 'Set', 'ResolveKey', 'GetCopy'):
    assert '  def %s(self' % method in hyperparams, method


# ---- the checks catch what they should: small modules by hand --------------

_OLD_SHAPE = {
    # The shape of main before issue 37: each arrow of the cycle, a deferred
    # import that dodged it, and private names passed across.
    'params': 'from params.hyperparams import Params\n',
    'params.hyperparams': (
        'class Params:\n'
        '  def __init__(self):\n'
        "    self.__dict__['_params'] = {}\n"
        '  def ToText(self):\n'
        '    from params import params_text\n'
        '    return params_text.ToText(self)\n'
        'def _OneLine(e):\n'
        '  return str(e)\n'),
    'params.params_text': (
        'from params.hyperparams import Params\n'
        'from params.hyperparams import _OneLine\n'
        'from params.value_codec import EncodeValue\n'
        'def Rest(parent, name):\n'
        '  return parent._params[name]\n'),
    'params.value_codec': (
        'from params.hyperparams import Params\n'
        'def EncodeValue(v):\n'
        '  return v\n'),
    'params.text_registry': 'import sys\n',
}


def test_each_rule_catches_the_old_shape():
  up = UpwardImports(_OLD_SHAPE)
  assert any(m.startswith('params.params_text imports params.hyperparams')
             for m in up), up
  assert any(m.startswith('params.value_codec imports params.hyperparams')
             for m in up), up
  assert not any(m.startswith('params.hyperparams') for m in up), up
  assert ImportsInFunctions(_OLD_SHAPE) == [
      'params.hyperparams:5 imports params.params_text inside a function; '
      'import at the top (the chain has no cycle to break)']
  foreign = ForeignPrivateNames(_OLD_SHAPE)
  assert foreign == [
      'params.params_text:2 imports the private name _OneLine from '
      'params.hyperparams',
      'params.params_text:5 uses parent._params, a private name it does not '
      'define'], foreign


def test_an_upward_import_through_another_module_is_caught():
  sources = {
      'params': '',
      'params.hyperparams': 'from params import params_text\n',
      'params.params_text': 'from params import value_codec\n',
      'params.value_codec': 'from params import text_registry\n',
      # text_registry is below the chain's bottom; it must not lead back up.
      'params.text_registry': 'from params import Params\n',
  }
  up = UpwardImports(sources)
  assert ('params.value_codec imports params, above it in hyperparams -> '
          'params_text -> value_codec (params.value_codec -> '
          'params.text_registry -> params, line 1 of params.text_registry)'
          ) in up, up
  sources['params.text_registry'] = 'import sys\n'
  assert UpwardImports(sources) == []


def test_own_private_names_and_self_are_allowed():
  source = ('class C:\n'
            '  def __init__(self):\n'
            "    self.__dict__['_table'] = {}\n"
            '    self._n = 0\n'
            '  def Merge(self, other):\n'
            '    C._count = 1\n'
            '    return other._table, other._n, other.__dict__, self._x\n'
            'def F(o):\n'
            '  return o._table, C._count\n')
  assert ForeignPrivateNames({'params.m': source}) == []
  assert ForeignPrivateNames({'params.m': 'def F(o):\n  o._hidden = 1\n'}) == [
      'params.m:2 uses o._hidden, a private name it does not define']
