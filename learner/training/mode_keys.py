"""ModeKeys: what a run does (`learner.ModeKeys.TRAIN`, MoXing's names)."""


class ModeKeys:
  """Run modes of the trainer and of `learner.run`.

  TRAIN trains (an optimizer is required); EVAL restores the weights and
  evaluates (no optimizer is built); TRAIN_AND_EVAL trains and evaluates
  every `p.task.eval.interval_steps` and at the end.
  """
  TRAIN = 'train'
  EVAL = 'eval'
  TRAIN_AND_EVAL = 'train_and_eval'
  ALL = (TRAIN, EVAL, TRAIN_AND_EVAL)
