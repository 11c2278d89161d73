"""benchmarks.update_step in its quickest mode, plus its building blocks.

Timings are never asserted; the numbers checked are shapes, traffic models
and each row's agreement with its numpy reference.
"""

import json
import logging

import numpy as np
import pytest

from benchmarks import bandwidth
from benchmarks import learner_row
from benchmarks import numpy_reference
from benchmarks import peer_rows
from benchmarks import update_step
from benchmarks import variable_sets


def test_resnet50_set_has_resnet50_shapes():
  # He et al. 2016, 50-layer: 53 convs (1 stem + 16 blocks x 3 + 4
  # shortcuts), each with BN gamma/beta, plus fc: 53 * 3 + 2 = 161 variables.
  specs = variable_sets.Specs('resnet50')
  assert len(specs) == 161
  # Trainable parameters of ResNet-50 v1.5 without conv biases.
  assert variable_sets.NumParams(specs) == 25557032
  assert specs[0].shape == (7, 7, 3, 64)
  assert specs[-2].shape == (2048, 1000)


def test_small_set_is_20_variables_1m_params():
  specs = variable_sets.Specs('small')
  assert len(specs) == 20
  assert variable_sets.NumParams(specs) == 10 * (320 * 320 + 320)


def test_unknown_set_names_the_set():
  with pytest.raises(ValueError, match=r"'resnet'.*resnet50"):
    variable_sets.Specs('resnet')


def test_unknown_optimizer_names_it():
  with pytest.raises(ValueError, match=r"'lamb'"):
    peer_rows.UpdateConfig('lamb')


def test_bandwidth_bad_threads_names_the_argument():
  with pytest.raises(ValueError, match='threads=0'):
    bandwidth.MeasureBandwidth(threads=0)


def test_limit_of_the_issue_example():
  # Issue 8: 25.6 M params x 20 B / 35 GB/s = 14.6 ms.
  limit = bandwidth.LimitSeconds(25.6e6, bandwidth.BYTES_PER_PARAM['momentum'],
                                 35.0)
  np.testing.assert_allclose(limit, 25.6e6 * 20 / 35e9)


def test_momentum_reference_by_hand():
  # One variable [1.0], g = [2.0] clipped to norm 1 -> [1.0]; lr 0.1,
  # cosine T=4, alpha=0.1: m0 = 1, m1 = 0.1 + 0.9 * 0.5 * (1 + cos(pi/4)).
  m1 = 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi / 4))
  w = numpy_reference.Momentum([np.array([1.0], np.float32)],
                               [np.array([2.0], np.float32)], steps=2, lr=0.1,
                               total_steps=4, alpha=0.1, momentum=0.9)
  # TF form: v = 1, w -= 0.1 * 1; v = 0.9 + 1, w -= 0.1 * m1 * 1.9.
  np.testing.assert_allclose(w[0], [1.0 - 0.1 - 0.1 * m1 * 1.9], rtol=1e-12)
  wk = numpy_reference.Momentum([np.array([1.0], np.float32)],
                                [np.array([2.0], np.float32)], steps=2,
                                lr=0.1, total_steps=4, alpha=0.1,
                                momentum=0.9, form='keras')
  # Keras form: m = -0.1; w = 0.9; m = -0.09 - 0.1 * m1; w += m.
  np.testing.assert_allclose(wk[0], [0.9 - 0.09 - 0.1 * m1], rtol=1e-12)


def test_reference_check_catches_the_wrong_momentum_form():
  # The check must be able to fail: Keras's Momentum form differs from TF's
  # once the rate changes, which the default 4-step cosine makes it do.
  specs = variable_sets.Specs('small')[:2]
  w, g = variable_sets.MakeValues(specs)
  kw = dict(steps=3, lr=0.1, total_steps=4, alpha=0.1)
  tf_form = numpy_reference.Momentum(w, g, **kw)
  keras_form = numpy_reference.Momentum(w, g, form='keras', **kw)
  err = numpy_reference.MaxRelativeError(w, keras_form, tf_form)
  assert err > 10 * update_step.CHECK_TOLERANCE


