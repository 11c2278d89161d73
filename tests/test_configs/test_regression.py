"""configs/regression.py: both regression experiments and their keys (issue 7)."""

import pytest

from params import registry


def test_distributed_linear_regression_is_registered_under_the_issue_key():
  keys = registry.GetAllRegisteredKeys()
  assert 'regression.DistributedLinearRegression' in keys
  assert 'regression.LinearRegression' in keys
  # The unregistered base module adds no key of its own (no duplicates).
  assert not [k for k in keys if k.startswith('regression_distributed.')]
  cls = registry.GetClass('regression.DistributedLinearRegression')
  assert cls.__module__ == 'configs.regression'


def test_distributed_linear_regression_params():
  p = registry.GetParams('regression.DistributedLinearRegression')
  assert p.task.train.max_steps == 300
  assert p.task.train.replicas_to_aggregate is None  # All replicas.
  assert p.train_input.batch_size == 32
  assert p.task.train.learner.optimizer_fn.learning_rate == 0.3
  assert (p.train_input.w, p.train_input.b) == (5.0, 2.0)


def test_old_key_is_unknown_and_the_error_names_it():
  with pytest.raises(LookupError) as e:
    registry.GetParams('regression_distributed.DistributedLinearRegression')
  assert 'regression_distributed.DistributedLinearRegression' in str(e.value)
