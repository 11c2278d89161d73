"""The house's layout: learner/ holds the step, not everything (issue 11).

docs/DESIGN.md, "The house": the step in learner/, update rules and wrappers
in learner/optimizers/, the training runtime in learner/training/.
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_STEP_MODULES = 12


def test_at_most_twelve_modules_directly_in_learner():
  modules = sorted(p.name for p in (ROOT / 'learner').glob('*.py'))
  assert len(modules) <= MAX_STEP_MODULES, modules


def test_each_layer_of_learner_is_a_package_with_its_modules():
  for package, expected in (
      ('learner/optimizers', {'base.py', 'update_rules.py', 'wrapper.py',
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
