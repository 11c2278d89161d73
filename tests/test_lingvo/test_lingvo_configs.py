"""Real Lingvo configs against values recorded from Lingvo 0.14.2 (issue 23).

Data: tests/data/lingvo_0_14_2_task.json (how it was recorded: its
`command` field and tests/data/README.md). For each of its 14 configs (the
training blocks of lingvo/tasks/... at the recorded commit):

* today: the learner that Lingvo's ExtractLearnerFromLegacyParams built from
  the block (recorded as params) is rebuilt here as `Learner.Params()` with
  the same classes and values (the legacy keys moved by hand, as the issue
  did) and must give Lingvo's rate at the 20 recorded steps and Lingvo's
  weights after each of 5 steps on the recorded linear regression;
* the verbatim block runs unchanged on our BaseTask.Params(), leaves p.train
  as Lingvo's does, and the learner built from it (by
  `task_params.ExtractLearnerFromLegacyParams`, Lingvo's function beside
  the other p.train keys) gives
  the same numbers; that function moves Lingvo's 16 keys and keeps the
  rest; BaseTask.Params().train / .eval carry Lingvo's keys and defaults
  except rows of docs/lingvo.md's "Param differences" (class
  'BaseTask.train' / 'BaseTask.eval'); XLAShardingAdafactor from a warm
  start at global step 10,000 gives Lingvo's weights.
All 14 blocks run unchanged. The three car configs call Lingvo's
lingvo/tasks/car/lr_util.py, bound here to ours
(learner/training/model/lr_util.py), and Waymo CenterPoint reads
`cluster_factory.Current().total_worker_devices`
(learner/training/cluster/cluster_factory.py; 1 outside a strategy, as
Lingvo's one-worker cluster the numbers were recorded with) and sets
ema_decay_moving_vars=True, which the task's knob check accepts (nothing
to average: these tasks have no non-trainable model variables; see
docs/lingvo.md). BaseTask's knob check still refuses LibriSpeech's
vn_std (variational noise is not offered yet): `_REFUSED_BY_TASK`.
"""

import json
import os
import types

import numpy as np
import pytest
import tensorflow as tf

import schedules
from learner import learner as learner_lib
from learner import optimizers
from learner.grad_norm_tracker import GradNormTracker
from learner.training.cluster import cluster_factory
from learner.training.model import lr_util
from learner.training.model import task_params
from learner.training.model.task import BaseTask
from params import NestedMap

_DATA = os.path.join(os.path.dirname(__file__), '..', 'data',
                     'lingvo_0_14_2_task.json')
with open(_DATA) as _f:
  DATA = json.load(_f)
with open(os.path.join(os.path.dirname(_DATA),
                       'lingvo_0_14_2_params.json')) as _f:
  _LINGVO_BASE_LAYER_KEYS = set(json.load(_f)['classes'][
      'lingvo.core.base_layer.BaseLayer']['params'])

CONFIGS = {c['id']: c for c in DATA['configs']}
# Learner params of Lingvo that ours does not have (TF1 gradient arguments;
# Learner's docstring, "absent").
_ABSENT_LEARNER_KEYS = {'grad_aggregation_method', 'gate_gradients',
                        'colocate_gradients_with_ops', 'scale_gradients',
                        'learner_use_variable_scope', 'skip_zero_gradients'}
# Rate and weights: float32 on both sides, different op orders.
RTOL, ATOL = 2e-5, 1e-7


def _OurClass(lingvo_cls):
  """Our class for a Lingvo class path 'lingvo.core.<module>.<Name>'."""
  name = lingvo_cls.rsplit('.', 1)[1]
  if name == 'GradNormTracker':
    return GradNormTracker
  if name == 'Learner':
    return learner_lib.Learner
  for mod in (optimizers, schedules):
    if hasattr(mod, name):
      return getattr(mod, name)
  raise KeyError('no class named %r here (Lingvo %s)' % (name, lingvo_cls))


def _OurParams(rec, top=False):
  """Our Params with the classes and values of recorded Lingvo params."""
  p = _OurClass(rec['cls']).Params()
  ours = set(k for k, _ in p.IterParams())
  for k, v in rec['params'].items():
    if k not in ours:
      if k in _LINGVO_BASE_LAYER_KEYS or (top and k in _ABSENT_LEARNER_KEYS):
        continue
      raise KeyError('%s has no param %r (Lingvo value %r)' %
                     (rec['cls'], k, v))
    if isinstance(v, dict) and 'cls' in v:
      v = _OurParams(v)
    elif isinstance(v, dict):
      continue  # A dtype or other non-literal: ours keeps its default.
    p.Set(**{k: v})
  return p


def _LearnerParams(cfg):
  lp = _OurParams({'cls': cfg['learner_cls'], 'params': cfg['learner']},
                  top=True)
  return lp.Set(lr_schedule_step='global_step')


