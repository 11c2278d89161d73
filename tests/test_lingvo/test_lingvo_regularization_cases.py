"""Lingvo 0.14.2's L1/L2 tests (py_utils_test.py), ported.

Sources (tensorflow/lingvo at the commit whose learner.py is the wheel's;
/work/lingvo_report.md §5.4), each cited in its test:
  lingvo/core/py_utils_test.py: testAdjustGradientsWithL2Loss,
    testAdjustGradientsWithL1Loss, testSkipL2Regularization,
    testSkipL1Regularization.
Lingvo runs py_utils.AdjustGradientsWithLpLoss on the gradients as
tf.gradients gives them; here that is gradient_pipeline.Regularize, so each
case is run there (same input, same expected values) and then through the
Learner, where the sparse gradient reaches Regularize with its duplicate
rows already summed (the applied update is the same).

The expected numbers are worked by hand from the setup:
  emb = arange(100) as [10, 10]; w = ones [10, 1]; act = emb[[2, 5, 2, 2,
  5]]; loss = sum(act @ w + b). So d loss / d act = ones [5, 10] (the
  sparse gradient of emb, indices [2, 5, 2, 2, 5]) and d loss / d w[j] =
  sum of act[:, j] = 3 * (20 + j) + 2 * (50 + j) = 160 + 5j.
  sum(emb[2]^2) = 20^2 + ... + 29^2 = 6085; sum(emb[5]^2) = 29785;
  sum(w^2) = sum|w| = 10; sum(emb[2]) = 245; sum(emb[5]) = 545.
Deliberate differences (docs/lingvo.md, "Learner and GradNormTracker"): a
variable in SKIP_LP_REGULARIZATION gets no term even when its gradient is
sparse (Lingvo adds one there), and under XLA a sparse gradient is
densified, so every row gets the term.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import gradient_pipeline as pipeline
from learner import gradient_tape
from learner import learner as learner_lib
from learner.optimizers.base import SGD
from params import AddToCollection
from params import BaseLayer
from params import NestedMap
from params import SKIP_LP_REGULARIZATION
from params import VarCollections

EMB0 = np.arange(100, dtype=np.float32).reshape([10, 10])
IDS = [2, 5, 2, 2, 5]
W_GRAD = 160.0 + 5.0 * np.arange(10, dtype=np.float32)  # d loss / d w.


def _EmbCase():
  emb = tf.Variable(EMB0, name='emb')
  w = tf.Variable(np.ones([10, 1], np.float32), name='w')
  return emb, w


def _EmbGradients(emb, w):
  """The gradients tf.gradients gives: emb sparse with duplicate rows."""
  with tf.GradientTape() as tape:
    act = tf.gather(emb, IDS)
    loss = tf.reduce_sum(tf.matmul(act, w) + tf.stop_gradient(0.217))
  g_emb, g_w = tape.gradient(loss, [emb, w])
  assert isinstance(g_emb, tf.IndexedSlices)
  return g_emb, g_w


@pytest.mark.parametrize('p,weights', [(2, dict(l2_weight=0.1)),
                                       (1, dict(l1_weight=0.1))])
def test_adjust_gradients_with_lp_loss_sparse_rows_only(p, weights):
  """py_utils_test.py testAdjustGradientsWithL2Loss (p=2) and
  testAdjustGradientsWithL1Loss (p=1): the emb gradient stays sparse with
  indices [2, 5, 2, 2, 5]; each row gets 0.1 * w (or sign) / count; the loss
  counts rows 2 and 5 once: 0.5*0.1*(10+6085+29785) = 1794.0 for the L2
  weight, 0.1*(10+245+545) = 80.0 for the L1 weight."""
  emb, w = _EmbCase()
  g_emb, g_w = _EmbGradients(emb, w)
  kw = dict(l1_weight=None, l2_weight=None)
  kw.update(weights)
  (r_emb, r_w), m = pipeline.Regularize([emb, w], [g_emb, g_w],
                                        skip_1d=False, **kw)
  assert isinstance(r_emb, tf.IndexedSlices)
  np.testing.assert_array_equal(r_emb.indices.numpy(), IDS)
  count = np.array([[1 / 3.], [1 / 2.], [1 / 3.], [1 / 3.], [1 / 2.]])
  term = EMB0[IDS] if p == 2 else np.sign(EMB0[IDS])
  np.testing.assert_allclose(r_emb.values.numpy(), 1.0 + 0.1 * count * term,
                             rtol=1e-6)
  # w = 1, so 0.1 * w and 0.1 * sign(w) are both 0.1.
  np.testing.assert_allclose(r_w.numpy()[:, 0], W_GRAD + 0.1, rtol=1e-6)
  if p == 2:
    assert float(m['l2_loss']) == pytest.approx(1794.0, rel=1e-6)
    assert 'l1_loss' not in m
  else:
    assert float(m['l1_loss']) == pytest.approx(80.0, rel=1e-6)
    assert 'l2_loss' not in m


@pytest.mark.parametrize('key,loss_name,loss', [
    ('l2_regularizer_weight', 'l2_loss', 1794.0),
    ('l1_regularizer_weight', 'l1_loss', 80.0)])
def test_adjust_gradients_with_lp_loss_through_the_learner(key, loss_name,
                                                           loss):
  """py_utils_test.py testAdjustGradientsWithL2Loss / L1Loss, one SGD step
  at rate 1 through the Learner (under tf.function): rows 2 and 5 of emb
  move by their summed gradient (3 and 2) plus one 0.1 term; the eight
  absent rows do not move; w moves by 160.1 + 5j."""
  emb, w = _EmbCase()
  vmap = NestedMap(emb=emb, w=w)
  lrn = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=1.0, optimizer=SGD.Params(),
      **{key: 0.1}).Instantiate().Bind(vmap)

  @tf.function
  def _Step():
    act = tf.gather(emb, IDS)
    metrics = {'loss': (tf.reduce_sum(tf.matmul(act, w) + 0.217), 1.0)}
    _, _, m = lrn.Apply(metrics, vmap)
    return {k: v for k, (v, _) in m.items()}

  m = _Step()
  assert float(m[loss_name]) == pytest.approx(loss, rel=1e-6)
  term = EMB0 if key.startswith('l2') else np.sign(EMB0)
  want = EMB0.copy()
  want[2] -= 3.0 + 0.1 * term[2]
  want[5] -= 2.0 + 0.1 * term[5]
  np.testing.assert_allclose(emb.numpy(), want, rtol=1e-6)
  np.testing.assert_allclose(w.numpy()[:, 0], 1.0 - (W_GRAD + 0.1),
                             rtol=1e-6)


def _BetaGamma(mark):
  """py_utils_test.py testSkipL*Regularization: beta and gamma =
  arange(10) as [1, 10]; beta is put in SKIP_LP_REGULARIZATION by `mark`."""
  init = np.arange(10, dtype=np.float32).reshape([1, 10])
  if mark == 'collection':
    beta = tf.Variable(init, name='beta')
    AddToCollection(SKIP_LP_REGULARIZATION, beta)
    gamma = tf.Variable(init, name='gamma')
    return beta, gamma
  layer = BaseLayer.Params().Set(name='layer').Instantiate()
  if mark == 'create_variable':
    beta = layer.CreateVariable('beta', [1, 10], init=init,
                                collections=[SKIP_LP_REGULARIZATION])
  else:  # A child layer with skip_lp_regularization=True.
    layer.CreateChild('norm', BaseLayer.Params().Set(
        skip_lp_regularization=True))
    beta = layer.norm.CreateVariable('beta', [1, 10], init=init)
  return beta, layer.CreateVariable('gamma', [1, 10], init=init)


@pytest.mark.parametrize('mark', ['collection', 'create_variable',
                                  'layer_param'])
@pytest.mark.parametrize('p', [2, 1])
def test_skip_lp_regularization(mark, p):
  """py_utils_test.py testSkipL2Regularization (p=2) and
  testSkipL1Regularization (p=1): loss = sum(act * gamma + beta), act =
  arange(10); the gradients are gamma: arange(10), beta: ones. beta is
  skipped: its gradient is unchanged and it is not in the loss:
  l2_loss = 0.5*0.1*sum(arange(10)^2) = 14.25, l1_loss = 0.1*45 = 4.5;
  gamma's gradient gets 0.1*gamma (p=2) or 0.1*sign(gamma) (p=1)."""
  beta, gamma = _BetaGamma(mark)
  assert SKIP_LP_REGULARIZATION in VarCollections(beta)
  assert SKIP_LP_REGULARIZATION not in VarCollections(gamma)
  act = np.arange(10, dtype=np.float32).reshape([1, 10])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(act * gamma + beta)
  g_beta, g_gamma = tape.gradient(loss, [beta, gamma])
  kw = dict(l2_weight=0.1, l1_weight=None) if p == 2 else dict(
      l1_weight=0.1, l2_weight=None)
  (r_beta, r_gamma), m = pipeline.Regularize([beta, gamma],
                                             [g_beta, g_gamma],
                                             skip_1d=False, **kw)
  np.testing.assert_array_equal(r_beta.numpy(), np.ones([1, 10]))
  term = act if p == 2 else np.sign(act)
  np.testing.assert_allclose(r_gamma.numpy(), act + 0.1 * term, rtol=1e-6)
  if p == 2:
    assert float(m['l2_loss']) == pytest.approx(14.25, rel=1e-6)
  else:
    assert float(m['l1_loss']) == pytest.approx(4.5, rel=1e-6)
  # The variables are not changed by the regularizer.
  np.testing.assert_array_equal(beta.numpy(), act)
  np.testing.assert_array_equal(gamma.numpy(), act)


