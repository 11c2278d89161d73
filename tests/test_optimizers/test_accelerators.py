"""Every accelerator gives its rule's `_Step` numbers (issue 37, item 2).

kernels/accelerators.py maps a rule's scalars to a faster kernel (TF's raw
ops, the fused multi-tensor ops); the rule's formula is its `_Step` alone.
Here each entry runs against the same rule with the accelerator taken away
(a subclass that re-defines `_Step` as its parent's: the base then never
uses the parent's kernels, `_AcceleratorOf`), on dense gradients (the raw
op, kernels off; the fused op, kernels on) and on a lazy sparse gradient
(the raw sparse op against `_Step` on the gathered rows). Bit for bit
where the entry says `exact`, else to float32 rounding (the raw ops
associate the sums in their own order, e.g. Eigen's m += (g - m)(1 - b1)).
"""

import numpy as np
import pytest
import tensorflow as tf

from learner.optimizers import kernels
from learner.optimizers import rules
from learner.optimizers.kernels import accelerators
from learner.optimizers.var_grad import VarGrad
from params import NestedMap

# The class that names each entry (its owner), from the one rule table.
OWNERS = {r.cls.ACCELERATOR: r.cls for r in rules.RULES
          if 'ACCELERATOR' in vars(r.cls) and r.cls.ACCELERATOR}
# Variants whose scalars take another branch of the same entry.
VARIANTS = {'momentum': [{}, {'use_nesterov': True}],
            'rmsprop': [{}, {'centered': True}]}


def _Pure(cls):
  """`cls` without its accelerator: the same `_Step`, re-defined below."""

  class Pure(cls):

    def _Step(self, s, w, g, slots):
      return super()._Step(s, w, g, slots)

  return Pure


def _Run(cls, kw, sparse=False, scale=None):
  """Three updates of a [4, 3] variable; returns (w, slots) as numpy."""
  p = cls.Params().Set(name='opt', **kw)
  if sparse:
    p.lazy_sparse_updates = True
  opt = p.Instantiate()
  rng = np.random.RandomState(3)
  w = tf.Variable(rng.normal(size=[4, 3]).astype(np.float32))
  opt.Bind([w])
  for _ in range(3):
    g = rng.normal(size=[4, 3]).astype(np.float32)
    if sparse:
      grad = tf.IndexedSlices(tf.constant(g[[0, 2]]), tf.constant([0, 2]),
                              tf.constant([4, 3]))
    else:
      grad = tf.constant(g)
    vgs = NestedMap(w=VarGrad(w, grad))
    if scale is None:
      opt.Apply(tf.constant(0.05), vgs)
    else:
      opt.ApplyScaled(tf.constant(0.05), vgs, tf.constant(scale))
  slots = {k: v.numpy() for k, v in opt.GetSlots(w).items()}
  return w.numpy(), slots


def _Compare(entry, got, want):
  (w1, s1), (w0, s0) = got, want
  init = np.random.RandomState(3).normal(size=[4, 3]).astype(np.float32)
  assert not np.allclose(w0, init)  # The updates moved the weights.
  if entry.exact:
    np.testing.assert_array_equal(w1, w0)
  else:
    np.testing.assert_allclose(w1, w0, rtol=2e-6, atol=1e-7)
  assert sorted(s1) == sorted(s0)
  for k in s0:
    if entry.exact:
      np.testing.assert_array_equal(s1[k], s0[k])
    else:
      np.testing.assert_allclose(s1[k], s0[k], rtol=2e-6, atol=1e-7)


def _Cases(kind):
  return [(name, kw) for name in sorted(accelerators.ACCELERATORS)
          if getattr(accelerators.ACCELERATORS[name], kind) is not None
          for kw in VARIANTS.get(name, [{}])]


def test_every_entry_belongs_to_a_registered_rule():
  assert sorted(OWNERS) == sorted(accelerators.ACCELERATORS)
  for name, cls in OWNERS.items():
    # An accelerator runs elementwise kernels; a whole-tensor rule only as
    # stages around its own middle (Muon's Newton-Schulz).
    staged = isinstance(accelerators.ACCELERATORS[name].multi,
                        accelerators.Staged)
    assert cls.ELEMENTWISE or (cls.WHOLE_TENSOR and staged), name


@pytest.mark.parametrize('name, kw', _Cases('dense'))
@pytest.mark.parametrize('scale', [None, 0.5])
def test_dense_entry_is_the_step(name, kw, scale, monkeypatch):
  monkeypatch.setenv('TF_LEARNER_FUSED_KERNELS', '0')  # The raw op runs.
  entry, cls = accelerators.ACCELERATORS[name], OWNERS[name]
  _Compare(entry, _Run(cls, kw, scale=scale),
           _Run(_Pure(cls), kw, scale=scale))


@pytest.mark.parametrize('name, kw', _Cases('sparse'))
def test_sparse_entry_is_the_step_on_rows(name, kw):
  entry, cls = accelerators.ACCELERATORS[name], OWNERS[name]
  got, want = _Run(cls, kw, sparse=True), _Run(_Pure(cls), kw, sparse=True)
  _Compare(entry, got, want)
  # Lazy: rows 1 and 3 never had a gradient, so they did not move.
  np.testing.assert_array_equal(got[0][[1, 3]], want[0][[1, 3]])


@pytest.mark.parametrize('name, kw', _Cases('multi'))
@pytest.mark.parametrize('scale', [None, 0.5])
def test_fused_entry_is_the_step(name, kw, scale):
  if kernels.Unavailable():
    pytest.skip(kernels.Unavailable())
  entry, cls = accelerators.ACCELERATORS[name], OWNERS[name]
  opt = cls.Params().Set(name='o', **kw).Instantiate()
  w = tf.Variable(tf.zeros([4, 3]))
  opt.Bind([w])
  assert opt.FusedApplyReason([VarGrad(w, tf.zeros([4, 3]))]) is None
  got = _Run(cls, kw, scale=scale)
  _Compare(entry, got, _Run(_Pure(cls), kw, scale=scale))


def test_a_taken_name_is_refused():
  with pytest.raises(ValueError, match="accelerator 'adam' is registered"):
    accelerators.Register('adam', accelerators.ACCELERATORS['adam'])


def test_lazy_sparse_rules_are_elementwise():
  # The base runs a lazy sparse update as `_Step` on the gathered rows (or
  # the accelerator's sparse op), which is only the rule for elementwise
  # steps: a rule that needs whole tensors must densify.
  for r in rules.RULES:
    if r.cls.SUPPORTS_LAZY_SPARSE:
      assert r.cls.ELEMENTWISE, r.cls.__name__
