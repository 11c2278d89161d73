"""ModeKeys: what a run does (`learner.ModeKeys.TRAIN`, MoXing's names).

Also which command-line flags each mode reads (`MODE_FLAGS`), so that a
flag given to a mode that would ignore it is refused (`FlagNotForMode`).
"""


class ModeKeys:
  """Run modes of the trainer and of `learner.run`, and the trainer's jobs.

  TRAIN trains (an optimizer is required); EVAL restores the weights and
  evaluates (no optimizer is built); TRAIN_AND_EVAL trains and evaluates
  every `p.task.eval.interval_steps` and at the end. These three (`ALL`)
  are what `Trainer` and `learner.run` run.

  The jobs (`JOBS`) only read a run's checkpoints, in processes of their
  own next to the trainer, as Lingvo's evaler and Model Garden's
  continuous_eval and export binaries do: EVALER waits for each new
  checkpoint and evaluates it once (`learner.training.jobs.evaler.Evaler`);
  EXPORT writes a SavedModel of the task's predictions
  (`learner.training.jobs.export.Export`). The trainer's `--mode` takes
  `ALL + JOBS`.
  """
  TRAIN = 'train'
  EVAL = 'eval'
  TRAIN_AND_EVAL = 'train_and_eval'
  EVALER = 'evaler'
  EXPORT = 'export'
  ALL = (TRAIN, EVAL, TRAIN_AND_EVAL)
  JOBS = (EVALER, EXPORT)


# The flags that apply to some modes only: {flag: the modes that read it}.
# Given with another mode, one is refused (`FlagNotForMode`).
MODE_FLAGS = {
    'checkpoint': (ModeKeys.EVAL, ModeKeys.EXPORT),
    'export_checkpoint': (ModeKeys.EVAL, ModeKeys.EXPORT),
    'eval_dir': (ModeKeys.EVAL,),
    'evaler_dataset': (ModeKeys.EVAL, ModeKeys.EVALER),
    'evaler_timeout_secs': (ModeKeys.EVALER,),
    'evaler_poll_secs': (ModeKeys.EVALER,),
    'evaler_dir': (ModeKeys.EVALER,),
    'export_dir': (ModeKeys.EXPORT,),
    'init_from_checkpoint': (ModeKeys.TRAIN, ModeKeys.TRAIN_AND_EVAL),
    'init_from_checkpoint_rules': (ModeKeys.TRAIN, ModeKeys.TRAIN_AND_EVAL),
    'strategy': ModeKeys.ALL,
}


def FlagNotForMode(mode, flag_values):
  """The one-line refusal of a flag `mode` does not read, or None.

  A flag of `MODE_FLAGS` given on the command line (`.present`, not left
  at its default) with a mode that ignores it would be silently dropped;
  so would --checkpoint and --export_checkpoint (its alias) naming two
  checkpoints.

  Args:
    mode: the --mode value (a str).
    flag_values: absl's FlagValues holding the trainer's flags.

  Returns:
    The message (str, without 'ERROR: '), or None when every flag applies.
  """
  for name, modes in MODE_FLAGS.items():
    if name in flag_values and flag_values[name].present and (
        mode not in modes):
      return ('--%s does not apply to --mode=%s: it is read by --mode=%s '
              'only. Remove it, or run one of those modes.' % (
                  name, mode, ' or --mode='.join(modes)))
  one, other = flag_values['checkpoint'].value, flag_values[
      'export_checkpoint'].value
  if one and other and one != other:
    return ('--checkpoint=%s and --export_checkpoint=%s name two checkpoints; '
            '--export_checkpoint is an alias of --checkpoint: give one of '
            'them.' % (one, other))
  return None
