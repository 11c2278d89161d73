"""Experiments of test_readonly_jobs.py: y = w*x + b with two learners.

Learner 'lw' trains w (plain momentum), learner 'lb' trains b with an Ema
of decay 0.9 around SGD, so the averages cover b only (the last two
experiments, of test_trainer_averaging.py, give 'lb' a Lookahead or an SWA
instead). Registered under `readonly_experiments.<Class>`, importable by a
trainer subprocess whose PYTHONPATH holds this directory. Imported by name, as pytest puts this
directory on sys.path.
"""

from configs import inputs
from configs import model_tasks
from learner import learner as learner_lib
from learner.optimizers import base as base_optimizer
from learner.optimizers.wrappers import ema as ema_lib
from learner.optimizers.wrappers import lookahead as lookahead_lib
from learner.optimizers.factory import get_optimizer_fn
from learner.optimizers.factory import get_optimizer_wrapper_fn
from params import registry
from schedules.base_schedule import ConstantOne

EMA_DECAY = 0.9


def _Learner(name, regex, **kw):
  return learner_lib.Learner.Params().Set(
      name=name, loss_name='loss', bprop_variable_filter=regex,
      lr_schedule=ConstantOne.Params(), **kw)


class _Base:
  """30 steps, a checkpoint and an evaluation every 10 (dev: loss, max)."""

  def LearnerB(self):
    raise NotImplementedError

  def Task(self):
    p = model_tasks.LinearRegressionTask.Params().Set(name='regression')
    p.train.Set(max_steps=30, save_interval_steps=10, save_max_to_keep=5,
                summary_interval_steps=10, log_interval_steps=10)
    # 'max' of the loss: the best checkpoint is the first evaluation's
    # (step 10), not the newest, so choosing it is visible.
    p.eval.Set(dev_metric='loss', dev_metric_mode='max', interval_steps=10)
    p.train.learner = [
        _Learner('lw', '/w$', optimizer_fn=get_optimizer_fn(
            'momentum', learning_rate=0.05, momentum=0.9)),
        self.LearnerB()]
    return p

  def Train(self):
    return inputs.LinearRegressionInput.Params().Set(
        name='train_input', split='train', batch_size=32)

  def Eval(self):
    return inputs.LinearRegressionInput.Params().Set(
        name='eval_input', split='test', batch_size=200, shuffle=False,
        num_epochs=1, drop_remainder=False)


@registry.Register
class TwoLearnersOneEma(_Base):
  """'lb' is Ema(0.9, SGD 0.2) given as optimizer params."""

  def LearnerB(self):
    return _Learner('lb', '/b$', learning_rate=0.2,
                    optimizer=ema_lib.Ema.Params().Set(
                        decay=EMA_DECAY,
                        optimizer=base_optimizer.SGD.Params()))


@registry.Register
class TwoLearnersEmaFn(_Base):
  """'lb' is Ema(0.9, SGD 0.2) given through optimizer_fn."""

  def LearnerB(self):
    return _Learner('lb', '/b$', optimizer_fn=get_optimizer_wrapper_fn(
        'ema', get_optimizer_fn('sgd', learning_rate=0.2), decay=EMA_DECAY))


@registry.Register
class TwoLearnersDevTest(TwoLearnersOneEma):
  """Lingvo's datasets, no Eval(): Dev() (the default; the test split) and
  Test() (the train split), for the directories of --evaler_dataset."""

  Eval = None

  def Dev(self):
    return _Base.Eval(self)

  def Test(self):
    return _Base.Eval(self).Set(split='train')


# test_trainer_averaging.py: the other averaging wrappers on 'lb'.
LOOKAHEAD_K = 7  # Syncs at updates 7, 14, 21, 28: none at a checkpoint.
SWA_START, SWA_FREQ = 9, 10  # Samples after global steps 10, 20, 30.


@registry.Register
class TwoLearnersLookahead(_Base):
  """'lb' is Lookahead(k 7, alpha 0.5, SGD 0.2) given as optimizer params."""

  def LearnerB(self):
    return _Learner('lb', '/b$', learning_rate=0.2,
                    optimizer=lookahead_lib.Lookahead.Params().Set(
                        k=LOOKAHEAD_K, alpha=0.5,
                        optimizer=base_optimizer.SGD.Params()))


@registry.Register
class TwoLearnersSwaFn(_Base):
  """'lb' is SWA(start 9, freq 10, SGD 0.2) given through optimizer_fn."""

  def LearnerB(self):
    return _Learner('lb', '/b$', optimizer_fn=get_optimizer_wrapper_fn(
        'swa', get_optimizer_fn('sgd', learning_rate=0.2),
        swa_start=SWA_START, swa_freq=SWA_FREQ))