def test_bad_steps_flag_is_refused():
  with pytest.raises(SystemExit):
    update_step.ParseArgs(['--steps=0'])


@pytest.mark.parametrize('flag, value', [
    ('--optimizers', 'lion,adamm'), ('--sets', 'smal'), ('--rows', 'lerner'),
    ('--sets', ',')])
def test_unknown_names_are_refused_in_one_line_before_any_work(
    flag, value, capsys):
  # Checked in ParseArgs, before the bandwidth probe and any file: the
  # message names the flag, the value and the names to choose from.
  with pytest.raises(SystemExit) as e:
    update_step.ParseArgs(['%s=%s' % (flag, value)])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert '%s=%s' % (flag, value) in err and 'choose from' in err


def test_quickest_run_every_row_matches_its_numpy_reference(tmp_path):
  out = tmp_path / 'update_step.json'
  payload = update_step.main(['--sets=small', '--steps=3', '--warmup=0',
                              '--output=%s' % out])
  written = json.loads(out.read_text())
  assert written['benchmark'] == 'update_step'
  failures = [n for n in payload['notes'] if 'failed' in n]
  assert not failures, failures
  assert [(r['set'], r['optimizer']) for r in payload['results']] == [
      ('small', 'momentum'), ('small', 'adam')]
  for res in payload['results']:
    rows = res['rows']
    for name in ('learner', 'learner_fallback', 'learner_jit',
                 'learner_jit_metrics', 'learner_loop', 'tf_fused', 'keras'):
      assert name in rows, (res['optimizer'], sorted(rows))
    for name, r in rows.items():
      assert r['check_ok'], (res['optimizer'], name, r['max_rel_err'])
      assert r['steps'] == 3
      assert r['steps_per_call'] == (update_step.LOOP_STEPS
                                     if name.endswith('_loop') else 1)


def test_loop_row_runs_its_steps_as_the_per_call_row_bit_for_bit():
  # One call of the looping row is steps_per_call steps of the plain row:
  # the same weights, bit for bit, and the same counters.
  specs = variable_sets.Specs('small')[:3]
  weights, grads = variable_sets.MakeValues(specs)
  cfg = peer_rows.UpdateConfig('momentum', total_steps=10)
  plain = learner_row.LearnerRow(cfg, specs, weights, grads)
  loop = learner_row.LearnerRow(cfg, specs, weights, grads, steps_per_call=4)
  for _ in range(4):
    plain.step()
  out = loop.step()
  assert float(out['num_updates']) == 4.0
  for a, b in zip(plain.Weights(), loop.Weights()):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match='steps_per_call=0'):
    learner_row.LearnerRow(cfg, specs, weights, grads, steps_per_call=0)


def test_fixed_gradients_loss_gives_each_variable_its_gradient_variable():
  # The harness's loss is 0 and its gradient w.r.t. variable i is the value
  # of gradient variable i (here [1, 2] and [[3]]), read when the step runs.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  xs = [tf.Variable([5.0, 6.0]), tf.Variable([[7.0]])]
  gs = [tf.Variable([1.0, 2.0]), tf.Variable([[3.0]])]

  @tf.function
  def Grads():
    loss = learner_row.FixedGradientsLoss(xs, gs)
    return loss, tf.gradients(loss, xs)

  loss, (g0, g1) = Grads()
  assert float(loss) == 0.0
  np.testing.assert_array_equal(g0.numpy(), [1.0, 2.0])
  np.testing.assert_array_equal(g1.numpy(), [[3.0]])
  gs[1].assign([[4.0]])
  np.testing.assert_array_equal(Grads()[1][1].numpy(), [[4.0]])
  with pytest.raises(ValueError, match='2 variables but 1 gradient'):
    learner_row.FixedGradientsLoss(xs, gs[:1])


