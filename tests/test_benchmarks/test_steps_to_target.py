"""benchmarks/steps_to_target.py: the AlgoPerf score, the target logic, a run."""

import json
import math
import os

import numpy as np
import pytest

from benchmarks import steps_to_target as stt

INF = math.inf


# Two submissions, three workloads (seconds to target; A misses w3):
#   A: 10, 30, inf   B: 20, 15, 50   -> best 10, 15, 50
#   ratios A: 1, 2, inf              B: 2, 1, 1
_TIMES = {'A': {'w1': 10.0, 'w2': 30.0, 'w3': INF},
          'B': {'w1': 20.0, 'w2': 15.0, 'w3': 50.0}}


def test_ratios_divide_by_the_best_rule_per_workload():
  ratios = stt.Ratios(_TIMES)
  assert ratios == {'A': {'w1': 1.0, 'w2': 2.0, 'w3': INF},
                    'B': {'w1': 2.0, 'w2': 1.0, 'w3': 1.0}}


def test_profile_counts_workloads_within_tau():
  ratios = stt.Ratios(_TIMES)
  # tau 1.5: A has w1 only (1/3); B has w2 and w3 (2/3). tau 2: A 2/3, B 1.
  assert stt.Profile(ratios['A'], 1.5) == pytest.approx(1 / 3)
  assert stt.Profile(ratios['B'], 1.5) == pytest.approx(2 / 3)
  assert stt.Profile(ratios['A'], 2.0) == pytest.approx(2 / 3)
  assert stt.Profile(ratios['B'], 2.0) == pytest.approx(1.0)


def test_score_by_hand_two_submissions_three_workloads():
  # A: ((4 - 1) + (4 - 2) + 0) / 3 / 3 = 5/9; B: ((4 - 2) + 3 + 3) / 9 = 8/9.
  ratios = stt.Ratios(_TIMES)
  assert stt.ProfileScore(ratios['A']) == pytest.approx(5 / 9)
  assert stt.ProfileScore(ratios['B']) == pytest.approx(8 / 9)


def test_score_equals_the_normalised_integral_of_rho():
  # The closed form against a midpoint sum of rho over [1, 4].
  ratios = {'w1': 1.0, 'w2': 1.7, 'w3': 3.2, 'w4': 5.0, 'w5': INF}
  taus = 1.0 + 3.0 * (np.arange(30000) + 0.5) / 30000
  integral = np.mean([stt.Profile(ratios, t) for t in taus])
  assert stt.ProfileScore(ratios) == pytest.approx(integral, abs=1e-4)
  # By hand: (3 + 2.3 + 0.8 + 0 + 0) / 3 / 5 = 0.40667.
  assert stt.ProfileScore(ratios) == pytest.approx(6.1 / 15)


def test_a_workload_no_rule_reaches_counts_zero_for_everyone():
  ratios = stt.Ratios({'A': {'w': INF}, 'B': {'w': INF}})
  assert ratios == {'A': {'w': INF}, 'B': {'w': INF}}
  assert stt.ProfileScore(ratios['A']) == 0.0


def test_steps_to_target_on_a_fake_curve():
  acc = stt.Curve(steps=[10, 20, 30], times=[1.0, 2.5, 4.0],
                  values=[0.5, 0.8, 0.9])
  assert stt.StepsToTarget(acc, 0.8, 'max') == (20, 2.5)  # Meets at equal.
  assert stt.StepsToTarget(acc, 0.95, 'max') == (INF, INF)
  bits = stt.Curve(steps=[10, 20, 30], times=[1.0, 2.5, 4.0],
                   values=[3.0, 2.5, 2.0])
  assert stt.StepsToTarget(bits, 2.4, 'min') == (30, 4.0)
  assert stt.StepsToTarget(bits, 3.0, 'min') == (10, 1.0)


def test_target_is_the_median_of_the_baselines_seeds():
  assert stt.Target([2.3, 2.1, 2.0], 'min') == 2.1


def test_best_trial_is_fewest_steps_then_better_metric():
  c = lambda values: stt.Curve([10, 20], [1.0, 2.0], values)
  curves = [c([0.7, 0.9]), c([0.8, 0.85]), c([0.8, 0.95])]
  # Target 0.8: trials 2 and 3 meet it at step 10; 3 ends higher.
  assert stt._BestTrial(curves, 0.8, 'max') == 2
  # No target (the baseline): the best final metric.
  assert stt._BestTrial(curves[:2], None, 'max') == 0
  # None reaches 0.99: the best final metric.
  assert stt._BestTrial(curves, 0.99, 'max') == 2


