"""Params text naming learner/optimizers/update_rules.py still loads.

Issue 22, item 2 split update_rules.py into learner/optimizers/rules/, one
module per family. A params file written before the split names each rule as
'learner.optimizers.update_rules.<Class>'; params/moved_paths.py maps each to
its family module, and the reader warns once, naming the new path.
"""

import pathlib
import warnings

import pytest

from learner import optimizers
from learner.optimizers import rules
from params import Params
from params import moved_paths

OLD = 'learner.optimizers.update_rules.'
# Every class update_rules.py held (SGD by re-export) -> its module today.
NEW_MODULE = {
    'SGD': 'learner.optimizers.base',
    'Momentum': 'learner.optimizers.rules.momentum',
    'Adam': 'learner.optimizers.rules.adam',
    'AdamW': 'learner.optimizers.rules.adam',
    'Adagrad': 'learner.optimizers.rules.adagrad',
    'RMSProp': 'learner.optimizers.rules.rmsprop',
    'AdaDelta': 'learner.optimizers.rules.adadelta',
    'Adafactor': 'learner.optimizers.rules.adafactor',
    'LAMB': 'learner.optimizers.rules.lamb',
    'Lion': 'learner.optimizers.rules.lion',
}


def _Holder(value):
  p = Params()
  p.Define('optimizer', value, '')
  return p


@pytest.mark.parametrize('name', sorted(NEW_MODULE))
def test_old_update_rules_path_in_params_text_loads_with_a_warning(name):
  cls = getattr(optimizers, name)
  assert cls.__module__ == NEW_MODULE[name]
  today = cls.Params().Set(decoupled_weight_decay=0.25, name='opt_' + name.lower())
  new_text = _Holder(today).ToText()
  path = '%s.%s' % (NEW_MODULE[name], name)
  assert path in new_text
  old_text = new_text.replace(path, OLD + name)
  assert OLD + name in old_text and path not in old_text
  loaded = _Holder(None)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    loaded.FromText(old_text)
  assert loaded.optimizer.cls is cls
  assert loaded.optimizer.decoupled_weight_decay == 0.25
  assert loaded.ToText() == new_text
  messages = [str(w.message) for w in caught
              if issubclass(w.category, FutureWarning)]
  assert any(repr(OLD + name) in m and repr(path) in m for m in messages), (
      messages)


def test_the_old_module_is_gone_and_every_moved_rule_is_covered_here():
  assert not (pathlib.Path(__file__).resolve().parents[2] /
              'learner/optimizers/update_rules.py').exists()
  # Exactly the rules the old module held have an old path (moved_paths);
  # a rule registered after the move has none and needs nothing here.
  registered = {r.cls.__name__ for r in rules.RULES}
  assert set(NEW_MODULE) <= registered
  for name in registered:
    old = moved_paths.Resolve(OLD + name)
    assert (old is not None) == (name in NEW_MODULE), name
