"""Learning: optimizers and their wrappers, Learner, Task, trainer."""

from learner.var_grad import VarGrad
from learner.base_optimizer import BaseOptimizer
from learner.base_optimizer import SGD
from learner.grad_norm_tracker import GradNormTracker
from learner.gradient_combiner import BaseGradientCombiner
from learner.gradient_combiner import GradientSum
from learner.gradient_combiner import PCGrad
from learner.loss_scale import LossScale
from learner.gradient_tape import GradientTape
from learner.gradient_accumulation import GradientAccumulation
from learner.learner import Learner
