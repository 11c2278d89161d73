"""The house's layout: learner/ holds the step, not everything (issue 11).

docs/DESIGN.md, "The house": the step in learner/, update rules and wrappers
in learner/optimizers/, the training runtime in learner/training/.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_STEP_MODULES = 12


def test_at_most_twelve_modules_directly_in_learner():
  modules = sorted(p.name for p in (ROOT / 'learner').glob('*.py'))
  assert len(modules) <= MAX_STEP_MODULES, modules


def test_each_layer_of_learner_is_a_package_with_its_modules():
  for package, expected in (
      ('learner/optimizers', {'base.py', 'wrapper.py',
                              'lars.py', 'ema.py', 'composite.py',
                              'keras_optimizer.py', 'accumulation.py',
                              'factory.py'}),
      ('learner/training', {'task.py', 'input_generator.py', 'trainer.py',
                            'checkpointer.py', 'summary.py', 'progress.py',
                            'run.py', 'mode_keys.py', 'distribution.py',
                            'launcher.py'})):
    present = {p.name for p in (ROOT / package).glob('*.py')}
    assert (ROOT / package / '__init__.py').exists()
    assert expected <= present, sorted(expected - present)


def test_the_experiments_datasets_live_with_the_experiments():
  source = (ROOT / 'learner/training/input_generator.py').read_text()
  for name in ('DigitsInput', 'DiabetesInput', 'LinearRegressionInput'):
    assert 'class %s(' % name not in source
    assert 'class %s(' % name in (ROOT / 'configs/inputs.py').read_text()


MAX_MODULE_LINES = 800


def test_params_text_codec_lives_beside_params_not_inside():
  # Issue 22, item 5: hyperparams.py holds Params; the text form is
  # params_text.py (lines), value_codec.py (one value), text_registry.py
  # (what text may name). Each stays a readable size.
  hyperparams = (ROOT / 'params/hyperparams.py').read_text()
  for name in ('def EncodeValue', 'def DecodeValue', 'def TextLines',
               'class _ValueReader', 'class TextSerializable',
               'def LookupImported', 'MAX_TEXT_CHARS ='):
    assert name not in hyperparams, name
  for module, names in (
      ('params/params_text.py', ('def ToText', 'def FromText', 'def TextLines',
                                 'def ReadTextFile')),
      ('params/value_codec.py', ('def EncodeValue', 'def DecodeValue',
                                 'class _ValueReader', 'MAX_TEXT_CHARS =')),
      ('params/text_registry.py', ('class TextSerializable',
                                   'def RegisterForText', 'def TextFactory',
                                   'def LookupImported'))):
    source = (ROOT / module).read_text()
    assert all(n in source for n in names), module
  too_long = {str(p.relative_to(ROOT)): n
              for folder in ('params', 'layers')
              for p in sorted((ROOT / folder).glob('*.py'))
              if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
  assert not too_long, too_long


def test_model_layers_live_in_layers():
  # Issue 22, item 6: no BaseLayer subclass that is a model layer outside
  # layers/ (tasks, schedules, optimizers and learners are BaseLayers too,
  # but not model layers); the old homes hold none.
  for old in ('configs/model_tasks.py', 'params/demo.py'):
    path = ROOT / old
    assert not path.exists() or 'class DenseLayer(' not in path.read_text()
  assert not (ROOT / 'params/demo.py').exists()
  assert 'class DenseLayer(BaseLayer)' in (ROOT / 'layers/dense.py').read_text()
  assert 'from layers.dense import DenseLayer' in (
      ROOT / 'layers/__init__.py').read_text()


# Issue 22, item 2: the update rules are a catalog of families, one module
# per family, as schedules/ is; each starts with its formula and source.
RULE_FAMILIES = ('momentum.py', 'adam.py', 'adagrad.py', 'rmsprop.py',
                 'adadelta.py', 'adafactor.py', 'lamb.py', 'lion.py')


def test_rules_are_one_family_per_module_with_formula_and_source():
  rules = ROOT / 'learner/optimizers/rules'
  assert (rules / '__init__.py').exists()
  present = {p.name for p in rules.glob('*.py')}
  assert set(RULE_FAMILIES) <= present, sorted(set(RULE_FAMILIES) - present)
  for name in RULE_FAMILIES:
    source = (rules / name).read_text()
    doc = source.split('"""')[1]
    assert '<-' in doc and 'Source:' in doc, name  # formula, then source
    assert len(source.splitlines()) <= MAX_MODULE_LINES, name


# Issue 22, item 1: a Learner of Lingvo's size (Lingvo 0.14.2's whole
# learner.py is 551 lines); what grew in it lives beside it.
MAX_LEARNER_CLASS_LINES = 600


def _ClassLines(path, name):
  tree = ast.parse(path.read_text())
  for node in tree.body:
    if isinstance(node, ast.ClassDef) and node.name == name:
      return node.end_lineno - node.lineno + 1
  raise AssertionError('no class %s in %s' % (name, path))


def test_the_learner_class_is_lingvos_size():
  lines = _ClassLines(ROOT / 'learner/learner.py', 'Learner')
  assert lines <= MAX_LEARNER_CLASS_LINES, lines
  guard = (ROOT / 'learner/guarded_update.py').read_text()
  for name in ('class GuardedUpdate', 'def ApplyOrSkip', 'def AgreeAndApply',
               'def _CheckedApply', 'SKIP_REASONS = '):
    assert name in guard, name
  resolve = (ROOT / 'learner/optimizers/resolve.py').read_text()
  for name in ('def ResolveOptimizer', 'def ScheduleParams',
               'def CheckLearnerParams'):
    assert name in resolve, name


def test_no_module_of_the_step_or_its_optimizers_over_800_lines():
  too_long = {str(p.relative_to(ROOT)): n
              for folder in ('learner', 'learner/optimizers',
                             'learner/optimizers/rules',
                             'learner/optimizers/kernels', 'schedules')
              for p in sorted((ROOT / folder).glob('*.py'))
              if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
  assert not too_long, too_long


def test_the_class_size_check_counts_lines(tmp_path):
  path = tmp_path / 'm.py'
  path.write_text('x = 1\n\n\nclass A:\n  """Doc."""\n\n  def f(self):\n'
                  '    return 1\n\n\ndef g():\n  pass\n')
  assert _ClassLines(path, 'A') == 5
