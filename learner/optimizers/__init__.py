"""Update rules and their wrappers, and the MoXing-style factories.

  base.py            BaseOptimizer (Bind-time slots, Apply), SGD, helpers
  rules/             the update rules, one family per module (momentum, adam,
                     adagrad, rmsprop, adadelta, adafactor, lamb, lion, muon);
                     rules.RULES registers each (export, factory name)
  lars.py, ema.py, composite.py, keras_optimizer.py, accumulation.py
                     the wrappers (each holds an inner optimizer's params)
  factory.py         get_optimizer_fn, get_optimizer_wrapper_fn
  var_grad.py        VarGrad, the (variable, gradient) pair they consume
"""

from learner.optimizers.var_grad import VarGrad
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import SGD
from learner.optimizers import rules
from learner.optimizers.lars import Lars
from learner.optimizers.ema import Ema
from learner.optimizers.composite import Composite
from learner.optimizers.keras_optimizer import KerasOptimizer
from learner.optimizers.accumulation import GradientAccumulation
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from learner.optimizers.factory import OptimizerParamsFromFn

# Every registered update rule (rules.RULES) under its class name.
globals().update({r.cls.__name__: r.cls for r in rules.RULES})
