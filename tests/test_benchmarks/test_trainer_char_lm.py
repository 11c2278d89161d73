"""benchmarks.trainer's Keras twins (lm.CharTransformer, mnist1d.ConvNet).

The twin (benchmarks/char_lm_keras.py) is checked against our task in
process: the parameter count by hand and the loss of the same weights on
the same batch; then the benchmark's quickest run (both sides in
subprocesses; timings are never asserted).
"""

import math

import pytest

from benchmarks import char_lm_keras
from benchmarks import trainer
from learner.training.jobs import cli as cli_lib
from params import NestedMap

# vocab V = 103, model D = 128, hidden H = 512, 2 blocks: the table and the
# softmax bias V*D + V; per block 2 LayerNorms 4D, w_qkv/b_qkv 3D*D + 3D,
# w_post/b_post D*D + D, the feed-forward D*H + H + H*D + D; final LN 2D.
_V, _D, _H = 103, 128, 512
_NUM_PARAMS = (_V * _D + _V + 2 * (4 * _D + 3 * _D * _D + 3 * _D + _D * _D +
                                   _D + 2 * _D * _H + _H + _D) + 2 * _D)


def test_keras_twin_has_our_parameters_and_computes_our_loss():
  assert _NUM_PARAMS == 410087
  p = cli_lib.LoadExperimentParams(trainer.CHAR_LM)
  task = p.task.Instantiate()
  model = char_lm_keras.Build(p.task, 64, 200, 0.9, 0.98, 1e-9, 1.0)
  assert char_lm_keras.CopyWeights(task, model) == _NUM_PARAMS
  assert model.count_params() == _NUM_PARAMS
  batch = next(iter(p.train_input.Instantiate().GetDataset()))
  ours = float(task.FProp(task.theta, NestedMap(batch))[0]['loss'][0])
  theirs = float(model.compute_loss(y=batch['labels'],
                                    y_pred=model(batch['ids'])))
  assert theirs == pytest.approx(ours, rel=1e-6)
  # Measured 6.57 nats at the initial weights: above uniform (ln 103 =
  # 4.63), as logits of unit-variance features times N(0, 1/128) rows are.
  assert math.log(_V) < ours < 8.0


def test_twin_refuses_a_model_of_another_size():
  p = cli_lib.LoadExperimentParams(trainer.CHAR_LM)
  task = p.task.Instantiate()
  other = p.task.Copy().Set(hidden_dim=256)
  model = char_lm_keras.Build(other, 64, 200, 0.9, 0.98, 1e-9, 1.0)
  with pytest.raises(ValueError, match='410087 parameters, its Keras twin '
                     '278503'):
    char_lm_keras.CopyWeights(task, model)


def _QuickestRun(tmp_path, model, sides):
  """benchmarks.trainer on `model`, 2 steps (W = 1): the model's payload."""
  payload = trainer.main(['--model=%s' % model, '--steps=2',
                          '--warmup_steps=1', '--sides=%s' % sides,
                          '--output=%s' % (tmp_path / 't.json')])
  assert not payload['notes'], payload['notes']
  return payload['models'][model]


def test_trainer_char_lm_quickest_run_trains_every_side(tmp_path):
  part = _QuickestRun(tmp_path, trainer.CHAR_LM, 'ours,keras,loop')
  assert part['warmup_steps'] == 1
  assert sorted(part['results']) == ['keras', 'loop', 'ours']
  for side in ('ours', 'keras', 'loop'):
    r = part['results'][side]
    assert r['steps'] == 2
    assert r['steady_steps_per_s'] > 0
    # Two updates at the warm-up's smallest rates (3.1e-5, 6.3e-5) leave
    # the loss near its initial 6.57 nats.
    assert 5.0 < r['final_loss'] < 7.5, (side, r['final_loss'])
  assert part['results']['keras']['num_params'] == _NUM_PARAMS
  assert [t['target'] for t in part['targets']] == [
      'ours steady steps/s / keras >= 1.25',
      'ours steady steps/s / loop >= 0.95']
  # One steady step judges nothing (a --quick run printed 'met' for a
  # hand loop still warming up).
  assert [t['met'] for t in part['targets']] == [None, None]


# mnist1d.ConvNet: conv 5*1*32 + 32, twice 5*32*32 + 32, head 160*10 + 10.
_CONVNET_PARAMS = (5 * 32 + 32) + 2 * (5 * 32 * 32 + 32) + (160 * 10 + 10)


def test_convnet_keras_twin_has_our_weights_and_computes_our_loss():
  assert _CONVNET_PARAMS == 12106
  p = cli_lib.LoadExperimentParams(trainer.CONVNET)
  model, _ = trainer._KerasConvNet(p, 2)  # Checks the loss itself.
  assert model.count_params() == _CONVNET_PARAMS
  task = p.task.Instantiate()
  # A fresh input's first batch (iterating the returned dataset again would
  # reshuffle).
  batch = next(iter(p.train_input.Instantiate().GetDataset()))
  ours = float(task.FProp(task.theta, NestedMap(batch))[0]['loss'][0])
  theirs = float(model.compute_loss(y=batch['labels'],
                                    y_pred=model(batch['features'])))
  assert theirs == pytest.approx(ours, rel=1e-6)
  # 10 classes: the initial loss is near ln 10 = 2.30 nats.
  assert 1.5 < ours < 3.5


