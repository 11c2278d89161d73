"""LinearScaling: scale a schedule by the global batch size."""

import math

from schedules.base_schedule import BaseSchedule
from schedules.base_schedule import ConstantOne
from schedules.base_schedule import NumReplicasInSync


class LinearScaling(BaseSchedule):
  """Multiplies the child `schedule` by the batch-size ratio k.

  k = global_batch_size / base_batch_size (rule='linear') or its square root
  (rule='sqrt'). The global batch size is the number of examples in one
  applied update: global_batch_size if set, else batch_size * num_replicas *
  num_batches (num_batches = micro-batches per update of gradient
  accumulation; num_replicas None = the current tf.distribute strategy's
  num_replicas_in_sync when the schedule is built). Value(step) = k *
  schedule.Value(step); k is fixed at construction.

  Source: Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
  1 Hour", 2017, section 2.1 (linear scaling rule); Krizhevsky, "One weird
  trick for parallelizing convolutional neural networks", 2014 (square root
  rule).

  Raises:
    ValueError: at construction, if base_batch_size is not positive, neither
      global_batch_size nor batch_size is set, a batch count is not
      positive, or rule is not 'linear' or 'sqrt'.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('schedule', ConstantOne.Params(), 'The scaled schedule (child).')
    p.Define('base_batch_size', 256, 'Batch size (examples per update) the '
             'base learning rate was tuned for; > 0.')
    p.Define('global_batch_size', None, 'Examples per applied update, all '
             'replicas and micro-batches together. None: batch_size * '
             'num_replicas * num_batches.')
    p.Define('batch_size', None, 'Examples per replica per micro-batch; used '
             'when global_batch_size is None. (An input generator\'s '
             'batch_size is the global batch: give it as global_batch_size, '
             'or the rate grows with the replicas.)')
    p.Define('num_replicas', None, 'Replicas; None uses the current '
             'tf.distribute strategy\'s num_replicas_in_sync.')
    p.Define('num_batches', 1, 'Micro-batches accumulated per applied update '
             '(GradientAccumulation num_batches).')
    p.Define('rule', 'linear', '"linear": k = global / base; "sqrt": k = '
             'sqrt(global / base).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self._CheckPositive('base_batch_size')
    if p.rule not in ('linear', 'sqrt'):
      self._Fail('rule', 'must be "linear" or "sqrt"', 'Set rule="linear".')
    if p.global_batch_size is not None:
      self._CheckPositive('global_batch_size')
      global_batch = p.global_batch_size
    else:
      if p.batch_size is None:
        self._Fail('batch_size', 'must be set when global_batch_size is None',
                   'Set batch_size (per replica, per micro-batch) or '
                   'global_batch_size.')
      self._CheckPositive('batch_size')
      self._CheckPositive('num_batches')
      if p.num_replicas is not None:
        self._CheckPositive('num_replicas')
      replicas = (p.num_replicas if p.num_replicas is not None else
                  NumReplicasInSync())
      global_batch = p.batch_size * replicas * p.num_batches
    self._global_batch_size = global_batch
    ratio = float(global_batch) / float(p.base_batch_size)
    self._scale = ratio if p.rule == 'linear' else math.sqrt(ratio)
    self._CheckScheduleParams('schedule')
    self._CreateScheduleChild('schedule', p.schedule)

  @property
  def scale(self):
    """The Python float k multiplying the child."""
    return self._scale

  @property
  def global_batch_size(self):
    """Examples per applied update used for k."""
    return self._global_batch_size

  def FProp(self, theta, step):
    return self._scale * self._ChildValue(self.schedule, theta.schedule, step)

  def Boundaries(self):
    return self.schedule.Boundaries()
