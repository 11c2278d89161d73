"""Services the jobs use: what they write, print and stop on.

  checkpointer.py     checkpoints: save, resume, the best checkpoint
  warm_start.py       init_from_checkpoint: another run's weights by name
  failed_restore.py   silences TF's warnings after a restore that raised
  logdir.py           who owns which file of a logdir; locks; params.txt
  summary.py, progress.py
                      TensorBoard scalars; the progress bar and log lines
  early_stop.py       early stopping (evaluations, or Lingvo's step window)
  skipped_steps.py    skipped-update reports and the consecutive-skip limit
  stops.py            stops by signal (SIGINT, SIGTERM)
  errors.py           ExperimentError: a refused value, one line

Imports cluster/ only.
"""
