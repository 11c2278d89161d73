"""Records the Params() of Lingvo classes as JSON, by reading their source.

Lingvo is never imported (it does not import with our TensorFlow): each
module's source is parsed with `ast`, and every `Params()` classmethod is
interpreted statement by statement:

  p = super().Params()             inherit the first Lingvo base's params
  p = hyperparams.InstantiableParams(cls)   the root: one param, 'cls'
  p.Define('x', default, doc)      a new param
  p.x = value / p.Set(x=value)     an override of an existing default
  tp = p.train; tp.Define(...)     a nested Params (recorded as a dict)
  return super().Params().Set(...) inherit, then override

Each class is resolved for itself (so `p.name = cls.__name__` in a base gives
'SGD' for SGD, and `cls._X` gives the literal class attribute _X of its
chain), through its bases anywhere under lingvo/core.

Defaults are written as JSON: literals via ast.literal_eval (tuples become
lists, None becomes null), constant arithmetic such as `256 * 2**20` folded
to its value, `cls.__name__` to the class name, anything else as
{"expr": "<source text>"} (e.g. {"expr": "tf.float32"}). Statements in a
Params() body that touch the params in another way are listed under
"unresolved" rather than guessed. Other classmethods of the form
`return cls.Params().Set(...)` (Adam.ParamsA) are listed under "presets".

Per class: "bases" (resolved names, or the source text of a base outside
lingvo), "chain" (the classes whose Params() bodies were applied, root first),
"own" (params this class's Params() defines), "overrides" (existing params it
changes), "params" (the full set, in definition order).

The JSON in tests/data/lingvo_0_14_2_params.json was produced, from the
repository root, by:

  cd /tmp && mkdir -p lingvo_src && cd lingvo_src && \
      pip download --no-deps lingvo==0.14.2 -d . && unzip -q -o lingvo-*.whl
  python3 tools/record_lingvo_params.py /tmp/lingvo_src \
      -o tests/data/lingvo_0_14_2_params.json
"""

import argparse
import ast
import glob
import json
import os
import sys

# Modules recorded whole, and single classes recorded from other modules.
MODULES = ['schedule', 'optimizer', 'learner', 'gradient_combiner']
CLASSES = ['base_layer.BaseLayer', 'layers.GradNormTracker',
           'base_model.BaseTask', 'base_input_generator.BaseInputGenerator']
PKG = 'lingvo.core'


class Source:
  """The parsed modules of lingvo/core, and their imports."""

  def __init__(self, root):
    self.root = root
    self._modules = {}

  def Module(self, name):
    """Returns (classes {name: ClassDef}, aliases {local name: dotted})."""
    if name not in self._modules:
      path = os.path.join(self.root, 'lingvo', 'core', name + '.py')
      if not os.path.exists(path):
        self._modules[name] = None
        return None
      with open(path) as f:
        tree = ast.parse(f.read(), path)
      classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
      aliases = {}
      for n in tree.body:
        if isinstance(n, ast.ImportFrom) and n.module:
          for a in n.names:
            aliases[a.asname or a.name] = n.module + '.' + a.name
        elif isinstance(n, ast.Import):
          for a in n.names:
            aliases[a.asname or a.name] = a.name
      self._modules[name] = (classes, aliases)
    return self._modules[name]

  def Resolve(self, module, expr):
    """'lingvo.core.<mod>.<Class>' for a base expression, or None."""
    classes, aliases = self.Module(module)
    text = ast.unparse(expr)
    head, _, rest = text.partition('.')
    if not rest and head in classes:
      return '%s.%s.%s' % (PKG, module, head)
    dotted = aliases.get(head, head) + ('.' + rest if rest else '')
    if dotted.startswith(PKG + '.'):
      mod, _, cls = dotted[len(PKG) + 1:].rpartition('.')
      found = self.Module(mod) if mod and '.' not in mod else None
      if found and cls in found[0]:
        return dotted
    return None

  def Class(self, key):
    mod, cls = key[len(PKG) + 1:].rsplit('.', 1)
    return mod, self.Module(mod)[0][cls]


def _Method(cdef, name):
  for n in cdef.body:
    if isinstance(n, ast.FunctionDef) and n.name == name:
      return n
  return None