def test_skip_lp_regularization_through_the_learner():
  """py_utils_test.py testSkipL2Regularization, one SGD step at rate 1:
  beta moves by its gradient (1) only, gamma by 1.1 * arange(10); the
  learner reports l2_loss 14.25."""
  beta, gamma = _BetaGamma('layer_param')
  act = np.arange(10, dtype=np.float32).reshape([1, 10])
  vmap = NestedMap(beta=beta, gamma=gamma)
  lrn = learner_lib.Learner.Params().Set(
      name='loss', learning_rate=1.0, optimizer=SGD.Params(),
      l2_regularizer_weight=0.1).Instantiate().Bind(vmap)
  with gradient_tape.GradientTape():
    metrics = {'loss': (tf.reduce_sum(act * gamma + beta), 1.0)}
    _, _, m = lrn.Apply(metrics, vmap)
  assert float(m['l2_loss'][0]) == pytest.approx(14.25, rel=1e-6)
  np.testing.assert_allclose(beta.numpy(), act - 1.0, rtol=1e-6)
  # gamma - 1.1 * gamma = -0.1 * arange(10).
  np.testing.assert_allclose(gamma.numpy(), -0.1 * np.arange(10.)[None],
                             rtol=1e-6)


def test_skip_lp_regularization_param_is_inherited_and_lingvos_default():
  """base_layer.py: skip_lp_regularization defaults to None and a child
  left at None takes its parent's (CopyBaseParams)."""
  assert BaseLayer.Params().skip_lp_regularization is None
  parent = BaseLayer.Params().Set(name='p', skip_lp_regularization=True)
  parent = parent.Instantiate()
  parent.CreateChild('c', BaseLayer.Params())
  parent.CreateChild('d', BaseLayer.Params().Set(
      skip_lp_regularization=False))
  assert parent.c.params.skip_lp_regularization is True
  assert parent.d.params.skip_lp_regularization is False
  v = parent.d.CreateVariable('v', [2])
  assert VarCollections(v) == ()


