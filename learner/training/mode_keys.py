"""ModeKeys: what a run does (`learner.ModeKeys.TRAIN`, MoXing's names)."""


class ModeKeys:
  """Run modes of the trainer and of `learner.run`, and the trainer's jobs.

  TRAIN trains (an optimizer is required); EVAL restores the weights and
  evaluates (no optimizer is built); TRAIN_AND_EVAL trains and evaluates
  every `p.task.eval.interval_steps` and at the end. These three (`ALL`)
  are what `Trainer` and `learner.run` run.

  The jobs (`JOBS`) only read a run's checkpoints, in processes of their
  own next to the trainer, as Lingvo's evaler and Model Garden's
  continuous_eval and export binaries do: EVALER waits for each new
  checkpoint and evaluates it once (`learner.training.evaler.Evaler`);
  EXPORT writes a SavedModel of the task's predictions
  (`learner.training.export.Export`). The trainer's `--mode` takes
  `ALL + JOBS`.
  """
  TRAIN = 'train'
  EVAL = 'eval'
  TRAIN_AND_EVAL = 'train_and_eval'
  EVALER = 'evaler'
  EXPORT = 'export'
  ALL = (TRAIN, EVAL, TRAIN_AND_EVAL)
  JOBS = (EVALER, EXPORT)