def test_folded_clip_prototype_matches_momentum_when_the_clip_scale_changes():
  # tf_fused_folded stores u = v / c_t; with momentum' = a*c_{t-1}/c_t and
  # lr' = lr*c_t its weights must equal v = a*v + c_t*g, w -= lr_t*v, also
  # when c_t changes (gradient norms 0.5, ~300 and ~3: c = 1, 1/300, 1/3).
  specs = variable_sets.Specs('small')[:2]
  w0, g0 = variable_sets.MakeValues(specs)
  cfg = peer_rows.UpdateConfig('momentum')
  row = peer_rows.TfFusedRow(cfg, w0, g0, fold_clip=True)
  norm0 = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in g0))
  scales = [0.5 / norm0, 1.0, 0.01]
  w = [x.astype(np.float64) for x in w0]
  v = [np.zeros_like(x) for x in w]
  for t, s in enumerate(scales):
    for gv, g in zip(row.grads, g0):
      gv.assign(g * np.float32(s))
    row.step()
    c = min(1.0, 1.0 / (norm0 * s))
    lr_t = cfg.lr * numpy_reference.CosineMultiplier(t, cfg.total_steps,
                                                     cfg.alpha)
    for i, g in enumerate(g0):
      v[i] = cfg.momentum * v[i] + c * s * g.astype(np.float64)
      w[i] -= lr_t * v[i]
  err = numpy_reference.MaxRelativeError(w0, row.Weights(), w)
  assert err < 1e-4, err


def test_folded_clip_prototype_refuses_adam():
  cfg = peer_rows.UpdateConfig('adam')
  with pytest.raises(ValueError, match="'adam'"):
    peer_rows.TfFusedRow(cfg, [np.zeros(2, np.float32)],
                         [np.zeros(2, np.float32)], fold_clip=True)


def test_fused_targets_are_ratios_of_the_named_rows():
  res = dict(set='resnet50', optimizer='momentum', limit_s=2.0,
             rows={'learner': {'median_s': 2.4},
                   'learner_fallback': {'median_s': 4.8},
                   'optax_jit': {'median_s': 3.0}})
  got = {t: (round(v, 6), ok) for t, v, ok in update_step.FusedTargets(res)}
  # 2.4 / 2.0 = 1.2 <= 1.3; 2.4 / 3.0 = 0.8 <= 0.85; 2.4 / 4.8 = 0.5.
  assert got == {
      'resnet50 momentum learner / limit <= 1.30 (issue 16)': (1.2, True),
      'resnet50 momentum learner / optax_jit <= 0.85 (issue 16)': (0.8, True),
      'resnet50 momentum learner / learner_fallback < 1': (0.5, True)}


def test_rule_optimizers_run_learner_rows_equal_to_the_pure_tf_path(tmp_path):
  # The fused rules (multi_tensor_rules.cc): only the learner rows, each
  # checked against a fresh pure-TF learner (bit-identical: err 0).
  payload = update_step.main([
      '--sets=small', '--optimizers=lion,sf_adamw', '--steps=1',
      '--warmup=0', '--rows=learner,learner_fallback',
      '--output=%s' % (tmp_path / 'u.json')])
  assert [(r['optimizer'], sorted(r['rows'])) for r in payload['results']] == [
      ('lion', ['learner', 'learner_fallback']),
      ('sf_adamw', ['learner', 'learner_fallback'])]
  for res in payload['results']:
    assert res['bytes_per_param'] == {'lion': 20, 'sf_adamw': 36}[
        res['optimizer']]
    for row in res['rows'].values():
      assert row['max_rel_err'] == 0.0 and row['check_ok']



