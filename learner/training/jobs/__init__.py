"""The jobs: what runs a task, one per --mode, and their command line.

  trainer.py          Trainer: modes train, eval, train_and_eval
  cli.py              `python -m learner.trainer`: flags, main, exit codes
  evaler.py, export.py
                      the jobs that read a run's checkpoints
  eval_restore.py     their one restore (averages where a learner keeps them)
  validate.py         every value checked before the first file is written
  mode_keys.py        the modes and which flags each reads
  run.py              the MoXing-style `learner.run` entry point

The top floor: imports model/, services/ and cluster/; nothing imports it
but learner/ entry points and run.py's users.
"""
