"""TF's restore coordinator left behind by a restore that raised.

`tf.train.Checkpoint.restore` builds a coordinator once it has read the
checkpoint's object graph; if the restore then raises (files deleted by
the trainer's rotation while they are read, a damaged shard, a replica
count refused), no status object comes back to call `expect_partial()`
on, and when the coordinator is garbage-collected (often at exit) TF logs
one warning per checkpoint value it did not restore. `QuietFailedRestore`
finds it from the error, for every restore of ours (the checkpointer's and
the read-only jobs' `eval_restore.RestoreForEval`).
"""

# TF's class of the coordinator (tensorflow/python/checkpoint/checkpoint.py),
# matched by name: it is private, and no public API reaches the coordinator
# of a restore whose status never came back.
_COORDINATOR = '_CheckpointRestoreCoordinator'


def QuietFailedRestore(error):
  """Silences TF's warnings about the restore that raised `error`.

  A `tf.train.Checkpoint.restore` that raises after TF read the checkpoint's
  object graph (a data file deleted by the trainer's rotation while an
  evaler reads it, a damaged shard, a replica-count refusal) returns no
  status object to call `expect_partial()` on, yet TF's restore coordinator
  lives on; when it is garbage-collected (often at exit) TF logs one
  warning per checkpoint value it did not restore (the optimizer slots,
  the input iterator, the counters: 30 lines and more, long after the
  one-line report of the failure). The coordinator (or the load status
  holding it) is found in the frames of the error's traceback, and of the
  errors it was raised from (TF re-raises a NotFoundError as a new one),
  and marked partial, which is what `expect_partial()` does. Safe to call
  with any error (no coordinator: nothing happens).

  Args:
    error: the exception the restore raised (its `__traceback__`,
      `__context__` and `__cause__` are read).
  """
  errors, seen = [error], set()
  while errors:
    e = errors.pop()
    if e is None or id(e) in seen:
      continue
    seen.add(id(e))
    errors += [e.__context__, e.__cause__]
    tb = e.__traceback__
    while tb is not None:
      for value in list(tb.tb_frame.f_locals.values()):
        # The coordinator, or a load status holding it.
        for obj in (value, getattr(value, '_checkpoint', None)):
          if type(obj).__name__ == _COORDINATOR:
            obj.expect_partial = True
      tb = tb.tb_next