@pytest.mark.slow
def test_isolated_set_runs_each_rule_in_a_child(tmp_path, monkeypatch):
  # A set in ISOLATED_SETS runs each (set, rule) in a child process; its
  # result comes back as the in-process one would (the check's error 0 as
  # in the test above, numbers as floats), and a child that prints no
  # result leaves a note naming the pair and the run goes on.
  monkeypatch.setattr(update_step, 'ISOLATED_SETS', ('small',))
  flags = ['--sets=small', '--optimizers=lion', '--steps=1', '--warmup=0',
           '--rows=learner']
  payload = update_step.main(flags + ['--output=%s' % (tmp_path / 'u.json')])
  [res] = payload['results']
  assert res['optimizer'] == 'lion' and res['bytes_per_param'] == 20
  row = res['rows']['learner']
  assert row['max_rel_err'] == 0.0 and row['check_ok']
  assert isinstance(row['median_s'], float) and row['median_s'] > 0
  with open(tmp_path / 'u.json') as f:
    assert [r['optimizer'] for r in json.load(f)['results']] == ['lion']
  # A child that prints no result (here: it refuses its flags).
  notes = []
  assert update_step._RunInChild(  # pylint: disable=protected-access
      'small', 'no_such_rule', update_step.ParseArgs(flags), notes) is None
  assert notes[0].startswith('small/no_such_rule: child exited 2')


def test_issue39_rules_with_kernels_run_the_fallback_row(tmp_path):
  # Issue 40's kernels (AdEMAMix, simplified AdEMAMix, COCOB, MADGRAD):
  # `learner` fused, `learner_fallback` the pure-TF path, checked against
  # it: to float32 rounding, as the clip's norm sums in float64 on the
  # fused path (float32 on the other), so the clip scales differ in the
  # last bit; a rule without a kernel (DoG) gets no fallback row.
  payload = update_step.main([
      '--sets=small', '--optimizers=cocob,madgrad,dog', '--steps=1',
      '--warmup=0', '--rows=learner,learner_fallback',
      '--output=%s' % (tmp_path / 'u.json')])
  rows = {r['optimizer']: r['rows'] for r in payload['results']}
  assert sorted(rows['cocob']) == ['learner', 'learner_fallback']
  assert sorted(rows['madgrad']) == ['learner', 'learner_fallback']
  assert sorted(rows['dog']) == ['learner']
  # The error is of the weight change: an ulp of the weights (~1e-7) is
  # ~2e-5 of MADGRAD's first steps here (measured 2.0e-5 with its former
  # pow; its cube root is now one formula on both paths; COCOB 6.0e-7).
  assert rows['cocob']['learner']['max_rel_err'] < 1e-4
  assert rows['madgrad']['learner']['max_rel_err'] < 1e-4
  assert rows['cocob']['learner_fallback']['max_rel_err'] == 0.0
  for rs in rows.values():
    assert all(r['check_ok'] for r in rs.values())

def test_issue40_targets_are_ratios_of_the_named_rows():
  # Muon's trainer's form against optax's loop; a newer elementwise rule
  # against Adam's rows of the same run; small Momentum in the loop form.
  results = [
      dict(set='resnet50', optimizer='muon',
           rows={'learner_loop': {'median_s': 3.0},
                 'optax_jit_loop': {'median_s': 2.0}}),
      dict(set='resnet50', optimizer='cocob',
           rows={'learner': {'median_s': 1.2},
                 'adam_learner': {'median_s': 1.0},
                 'learner_jit': {'median_s': 2.6},
                 'adam_learner_jit': {'median_s': 2.0}}),
      # SOAP is not elementwise: no target line.
      dict(set='resnet50', optimizer='soap',
           rows={'learner': {'median_s': 9.0},
                 'adam_learner': {'median_s': 1.0}}),
      dict(set='small', optimizer='momentum', limit_s=1.0,
           rows={'learner_loop': {'median_s': 0.9},
                 'optax_jit_loop': {'median_s': 1.0},
                 'learner': {'median_s': 5.0},
                 'tf_fused': {'median_s': 1.0},
                 'optax_jit': {'median_s': 1.0}}),
  ]
  got = [(t, round(v, 6), ok) for t, v, ok in update_step.Targets(results)]
  assert got == [
      ('resnet50 muon two-learner step, trainer\'s form / optax muon+adamw '
       '(jit, loop) <= 1.0 (issue 40)', 1.5, False),
      ('resnet50 cocob step / Adam\'s (fused path) <= 1.3 (issue 40)', 1.2,
       True),
      ('resnet50 cocob step / Adam\'s, both under XLA <= 1.2 (issue 40)',
       1.3, False),
      ('small momentum, trainer\'s form / optax (jit, loop) <= 1.0 (issue '
       '40)', 0.9, True)]
  # The small set's per-call targets (issues 8, 16) are retired: a 5x
  # per-call learner row gives no line.


