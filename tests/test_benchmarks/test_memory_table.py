"""benchmarks.memory --table (benchmarks/memory_table.py) on the small set.

Each cell of the table runs in its own child process (its CPU split into
N logical devices before TF starts); the test runs one cell that way and
the rest in this process (_SmallSetCells). The bytes are sizes, not
timings, so they are asserted exactly: the small set
(benchmarks/variable_sets.py) has P = 10 x (320 x 320 + 320) = 1,027,200
float32 parameters and Adam keeps m and v (4 B each per parameter) plus
its 8 B num_updates counter.
"""

import pytest

from benchmarks import memory
from benchmarks import memory_table

P = 10 * (320 * 320 + 320)


def test_memory_table_refuses_an_unknown_lever_naming_it():
  with pytest.raises(ValueError, match=r'--levers=fp32,int4: unknown'):
    memory_table.main(['--levers=fp32,int4'])


def test_memory_table_refuses_a_directory_as_output_before_measuring(
    tmp_path):
  with pytest.raises(ValueError, match=r'is a directory; give a file path'):
    memory_table.main(['--sets=small', '--output=%s' % tmp_path])


def test_int8_lever_notes_a_rule_that_is_not_elementwise():
  # lm.CharTransformerLarge: Muon keeps float32 state (its slot_dtype=int8
  # would be refused: the cell would fail), AdamW takes int8.
  from learner.training.jobs import cli  # pylint: disable=g-import-not-at-top
  params = cli.LoadExperimentParams('lm.CharTransformerLarge', max_steps=2)
  lps = params.task.train.learner
  notes = [memory_table._SetInt8State(lp, params.task) for lp in lps]
  assert notes == ['muon float32 state (Muon: int8 needs an elementwise '
                   'rule)', None]
  assert [memory_table._Rule(lp).slot_dtype for lp in lps] == [None, 'int8']


def _SmallSetCells(tmp_path):
  """{(lever, N): cell} of the small set, fp32 / zero1 / accum, N = 1, 2.

  One cell (zero1, N = 2) goes the table's own way: `benchmarks.memory
  --table`, its child process, its JSON. The other five are the same
  function its children run, called here (on this process's two logical
  CPUs, tests/conftest.py; N = 1 is the default strategy): a cell's bytes
  do not depend on the process that counts them, and each child is a
  TensorFlow start-up (six of them took ~35 s of the suite).
  """
  payload = memory.main(['--table', '--sets=small', '--replicas=2',
                         '--levers=zero1',
                         '--output=%s' % (tmp_path / 't.json')])
  assert payload['errors'] == []
  assert [(r['set'], r['lever'], r['replicas'])
          for r in payload['results']] == [('small', 'zero1', 2)]
  cells = {('zero1', 2): payload['results'][0]}
  for lever in ('fp32', 'zero1', 'zero1+accum4_nosync'):
    for n in (1, 2):
      if (lever, n) not in cells:
        cells[(lever, n)] = memory_table._FixedGradientCell(  # pylint: disable=protected-access
            'small', n, lever, steps=3)
  return cells


@pytest.mark.slow
def test_memory_table_small_set_bytes_per_replica(tmp_path):
  cells = _SmallSetCells(tmp_path)
  for n in (1, 2):
    assert cells[('fp32', n)]['weights'] == 4 * P
    assert cells[('fp32', n)]['opt_state'] == 8 * P + 8
  # ZeRO-1: half of m and v per replica, and the replica's slice of the
  # weights that its rule updates.
  assert cells[('zero1', 2)]['opt_state'] == 8 * (P // 2) + 8
  assert cells[('zero1', 2)]['weight_shard'] == 4 * (P // 2)
  assert cells[('zero1', 1)]['opt_state'] == 8 * P + 8
  # ZeRO-1 with accumulation all-reduced every micro-step: each replica
  # keeps its half of the accumulators (the whole on one replica).
  assert cells[('zero1+accum4_nosync', 2)]['accum'] == 4 * (P // 2)
  assert cells[('zero1+accum4_nosync', 1)]['accum'] == 4 * P
  # Bytes sent: none on one replica; on two, a ring all-reduce of the
  # gradients (2 (N-1)/N x 4P = 4P) plus five float32 scalars of the step
  # (two packed with the gradients, three in one more all-reduce: 20 B).
  # ZeRO-1 reduce-scatters instead (cross_replica.ScatteredMean): an
  # all-to-all of [2, P/2 + 2] (each half carries the weight and the loss
  # flag) keeps its own row and sends the other, 4 (P/2 + 2) B; then the
  # norm (4 B in a ring all-reduce of [1]), the three flags (12 B) and the
  # all-gather of each replica's updated half ((N-1) x 4 P/2): 4P + 24 B.
  assert cells[('fp32', 1)]['sent'] == 0
  assert cells[('fp32', 2)]['sent'] == 4 * P + 20
  assert cells[('zero1', 2)]['sent'] == 4 * (P // 2 + 2) + 4 + 12 + 4 * (
      P // 2)
