"""`python -m learner.trainer`: the trainer's command line.

The trainer itself is `learner/training/trainer.py`; this module only keeps
the documented command working.
"""

from learner.training.trainer import Main

if __name__ == '__main__':
  Main()