def test_skipped_sparse_gradient_gets_no_term():
  """Deliberate difference: Lingvo (py_utils.py AdjustGradientsWithLpLoss)
  leaves a skipped variable out of the loss but still adds 0.1 * w / count
  to its sparse gradient; ours leaves that gradient unchanged and l2_loss
  is 0."""
  emb, w = _EmbCase()
  AddToCollection(SKIP_LP_REGULARIZATION, emb)
  g_emb, g_w = _EmbGradients(emb, w)
  (r_emb, _), m = pipeline.Regularize([emb, w], [g_emb, g_w], None, 0.1,
                                      False)
  np.testing.assert_array_equal(r_emb.values.numpy(), np.ones([5, 10]))
  assert float(m['l2_loss']) == pytest.approx(0.5 * 0.1 * 10.0, rel=1e-6)


def test_sparse_gradient_under_xla_is_regularized_densely():
  """Deliberate difference: under jit_compile the sparse gradient is
  densified (tf.unique does not compile), so every row of emb gets 0.1 *
  emb and the loss counts all of emb: 0.5 * 0.1 * sum(arange(100)^2) =
  16417.5."""
  emb, w = _EmbCase()
  g_emb, _ = _EmbGradients(emb, w)

  @tf.function(jit_compile=True)
  def _Run(values):
    g = tf.IndexedSlices(values, tf.constant(IDS), tf.constant([10, 10]))
    (r,), m = pipeline.Regularize([emb], [g], None, 0.1, False)
    return r, m['l2_loss']

  r, loss = _Run(g_emb.values)
  dense = np.zeros([10, 10], np.float32)
  dense[2], dense[5] = 3.0, 2.0
  np.testing.assert_allclose(r.numpy(), dense + 0.1 * EMB0, rtol=1e-6)
  assert float(loss) == pytest.approx(16417.5, rel=1e-6)