def _Value(node, leaf, class_attr=None):
  """A JSON-able default for the expression `node` (see the docstring).

  `leaf` is the class being recorded; `class_attr(name)` returns the literal
  node of a class attribute `cls.<name>` of its chain, or None.
  """
  text = ast.unparse(node)
  if text == 'cls.__name__':
    return leaf
  if text.startswith('cls.') and class_attr and class_attr(text[4:]):
    node = class_attr(text[4:])
  try:
    value = ast.literal_eval(node)
  except (ValueError, SyntaxError, TypeError):
    try:  # Constant arithmetic, e.g. 256 * 2**20.
      if all(isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Constant,
                            ast.operator, ast.unaryop))
             for n in ast.walk(node)):
        code = compile(ast.Expression(node), '<default>', 'eval')
        value = eval(code, {'__builtins__': {}})  # pylint: disable=eval-used
      else:
        raise ValueError
    except Exception:  # pylint: disable=broad-except
      return {'expr': ast.unparse(node)}
  try:
    return json.loads(json.dumps(value))  # Tuples -> lists; sets fail.
  except TypeError:
    return {'expr': ast.unparse(node)}


class Recorder:
  """Interprets Params() bodies; see the module docstring."""

  def __init__(self, source):
    self.source = source

  def Bases(self, key):
    mod, cdef = self.source.Class(key)
    return [self.source.Resolve(mod, b) or ast.unparse(b) for b in cdef.bases]

  def _LingvoBase(self, key):
    for b in self.Bases(key):
      if b.startswith(PKG + '.'):
        return b
    return None

  def _Owner(self, key):
    """The class whose Params() `key` uses (itself or its nearest base)."""
    while key:
      if _Method(self.source.Class(key)[1], 'Params'):
        return key
      key = self._LingvoBase(key)
    return None

  def ClassAttr(self, key, name):
    """The value node of `name = <literal>` in the body of `key` or a base."""
    while key:
      for n in self.source.Class(key)[1].body:
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and
            ast.unparse(n.targets[0]) == name):
          return n.value
      key = self._LingvoBase(key)
    return None

  def Params(self, key, leaf):
    """Returns (params, chain, own, overrides, unresolved) of Params().

    `leaf` is the key of the class being recorded (for cls.<attr>).
    """
    owner = self._Owner(key)
    leaf_name = leaf.rsplit('.', 1)[1]
    class_attr = lambda name: self.ClassAttr(leaf, name)
    if owner is None:
      return None, [], {}, {}, []
    fn = _Method(self.source.Class(owner)[1], 'Params')
    state = {'params': {}, 'chain': [], 'own': {}, 'overrides': {},
             'unresolved': []}
    aliases = {}  # local name -> path (list of keys) inside the params.

    def Start(call):
      """Params produced by a call chain such as super().Params().Set(..)."""
      sets = []
      while (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
             and call.func.attr == 'Set'):
        sets.insert(0, call.keywords)
        call = call.func.value
      text = ast.unparse(call)
      if text.startswith('super(') and text.endswith('.Params()'):
        base = self._LingvoBase(owner)
        params, chain = self.Params(base, leaf)[:2] if base else ({}, [])
        state['params'], state['chain'] = params or {}, list(chain)
      elif text.endswith('InstantiableParams(cls)'):
        state['params'], state['chain'] = {'cls': {'expr': 'cls'}}, []
      else:
        return False
      for kws in sets:
        for kw in kws:
          Override([kw.arg], kw.value)
      return True

    def Target(path):
      d = state['params']
      for k in path:
        d = d.setdefault(k, {})
      return d

    def Override(path, node):
      value = _Value(node, leaf_name, class_attr)
      Target(path[:-1])[path[-1]] = value
      state['overrides']['.'.join(path)] = value

    def Alias(node):
      """The path of `p`, `p.train`, ... or None."""
      if isinstance(node, ast.Name):
        return aliases.get(node.id)
      if isinstance(node, ast.Attribute):
        base = Alias(node.value)
        return None if base is None else base + [node.attr]
      return None

    for stmt in fn.body:
      if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        continue  # Docstring.
      if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        tgt, val = stmt.targets[0], stmt.value
        if (isinstance(tgt, ast.Name) and isinstance(val, ast.Call) and
            Start(val)):
          aliases[tgt.id] = []
          continue
        if isinstance(tgt, ast.Name) and Alias(val) is not None:
          aliases[tgt.id] = Alias(val)
          continue
        if isinstance(tgt, ast.Attribute) and Alias(tgt.value) is not None:
          Override(Alias(tgt.value) + [tgt.attr], val)
          continue
      if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if isinstance(call.func, ast.Attribute):
          path = Alias(call.func.value)
          if path is not None and call.func.attr == 'Define' and call.args:
            name = ast.literal_eval(call.args[0])
            default = call.args[1] if len(call.args) > 1 else None
            is_nested = (default is not None and
                         ast.unparse(default).endswith('hyperparams.Params()'))
            value = ({} if is_nested else
                     _Value(default, leaf_name, class_attr))
            Target(path)[name] = value
            state['own']['.'.join(path + [name])] = value
            continue
          if path is not None and call.func.attr == 'Set':
            for kw in call.keywords:
              Override(path + [kw.arg], kw.value)
            continue
      if isinstance(stmt, ast.Return):
        if isinstance(stmt.value, ast.Name) and stmt.value.id in aliases:
          break
        if isinstance(stmt.value, ast.Call) and Start(stmt.value):
          break
      state['unresolved'].append(ast.unparse(stmt)[:200])
    state['chain'].append(owner)
    return (state['params'], state['chain'], state['own'],
            state['overrides'], state['unresolved'])

  def Presets(self, key):
    """{method: {param: value}} for `return cls.Params().Set(...)` methods."""
    out = {}
    for fn in self.source.Class(key)[1].body:
      if (isinstance(fn, ast.FunctionDef) and fn.name != 'Params' and
          len(fn.body) >= 1 and isinstance(fn.body[-1], ast.Return)):
        ret = fn.body[-1].value
        if (isinstance(ret, ast.Call) and isinstance(ret.func, ast.Attribute)
            and ret.func.attr == 'Set' and
            ast.unparse(ret.func.value) == 'cls.Params()'):
          out[fn.name] = {
              kw.arg: _Value(kw.value, key.rsplit('.', 1)[1],
                             lambda name: self.ClassAttr(key, name))
              for kw in ret.keywords}
    return out

  def Record(self, key):
    params, chain, own, overrides, unresolved = self.Params(key, key)
    if self._Owner(key) != key:
      own, overrides, unresolved = {}, {}, []  # Inherited Params() as is.
    entry = {'bases': self.Bases(key), 'chain': chain, 'own': own,
             'overrides': overrides, 'params': params}
    if params is None:
      entry['params'] = {}
      entry['note'] = 'no Params() in its Lingvo chain (not a Lingvo layer)'
    presets = self.Presets(key)
    if presets:
      entry['presets'] = presets
    if unresolved:
      entry['unresolved'] = unresolved
    return entry


def _Version(root):
  for meta in glob.glob(os.path.join(root, 'lingvo-*.dist-info', 'METADATA')):
    with open(meta) as f:
      for line in f:
        if line.startswith('Version:'):
          return line.split(':', 1)[1].strip()
  return None


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('wheel_dir', help='directory of an unzipped Lingvo wheel')
  parser.add_argument('-o', '--output', help='JSON file (default: stdout)')
  args = parser.parse_args(argv)
  source = Source(args.wheel_dir)
  recorder = Recorder(source)
  keys = []
  for mod in MODULES:
    keys += ['%s.%s.%s' % (PKG, mod, c) for c in source.Module(mod)[0]]
  keys += ['%s.%s' % (PKG, c) for c in CLASSES]
  out = {
      'lingvo_version': _Version(args.wheel_dir),
      'command': 'python3 tools/record_lingvo_params.py %s' % ' '.join(argv),
      'classes': {k: recorder.Record(k) for k in keys},
  }
  text = json.dumps(out, indent=1) + '\n'
  if args.output:
    with open(args.output, 'w') as f:
      f.write(text)
  else:
    sys.stdout.write(text)


if __name__ == '__main__':
  main(sys.argv[1:])
