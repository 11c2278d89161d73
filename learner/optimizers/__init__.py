"""Update rules and their wrappers, and the MoXing-style factories.

  base.py            BaseOptimizer (Bind-time slots, Apply), SGD, helpers
  update_rules.py    Momentum, Adam, AdamW, Adagrad, RMSProp, AdaDelta,
                     Adafactor, LAMB, Lion
  lars.py, ema.py, composite.py, keras_optimizer.py, accumulation.py
                     the wrappers (each holds an inner optimizer's params)
  factory.py         get_optimizer_fn, get_optimizer_wrapper_fn
  var_grad.py        VarGrad, the (variable, gradient) pair they consume
"""

from learner.optimizers.var_grad import VarGrad
from learner.optimizers.base import BaseOptimizer
from learner.optimizers.base import SGD
from learner.optimizers.update_rules import Momentum
from learner.optimizers.update_rules import Adam
from learner.optimizers.update_rules import AdamW
from learner.optimizers.update_rules import Adagrad
from learner.optimizers.update_rules import RMSProp
from learner.optimizers.update_rules import AdaDelta
from learner.optimizers.update_rules import Adafactor
from learner.optimizers.update_rules import LAMB
from learner.optimizers.update_rules import Lion
from learner.optimizers.lars import Lars
from learner.optimizers.ema import Ema
from learner.optimizers.composite import Composite
from learner.optimizers.keras_optimizer import KerasOptimizer
from learner.optimizers.accumulation import GradientAccumulation
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from learner.optimizers.factory import OptimizerParamsFromFn
