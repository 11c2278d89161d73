"""The cluster: tf.distribute strategies and the multi-worker launcher.

  distribution.py     strategies, TF_CONFIG, input sharding, replica checks
  launcher.py         `python -m learner.launcher`: N local workers

The bottom floor: imports nothing else of learner/training/.
"""
