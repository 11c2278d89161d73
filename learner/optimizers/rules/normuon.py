"""NorMuon: Muon with a per-neuron second moment after orthogonalisation.

  m <- beta m + (1 - beta) g;  u = beta m + (1 - beta) g (nesterov) or m
  O = NS(u as a [fan_in, fan_out] matrix)           (Muon's Newton-Schulz)
  v <- beta2 v + (1 - beta2) mean_rows(O * O)        (v: [fan_out], a neuron's
                                                      mean square over fan_in)
  N = O / (sqrt(v) + eps)                            (each output column)
  update_scale 'preserve_norm':  w <- w - lr * s * N * ||O||_F / (||N||_F + eps)
  update_scale 'match_rms':      w <- w - lr * N * rms_rate sqrt(fan_in fan_out)
                                          / (||N||_F + eps)
  s = sqrt(max(1, fan_out / fan_in)) ('width') or rms_rate sqrt(max(fan_in,
  fan_out)) ('moonlight'), as Muon's.

Source: Z. Li et al., "NorMuon: Making Muon more efficient and scalable"
(arXiv:2510.05491), Algorithm 1; the numbers are pytorch-optimizer 4.1.0's
`NorMuon` (pytorch_optimizer/optimizer/muon/normuon.py, "as the official
code": preserve_norm by default), recorded by tools/record_torch_normuon.py.
"""

import math

import tensorflow as tf

from learner.optimizers.rules import muon
from params import checks

UPDATE_SCALES = ('preserve_norm', 'match_rms')


class NorMuon(muon.Muon):
  """NorMuon: Muon's orthogonalised momentum, normalised per output neuron.

  After Newton-Schulz, O [fan_in, fan_out] (a conv kernel flattened as
  Muon's `MatrixShape`) is divided column by column (a column is one output
  neuron: torch's row of its [out, in] weight) by the square root of v, an
  EMA of that neuron's mean O^2, then rescaled: to O's Frobenius norm times
  Muon's shape factor ('preserve_norm', the official code's) or to an RMS
  of `rms_rate` ('match_rms', the paper's Algorithm 1). The rest is Muon's
  (momentum, ns_coeffs incl. 'polar_express', decoupled weight decay w <- w
  - lr * wd * w_old, the refusal of a variable of rank < 2 at Bind: give
  vectors to AdamW, e.g. with `TwoLearners`; pytorch-optimizer with
  use_muon=True would view a vector [n] as n one-element rows, i.e. divide
  each element by its own RMS).

  Defaults are pytorch-optimizer's: momentum_form 'reference' (K. Jordan's
  m.lerp_(g, 1 - beta), no bias correction), beta 0.95, beta2 0.95,
  row_epsilon 1e-10, 'preserve_norm', rate_scaling 'width' (its use_adjusted_lr=False).
  The reference runs Newton-Schulz in bfloat16 (and clamps the norm at
  1e-7 where we add epsilon 1e-8); it is recorded with the iteration in the
  variable's dtype. Slots: 'm' (the variable's shape), 'v' ([fan_out]),
  zeros.

  Raises:
    ValueError: at construction, Muon's refusals, beta2 outside [0, 1),
      row_epsilon < 0 or an unknown update_scale (one line naming the key,
      the value and the fix); at `Bind`, a variable of rank < 2.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.momentum_form = 'reference'
    p.Define('beta2', 0.95, 'Decay of v, the per-neuron mean square of the '
             'orthogonalised update: v <- beta2 v + (1 - beta2) mean(O^2).')
    p.Define('row_epsilon', 1e-10, 'Added to sqrt(v) and to ||N||_F '
             '(pytorch-optimizer\'s eps).')
    p.Define('update_scale', 'preserve_norm', 'preserve_norm: N rescaled to '
             '||O||_F, times Muon\'s rate_scaling (official code); match_rms: '
             'N rescaled to RMS rms_rate (Algorithm 1; no rate_scaling).')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs.update(
        beta2=checks.Real(0, 1, high_open=True, example=0.95,
                          why='beta2 = 1 never lets a square in'),
        row_epsilon=checks.Real(0, example=1e-10))
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.update_scale not in UPDATE_SCALES:
      raise ValueError(
          '%s: update_scale=%r is not one of %s; set update_scale to one of '
          'them (default %r).' % (checks.Where(self), p.update_scale,
                                  list(UPDATE_SCALES), UPDATE_SCALES[0]))

  def _CreateSlots(self, var):
    fan_out = muon.MatrixShape(var.shape.as_list())[1]
    return {'m': None, 'v': tf.zeros([fan_out], var.dtype)}

  def _Scalars(self, update, dtype):
    """Muon's scalars and beta2, 1 - beta2, eps (constants of `dtype`)."""
    s = super()._Scalars(update, dtype)
    p = self.params
    s.beta2 = tf.constant(p.beta2, dtype)
    s.one_minus_beta2 = tf.constant(1. - p.beta2, dtype)
    s.row_eps = tf.constant(p.row_epsilon, dtype)
    return s

  def _Finish(self, s, o, slots, new_slots):
    """NorMuon's normalisation of o [..., fan_in, fan_out]; v [..., fan_out]."""
    p = self.params
    fan_in, fan_out = o.shape.as_list()[-2:]
    v = s.beta2 * slots['v'] + s.one_minus_beta2 * tf.reduce_mean(
        tf.square(o), axis=-2)
    n = o / (tf.sqrt(v)[..., tf.newaxis, :] + s.row_eps)
    n_norm = tf.norm(n, axis=[-2, -1], keepdims=True) + s.row_eps
    if p.update_scale == 'preserve_norm':
      target = tf.norm(o, axis=[-2, -1], keepdims=True) * tf.constant(
          self._Scale(fan_in, fan_out), o.dtype)
    else:
      target = tf.constant(p.rms_rate * math.sqrt(fan_in * fan_out), o.dtype)
    return s.lr * n * (target / n_norm), dict(new_slots, v=v)
