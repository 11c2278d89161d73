"""Learning-rate schedules: pure functions of an integer step."""

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import Constant
from schedules.base_schedule import ConstantOne
