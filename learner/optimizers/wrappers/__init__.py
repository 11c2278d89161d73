"""The optimizer wrappers, one per module: an optimizer around an optimizer.

  accumulation.py  GradientAccumulation ('batch_gradients'; outermost only)
  dynamic_accumulator.py  DynamicAccumulator ('dynamic_accumulator': Lingvo's;
                   a window that ends on its weight; outermost only)
  lars.py          Lars (layer-wise rate scaling of the gradients)
  ema.py           Ema (exponential moving average; eval weights)
  lookahead.py     Lookahead (slow weights every k updates; eval weights)
  swa.py           SWA (equal-weight average of sampled weights)
  sam.py           Sam (sharpness-aware: the learner's second pass)
  composite.py     Composite (one inner optimizer per variable group),
                   AdaGraft (one optimizer's step norm, another's direction)
  easgd.py         Easgd (replica-local copies, elastic pull to a center)
  local_sgd.py     LocalSgd (replica-local copies, averaged every tau)
  mechanic.py      Mechanic (a learned scale of the inner updates)
  replica_local.py their base: no gradient all-reduce, per-replica saves

Their shared bases, `BaseWrapper` and `BaseAveraging` (the copies every
job evaluates: Ema, Lookahead, SWA), are learner/optimizers/wrapper.py.
`learner.optimizers` exports every class; `get_optimizer_wrapper_fn`
(learner/optimizers/factory.py) names the MoXing-style ones. Nothing is
imported here, so each module imports only what it needs.
"""
