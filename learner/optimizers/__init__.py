"""Update rules and their wrappers, and the MoXing-style factories.

  base.py            BaseOptimizer (Bind-time slots; Apply: every path
                     derived from a rule's _Scalars + _Step), SGD, helpers
  rules/             the update rules, one family per module (momentum, adam,
                     adagrad, rmsprop, adadelta, adafactor, lamb, lion,
                     adam_family, schedule_free, muon, ademamix), each
                     formula once in its _Step; rules.RULES registers each
                     (export, factory name)
  wrappers/          the wrappers, one per module, each holding an inner
                     optimizer's params: lars, ema, lookahead, swa, sam,
                     composite, accumulation, mechanic; easgd, local_sgd
                     (replica-local, base replica_local.py)
  wrapper.py         their bases: BaseWrapper, and BaseAveraging for those
                     that keep weights to evaluate (Ema, Lookahead, SWA)
  keras_optimizer.py any tf.keras optimizer as a BaseOptimizer
  factory.py         get_optimizer_fn, get_optimizer_wrapper_fn
  hyper.py, resolve.py, sharded_state.py, sharded_wrappers.py
                     scheduled hyperparameters; a learner's optimizer and
                     schedule resolved; ZeRO-1 sharded state (the rule's;
                     the wrappers' averages and accumulators)
  var_grad.py        VarGrad, the (variable, gradient) pair they consume
  kernels/           the accelerators (raw TF and fused C++ ops per rule),
                     slot storage and the graph helpers all share
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
from learner.optimizers.wrappers.composite import AdaGraft
from learner.optimizers.wrappers.composite import Composite
from learner.optimizers.wrappers.easgd import Easgd
from learner.optimizers.wrappers.local_sgd import LocalSgd
from learner.optimizers.wrappers.mechanic import Mechanic
from learner.optimizers.keras_optimizer import KerasOptimizer
from learner.optimizers.wrappers.accumulation import GradientAccumulation
from learner.optimizers.wrappers.dynamic_accumulator import DynamicAccumulator
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from learner.optimizers.factory import OptimizerParamsFromFn

# Every registered update rule (rules.RULES) under its class name.
globals().update({r.cls.__name__: r.cls for r in rules.RULES})
