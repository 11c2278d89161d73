"""Learning-rate schedules: pure functions of an integer step."""

from learner import tf_log as _tf_log

# `python -m schedules.plot` and `tf-learner-plot-schedule` import this
# package, and TensorFlow with it, before schedules/plot.py runs: quiet
# TensorFlow's start-up lines here, for that command only.
with _tf_log.QuietImportFor('schedules.plot', 'tf-learner-plot-schedule'):
  import tensorflow as _tf  # noqa: F401  pylint: disable=unused-import

# pylint: disable=wrong-import-position

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import Constant
from schedules.base_schedule import ConstantOne
from schedules.base_schedule import ToInt64Step
from schedules.piecewise import PiecewiseConstantSchedule
from schedules.polynomial import PolynomialSchedule
from schedules.polynomial import LinearSchedule
from schedules.exponential import ExponentialSchedule
from schedules.exponential import ContinuousSchedule
from schedules.exponential import StepwiseExponentialSchedule
from schedules.composite import CombinedMinimumSchedule
from schedules.composite import PiecewiseSchedule
from schedules.composite import CycleSchedule
from schedules.cosine import CosineSchedule
from schedules.cosine import LinearRampupCosineSchedule
from schedules.cosine import CosineDecay
from schedules.restarts import CosineWithRestarts
from schedules.wsd import WarmupStableDecay
from schedules.one_cycle import OneCycle
from schedules.one_cycle import OneCycleMomentum
from schedules.step_decay import StepDecay
from schedules.transformer import TransformerSchedule
from schedules.transformer import TransformerScheduleNoWarmUp
from schedules.transformer import TransformerMLPerfSchedule
from schedules.sqrt_decay import SqrtDecay
from schedules.sqrt_decay import SqrtDecayToZero
from schedules.sqrt_decay import LinearRampupSqrtDecay
from schedules.sqrt_decay import LinearRampupSqrtDecayByBatchSizeAndReplicas
from schedules.rampup import LinearRampupExponentialDecayScaledByNumSplitSchedule
from schedules.rampup import LinearRampupExponentialDecay
from schedules.rampup import LinearRampupPiecewiseConstantSchedule
from schedules.rampup import LinearRampupDecaySchedule
from schedules.annealing import AnnealingSchedule
from schedules.annealing import InverseSigmoid
from schedules.annealing import EmaDecaySchedule
from schedules.dev_based import DevBasedSchedule
from schedules.warmup import Warmup
from schedules.linear_scaling import LinearScaling
from schedules.recipes import EpochsToUpdates
from schedules.recipes import ResNet50Schedule
from schedules.keras_adapter import KerasSchedule
from schedules.keras_adapter import AsKerasSchedule
