"""benchmarks.accumulation in its quickest mode; timings never asserted."""

import numpy as np
import pytest

from benchmarks import accumulation


def test_num_batches_below_two_is_refused():
  with pytest.raises(SystemExit):
    accumulation.ParseArgs(['--num_batches=1'])


def test_steps_below_num_batches_is_refused():
  with pytest.raises(SystemExit):
    accumulation.ParseArgs(['--num_batches=4', '--steps=3'])


def test_unknown_accumulate_mode_names_it():
  with pytest.raises(ValueError, match="'fast'"):
    accumulation.TfAccumulateRow([], 'fast')


def test_checked_prototype_drops_a_non_finite_micro_batch():
  # C-accum-nonfinite: a micro-batch with an Inf is not added.
  row = accumulation.TfAccumulateRow([np.ones(3, np.float32)],
                                     'fused_checked', weight=2.0)
  row.step()
  row.grads[0].assign([1.0, np.inf, 1.0])
  row.step()
  np.testing.assert_array_equal(row.Weights()[0], [2.0, 2.0, 2.0])
  assert int(row._dropped.numpy()) == 1  # pylint: disable=protected-access


def test_quickest_run_every_row_matches_its_numpy_reference(tmp_path):
  payload = accumulation.main(['--sets=small', '--num_batches=2',
                               '--steps=4', '--warmup=0',
                               '--output=%s' % (tmp_path / 'acc.json')])
  failures = [n for n in payload['notes'] if 'failed' in n]
  assert not failures, failures
  rows = payload['results'][0]['rows']
  for name in ('learner', 'learner_fallback', 'tf_accumulate',
               'tf_accumulate_fused', 'tf_accumulate_checked', 'keras'):
    assert name in rows, sorted(rows)
  for name, r in rows.items():
    assert r['check_ok'], (name, r['max_rel_err'])
  # 4 timed steps with 2 micro-batches per update: 2 applying, 2 not.
  assert rows['learner']['micro']['steps'] == 2
  assert rows['learner']['apply']['steps'] == 2
  assert rows['tf_accumulate']['micro']['steps'] == 4
