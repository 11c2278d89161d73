"""Class flags are declared once on their base class (issue 37, item 3).

Every feature flag the runtime asks an optimizer's class about
(IS_ACCUMULATION, NEEDS_SECOND_PASS, REPLICA_LOCAL, EVAL_WEIGHTS_LABEL,
APPLY_TAKES_GRAD_SCALE, SUPPORTS_LAZY_SPARSE, SCHEDULABLE_PARAMS) has its
default on `RuleFlags` (learner/optimizers/rule_flags.py, a base of
`BaseOptimizer`), so code reads it as an attribute; a
`getattr(x, 'FLAG', default)` probe for an upper-case name, which hides a
flag no base declares, is caught here.
"""

import pathlib
import re

import pytest

from learner.optimizers import base as base_optimizer
from learner.optimizers import rule_flags
from learner.optimizers import wrappers  # pylint: disable=unused-import

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = ('params', 'layers', 'schedules', 'learner', 'configs')
FLAGS = ('IS_ACCUMULATION', 'NEEDS_SECOND_PASS', 'REPLICA_LOCAL',
         'EVAL_WEIGHTS_LABEL', 'APPLY_TAKES_GRAD_SCALE',
         'SUPPORTS_LAZY_SPARSE', 'SCHEDULABLE_PARAMS', 'ELEMENTWISE',
         'ACCELERATOR', 'STEP_GIVES_WEIGHTS', 'DECAY_IN_STEP')
# getattr(<anything>, '<UPPER_CASE>' ...): a probe for an undeclared flag.
_PROBE = re.compile(r"getattr\((?:[^()]|\([^()]*\))*,\s*'[A-Z][A-Z0-9_]+'")


def Probes(path, text):
  """[(path, line)] of each flag probe in `text`."""
  return [(path, n) for n, line in enumerate(text.splitlines(), 1)
          if _PROBE.search(line.split('#', 1)[0])]


@pytest.mark.parametrize('line, caught', [
    ("  acc = getattr(type(opt), 'IS_ACCUMULATION', False)", True),
    ("  if getattr(cls, 'REPLICA_LOCAL', False):", True),
    ("  if getattr(getattr(p, 'cls', None), 'IS_ACCUMULATION', 0):", True),
    ('  acc = type(opt).IS_ACCUMULATION', False),
    ("  fn = getattr(module, 'Adam')", False),
    ("  # getattr(type(o), 'NEEDS_SECOND_PASS', False) was the old way", False),
])
def test_probes_are_caught(line, caught):
  assert bool(Probes('m.py', line)) == caught


def test_no_product_module_probes_a_flag():
  found = []
  for package in PRODUCT:
    for path in sorted((ROOT / package).rglob('*.py')):
      found += Probes(path.relative_to(ROOT).as_posix(), path.read_text())
  assert not found, found


@pytest.mark.parametrize('flag', FLAGS)
def test_each_flag_has_its_default_on_the_base(flag):
  assert flag in vars(rule_flags.RuleFlags), flag
  assert issubclass(base_optimizer.BaseOptimizer, rule_flags.RuleFlags)
  assert flag not in vars(base_optimizer.BaseOptimizer), flag  # Once.


def test_the_subclasses_set_the_flags_they_stand_for():
  # By hand: which class turns which flag on.
  from learner import optimizers  # pylint: disable=g-import-not-at-top
  assert optimizers.GradientAccumulation.IS_ACCUMULATION
  assert optimizers.Sam.NEEDS_SECOND_PASS
  assert optimizers.Easgd.REPLICA_LOCAL and optimizers.LocalSgd.REPLICA_LOCAL
  assert optimizers.Ema.EVAL_WEIGHTS_LABEL == 'EMA averages'
  for cls in (optimizers.SGD, optimizers.Adam, optimizers.Lars):
    assert not cls.IS_ACCUMULATION and not cls.NEEDS_SECOND_PASS
    assert not cls.REPLICA_LOCAL and cls.EVAL_WEIGHTS_LABEL is None
