"""Wrappers with several inner optimizers: Composite (one per variable
group) and AdaGraft (one gives the step norm, the other the direction)."""

import re

import tensorflow as tf

from learner.optimizers import base as base_optimizer
from learner.optimizers import wrapper
from learner.optimizers import var_grad as var_grad_lib
from params import NestedMap
from params import checks

DEFAULT_KEY = 'default_optimizer'


class Composite(base_optimizer.BaseOptimizer):
  """Sends each variable to the optimizer of the group whose regex matches.

  `optimizer_map = {regex: (optimizer params, lr multiplier), ...}`, with an
  optional `'default_optimizer': (params, multiplier)` for the variables no
  regex matches. Regexes use `re.search` on the variable name (no ':0').
  Each group's rate is the learner's scheduled rate times its multiplier
  (Lingvo's CompositeOptimizer ignored the learner's rate; this one does
  not: docs/lingvo.md). Every group's optimizer is applied once per update, so each
  group's `num_updates` equals this wrapper's.
  Groups are children named 'group_<i>' in the map's order, the default
  group 'default'. Not a `wrapper.BaseWrapper`: it has several inner
  optimizers, each bound to a subset of the variables; `inner_optimizers`
  lists them, so an Ema inside a group is found by `EvalAverages()`.

  Raises:
    ValueError: at construction, for an empty map, an entry that is not
      (optimizer params, number), an invalid regex, or a gradient
      accumulation inside (accumulation must be the outermost wrapper); at
      `Bind`, for a variable matched by two regexes (naming it and both) or
      by none when there is no 'default_optimizer' (naming it).
  """

  # Nothing of its own to schedule: each group's params schedule theirs.
  SCHEDULABLE_PARAMS = ()

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'composite'
    p.Define(
        'optimizer_map', {},
        'Dict {regex: (optimizer params, lr multiplier)}; the key '
        '\'default_optimizer\' takes the variables no regex matches.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    wrapper.CheckNoWrapperDecay(self)
    if not p.optimizer_map:
      raise ValueError(
          '%s: optimizer_map is empty; give {regex: (optimizer params, lr '
          'multiplier)}, e.g. {\'enc/\': (SGD.Params(), 1.0)}.' % self.path)
    self._regexes = []
    self._multipliers = []
    group_params = []
    for key, entry in p.optimizer_map.items():
      if (not isinstance(entry, (tuple, list)) or len(entry) != 2 or
          isinstance(entry[1], bool) or
          not isinstance(entry[1], (int, float))):
        raise ValueError(
            '%s: optimizer_map[%r] must be (optimizer params, lr multiplier),'
            ' got %r.' % (self.path, key, entry))
      wrapper.CheckInnerOptimizerParams(
          'Composite', 'optimizer_map[%r]' % key, entry[0])
      if key != DEFAULT_KEY:
        try:
          re.compile(key)
        except re.error as e:
          raise ValueError('%s: optimizer_map key %r is not a valid regex: %s'
                           % (self.path, key, e)) from None
      self._regexes.append(key)
      self._multipliers.append(float(entry[1]))
      group_params.append(entry[0])
    self._groups = []
    for i, (key, gp) in enumerate(zip(self._regexes, group_params)):
      name = 'default' if key == DEFAULT_KEY else 'group_%d' % i
      self._groups.append(self.CreateChild(name, gp))
    self._assignment = {}

  @property
  def inner_optimizers(self):
    """The groups' optimizers, in the map's order."""
    return list(self._groups)

  @classmethod
  def InnerOptimizerParams(cls, p):
    """The groups' optimizer params (entries that are not pairs skipped)."""
    return [e[0] for e in p.optimizer_map.values()
            if isinstance(e, (tuple, list)) and len(e) == 2]

  @property
  def groups(self):
    """List of (regex or 'default_optimizer', multiplier, optimizer)."""
    return list(zip(self._regexes, self._multipliers, self._groups))

  def _GroupOf(self, name):
    matches = [i for i, r in enumerate(self._regexes)
               if r != DEFAULT_KEY and re.search(r, name)]
    if len(matches) > 1:
      raise ValueError(
          '%s: variable %r is matched by more than one optimizer_map regex: '
          '%s. Make the regexes disjoint (e.g. anchor them with ^ or $).' %
          (self.path, name, [self._regexes[i] for i in matches]))
    if matches:
      return matches[0]
    if DEFAULT_KEY in self._regexes:
      return self._regexes.index(DEFAULT_KEY)
    raise ValueError(
        '%s: variable %r is matched by no optimizer_map regex (%s) and there '
        'is no \'default_optimizer\'. Add a regex for it or a '
        '\'default_optimizer\': (params, multiplier) entry.' %
        (self.path, name, [r for r in self._regexes]))

  def Bind(self, vmap):
    """Assigns each variable to its group and binds the group's optimizer.

    Raises:
      ValueError: double match or no match without a default (see class).
    """
    variables = vmap.Flatten() if isinstance(vmap, NestedMap) else list(vmap)
    per_group = [[] for _ in self._groups]
    assignment = {}
    for var in variables:
      name = var_grad_lib.VarName(var)
      assignment[name] = self._GroupOf(name)
      per_group[assignment[name]].append(var)
    super().Bind(variables)
    self._assignment.update(assignment)
    for group, gvars in zip(self._groups, per_group):
      if gvars:
        group.Bind(gvars)
    return self

  def GroupOf(self, var):
    """Returns the optimizer that updates the bound variable `var`."""
    return self._groups[self._assignment[var_grad_lib.VarName(var)]]

  def Apply(self, lr, var_grads):
    """Applies each group's optimizer at lr * its multiplier.

    Args, return value and errors as `BaseOptimizer.Apply` (lr: the
    learner's scheduled rate; an unbound variable raises ValueError).
    """
    lr = tf.convert_to_tensor(lr, tf.float32)
    self._CheckAllBound(var_grads)
    per_group = [NestedMap() for _ in self._groups]
    for n, vg in enumerate(var_grads.Flatten()):
      if vg.grad is not None:
        i = self._assignment[var_grad_lib.VarName(vg.var)]
        per_group[i]['v%d' % n] = vg
    return self._FinishApply([
        group.Apply(lr * mult, gvg)
        for group, mult, gvg in zip(self._groups, self._multipliers, per_group)
    ])


class AdaGraft(base_optimizer.BaseOptimizer):
  """Lingvo's AdaGraft: one optimizer's step norm, another's direction.

  Per variable w (gradient g, the learner's rate lr):
    m = M(w, g, lr) - w        (the magnitude optimizer's step, then undone)
    d = D(w, g, lr_d) - w      (the direction optimizer's step, undone)
    w <- w + (|m| / max(|d|, 1e-30)) d      (w unchanged where |d| = 0)
  with |.| the Frobenius norm of the variable's step and lr_d =
  direction_optimizer_lr, or lr when None. Both inner optimizers keep their
  state (slots, counts) as if each had stepped alone. Source: Agarwal,
  Anil, Hazan, Koren & Zhang, "Disentangling Adaptive Gradient Methods from
  Learning Rates", arXiv:2002.11803 (2020); Lingvo 0.14.2
  lingvo/core/optimizer.py `AdaGraft` and lingvo/core/adagraft.py
  (AdaGraftOptimizer, its rate 1.0), tested in
  tests/test_optimizers/test_adagraft.py against Lingvo itself.

  Children 'magnitude_optimizer' and 'direction_optimizer' (their params
  in the params of the same names; Lingvo takes instantiated layers there).
  Differences from Lingvo (docs/lingvo.md, "Update rules: behaviour that
  differs"): use_global_norm=True is refused (Lingvo 0.14.2's global
  grafting never moves the weights: its `_finish` discards the norm sums);
  `diagnostic` writes no summaries (the norms are not kept as slots);
  sparse gradients are densified and applied (Lingvo: a no-op).

  Raises:
    ValueError: at construction, if magnitude_optimizer or
      direction_optimizer is not optimizer params (or is a gradient
      accumulation), direction_optimizer_lr is not None or a number > 0,
      use_global_norm is True, or this wrapper's own
      decoupled_weight_decay is set; in `Apply`, for an unbound variable.
  """

  SCHEDULABLE_PARAMS = ()
  _INNER = ('magnitude_optimizer', 'direction_optimizer')

  @classmethod
  def Params(cls):
    p = base_optimizer.DefineLingvoBaseParams(super().Params())
    p.name = 'adagraft'
    p.Define('magnitude_optimizer', None,
             'Params of the optimizer providing the step size.')
    p.Define('direction_optimizer', None,
             'Params of the optimizer providing the step direction.')
    p.Define(
        'direction_optimizer_lr', None,
        'Custom constant learning rate passed to direction '
        'optimizer. If None, then pass scheduled lr for both.')
    p.Define('use_global_norm', False, 'Whether to graft global l2 norm. '
             'Only False: Lingvo 0.14.2\'s True never updates.')
    p.Define('diagnostic', False, 'Lingvo: record norm summaries. No effect '
             'here.')
    return p

  @classmethod
  def ValueChecks(cls):
    specs = super().ValueChecks()
    specs['direction_optimizer_lr'] = checks.Real(
        0, low_open=True, none_ok=True, example=0.1,
        why='0 gives a zero direction, so no step')
    return specs

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    wrapper.CheckNoWrapperDecay(self)
    if p.use_global_norm is not False:
      raise ValueError(
          '%s: use_global_norm=%r is refused: Lingvo 0.14.2\'s global '
          'grafting never moves the weights (AdaGraftOptimizer._finish '
          'discards the norm sums). Set use_global_norm=False (per-variable '
          'grafting).' % (checks.Where(self), p.use_global_norm))
    for key in self._INNER:
      wrapper.CheckInnerOptimizerParams('AdaGraft', key, p.Get(key))
      self.CreateChild(key, p.Get(key))

  @property
  def inner_optimizers(self):
    """[the magnitude optimizer, the direction optimizer]."""
    return [self.magnitude_optimizer, self.direction_optimizer]

  @classmethod
  def InnerOptimizerParams(cls, p):
    """The inner optimizers' params (unset ones skipped)."""
    return [p.Get(k) for k in cls._INNER if p.Get(k) is not None]

  def Bind(self, vmap):
    """Binds this wrapper and both inner optimizers to `vmap`."""
    super().Bind(vmap)
    for opt in self.inner_optimizers:
      opt.Bind(vmap)
    return self

  def Apply(self, lr, var_grads):
    """The magnitude step, undone; the direction step, undone; the grafted
    step. Args, return value and errors as `BaseOptimizer.Apply`."""
    p = self.params
    lr = tf.convert_to_tensor(lr, tf.float32)
    self._CheckAllBound(var_grads)
    vgs = NestedMap({'v%d' % n: vg for n, vg in enumerate(
        var_grads.Flatten()) if vg.grad is not None})
    variables = [vg.var for vg in vgs.Flatten()]
    old = [tf.identity(v.read_value()) for v in variables]
    m_norms, undo = self._StepAndUndo(self.magnitude_optimizer, lr, vgs,
                                      variables, old)
    d_lr = lr if p.direction_optimizer_lr is None else tf.constant(
        p.direction_optimizer_lr, tf.float32)
    with tf.control_dependencies(undo):
      op = self.direction_optimizer.Apply(d_lr, vgs)
    ops = []
    with tf.control_dependencies([op] if op is not None else []):
      for v, w0, m_norm in zip(variables, old, m_norms):
        d = v.read_value() - w0
        d_norm = tf.norm(d)
        step = tf.where(d_norm > 0,
                        (m_norm / tf.maximum(d_norm, 1e-30)) * d,
                        tf.zeros_like(d))
        ops.append(v.assign(w0 + step, read_value=False))
    return self._FinishApply(ops)

  @staticmethod
  def _StepAndUndo(opt, lr, vgs, variables, old):
    """([|step| per variable], [ops restoring the variables]) of `opt`."""
    op = opt.Apply(lr, vgs)
    norms, undo = [], []
    with tf.control_dependencies([op] if op is not None else []):
      for v, w0 in zip(variables, old):
        norms.append(tf.norm(v.read_value() - w0))
    with tf.control_dependencies(norms):
      undo = [v.assign(w0, read_value=False) for v, w0 in zip(variables, old)]
    return norms, undo
