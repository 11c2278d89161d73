"""The cluster: tf.distribute strategies and the multi-worker launcher.

  distribution.py     the facade callers use (`distribution.<Name>`) of:
    strategy.py       strategies, TF_CONFIG, start-up, which worker this is
    cluster_env.py    TF_CONFIG from a SLURM step or a Kubernetes indexed Job
    datasets.py       input sharding and per-replica batching
    replicas.py       replica agreement, worker logdirs, peer failures
    group_stop.py     the workers' agreement on a stop by signal
  launcher.py         `python -m learner.launcher`: N local workers
  cluster_factory.py  Lingvo's `cluster_factory.Current()`, from the strategy

The bottom floor: imports nothing else of learner/training/.
"""
