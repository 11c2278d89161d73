"""The features the runtime asks an optimizer's class about, declared once.

`RuleFlags` is a base of `BaseOptimizer` (learner/optimizers/base.py): each
flag is a class attribute with its default, and a rule or wrapper sets its
own in its class body. Nothing probes them with getattr; the base, the
learner, ZeRO-1 (sharded_state.py, home_sharding.py), the kernels' table
(kernels/accelerators.py) and the jobs read them by name.
"""


class RuleFlags:
  """Class attributes every optimizer has, with their defaults.

  No state and no methods: a subclass overrides a flag by assigning it.
  """

  SUPPORTS_LAZY_SPARSE = False
  # Params `hyper_schedules` may name: those its update reads by `Hyper`.
  SCHEDULABLE_PARAMS = ('decoupled_weight_decay',)
  # True when a subclass's Apply takes `_grad_scale` (ApplyScaled uses it).
  APPLY_TAKES_GRAD_SCALE = False
  # The features the runtime asks a class about (nothing probes getattr).
  # True for gradient accumulation: global steps feed one update
  # (MicroBatchesPerUpdateOf), and it must be the outermost wrapper.
  IS_ACCUMULATION = False
  # True when the step needs a second forward/backward pass at perturbed
  # weights (Sam); the gradient tape finds it (gradient_tape.FindPerturber).
  NEEDS_SECOND_PASS = False
  # True for a wrapper whose replicas train their own copies (Easgd).
  REPLICA_LOCAL = False
  EVAL_WEIGHTS_LABEL = None  # The jobs' name of evaluated copies (None).
  WEIGHT_SLOTS = ()  # Slots that start at the weights (ZeRO-1 fills them).
  DEFAULT_LEARNING_RATE = None  # 1.0 for rate-free rules (resolve.py).
  SHARDS_WITH_RULE = False  # A wrapper ZeRO-1 shards with (wrapper.py).
  # True when `_Step` on one element reads only that element's weight,
  # gradient, slots and the scalars: the base may run it on the rows of a
  # lazy sparse gradient and on a flat shard (ZeRO-1, sharded_state.py).
  ELEMENTWISE = False
  # True when `_Step` on a variable reads only it (and the scalars): ZeRO-1
  # gives each a home replica (home_sharding.py).
  WHOLE_TENSOR = False
  # The rule's entry in kernels.ACCELERATORS, or None (`_Step`'s TF ops).
  ACCELERATOR = None
  # True when `_Step` returns the new weights, not a delta (schedule-free's
  # y, where y - (y - y_new) != y_new in the last bit): the base assigns.
  STEP_GIVES_WEIGHTS = False
  # True when `_Step` applies decoupled weight decay itself (schedule-free
  # decays inside its direction u); the base then adds none after it.
  DECAY_IN_STEP = False
  # Slots `_Step` sets to w when `_Scalars`' `first` (kernels/first_update.py).
  FIRST_UPDATE_SLOTS = ()
  # The slots that are never negative (second moments, accumulators): with
  # slot_dtype=tf.int8 they use the unsigned dynamic map (twice the codes
  # in [0, 1]); the others the signed one.
  NONNEGATIVE_SLOTS = ()