def _Problem():
  pr = DATA['problem']
  return (np.array(pr['x'], np.float32), np.array(pr['y'], np.float32),
          np.array(pr['w0'], np.float32), np.float32(pr['b0']))


def _Run(lp, cfg):
  """(rates at cfg['lr_steps'], [(w per step, b per step) per window])."""
  x, y, w0, b0 = _Problem()
  rates, windows = [], []
  for start in [None] + [win['start_step'] for win in cfg['windows']]:
    gs = tf.Variable(0, dtype=tf.int64)
    w, b = tf.Variable(w0, name='w'), tf.Variable(b0, name='b')
    vmap = NestedMap(w=w, b=b)
    learner = lp.Copy().Instantiate()
    learner.Bind(vmap, global_step=gs)
    if start is None:
      for s in cfg['lr_steps']:
        gs.assign(s)
        rates.append(float(learner.LearningRate().numpy()))
      continue

    @tf.function
    def _Step():
      loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, w) + b - y))
      learner.Apply({'loss': (loss, tf.constant(1.0))}, vmap)  # pylint: disable=cell-var-from-loop
      gs.assign_add(1)  # pylint: disable=cell-var-from-loop

    gs.assign(start)
    ws, bs = [], []
    for _ in range(5):
      _Step()
      ws.append(w.numpy().tolist())
      bs.append(float(b.numpy()))
    windows.append((ws, bs))
  return rates, windows


