"""Update rules and their wrappers, and the MoXing-style factories.

  base.py            BaseOptimizer (Bind-time slots, Apply), SGD, helpers
  rules/             the update rules, one family per module (momentum, adam,
                     adagrad, rmsprop, adadelta, adafactor, lamb, lion,
                     adam_family: Nadam, RAdam, Adamax, AMSGrad, ADOPT;
                     schedule_free, muon);
                     rules.RULES registers each (export, factory name)
  lars.py, ema.py, lookahead.py, swa.py, sam.py, composite.py,
  easgd.py, local_sgd.py (replica-local; base replica_local.py),
  keras_optimizer.py, accumulation.py
                     the wrappers (each holds an inner optimizer's params);
  wrapper.py         their base, BaseWrapper, and BaseAveraging, the base of
                     those that keep weights to evaluate (Ema, Lookahead, SWA)
  factory.py         get_optimizer_fn, get_optimizer_wrapper_fn
  var_grad.py        VarGrad, the (variable, gradient) pair they consume
"""

from learner.optimizers.var_grad import VarGrad
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import SGD
from learner.optimizers import rules
from learner.optimizers.wrappers.lars import Lars
from learner.optimizers.wrappers.ema import Ema
from learner.optimizers.wrappers.lookahead import Lookahead
from learner.optimizers.wrappers.swa import SWA
from learner.optimizers.wrappers.sam import Sam
from learner.optimizers.wrappers.composite import Composite
from learner.optimizers.wrappers.easgd import Easgd
from learner.optimizers.wrappers.local_sgd import LocalSgd
from learner.optimizers.keras_optimizer import KerasOptimizer
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from learner.optimizers.factory import OptimizerParamsFromFn

# Every registered update rule (rules.RULES) under its class name.
globals().update({r.cls.__name__: r.cls for r in rules.RULES})
