"""Warm start: initialising variables from another run's checkpoint.

The trainer's `init_from_checkpoint` (with our list of (regex,
replacement) rules) and Lingvo's `init_from_checkpoint_rules` (its dict of
load and ignore rules, `LingvoInitRules`) both land here: the source
checkpoint's variables are found by name (its `variable_names.json`, written
by `checkpointer.Checkpointer.Save`, or its checkpoint keys), mapped to ours
by the rules, checked for shape, and assigned. Only the variables passed in
are touched; nothing is resumed (that is `checkpointer.Checkpointer.Restore`).
"""

import collections
import json
import os
import re

from absl import logging
import tensorflow as tf

from learner.training.services import checkpointer
from params import VariableName


class LingvoInitRules(collections.namedtuple('LingvoInitRules',
                                             ['load', 'ignore'])):
  """One checkpoint's rules in Lingvo's `init_from_checkpoint_rules` form.

  load: [(regex, format)]: our variable whose name re.match-es the first
    such regex takes the checkpoint variable named `format % groups`.
  ignore: [regex]: our variables whose name re.match-es one are not
    loaded. Source: Lingvo's `py_utils.OverrideVarsFromCheckpoint`.
  """


def ByName(variables):
  """{variable name: variable}: the form `InitFromCheckpoint` takes.

  Args:
    variables: iterable of tf.Variable (e.g. a task's ModelVars().Flatten()).

  Returns:
    dict keyed by `params.VariableName` (e.g. 'task/enc/w', no ':0').
  """
  return {VariableName(v): v for v in variables}


def InitFromCheckpoint(path, variables, rules=()):
  """Warm-starts `variables` from another run's checkpoint by variable name.

  Names in the source checkpoint come from its `variable_names.json` (written
  by `Checkpointer.Save`) or, without it, from its checkpoint keys
  ('task/_private_children/enc/_private_vars/w' -> 'task/enc/w'). Each source
  name is mapped with the first rule (regex, replacement) whose regex
  `re.search`-es it (`re.sub`), or kept as it is when `rules` is empty; a
  mapped name that is one of `variables` is assigned. With Lingvo's rules
  (`LingvoInitRules`) the mapping goes the other way, from each of our names
  to a source name. Only `variables` are touched (pass the model variables:
  optimizer slots are not taken).

  Args:
    path: a checkpoint prefix, or a directory holding checkpoints (or a
      logdir whose 'ckpt' subdirectory holds them).
    variables: {variable name: tf.Variable} to initialise (`ByName`).
    rules: list of (regex, replacement) pairs, or a LingvoInitRules.

  Returns:
    {our variable name: source variable name} of the variables assigned.

  Raises:
    ValueError: if the checkpoint cannot be found or read, a shape differs,
      or no variable at all is matched (the message lists both sets of
      names).
    checkpointer.CheckpointError: the checkpoint's variable_names.json is
      damaged (naming the file).
  """
  reader, plan = _InitPlan(path, variables, rules)
  assigned = {}
  for dst_name, src_name, key in plan:
    variables[dst_name].assign(reader.get_tensor(key))
    assigned[dst_name] = src_name
  logging.info('Warm-started %d variables from %s: %s', len(assigned), path,
               assigned)
  return assigned


def CheckInitFromCheckpoint(path, variables, rules=()):
  """What `InitFromCheckpoint` would assign, checked without assigning.

  The trainer calls it before anything is written to the logdir, so a
  missing checkpoint or rules that match nothing are refused in one line
  with no file left behind.

  Args, Raises: as `InitFromCheckpoint` (variables may be any objects with
    a `shape`).

  Returns:
    {our variable name: source variable name} it would assign.
  """
  _, plan = _InitPlan(path, variables, rules)
  return {dst: src for dst, src, _ in plan}


