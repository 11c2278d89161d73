"""benchmarks.memory --sharded and benchmarks.collectives, quickest modes.

Each runs in a child process (2 logical CPUs configured before TF starts).
Timings are not asserted; the bytes are: they are sizes, not measurements.
"""

import re

import pytest

from benchmarks import child_process
from benchmarks import collectives
from benchmarks import memory
from benchmarks import sharded_memory


@pytest.mark.slow
def test_memory_sharded_rows_hold_half_the_adam_state(tmp_path):
  payload = memory.main(['--sharded', '--quick', '--steps=2',
                         '--num_batches=2',
                         '--output=%s' % (tmp_path / 'm.json')])
  res, check = payload['result'], payload['check']
  n = res['num_params']
  assert res['num_replicas'] == 2 and n % 2 == 0
  # Adam's m and v (4 B each) per parameter, + the 8 B num_updates counter.
  assert check['unsharded_bytes'] == 8 * n + 8
  assert check['sharded_bytes'] == 8 * (n // 2) + 8
  assert check['within_bound']
  copies = res['rows']['adam_sharded']['shard_copy_bytes_by_device']
  assert sorted(copies.values()) == [4 * (n // 2)] * 2
  for row in res['rows'].values():
    assert row['step']['median_s'] > 0
  # The collectives of the floor, on n float32 in the same run.
  assert res['rows']['all_reduce']['sent_bytes'] == 4 * n
  assert res['rows']['reduce_scatter_a2a']['sent_bytes'] == 2 * n
  assert res['rows']['all_gather']['sent_bytes'] == 2 * n
  assert any(line.startswith('floor: unsharded step >= all_reduce')
             for line in payload['lines'])
  assert 'targets:' in payload['lines']
  # The small set's step times judge nothing (memory --help: not
  # meaningful); the bytes sent are counted, and judged.
  verdicts = [re.sub(r'^.*\(issue 40\) +\S+  ', '', line)
              for line in payload['lines'] if '(issue 40)' in line]
  assert verdicts[:2] == [
      'not judged (the small set: its step times are not meaningful (memory '
      '--help); judged on resnet50 only)'] * 2 and verdicts[2] == 'met'
  assert [t['target'].split(',')[0] for t in check['targets']] == [
      'adam step sharded / unsharded', 'adam step beyond the collectives\' '
      'floor', 'adam bytes sent per replica and step']


def test_sharded_targets_by_hand():
  # Medians in s; 1000 float32 on 2 replicas.
  step = lambda ms: dict(step=dict(median_s=ms / 1e3))
  res = dict(set='resnet50', num_params=1000, num_replicas=2, rows=dict(
      adam_unsharded=step(100.), adam_sharded=step(130.),
      muon_unsharded=step(400.), muon_sharded=step(480.),
      all_reduce=step(40.), reduce_scatter_a2a=step(30.),
      all_gather=step(20.)))
  got = {t['target'].split(',')[0]: (t['value'], t['met'])
         for t in sharded_memory.Targets(res)}
  assert got['adam step sharded / unsharded'] == (1.3, False)
  assert got['muon step sharded / unsharded'] == (1.2, True)
  # (130 - 30 - 20) / (100 - 40) = 80 / 60.
  value, met = got['adam step beyond the collectives\' floor']
  assert abs(value - 80. / 60.) < 1e-12 and not met
  # a2a 2000 B + all-gather 2000 B against the all-reduce's 4000 B.
  assert got['adam bytes sent per replica and step'] == (1.0, True)


@pytest.mark.slow
def test_collectives_quickest_run_times_all_reduce_and_all_gather():
  res, err = child_process.SpawnChild(
      'benchmarks.collectives', ['--elements=1000', '--steps=2'],
      'collectives', collectives.RESULT_PREFIX)
  assert res is not None, err
  for row in collectives.ROWS:  # Sizes of 1000 float32, 2 replicas.
    assert res[row]['median_s'] > 0
  assert res['all_reduce']['sent_bytes'] == 4000  # 2 (N-1)/N x 4000 B.
  assert res['all_gather']['sent_bytes'] == 2000  # (N-1) x 500 x 4 B.
  assert res['all_to_all']['sent_bytes'] == 2000  # (N-1)/N x 4000 B.
  assert res['reduce_scatter_a2a']['sent_bytes'] == 2000
  # TF 2.21 has no reduce-scatter on CPU: said in the note, not a failure.
  assert 'reduce_scatter' in res or 'not available' in res['note']


def test_sharded_step_time_targets_are_not_judged_on_the_small_set():
  # The bytes sent are counted, not timed: judged on any set; the step-time
  # targets (here 1.3 and 80 / 60, both above 1.25) are resnet50's.
  step = lambda ms: dict(step=dict(median_s=ms / 1e3))
  res = dict(set='small', num_params=1000, num_replicas=2, rows=dict(
      adam_unsharded=step(100.), adam_sharded=step(130.),
      all_reduce=step(40.), reduce_scatter_a2a=step(30.),
      all_gather=step(20.)))
  got = [(t['target'].split(',')[0], round(t['value'], 6), t['met'],
          t['not_judged']) for t in sharded_memory.Targets(res)]
  why = ('the small set: its step times are not meaningful (memory --help); '
         'judged on resnet50 only')
  assert got == [('adam step sharded / unsharded', 1.3, None, why),
                 ('adam step beyond the collectives\' floor', 1.333333,
                  None, why),
                 ('adam bytes sent per replica and step', 1.0, True, None)]


def test_sharded_muon_run_builds_muon_and_adamw_learners():
  # `memory --sharded --muon` builds Muon.TwoLearners' two learners, both
  # with the sharded flag of the run.
  for shard in (False, True):
    learners = sharded_memory._Learners(shard, muon=True)  # pylint: disable=protected-access
    assert [lp.optimizer.cls.__name__ for lp in learners] == ['Muon', 'Nadam']
    assert all(lp.shard_optimizer_state == shard for lp in learners)
