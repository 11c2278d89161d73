"""benchmarks.remat --quick: both modes run, in one child, on one batch.

Timings and peaks are not asserted (measurements); what must hold is that
the rematerialized step trains the same model: the same loss after the
same steps on the same batch.
"""

import pytest

from benchmarks import remat


@pytest.mark.slow
def test_remat_quick_runs_both_modes_with_the_same_loss(tmp_path):
  result = remat.main(['--quick', '--output=%s' % (tmp_path / 'r.json')])
  assert result['config']['window'] == 128
  (row,) = result['rounds']
  assert row['baseline']['loss'] == pytest.approx(row['remat']['loss'],
                                                  rel=1e-5)
  for mode in remat.MODES:
    assert len(row[mode]['step_ms']) == 2  # --quick: 2 steps of each.
    assert min(row[mode]['peak_bytes']) > 0 and min(row[mode]['step_ms']) > 0
  assert len(result['time_ratios']) == 2
  assert (tmp_path / 'r.json').exists()