def test_add_to_collection_refuses_a_non_string_name():
  with pytest.raises(TypeError, match='SKIP_LP_REGULARIZATION'):
    AddToCollection(None, tf.Variable(1.0))


def test_sparse_gradient_under_replicas_is_regularized_densely():
  """Deliberate difference: with several replicas the all-reduce of a
  sparse gradient is dense (learner/cross_replica.py), so L1/L2 sees a
  dense gradient and every row of emb gets 0.1 * emb, as under XLA. Two
  replicas with the testAdjustGradientsWithL2Loss batch each, SGD at rate
  1: rows 2 and 5 move by 3 and 2 plus 0.1 * emb, every other row by 0.1 *
  emb; l2_loss is over all of emb and w: 0.5 * 0.1 * (328350 + 10) =
  16418.0."""
  from learner.training.cluster import distribution  # pylint: disable=g-import-not-at-top
  strategy = distribution.CreateStrategy('mirrored')
  if strategy.num_replicas_in_sync < 2:
    pytest.skip('needs two logical devices (tests/conftest.py)')
  with strategy.scope():
    emb, w = _EmbCase()
    vmap = NestedMap(emb=emb, w=w)
    lrn = learner_lib.Learner.Params().Set(
        name='loss', learning_rate=1.0, optimizer=SGD.Params(),
        l2_regularizer_weight=0.1).Instantiate().Bind(vmap)

  @tf.function
  def _Step():
    def _Replica():
      act = tf.gather(emb, IDS)
      metrics = {'loss': (tf.reduce_sum(tf.matmul(act, w)), 1.0)}
      _, _, m = lrn.Apply(metrics, vmap)
      return m['l2_loss'][0]
    return strategy.experimental_local_results(strategy.run(_Replica))

  losses = _Step()
  for loss in losses:
    assert float(loss) == pytest.approx(16418.0, rel=1e-6)
  want = EMB0 - 0.1 * EMB0
  want[2] -= 3.0
  want[5] -= 2.0
  np.testing.assert_allclose(emb.numpy(), want, rtol=1e-6)
  np.testing.assert_allclose(w.numpy()[:, 0], 1.0 - (W_GRAD + 0.1),
                             rtol=1e-6)


def test_sparse_gradient_of_a_rank_3_variable():
  """Extension (docs/lingvo.md): Lingvo asserts rank 2; the same rule for
  a [4, 2, 3] variable gathered at [1, 1, 3]: slices 1 (twice) and 3 get
  0.1 * w / count, i.e. 0.05 * w[1] each and 0.1 * w[3]; l2_loss =
  0.5 * 0.1 * (sum(w[1]^2) + sum(w[3]^2)) with w = arange(24):
  sum(6..11 squared) = 451, sum(18..23 squared) = 2539 -> 149.5."""
  w0 = np.arange(24, dtype=np.float32).reshape([4, 2, 3])
  v = tf.Variable(w0, name='v3')
  g = tf.IndexedSlices(tf.ones([3, 2, 3]), tf.constant([1, 1, 3]),
                       tf.constant([4, 2, 3]))
  (r,), m = pipeline.Regularize([v], [g], None, 0.1, False)
  np.testing.assert_array_equal(r.indices.numpy(), [1, 1, 3])
  want = 1.0 + np.stack([0.05 * w0[1], 0.05 * w0[1], 0.1 * w0[3]])
  np.testing.assert_allclose(r.values.numpy(), want, rtol=1e-6)
  assert float(m['l2_loss']) == pytest.approx(149.5, rel=1e-6)
