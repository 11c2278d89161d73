"""Records optax's adaptive gradient clipping (AGC) for the learner's tests.

Brock, De, Smith & Simonyan, "High-Performance Large-Scale Image Recognition
Without Normalization", ICML 2021, section 4.1: per unit u (a matrix's
column, a conv kernel's output channel, a whole vector),
  g_u <- g_u * (c * max(||w_u||, eps) / ||g_u||)  if ||g_u|| > c * max(||w_u||, eps)
optax.adaptive_grad_clip(c, eps) before optax.sgd and optax.adam, with and
without optax.clip_by_global_norm(1.0) first (tools/optax_reference.py). Our
side is the Learner's `adaptive_clip_ratio` / `adaptive_clip_eps` with SGD /
Adam. Adam's epsilon is 1e-12 in both: optax adds it to sqrt(v_hat), TF's
form (ours) to sqrt(v) = sqrt(1 - beta2^t) sqrt(v_hat), so with optax's
default 1e-8 a small clipped gradient element (|g| ~ 1e-3) moves ~3e-4
differently at t = 1, ~1e-6 of the weights; at 1e-12 the forms agree to
float32 rounding and the cases test the clipping.

Run from the repository root in the optax venv:

    /work/optax_venv/bin/python tools/record_optax_agc.py
"""

import optax_reference as ref  # pylint: disable=g-bad-import-order

import optax  # pylint: disable=g-bad-import-order

OUT = 'tests/data/optax_agc.json'


def _AgcSgd(lr, clipping, eps):
  return optax.chain(optax.adaptive_grad_clip(clipping, eps), optax.sgd(lr))


def _AgcAdam(lr, clipping, eps, adam_eps):
  return optax.chain(optax.adaptive_grad_clip(clipping, eps),
                     optax.adam(lr, b1=0.9, b2=0.999, eps=adam_eps))


def main():
  cases = []
  # c = 0.5: with N(0, 1) weights and gradients most units clip without the
  # global-norm clip and few clip after it (the global norm 1.0 leaves
  # units of norm ~0.3-0.6 against limits ~0.5-1.5).
  for c in (0.5, 0.1):
    cases += ref.Cases('agc_sgd_c%g' % c, _AgcSgd,
                       dict(clipping=c, eps=1e-3), lr=0.1)
    cases += ref.Cases('agc_adam_c%g' % c, _AgcAdam,
                       dict(clipping=c, eps=1e-3, adam_eps=1e-12), lr=0.01)
  ref.Write(OUT, cases)


if __name__ == '__main__':
  main()