def test_optimizer_groups_expand_and_muon_clip_never_fires():
  args = update_step.ParseArgs(['--optimizers=issue40,cocob'])
  assert args.optimizers == 'lion,nadam,amsgrad,sf_adamw,muon,cocob'
  assert update_step.ParseArgs(['--optimizers=issue39']).optimizers == (
      ','.join(peer_rows.NEW_RULES))
  # The resnet50 set's gradient norm is ~sqrt(25.6e6) = 5e3 < 1e6.
  assert peer_rows.UpdateConfig('muon').clip == 1e6
  assert peer_rows.UpdateConfig('dog').lr == 1.0


@pytest.mark.slow
def test_muon_peers_match_our_two_learners_in_their_variant():
  # Each peer against our Muon + AdamW learners with its numbers (err
  # small), and against another variant's (err large: the check can fail).
  pytest.importorskip('optax')
  torch = pytest.importorskip('torch')
  del torch
  from benchmarks import rule_peers  # pylint: disable=g-import-not-at-top
  specs = variable_sets.Specs('small')[:2] + [
      variable_sets.VariableSpec('conv/w', (3, 3, 4, 8))]
  w, g = variable_sets.MakeValues(specs)
  cfg = peer_rows.UpdateConfig('muon')
  refs = {}
  for form in ('optax', 'keras', 'torch'):
    ref = learner_row.LearnerRow(cfg, specs, w, g, fused=False, variant=form)
    for _ in range(2):
      ref.step()
    refs[form] = ref.Weights()
  for row, bound, other in (
      (rule_peers.OptaxRuleRow(cfg, w, g), 1e-4, 'keras'),
      (rule_peers.KerasRuleRow(cfg, w, g), 1e-4, 'torch'),
      # torch runs Newton-Schulz in bfloat16.
      (rule_peers.TorchRuleRow(cfg, w, g), 3e-2, 'keras')):
    for _ in range(2):
      row.step()
    got = row.Weights()
    assert [x.shape for x in got] == [x.shape for x in w]
    err = numpy_reference.MaxRelativeError(w, got, refs[row.reference_form])
    assert err < bound, (row.name, err)
    assert numpy_reference.MaxRelativeError(w, got, refs[other]) > 0.1


@pytest.mark.slow
def test_rule_rows_run_with_adams_rows_and_their_peers(tmp_path):
  # Issue 39's rules get Adam's row, the peered rules their peers too (the
  # Muon peers: the test above; rows limited to keep this lean).
  payload = update_step.main([
      '--sets=small', '--optimizers=cocob,nadam', '--steps=1',
      '--warmup=0', '--rows=learner,adam_learner,keras',
      '--output=%s' % (tmp_path / 'u.json')])
  assert not [n for n in payload['notes'] if 'failed' in n], payload['notes']
  rows = {r['optimizer']: r['rows'] for r in payload['results']}
  assert sorted(rows['cocob']) == ['adam_learner', 'learner']
  assert sorted(rows['nadam']) == ['adam_learner', 'keras', 'learner']
  for opt, rs in rows.items():
    for name, r in rs.items():
      if opt == 'nadam' and name == 'keras':
        # Keras's Nadam is Dozat's: timed, shown as 'form', not checked.
        assert r['check_ok'] is None and 'Dozat' in r['form_note']
        assert r['max_rel_err'] > update_step.CHECK_TOLERANCE
      else:
        assert r['check_ok'], (opt, name, r['max_rel_err'])