def test_trainer_convnet_quickest_run_has_a_keras_side(tmp_path):
  part = _QuickestRun(tmp_path, trainer.CONVNET, 'ours,keras')
  assert sorted(part['results']) == ['keras', 'ours']
  for side in ('ours', 'keras'):
    # Two Adam steps at 1e-2 from ~2.3 nats.
    assert 1.0 < part['results'][side]['final_loss'] < 3.5
  assert part['results']['keras']['num_params'] == _CONVNET_PARAMS
  assert [t['target'] for t in part['targets']] == [
      'ours steady steps/s / keras >= 1.00']


def test_targets_are_judged_from_min_judged_steps_on():
  results = {'ours': {'steady_steps_per_s': 5.0},
             'keras': {'steady_steps_per_s': 4.0},
             'loop': {'steady_steps_per_s': 6.0}}
  rows = trainer._Targets(trainer.CHAR_LM, results, trainer.MIN_JUDGED_STEPS)
  assert [(r['value'], r['met']) for r in rows] == [(1.25, True),
                                                    (5.0 / 6.0, False)]
  short = trainer._Targets(trainer.CHAR_LM, results,
                           trainer.MIN_JUDGED_STEPS - 1)
  assert [r['met'] for r in short] == [None, None]


def test_muon_side_is_judged_against_ours_as_a_step_ratio():
  # Issue 40: lm.CharTransformerMuon's steady step <= 1.05x the char LM's,
  # i.e. steady/s ours_muon / ours >= 1 / 1.05 = 0.952: 10 vs 10.4 steps/s
  # (a step 1.04x as long) meets it, 10 vs 10.6 (1.06x) misses it.
  for muon, met in ((10.0, True), (10.0, False)):
    results = {'ours': {'steady_steps_per_s': 10.4 if met else 10.6},
               'ours_muon': {'steady_steps_per_s': muon}}
    rows = trainer._Targets(trainer.CHAR_LM, results,
                            trainer.MIN_JUDGED_STEPS)
    assert len(rows) == 1
    assert rows[0]['target'] == (
        'ours_muon steady steps/s / ours >= 0.95 (lm.CharTransformerMuon '
        'step <= 1.05x lm.CharTransformer\'s, issue 40)')
    assert rows[0]['met'] is met, rows[0]


def test_muon_floor_is_adams_step_plus_newton_schulz_alone():
  # ours at 10 steps/s is 100 ms a step; Newton-Schulz alone 12.5 ms: a
  # Muon step of at least 112.5 ms, so ours_muon / ours <= 100 / 112.5.
  results = {'ours': {'steady_steps_per_s': 10.0},
             'ours_muon': {'steady_steps_per_s': 8.0,
                           'newton_schulz_s': 0.0125}}
  rows = trainer._Targets(trainer.CHAR_LM, results, trainer.MIN_JUDGED_STEPS)
  assert rows[0]['floor'] == pytest.approx(1 / 1.125)
  del results['ours_muon']['newton_schulz_s']
  rows = trainer._Targets(trainer.CHAR_LM, results, trainer.MIN_JUDGED_STEPS)
  assert rows[0]['floor'] is None


def test_newton_schulz_seconds_times_the_muon_learners_matrices(monkeypatch):
  # lm.CharTransformerMuon: 8 matrices (w_qkv, w_post, w1, w2 of 2 blocks),
  # each orthogonalised once per call by its Muon learner's rule.
  from learner.optimizers.rules import muon as muon_lib
  shapes = []
  original = muon_lib.Muon._Orthogonalize
  monkeypatch.setattr(muon_lib.Muon, '_Orthogonalize', lambda self, u: (
      shapes.append(u.shape.as_list()) or original(self, u)))
  params = trainer._ExperimentParams(trainer.CHAR_LM_MUON, 10)
  seconds = trainer.NewtonSchulzSeconds(params, calls=2)
  assert seconds > 0
  assert sorted(shapes) == sorted([[128, 384], [128, 128], [128, 512],
                                   [512, 128]] * 2)
  assert trainer.NewtonSchulzSeconds(
      trainer._ExperimentParams(trainer.CHAR_LM, 10)) is None


def test_muon_side_trains_the_muon_experiment(monkeypatch):
  seen = []
  monkeypatch.setattr(trainer, 'RunOurs', lambda model, steps, warmup, **kw:
                      seen.append((model, steps, warmup, kw)) or {})
  trainer.RunSide(trainer.CHAR_LM, 'ours_muon', 20, 10)
  trainer.RunSide(trainer.CHAR_LM, 'ours', 20, 10)
  assert seen == [('lm.CharTransformerMuon', 20, 10, {'side': 'ours_muon'}),
                  ('lm.CharTransformer', 20, 10, {'jit_compile': False})]


def test_steady_rates_leave_out_the_first_w_steps():
  # Log lines at steps 20 and 60: 40 steps in 8 s wall (5 steps/s) and in
  # 10 CPU seconds (0.25 s per step); without a line at W there is none.
  clock = trainer._StepClock()  # pylint: disable=protected-access
  assert trainer._Steady({20: 2.0, 60: 10.0}, 60, 20) == 5.0  # pylint: disable=protected-access
  assert trainer._SteadyCpu({20: 1.0, 60: 11.0}, 60, 20) == 0.25  # pylint: disable=protected-access
  assert trainer._SteadyCpu({60: 11.0}, 60, 20) is None  # pylint: disable=protected-access
  clock.write('step 20/60 loss 1.0\n')
  assert set(clock.times) == set(clock.cpu_times) == {20}