def test_summary_takes_medians_over_seeds_with_a_miss():
  rule = stt.RULES[0]
  c = lambda steps, values: stt.Curve(steps, [s / 10 for s in steps], values)
  seeds = [c([10, 20], [0.7, 0.9]), c([10, 20, 30], [0.6, 0.7, 0.81]),
           c([10, 20, 30], [0.5, 0.6, 0.7])]
  s = stt._Summary(rule, {}, seeds[:1], seeds, 0.8, 'max')
  # Steps per seed 20, 30, inf -> median 30; seconds 2, 3, inf -> 3.
  assert s['seed_steps'] == [20, 30, INF]
  assert (s['steps'], s['seconds']) == (30, 3.0)
  assert s['metric'] == pytest.approx(0.81)  # Median of 0.9, 0.81, 0.7.
  assert s['trials_reaching'] == '1/1'


def test_halton_points_and_the_shared_log_draw():
  # Bases 2 and 3: 1/2, 1/4, 3/4 and 1/3, 2/3, 1/9.
  np.testing.assert_allclose(stt.Halton(3, 2),
                             [(0.5, 1 / 3), (0.25, 2 / 3), (0.75, 1 / 9)])
  rule = stt.Rule('r', 'adamw', (('learning_rate', 1e-3, 1e-1),
                                 ('weight_decay', 1e-4, 1e-1)), {}, 'cosine')
  hp = stt.TrialHparams(rule, 2)
  # lr 1e-3 * 100**0.5 = 1e-2; wd 1e-4 * 1000**(1/3) = 1e-3.
  assert hp[0]['learning_rate'] == pytest.approx(1e-2)
  assert hp[0]['weight_decay'] == pytest.approx(1e-3)
  assert hp[1]['learning_rate'] == pytest.approx(1e-3 * 100 ** 0.25)
  free = stt.Rule('free', 'adam', (), {}, 'cosine')
  assert stt.TrialHparams(free, 5) == [{}]


def test_halton_refuses_more_than_four_dimensions():
  with pytest.raises(ValueError, match='dims=5; at most 4'):
    stt.Halton(2, 5)


def test_muon_row_builds_two_learners_on_the_matrices():
  from learner import optimizers
  from learner.training.jobs import cli as cli_lib
  p = cli_lib.LoadExperimentParams('lm.CharTransformer', max_steps=10)
  rule = {r.name: r for r in stt.RULES}['muon']
  lps = stt.RuleLearners(p.task.train.learner, rule,
                         {'muon_learning_rate': 0.02, 'learning_rate': 3e-3},
                         100, r'/stack/.*/w\w*$')
  assert [lp.name for lp in lps] == ['muon', 'adamw']
  assert lps[0].optimizer.cls is optimizers.Muon
  assert lps[1].optimizer.cls is optimizers.AdamW
  assert lps[0].bprop_variable_filter == r'/stack/.*/w\w*$'
  assert lps[1].bprop_variable_exclusion == r'/stack/.*/w\w*$'
  assert (lps[0].learning_rate, lps[1].learning_rate) == (0.02, 3e-3)
  assert lps[0].clip_gradient_norm_to_value == 1.0  # The LM's clipping.
  # Warmup 10 of 100, then cosine to 0 over the other 90.
  assert lps[0].lr_schedule.warmup_steps == 10
  assert lps[0].lr_schedule.schedule.total_steps == 90


def test_schedule_free_row_is_constant_with_its_own_warmup():
  from learner.training.jobs import cli as cli_lib
  from schedules.base_schedule import ConstantOne
  p = cli_lib.LoadExperimentParams('lm.CharTransformer', max_steps=10)
  rule = {r.name: r for r in stt.RULES}['sf_adamw']
  lps = stt.RuleLearners(p.task.train.learner, rule, {'learning_rate': 0.01},
                         200, '')
  assert [lp.name for lp in lps] == ['embedding', 'body']
  assert lps[1].lr_schedule.cls is ConstantOne
  assert lps[1].optimizer.warmup_steps == 20


def test_unknown_rule_and_workload_are_refused(capsys):
  with pytest.raises(SystemExit) as e:
    stt.main(['--rules=adam,sophia'])
  assert e.value.code == 2
  assert "--rules: unknown rule 'sophia'" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    stt.main(['--workloads=digits.Mlp'])
  assert "--workloads: unknown workload 'digits.Mlp'" in (
      capsys.readouterr().err)


