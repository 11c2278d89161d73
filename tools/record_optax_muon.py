"""Records optax.contrib.muon's trajectories into tests/data/optax_muon.json.

Run from the repository root in the optax venv (tools/optax_reference.py):

    /work/optax_venv/bin/python tools/record_optax_muon.py

Muon updates matrices only, so the shapes are the shared (4, 3) matrix and
(3, 3, 2, 4) conv kernel (flattened to [18, 4] through
`MuonDimensionNumbers(reduction_axis=(0, 1, 2), output_axis=3)`, as our
`Muon` flattens it) plus a wide (3, 5) matrix, whose width scaling
sqrt(max(1, fan_out / fan_in)) is not 1; the (5,) vector is no case (our
Muon refuses it; optax would route it to AdamW). Rules: 'muon' (defaults:
Nesterov, beta 0.95), 'muon_plain' (nesterov=False), 'muon_moonlight'
(consistent_rms=0.2) and 'muon_wd' (weight_decay=0.1, beta 0.9).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optax_reference as ref  # pylint: disable=g-import-not-at-top
from optax import contrib  # pylint: disable=g-import-not-at-top

# The vector is left out (refused by our Muon); 'wide' exercises the width
# scaling. Seeds follow the sorted names: conv 0, matrix 1, wide 2.
ref.SHAPES = {'matrix': (4, 3), 'conv': (3, 3, 2, 4), 'wide': (3, 5)}

OUT = os.path.join('tests', 'data', 'optax_muon.json')


def _KernelDims(w):
  """Every axis but the last is reduced: [.., cout] -> [prod(..), cout]."""
  return contrib.MuonDimensionNumbers(
      reduction_axis=tuple(range(w.ndim - 1)), output_axis=w.ndim - 1)


def Muon(lr, **kwargs):
  return contrib.muon(lr, muon_weight_dimension_numbers=_KernelDims,
                      **kwargs)


def main():
  cases = []
  for rule, kwargs in (('muon', {}),
                       ('muon_plain', {'nesterov': False}),
                       ('muon_moonlight', {'consistent_rms': 0.2}),
                       ('muon_wd', {'weight_decay': 0.1, 'beta': 0.9})):
    cases += ref.Cases(rule, Muon, kwargs, lr=0.02)
  ref.Write(OUT, cases,
            command='/work/optax_venv/bin/python tools/record_optax_muon.py')


if __name__ == '__main__':
  main()