def test_normuon_row_is_two_learners_checked_against_the_pure_tf_path():
  # Issue 39's leftover: NorMuon on the matrices (a conv kernel flattened),
  # AdamW on the bias; its XLA row is checked against a fresh pure-TF
  # learner over the checked steps, and that check fails on Muon's numbers.
  specs = variable_sets.Specs('small')[:2] + [
      variable_sets.VariableSpec('conv/w', (3, 3, 4, 8))]
  w, g = variable_sets.MakeValues(specs)
  cfg = peer_rows.UpdateConfig('normuon')
  assert (cfg.lr, cfg.clip) == (0.02, 1e6)
  row = learner_row.LearnerRow(cfg, specs, w, g, jit_compile=True)
  assert [type(l.optimizer).__name__ for l in row.learners] == [
      'NorMuon', 'AdamW']
  for _ in range(update_step.CHECK_STEPS):
    row.step()
  ref = update_step.Reference(cfg, specs, w, g, 'learner')
  err = numpy_reference.MaxRelativeError(w, row.Weights(), ref)
  assert err < 1e-4
  muon = update_step.Reference(peer_rows.UpdateConfig('muon'), specs, w, g,
                               'optax')
  assert numpy_reference.MaxRelativeError(w, row.Weights(), muon) > 0.1


def _MomentumSmallLoop(learner_loop_s):
  # Issue 40's small Momentum target: learner_loop / optax_jit_loop <= 1.0.
  return dict(set='small', optimizer='momentum', limit_s=1.0,
              rows={'learner_loop': {'median_s': learner_loop_s},
                    'optax_jit_loop': {'median_s': 1.0}})


def test_targets_are_not_judged_below_100_timed_steps():
  # --quick times 20 steps: the ratio is printed, not judged (as the
  # trainer's below 100 steady steps); from 100 on, met / MISSED.
  results = [_MomentumSmallLoop(0.9)]
  assert update_step.MIN_JUDGED_STEPS == 100
  [quick] = update_step.JudgedTargets(results, steps=20)
  assert (quick['value'], quick['met']) == (0.9, None)
  assert update_step.TargetLine(quick).endswith(
      ' 0.90  not judged (20 timed steps < 100)')
  [full] = update_step.JudgedTargets(results, steps=100)
  assert (full['met'], full['not_judged']) == (True, None)
  assert update_step.TargetLine(full).endswith(' 0.90  met')
  [missed] = update_step.JudgedTargets([_MomentumSmallLoop(1.1)], steps=100)
  assert update_step.TargetLine(missed).endswith(' 1.10  MISSED')


def test_small_set_muon_says_its_target_is_resnet50s():
  # Muon's issue 40 target is resnet50's: a small-set run says so instead
  # of printing no line; with resnet50 in the run its own line stands.
  small = dict(set='small', optimizer='muon',
               rows={'learner_loop': {'median_s': 3.0},
                     'optax_jit_loop': {'median_s': 2.0}})
  [t] = update_step.JudgedTargets([small], steps=100)
  assert t['target'].startswith('resnet50 muon two-learner step')
  assert (t['value'], t['met']) == (None, None)
  assert update_step.TargetLine(t).endswith(
      '(issue 40)      -  not judged (judged on resnet50 only; this run: '
      'small)')
  big = dict(small, set='resnet50')
  assert [(x['target'].split()[0], x['value'], x['met']) for x in
          update_step.JudgedTargets([small, big], steps=100)] == [
              ('resnet50', 1.5, False)]


