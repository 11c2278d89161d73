"""benchmarks.memory and benchmarks.trainer in their quickest modes.

Each spawns subprocesses (one per measured side); sizes and timings are not
asserted, only that every side ran and reported what the table needs.
"""

import re

import pytest

from benchmarks import memory
from benchmarks import trainer


def test_memory_unknown_child_mode_names_it():
  with pytest.raises(ValueError, match="'bogus'"):
    memory.RunChild('bogus', 'small', 1, 2)


def test_memory_steps_below_num_batches_is_refused():
  with pytest.raises(SystemExit):
    memory.ParseArgs(['--steps=1', '--num_batches=2'])


@pytest.mark.parametrize('argv, words', [
    (['--set=smal'], ['--set=smal', 'choose from resnet50, small']),
    (['--muon'], ['--muon', '--sharded'])])
def test_memory_bad_set_or_muon_alone_is_refused_in_one_line(
    argv, words, capsys):
  with pytest.raises(SystemExit) as e:
    memory.ParseArgs(argv)
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert all(w in err for w in words), err


def test_memory_help_lists_the_table_and_table_help_runs_nothing(capsys):
  # `--table` is taken before the flags are parsed; --help with it prints
  # this help (which names it) instead of starting the table's children.
  for argv in (['--help'], ['--table', '--help']):
    with pytest.raises(SystemExit) as e:
      memory.main(argv)
    assert e.value.code == 0
    out = capsys.readouterr().out
    # An option line of its own (the docstring's usage also names it).
    assert re.search(r'^  --table +The memory table of the levers', out,
                     re.M), out


def test_trainer_side_the_model_lacks_is_refused(capsys):
  # digits has only ours and keras: ours_muon alone would run nothing.
  with pytest.raises(SystemExit) as e:
    trainer.ParseArgs(['--model=%s' % trainer.DIGITS, '--sides=ours_muon'])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert '--sides=ours_muon' in err and 'its sides: ours, keras' in err
  # With another side it has, the run goes on (ours_muon is skipped there).
  args = trainer.ParseArgs(['--model=%s' % trainer.DIGITS,
                            '--sides=ours,ours_muon'])
  assert args.sides == ['ours', 'ours_muon']


def test_memory_quickest_run_reports_growth_and_allowance(tmp_path):
  payload = memory.main(['--quick', '--steps=2', '--num_batches=2',
                         '--modes=learner_accum',
                         '--output=%s' % (tmp_path / 'm.json')])
  assert not payload['notes'], payload['notes']
  row = payload['rows']['learner_accum']
  n = payload['baseline']['num_params']
  assert n == 10 * (320 * 320 + 320)
  # (momentum slot + accumulator) x 4 B x params, + 10 %.
  assert row['allowance_bytes'] == pytest.approx(2 * 4 * n * 1.1)
  assert row['peak_rss'] > 0


def test_trainer_bad_steps_is_refused():
  with pytest.raises(SystemExit):
    trainer.ParseArgs(['--steps=0'])


def test_trainer_quickest_run_trains_both_sides(tmp_path):
  payload = trainer.main(['--model=%s' % trainer.DIGITS, '--steps=60',
                          '--output=%s' % (tmp_path / 't.json')])
  assert not payload['notes'], payload['notes']
  for side in ('ours', 'keras'):
    r = payload['models'][trainer.DIGITS]['results'][side]
    assert r['steps'] == 60
    # Chance level is ln(10) = 2.30 nats; both sides are
    # well below it after 60 steps (measured: ours 0.3-0.9, Keras 0.2; Keras's
    # Momentum form lags during the warmup ramp: 2.4 after 30 steps).
    assert r['final_loss'] < 1.5, (side, r['final_loss'])


def test_memory_rule_mode_allowance_is_its_slots(tmp_path):
  # AMSGrad keeps m, v and v_max: 3 x 4 B x params, + 10 %.
  payload = memory.main(['--quick', '--steps=2', '--num_batches=2',
                         '--modes=learner_amsgrad',
                         '--output=%s' % (tmp_path / 'm.json')])
  assert not payload['notes'], payload['notes']
  row = payload['rows']['learner_amsgrad']
  n = payload['baseline']['num_params']
  assert row['allowance_bytes'] == pytest.approx(3 * 4 * n * 1.1)
  assert row['peak_rss'] > 0