def _Check(rates, windows, cfg):
  np.testing.assert_allclose(rates, cfg['lr'], rtol=RTOL, atol=0)
  assert len(windows) == len(cfg['windows'])
  for (ws, bs), rec in zip(windows, cfg['windows']):
    np.testing.assert_allclose(ws, rec['w'], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(bs, rec['b'], rtol=RTOL, atol=ATOL)


def test_recorded_file_has_14_configs_and_20_rates_each():
  assert len(CONFIGS) == 14
  assert DATA['lingvo_version'] == '0.14.2'
  for cfg in CONFIGS.values():
    assert len(cfg['lr_steps']) == 20, cfg['id']
    assert cfg['lr_steps'][-1] == cfg['horizon'], cfg['id']
    assert all(len(w['w']) == 5 for w in cfg['windows']), cfg['id']


@pytest.mark.parametrize('cid', sorted(CONFIGS))
def test_learner_moved_by_hand_matches_lingvo(cid):
  cfg = CONFIGS[cid]
  rates, windows = _Run(_LearnerParams(cfg), cfg)
  _Check(rates, windows, cfg)


# ---- The verbatim blocks on BaseTask.Params() (issue 23). ----


def _OurNamespace(cfg, p):
  """The block's names, bound to ours (only imports differ from Lingvo)."""
  me = types.SimpleNamespace(**cfg['self_attrs'])
  train_input = types.SimpleNamespace(**cfg['train_input'])
  me.Train = lambda: train_input
  layers = types.SimpleNamespace(GradNormTracker=GradNormTracker)
  return {'p': p, 'tp': p.train, 'self': me, 'optimizer': optimizers,
          'schedule': schedules, 'layers': layers, 'lingvo_layers': layers,
          'train_input_p': train_input, 'TrainerInputParams': lambda fn: fn(),
          'lr_util': lr_util, 'cluster_factory': cluster_factory,
          'device_assignment_lib': types.SimpleNamespace(
              DeviceOrderMode=types.SimpleNamespace(MESH='MESH'))}


_NEEDS_LR_UTIL = sorted(c for c in CONFIGS if 'lr_util' in CONFIGS[c]['stubs'])


def test_the_three_car_blocks_are_the_ones_that_call_lr_util():
  assert _NEEDS_LR_UTIL == ['kitti_starnet_cars', 'waymo_centerpoint_vehicle',
                            'waymo_starnet']


# Blocks whose knobs BaseTask refuses (docs/lingvo.md, "The task's train
# params"): LibriSpeech's variational noise is not offered yet.
_REFUSED_BY_TASK = {'librispeech_960_base': r'^task\.train\.vn_std : 0\.075: '}


@pytest.mark.parametrize('cid', sorted(CONFIGS))
def test_verbatim_block_builds_and_matches_lingvo(cid):
  cfg = CONFIGS[cid]
  p = BaseTask.Params()
  p.name = 'task'
  for k, v in cfg['task_train_keys'].items():
    p.train.Define(k, v, '')
  exec(cfg['prelude'] + cfg['block'], _OurNamespace(cfg, p))  # pylint: disable=exec-used
  for k, v in cfg['train_set'].items():
    if not isinstance(v, dict):
      assert getattr(p.train, k) == v, k
  assert p.train.max_steps == cfg['horizon']
  if cid in _REFUSED_BY_TASK:  # What BaseTask checks at build.
    with pytest.raises(ValueError, match=_REFUSED_BY_TASK[cid]):
      task_params.CheckLingvoKnobs(p.train)
  else:
    task_params.CheckLingvoKnobs(p.train)
  lp = task_params.ExtractLearnerFromLegacyParams(p.train.Copy())
  assert lp.name == DATA['legacy']['learner_name']
  rates, windows = _Run(lp.Set(lr_schedule_step='global_step'), cfg)
  _Check(rates, windows, cfg)


def test_extract_learner_moves_lingvos_legacy_keys():
  leg = DATA['legacy']
  assert len(leg['moved']) == 16 and leg['learner_name'] == 'loss'
  tp = BaseTask.Params().train
  lp = task_params.ExtractLearnerFromLegacyParams(tp)
  assert lp.name == leg['learner_name']
  for k in leg['moved']:
    assert getattr(tp, k) is None, k  # Moved: cleared on p.train.
  defaults = DATA['task_params']['train']
  for k in leg['kept']:
    if not isinstance(defaults[k], dict):
      assert getattr(tp, k) == defaults[k], k  # Kept: untouched.
  assert lp.learning_rate == leg['learner']['learning_rate']
  assert lp.optimizer.cls.__name__ == 'Adam'  # Lingvo's p.train default.


def _AllowList():
  """{(class name, param): kind} of docs/lingvo.md's "Param differences".

  The same table test_params_match.py reads; rows for the task's params
  name the class 'BaseTask.train' or 'BaseTask.eval'.
  """
  import importlib.util  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(__file__), 'test_params_match.py')
  spec = importlib.util.spec_from_file_location('_params_match', path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod._AllowList()  # pylint: disable=protected-access


def _TaskDifferences(part):
  """{key: kind} where our BaseTask.Params().<part> differs from Lingvo's.

  kind: 'missing' (Lingvo's key absent here), 'extra' (ours only) or
  'default'. A nested Params default compares by class name only.
  """
  ours = dict(getattr(BaseTask.Params(), part).IterParams())
  lingvo = DATA['task_params'][part]
  out = {}
  for k in set(ours) | set(lingvo):
    if k not in ours:
      out[k] = 'missing'
    elif k not in lingvo:
      out[k] = 'extra'
    else:
      a, b = lingvo[k], ours[k]
      if isinstance(a, dict) and 'cls' in a:
        same = (getattr(b, 'cls', None) is not None and
                a['cls'].rsplit('.', 1)[1] == b.cls.__name__)
      else:
        same = type(a) is type(b) and a == b
      if not same:
        out[k] = 'default'
  return out


@pytest.mark.parametrize('part', ['train', 'eval'])
def test_base_task_train_and_eval_keys_are_lingvos(part):
  allowed = _AllowList()
  name = 'BaseTask.' + part
  undocumented = {k: v for k, v in _TaskDifferences(part).items()
                  if allowed.get((name, k)) != v}
  assert not undocumented, (
      '%s differs from Lingvo 0.14.2 in %s; fix it or add a row to the '
      '"Param differences" table of docs/lingvo.md.' %
      (name, sorted(undocumented.items())))
  diffs = _TaskDifferences(part)
  stale = [k for (n, k) in allowed if n == name and k not in diffs]
  assert not stale, ('docs/lingvo.md lists %s.%s as a difference, but it '
                     'matches Lingvo now: remove the row.' % (name, stale))


@pytest.mark.parametrize('case', range(len(DATA['adafactor']['cases'])))
def test_xla_sharding_adafactor_warm_start(case):
  rec = DATA['adafactor']['cases'][case]
  pr = DATA['adafactor']['problem']
  op = optimizers.XLAShardingAdafactor.Params().Set(
      **{k: v for k, v in rec['optimizer'].items()
         if k not in _LINGVO_BASE_LAYER_KEYS})
  lp = learner_lib.Learner.Params().Set(
      learning_rate=DATA['adafactor']['learning_rate'], optimizer=op,
      lr_schedule=schedules.Constant.Params(), lr_schedule_step='global_step')
  x, y = np.array(pr['x'], np.float32), np.array(pr['y'], np.float32)
  w = tf.Variable(np.array(pr['w0'], np.float32), name='w')
  b = tf.Variable(np.array(pr['b0'], np.float32), name='b')
  gs = tf.Variable(rec['start_step'], dtype=tf.int64)
  vmap = NestedMap(w=w, b=b)
  learner = lp.Instantiate()
  learner.Bind(vmap, global_step=gs)

  @tf.function
  def _Step():
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    learner.Apply({'loss': (loss, tf.constant(1.0))}, vmap)
    gs.assign_add(1)

  for i in range(5):
    _Step()
    np.testing.assert_allclose(w.numpy(), rec['w'][i], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(b.numpy(), rec['b'][i], rtol=RTOL, atol=ATOL)