def _InitPlan(path, variables, rules):
  """(reader, [(our name, source name, checkpoint key)]) of a warm start."""
  prefix = _ResolveCheckpointPath(path)
  try:
    reader = tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    raise ValueError(
        'init_from_checkpoint: cannot read %r (%s). Give a checkpoint '
        'prefix (e.g. <logdir>/ckpt/ckpt-100), a directory of checkpoints '
        'or a logdir.' % (path, OneLineError(e))) from None
  shapes = reader.get_variable_to_shape_map()
  source = _InitSourceNames(prefix, reader)
  plan = []
  for dst_name, src_name in _InitPairs(source, variables, rules):
    key = source[src_name]
    var = variables[dst_name]
    if list(shapes[key]) != var.shape.as_list():
      raise ValueError(
          'init_from_checkpoint: %r (from %r) has shape %s in the checkpoint '
          'but %s here.' % (dst_name, src_name, list(shapes[key]),
                            var.shape.as_list()))
    plan.append((dst_name, src_name, key))
  if not plan:
    raise ValueError(
        'init_from_checkpoint: no variable of %r matched. Checkpoint '
        'variables: %s; ours: %s; rules: %s. Add (regex, replacement) rules '
        'mapping their names to ours.' % (path, sorted(source),
                                          sorted(variables), list(rules)))
  return reader, plan


def _ResolveCheckpointPath(path):
  """The checkpoint prefix `path` names: itself, or the newest one in it.

  A directory is searched itself, then its 'ckpt' subdirectory (a logdir),
  by `checkpointer.NewestCheckpoint` (the state file, else the complete
  checkpoints on disk).

  Raises:
    ValueError: `path` is a directory with no checkpoint in either place.
  """
  if tf.io.gfile.isdir(path):
    latest = (checkpointer.NewestCheckpoint(path) or
              checkpointer.NewestCheckpoint(os.path.join(path, 'ckpt')))
    if latest is None:
      raise ValueError('init_from_checkpoint: no checkpoint in directory %r '
                       '(nor in its ckpt/). Give a checkpoint prefix, a '
                       'directory of checkpoints or a logdir.' % path)
    return latest
  return path


def _InitSourceNames(prefix, reader):
  """{source variable name: checkpoint key} of the checkpoint at `prefix`."""
  shapes = reader.get_variable_to_shape_map()
  names_file = os.path.join(os.path.dirname(prefix),
                            checkpointer.VARIABLE_NAMES_FILE)
  if tf.io.gfile.exists(names_file):
    source = _ReadJson(names_file, 'init_from_checkpoint: the names file')
    if not isinstance(source, dict):
      raise checkpointer.CheckpointError(
          'init_from_checkpoint: %s holds %s, not {variable name: key}. Put '
          'back a good copy of it, or move it aside.' %
          (names_file, type(source).__name__))
    return {n: k for n, k in source.items() if k in shapes}
  source = {}
  for key in shapes:
    if not key.endswith(checkpointer.VAR_SUFFIX):
      continue
    parts = key[:-len(checkpointer.VAR_SUFFIX)].split('/')
    parts = [s for s in parts if s not in ('_private_children',
                                           '_private_vars')]
    source['/'.join(parts)] = key
  return source


def _ReadJson(path, what):
  """The JSON value in `path`; CheckpointError naming the file otherwise."""
  try:
    with tf.io.gfile.GFile(path) as f:
      return json.load(f)
  except (OSError, tf.errors.OpError, ValueError) as e:
    raise checkpointer.CheckpointError(
        '%s %s cannot be read (%s: %s). %s' % (
            what, path, type(e).__name__, str(e).split('\n')[0],
            'Put back a good copy of it, or move it aside.')) from None


def _InitPairs(source, variables, rules):
  """[(our name, source name)] of a warm start by `rules` (either form)."""
  if isinstance(rules, LingvoInitRules):
    return _LingvoPlan(source, variables, rules)
  pairs = []
  for src_name in sorted(source):
    dst_name = src_name
    if rules:
      dst_name = None
      for regex, repl in rules:
        if re.search(regex, src_name):
          dst_name = re.sub(regex, repl, src_name)
          break
    if dst_name is not None and dst_name in variables:
      pairs.append((dst_name, src_name))
  return pairs


def _LingvoPlan(source, variables, rules):
  """[(our name, source name)] by Lingvo's rules (our name -> source)."""
  pairs = []
  for dst_name in sorted(variables):
    if any(re.match(r, dst_name) for r in rules.ignore):
      continue
    for regex, fmt in rules.load:
      m = re.match(regex, dst_name)
      if m:
        src_name = fmt % m.groups()
        if src_name in source:
          pairs.append((dst_name, src_name))
        break
  return pairs


def OneLineError(error):
  """A TF error's message on one line, without TF's trailing hints."""
  return ' '.join(str(getattr(error, 'message', error)).split())
