"""The update rules, one family per module; the one table that registers them.

  momentum.py   Momentum (and Nesterov)      adam.py       Adam, AdamW
  adagrad.py    Adagrad                      rmsprop.py    RMSProp
  adadelta.py   AdaDelta                     adafactor.py  Adafactor,
                                                           XLAShardingAdafactor
  lamb.py       LAMB                         lion.py       Lion
  adam_family.py  Nadam, RAdam, Adamax, AMSGrad, ADOPT (optax's form)
  schedule_free.py  ScheduleFreeSGD, ScheduleFreeAdamW (eval weights x)
  muon.py       Muon (Newton-Schulz orthogonalised momentum; matrices only;
                Polar Express coefficient tables)
  normuon.py    NorMuon (Muon with a per-neuron second moment after NS)
  ademamix.py   AdEMAMix (Adam plus a slow EMA; issue 37's example rule)
  simplified_ademamix.py  SimplifiedAdEMAMix (one undamped momentum)
  dog.py        DoG, DoWG (learning-rate free; global norms, not sharded)
  cocob.py      COCOB (coin betting, learning-rate free)
  madgrad.py    MADGRAD (dual averaging, cube-root denominator)
  d_adaptation.py  DAdaptAdamW, Prodigy (learning-rate-free: a tree-wide d)
  soap.py       SOAP (Adam in the eigenbases of Shampoo's statistics)
  shampoo.py    DistributedShampoo (Lingvo's; grafted onto diagonal AdaGrad)
  common.py     helpers the families share

Plain SGD is `SGD` in learner/optimizers/base.py (the base's own rule).
Each family module starts with its formula and source. `RULES` is the only
place a rule is registered: learner.optimizers exports its classes,
learner's lazy table names their modules, and the factory takes its names
and keyword aliases from it (docs/DESIGN.md, "Where things go").
"""

import collections

from learner.optimizers import base
from learner.optimizers.rules import adadelta
from learner.optimizers.rules import adafactor
from learner.optimizers.rules import adagrad
from learner.optimizers.rules import adam
from learner.optimizers.rules import ademamix
from learner.optimizers.rules import adam_family
from learner.optimizers.rules import cocob
from learner.optimizers.rules import dog
from learner.optimizers.rules import d_adaptation
from learner.optimizers.rules import lamb
from learner.optimizers.rules import lion
from learner.optimizers.rules import madgrad
from learner.optimizers.rules import momentum
from learner.optimizers.rules import muon
from learner.optimizers.rules import normuon
from learner.optimizers.rules import rmsprop
from learner.optimizers.rules import schedule_free
from learner.optimizers.rules import shampoo
from learner.optimizers.rules import simplified_ademamix
from learner.optimizers.rules import soap

# One registered rule. `factory_names` are get_optimizer_fn's names for it
# (empty: reachable only by class); `aliases` maps an accepted factory
# keyword (MoXing/TF1/Keras spelling) to the class's param name.
Rule = collections.namedtuple('Rule', ['cls', 'factory_names', 'aliases'])

_BETAS = {'beta_1': 'beta1', 'beta_2': 'beta2'}

RULES = (
    Rule(base.SGD, ('sgd',), {}),
    Rule(momentum.Momentum, ('momentum', 'nesterov'), {'momentum': 'alpha'}),
    Rule(adam.Adam, ('adam',), dict(_BETAS)),
    Rule(adam.AdamW, ('adamw',),
         dict(_BETAS, weight_decay='decoupled_weight_decay')),
    Rule(adagrad.Adagrad, ('adagrad',), {}),
    Rule(rmsprop.RMSProp, ('rmsprop',), {'rho': 'decay'}),
    Rule(adadelta.AdaDelta, ('adadelta',), {'rho': 'decay'}),
    Rule(adafactor.Adafactor, ('adafactor',), {'beta_1': 'beta1'}),
    Rule(adafactor.XLAShardingAdafactor, (), {}),
    Rule(lamb.LAMB, ('lamb',), dict(_BETAS)),
    Rule(lion.Lion, ('lion',),
         dict(_BETAS, weight_decay='decoupled_weight_decay')),
    Rule(adam_family.Nadam, ('nadam',), dict(_BETAS)),
    Rule(adam_family.RAdam, ('radam',), dict(_BETAS)),
    Rule(adam_family.Adamax, ('adamax',), dict(_BETAS)),
    Rule(adam_family.AMSGrad, ('amsgrad',), dict(_BETAS)),
    Rule(adam_family.ADOPT, ('adopt',), dict(_BETAS)),
    Rule(schedule_free.ScheduleFreeSGD, ('schedule_free_sgd',),
         {'b1': 'momentum', 'weight_decay': 'decoupled_weight_decay'}),
    Rule(schedule_free.ScheduleFreeAdamW, ('schedule_free_adamw',),
         dict(_BETAS, b1='beta1', b2='beta2', eps='epsilon',
              weight_decay='decoupled_weight_decay')),
    Rule(muon.Muon, ('muon',),
         {'momentum': 'beta', 'weight_decay': 'decoupled_weight_decay'}),
    Rule(normuon.NorMuon, ('normuon',),
         {'momentum': 'beta', 'weight_decay': 'decoupled_weight_decay',
          'eps': 'row_epsilon'}),
    Rule(ademamix.AdEMAMix, ('ademamix',), dict(
        _BETAS, beta_3='beta3', weight_decay='decoupled_weight_decay')),
    Rule(simplified_ademamix.SimplifiedAdEMAMix, ('simplified_ademamix',),
         dict(_BETAS, weight_decay='decoupled_weight_decay')),
    Rule(dog.DoG, ('dog',), {'eps': 'epsilon'}),
    Rule(dog.DoWG, ('dowg',), {'eps': 'epsilon'}),
    Rule(cocob.COCOB, ('cocob',), {'eps': 'epsilon'}),
    Rule(madgrad.MADGRAD, ('madgrad',), {'eps': 'epsilon'}),
    Rule(d_adaptation.DAdaptAdamW, ('dadapt_adamw',), dict(
        _BETAS, eps='epsilon', estim_lr0='d0',
        weight_decay='decoupled_weight_decay')),
    Rule(d_adaptation.Prodigy, ('prodigy',), dict(
        _BETAS, beta_3='beta3', eps='epsilon', estim_lr0='d0',
        estim_lr_coef='d_coef', weight_decay='decoupled_weight_decay')),
    Rule(soap.SOAP, ('soap',),
         dict(_BETAS, eps='epsilon', weight_decay='decoupled_weight_decay',
              max_precondition_dim='max_precond_dim',
              normalize_gradient='normalize_grads')),
    Rule(shampoo.DistributedShampoo, ('distributed_shampoo', 'shampoo'),
         {'epsilon': 'matrix_epsilon'}),
)


def ExportedNames():
  """Returns {class name: defining module path} of every registered rule."""
  return {r.cls.__name__: r.cls.__module__ for r in RULES}


def FactoryTable():
  """Returns {factory name: (class, {keyword: param})}, in `RULES` order."""
  return {name: (r.cls, dict(r.aliases))
          for r in RULES for name in r.factory_names}
