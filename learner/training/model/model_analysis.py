"""model_analysis.txt: every model variable, its shape and size, and totals.

As Lingvo's trainer writes it to the logdir: one line per variable (its
name, shape, number of values, dtype and the learners that train it), then
the number of values each learner trains and the totals. A variable that
no learner trains is marked '-' (frozen, or not matched by any filter); a
variable that appears several times in the model (a tied weight) is listed
once.
"""

from learner.optimizers import var_grad as var_grad_lib
from params import IsTrainable


def _Size(var):
  size = 1
  for d in var.shape.as_list():
    size *= int(d)
  return size


def _UniqueVariables(vmap):
  """The model's variables in name order, each once (tied ones too)."""
  seen = {}
  for var in vmap.Flatten():
    seen.setdefault(var_grad_lib.VarName(var), var)
  return [seen[k] for k in sorted(seen)]


def ModelAnalysis(task, learners=()):
  """Returns the text of model_analysis.txt for `task`.

  Args:
    task: a BaseTask (its ModelVars(): the variables the learners may
      train; the global step and optimizer slots are not model variables).
    learners: the task's learners (task.learners when training); each
      learner's GetTrainableVariables(model vars) says what it trains. An
      evaluation-only caller passes none.

  Returns:
    str: a header, one line per variable
    ('<name>  <shape>  <size>  <dtype>  <learners>', learners '-' for
    none, 'frozen' for a variable of a Keras layer set trainable=False),
    the values trained by
    each learner, and 'Total' lines (all values; trainable ones).
  """
  model_vars = task.ModelVars()
  variables = _UniqueVariables(model_vars)
  trained_by = {var_grad_lib.VarName(v): [] for v in variables}
  per_learner = []
  for learner in learners:
    names = sorted({var_grad_lib.VarName(v) for v in
                    learner.GetTrainableVariables(model_vars).Flatten()})
    for n in names:
      trained_by.setdefault(n, []).append(learner.params.name)
    per_learner.append((learner.params.name, names))
  sizes = {var_grad_lib.VarName(v): _Size(v) for v in variables}
  width = max([len(n) for n in sizes] + [8])
  lines = ['%-*s  %-16s  %12s  %-8s  %s' % (width, 'variable', 'shape',
                                            'size', 'dtype', 'learners')]
  for v in variables:
    n = var_grad_lib.VarName(v)
    lines.append('%-*s  %-16s  %12d  %-8s  %s' % (
        width, n, str(v.shape.as_list()), sizes[n], v.dtype.name,
        ','.join(trained_by.get(n)) or _Untrained(v)))
  lines.append('')
  for name, names in per_learner:
    lines.append('Learner %s: %d variables, %d values' %
                 (name, len(names), sum(sizes.get(n, 0) for n in names)))
  trainable = sum(_Size(v) for v in variables if IsTrainable(v))
  lines.append('Total: %d variables, %d values (%d trainable)' %
               (len(variables), sum(sizes.values()), trainable))
  return '\n'.join(lines) + '\n'


def _Untrained(var):
  """The learners column of a variable no learner trains."""
  if getattr(var, 'trainable', False) and not IsTrainable(var):
    return 'frozen'
  return '-'
