"""Records optax's Adam family (issue 24 item 3) for its tests.

Run from the repository root, in the optax venv (never a dependency here):

    /work/optax_venv/bin/python tools/record_optax_adam_family.py

Writes tests/data/optax_adam_family.json: for each rule, optax's defaults
(rule name as in the factory: nadam, radam, adamax, amsgrad, adopt) and one
non-default setting (rule name + '_alt'); and optax's adam and adamw (for
our Adam/AdamW with epsilon_form='optax'), each on the three problems of
tools/optax_reference.py, float32 and float64, clip_by_global_norm(1.0) off
and on. The rate 0.0625 is exact in float32, so float64 cases are not
blurred by our float32 rate.
"""

import optax

import optax_reference as ref

LR = 0.0625
OUT = 'tests/data/optax_adam_family.json'


def _Adopt(lr, clip_exponent=0.25, **kwargs):
  """optax.contrib.adopt with clip_value_fn(count) = count ** clip_exponent."""
  return optax.contrib.adopt(
      lr, clip_value_fn=lambda c: c ** clip_exponent, **kwargs)


# (rule, make_tx, kwargs): defaults first, then one non-default setting.
RULES = (
    ('nadam', optax.nadam, {}),
    ('nadam_alt', optax.nadam, dict(b1=0.8, b2=0.99, eps=1e-3)),
    ('radam', optax.radam, {}),
    ('radam_alt', optax.radam,
     dict(b1=0.8, b2=0.99, eps=1e-4, threshold=4.0, nesterov=True)),
    ('adamax', optax.adamax, {}),
    ('adamax_alt', optax.adamax, dict(b1=0.8, b2=0.99, eps=1e-3)),
    ('amsgrad', optax.amsgrad, {}),
    ('amsgrad_alt', optax.amsgrad,
     dict(b1=0.8, b2=0.99, eps=1e-4, bias_correction_mu=False,
          bias_correction_nu=False)),
    ('adopt', _Adopt, {}),
    ('adopt_alt', _Adopt,
     dict(b1=0.8, b2=0.99, eps=1e-4, nesterov=True, clip_exponent=0.5)),
    ('adopt_noclip', _Adopt, dict(use_clipping=False)),
    # Our Adam / AdamW with epsilon_form='optax'.
    ('adam', optax.adam, {}),
    ('adamw', optax.adamw, dict(b2=0.99, eps=1e-3, weight_decay=0.1)),
)


def main():
  cases = []
  for rule, make_tx, kwargs in RULES:
    cases += ref.Cases(rule, make_tx, kwargs, LR)
  ref.Write(OUT, cases,
            command='/work/optax_venv/bin/python '
            'tools/record_optax_adam_family.py')


if __name__ == '__main__':
  main()
