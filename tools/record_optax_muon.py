"""Records optax.contrib.muon's trajectories into tests/data/optax_muon.json.

Run from the repository root in the optax venv (tools/optax_reference.py):

    /work/optax_venv/bin/python tools/record_optax_muon.py

(or /work/venv-ref/bin/python, which has jax and optax 0.2.8).

Muon updates matrices only, so the shapes are the shared (4, 3) matrix and
(3, 3, 2, 4) conv kernel (flattened to [18, 4] through
`MuonDimensionNumbers(reduction_axis=(0, 1, 2), output_axis=3)`, as our
`Muon` flattens it) plus a wide (3, 5) matrix, whose width scaling
sqrt(max(1, fan_out / fan_in)) is not 1; the (5,) vector is no case (our
Muon refuses it; optax would route it to AdamW). Rules: 'muon' (defaults:
Nesterov, beta 0.95), 'muon_plain' (nesterov=False), 'muon_moonlight'
(consistent_rms=0.2), 'muon_wd' (weight_decay=0.1, beta 0.9) and
'muon_polar' (ns_coeffs = the (5, 3) Polar Express table of modded-nanogpt,
our `muon.POLAR_EXPRESS`, as optax's per-step table; ns_steps 5).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optax_reference as ref  # pylint: disable=g-import-not-at-top
from optax import contrib  # pylint: disable=g-import-not-at-top

# Amsel et al. 2025 (arXiv:2505.16932), the rows modded-nanogpt's train_gpt.py
# uses; the same numbers as learner/optimizers/rules/muon.py POLAR_EXPRESS
# (written out: this venv does not import the project).
POLAR_EXPRESS = [
    [8.156554524902461, -22.48329292557795, 15.878769915207462],
    [4.042929935166739, -2.808917465908714, 0.5000178451051316],
    [3.8916678022926607, -2.772484153217685, 0.5060648178503393],
    [3.285753657755655, -2.3681294933425376, 0.46449024233003106],
    [2.3465413258596377, -1.7097828382687081, 0.42323551169305323],
]

# The vector is left out (refused by our Muon); 'wide' exercises the width
# scaling. Seeds follow the sorted names: conv 0, matrix 1, wide 2.
ref.SHAPES = {'matrix': (4, 3), 'conv': (3, 3, 2, 4), 'wide': (3, 5)}

OUT = os.path.join('tests', 'data', 'optax_muon.json')


def _KernelDims(w):
  """Every axis but the last is reduced: [.., cout] -> [prod(..), cout]."""
  return contrib.MuonDimensionNumbers(
      reduction_axis=tuple(range(w.ndim - 1)), output_axis=w.ndim - 1)


def Muon(lr, **kwargs):
  if 'ns_coeffs' in kwargs:  # A table: optax wants an (n, 3) array or tuples.
    kwargs = dict(kwargs, ns_coeffs=tuple(map(tuple, kwargs['ns_coeffs'])))
  return contrib.muon(lr, muon_weight_dimension_numbers=_KernelDims,
                      **kwargs)


def main():
  cases = []
  for rule, kwargs in (('muon', {}),
                       ('muon_plain', {'nesterov': False}),
                       ('muon_moonlight', {'consistent_rms': 0.2}),
                       ('muon_wd', {'weight_decay': 0.1, 'beta': 0.9}),
                       ('muon_polar', {'ns_coeffs': POLAR_EXPRESS,
                                       'ns_steps': 5})):
    cases += ref.Cases(rule, Muon, kwargs, lr=0.02)
  ref.Write(OUT, cases,
            command='/work/optax_venv/bin/python tools/record_optax_muon.py')


if __name__ == '__main__':
  main()