def test_per_call_rows_compare_with_per_call_peers_only():
  # The looping peer (0.4 ms per step) is faster than every per-call peer
  # (fastest optax_jit, 1.6), but is no peer of `learner`: 1.0 / 1.6;
  # `learner_loop` against it: 0.5 / 0.4.
  row = lambda ms, k=1: dict(median_s=ms / 1e3, steps_per_call=k)
  result = dict(rows={'learner': row(1.0), 'learner_loop': row(0.5, 10),
                      'tf_fused': row(2.0), 'optax_jit': row(1.6),
                      'optax_jit_loop': row(0.4, 10),
                      'tf_fused_folded': row(0.1)})  # No peer.
  update_step.AddPeerRatios(result)
  ratios = {k: round(r['ratio_to_best_peer'], 6)
            for k, r in result['rows'].items()}
  assert ratios == {'learner': 0.625, 'learner_loop': 1.25, 'tf_fused': 1.25,
                    'optax_jit': 1.0, 'optax_jit_loop': 1.0,
                    'tf_fused_folded': 0.0625}
  # Without a looping peer a looping row has no ratio.
  del result['rows']['optax_jit_loop']
  update_step.AddPeerRatios(result)
  assert result['rows']['learner_loop']['ratio_to_best_peer'] is None
  assert result['best_peer_s'] == 1.6e-3


def _Result(bytes_per_param, tolerance):
  row = dict(median_s=1e-3, p10_s=1e-3, p90_s=1e-3, ratio_to_limit=None,
             ratio_to_best_peer=1.0, first_call_s=0.1, max_rel_err=1.4e-2,
             check_ok=1.4e-2 <= tolerance, check_tolerance=tolerance,
             form_note=None)
  return dict(set='small', num_variables=20, num_params=1030400,
              optimizer='muon', bytes_per_param=bytes_per_param,
              bandwidth_gbps=9.3, limit_s=None, rows={'torch': row})


def test_table_shows_the_tolerance_each_row_is_checked_against():
  # torch's Muon (Newton-Schulz in bfloat16) is checked to 3e-2, the rest
  # to the header's 2e-3: its err 1.4e-2 is ok, and the row says to what.
  header, _, torch_row = update_step.FormatResult(
      _Result(None, 3e-2)).splitlines()[1:4]
  assert header.split()[-3:] == ['check', '(tol', '2e-3)']
  assert torch_row.split()[-4:] == ['1.4e-02', 'ok', '(tol', '3e-2)']
  plain = update_step.FormatResult(_Result(None, 2e-3)).splitlines()[3]
  assert plain.split()[-2:] == ['1.4e-02', 'FAIL']


def test_title_of_a_rule_without_bytes_model_says_there_is_no_limit():
  title = update_step.FormatResult(_Result(None, 3e-2)).splitlines()[0]
  assert title.endswith('muon + clip 1.0 + cosine; limit: none (no bytes '
                        'model for this rule); bandwidth 9.3 GB/s (numpy '
                        'probe timed with the rows)')
  title = update_step.FormatResult(_Result(20, 3e-2)).splitlines()[0]
  assert title.endswith('; limit = 20 B/param at 9.3 GB/s (numpy probe timed '
                        'with the rows)')


def test_rows_trace_once_and_raise_no_retracing_warning():
  # Five rows of one class, each its own tf.function traced once: TF's
  # retracing warning counted them as one function (they share the code
  # of LearnerRow._Step) and warned; per row it has nothing to say.
  specs = variable_sets.Specs('small')[:2]
  w, g = variable_sets.MakeValues(specs)
  cfg = peer_rows.UpdateConfig('momentum')
  records = []
  handler = logging.Handler()
  handler.emit = records.append
  logger = logging.getLogger('tensorflow')
  logger.addHandler(handler)
  try:
    rows = [learner_row.LearnerRow(cfg, specs, w, g) for _ in range(5)] + [
        learner_row.LearnerRow(cfg, specs, w, g, steps_per_call=2)]
    for _ in range(3):
      for row in rows:
        row.step()
  finally:
    logger.removeHandler(handler)
  retracing = [r.getMessage()[:120] for r in records
               if 'retracing' in r.getMessage()]
  assert not retracing, retracing
  assert [[f.experimental_get_tracing_count() for f in row.functions]
          for row in rows] == [[1]] * 5 + [[1, 1]]