def test_tiny_run_prints_the_table_scores_targets_and_writes_json(
    tmp_path, capsys):
  code = stt.main(['--workloads=digits.MlpMomentum', '--rules=adam,sf_adamw',
                   '--steps=30', '--eval_every=15', '--trials=1',
                   '--seeds=1', '--output=%s' % tmp_path])
  assert code == 0
  out = capsys.readouterr().out
  assert 'score on seconds (r_max 4)' in out and 'targets:' in out
  assert 'Muon/Adam steps to target on lm.CharTransformer: n/a' in out
  with open(os.path.join(tmp_path, 'steps_to_target.json')) as f:
    result = json.load(f)['results']['digits.MlpMomentum']
  adam = result['rows']['adam']
  # The baseline's one run sets the target: its final metric, met by 30.
  assert result['target'] == adam['seed_curves'][0]['values'][-1]
  assert adam['steps'] <= 30 and adam['trials_reaching'] == '1/1'
  assert 0.1 < result['target'] <= 1.0
  assert set(result['rows']) == {'adam', 'sf_adamw'}
  png = os.path.join(tmp_path, 'steps_to_target.png')
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:  # CI installs only the test extra: no plot extra.
    assert "plot skipped: matplotlib is not importable" in out
    assert "pip install -e '.[plot]'" in out and not os.path.exists(png)
  else:
    assert os.path.exists(png)


def test_mechanic_row_wraps_adam_and_dowg_is_rate_free():
  from learner import optimizers
  from learner.optimizers.wrappers import mechanic as mechanic_lib
  from learner.training.jobs import cli as cli_lib
  p = cli_lib.LoadExperimentParams('digits.MlpMomentum', max_steps=10)
  rows = {r.name: r for r in stt.RULES}
  lps = stt.RuleLearners([p.task.train.learner], rows['mechanic'], {}, 100,
                         '')
  assert lps[0].optimizer.cls is mechanic_lib.Mechanic
  assert lps[0].optimizer.optimizer.cls is optimizers.Adam
  assert lps[0].learning_rate == 1.0
  assert rows['dowg'].space == () and rows['mechanic'].space == ()


def test_target_lines_for_soap_and_the_rate_free_rules():
  def Row(steps, metric):
    return dict(steps=steps, metric=metric)
  results = {
      'mnist1d.ConvNet': (0.95, {'adam': Row(300, 0.951),
                                 'soap': Row(200, 0.952),
                                 'dog': Row(math.inf, 0.767),
                                 'cocob': Row(math.inf, 0.912)}),
      'lm.CharTransformer': (3.03, {'adam': Row(160, 3.032),
                                    'soap': Row(144, 3.02),
                                    'prodigy': Row(math.inf, 3.373)})}
  text = '\n'.join(stt.TargetLines(results))
  # 200 / 300 = 0.667 and 144 / 160 = 0.9.
  assert 'SOAP/Adam steps to target on mnist1d.ConvNet: 0.667' in text
  assert 'on lm.CharTransformer: 0.900 (want <= 0.8 for Shampoo or SOAP): ' \
      'MISSED' in text
  # (0.951 - 0.767) / 0.951 = 19.3 % worse; (0.951 - 0.912) / 0.951 = 4.1 %.
  assert "dog within 5 % of tuned Adam's metric on mnist1d.ConvNet: " \
      "0.767 vs 0.951 (+19.3 %): MISSED" in text
  assert '0.912 vs 0.951 (+4.1 %): met' in text
  # (3.373 - 3.032) / 3.032 = 11.2 % worse.
  assert '3.373 vs 3.032 (+11.2 %): MISSED' in text


def test_normuon_and_shampoo_rows():
  from learner import optimizers
  from learner.training.jobs import cli as cli_lib
  p = cli_lib.LoadExperimentParams('lm.CharTransformer', max_steps=10)
  rows = {r.name: r for r in stt.RULES}
  lps = stt.RuleLearners(p.task.train.learner, rows['normuon'],
                         {'muon_learning_rate': 0.02, 'learning_rate': 3e-3},
                         100, r'/stack/.*/w\w*$')
  assert [lp.optimizer.cls for lp in lps] == [optimizers.NorMuon,
                                               optimizers.AdamW]
  lps = stt.RuleLearners(p.task.train.learner, rows['shampoo'],
                         {'learning_rate': 0.1}, 100, '')
  shampoo = lps[1].optimizer
  assert shampoo.cls is optimizers.DistributedShampoo
  assert (shampoo.start_preconditioning_steps,
          shampoo.preconditioning_compute_steps) == (10, 10)
  # Simplified AdEMAMix's range is Adam's over ~30 (m sums ~100 gradients).
  assert rows['simplified_ademamix'].space == (
      ('learning_rate', 3e-5, 1e-3),)
