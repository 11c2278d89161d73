"""Learning: optimizers and their wrappers, Learner, Task, trainer."""

from learner.var_grad import VarGrad
from learner.base_optimizer import BaseOptimizer
from learner.base_optimizer import SGD
from learner.grad_norm_tracker import GradNormTracker
from learner.gradient_combiner import BaseGradientCombiner
from learner.gradient_combiner import GradientSum
from learner.gradient_combiner import PCGrad
from learner.optimizers import Momentum
from learner.optimizers import Adam
from learner.optimizers import AdamW
from learner.optimizers import Adagrad
from learner.optimizers import RMSProp
from learner.optimizers import AdaDelta
from learner.optimizers import Adafactor
from learner.optimizers import LAMB
from learner.optimizers import Lion
from learner.lars import Lars
from learner.ema import Ema
from learner.composite import Composite
from learner.keras_optimizer import KerasOptimizer
from learner.optimizer_factory import get_optimizer_fn
from learner.optimizer_factory import get_optimizer_wrapper_fn
from learner.optimizer_factory import OptimizerParamsFromFn
from learner.loss_scale import LossScale
