"""Fused multi-tensor CPU kernels with their pure-TF fallback (issue 16).

  multi_tensor_ops.cc  the C++ ops: sum of squares with a finite flag,
                       SGD / Momentum / Adam apply, checked accumulate,
                       in-place zero
  multi_tensor_rules.cc  the newer rules' apply ops: Lion, Nadam, AMSGrad,
                         schedule-free SGD / AdamW
  multi_tensor_common.h  the chunk split and the apply skeleton
                         (MultiApplyOp<Rule>: a rule writes its step)
  accelerators.py      per rule, its raw TF op or fused op fed with the
                       rule's scalars (the ACCELERATORS table; no formula)
  low_precision.py     slots stored in bfloat16 (slot_dtype), read upcast
  quantized_state.py   8-bit blockwise slots (slot_dtype=tf.int8): int8
                       codes + a float32 absmax per block, dynamic map
  loader.py            compiles them on first use into a cache, loads them
  multi_tensor.py      the Python entry points and when they may run
  shared_ops.py        InXla, the finite checks, ScaleGradient, BlockSum:
                       the graph tests and helpers every fast path shares
"""

from learner.optimizers.kernels.loader import Active
from learner.optimizers.kernels.loader import Disabled
from learner.optimizers.kernels.loader import Library
from learner.optimizers.kernels.loader import Unavailable
from learner.optimizers.kernels.multi_tensor import Accumulate
from learner.optimizers.kernels.multi_tensor import ApplyAdam
from learner.optimizers.kernels.multi_tensor import ApplyAMSGrad
from learner.optimizers.kernels.multi_tensor import ApplyLion
from learner.optimizers.kernels.multi_tensor import ApplyMomentum
from learner.optimizers.kernels.multi_tensor import ApplyNadam
from learner.optimizers.kernels.multi_tensor import ApplyScheduleFree
from learner.optimizers.kernels.multi_tensor import ApplySGD
from learner.optimizers.kernels.multi_tensor import HalfSumSquares
from learner.optimizers.kernels.multi_tensor import LogPath
from learner.optimizers.kernels.multi_tensor import Unsupported
from learner.optimizers.kernels.multi_tensor import WeightMeasure
from learner.optimizers.kernels.multi_tensor import Zero
from learner.optimizers.kernels.shared_ops import AllFinite
from learner.optimizers.kernels.shared_ops import BlockSum
from learner.optimizers.kernels.shared_ops import InXla
from learner.optimizers.kernels.shared_ops import ScaleGradient
from learner.optimizers.kernels.shared_ops import SumOfSquaresFinite
