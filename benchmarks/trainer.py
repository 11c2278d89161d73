"""Benchmark: experiments through our trainer vs Keras fit and a hand loop.

    python -m benchmarks.trainer [--model=all|digits.MlpMomentum|
                                  lm.CharTransformer|mnist1d.ConvNet]
                                 [--quick] [--sides=ours,keras,loop,...]
                                 [--steps=N] [--warmup_steps=W]
                                 [--repeats=N] [--output=PATH]

Sides (issue 27.2): `ours` (the registered experiment through the Trainer),
`keras` (its Keras twin through model.fit; every model), `loop`
(benchmarks/hand_loop.py: the experiment's own model and update written as
a bare tf.function loop, Adam only: the char LM and mnist1d.ConvNet), and
`ours_jit` / `loop_jit` (the same with jit_compile=True). `steady_x_loop`
divides a side's steady/s by the loop's (by loop_jit's for a _jit side).
Quick mode's W = 10 leaves XLA's first compiled steps in the jit sides'
steady/s: compare the jit sides on full runs.

One table per model (default all three, in one run). Each side of a model
runs in its own subprocess (so each one's peak RSS is its own), one after the
other in the same run, on the same data pipeline (the experiment's
`train_input`), for `--steps` steps.

Columns: `wall_s` and `steps/s` = steps / wall (set-up, tracing and every
step, below); `steady/s` = (steps - W) / (time of step `steps` - time of
step W), i.e. steps/s with the first W steps (tracing, compiling, the first
compiled steps) left out: ours times a step by its log line (at W and at
the end; when W is not the experiment's log_interval_steps, e.g. in quick
mode, log_interval_steps is set to W), Keras by a callback's
on_train_batch_end. `x_keras` divides ours by Keras's in both. A target
line is judged (met / MISSED) only from MIN_JUDGED_STEPS steady steps on.

lm.CharTransformer (`--model=lm.CharTransformer`; 400 steps, W = 50; quick
20 steps, W = 10): ours is the registered experiment through the Trainer
(two learners, checkpoints and summaries as configured); Keras is
benchmarks/char_lm_keras.py's twin (keras.layers MultiHeadAttention,
LayerNormalization, Dense; a tied embedding layer), started from OUR
initial weights (copied; the parameter counts must be equal, 410,087), the
same batches, Adam(0.9, 0.98, 1e-9), TransformerSchedule and per-learner
clipping (a `train_step` override). Before the clock starts the Keras
child checks that both compute the same loss on the first batch (to
1e-5). Target (issue 16): steady steps/s ours / Keras >= 1.0. Side
`ours_muon` is lm.CharTransformerMuon (Muon on the matrices, AdamW on the
rest) through the Trainer, alternating with the others in the same run;
target (issue 40): its steady step <= 1.05x `ours`' (steady steps/s
ours_muon / ours >= 1 / 1.05). Under it a `floor:` line: Muon's
Newton-Schulz timed alone on the same matrices in the ours_muon child
(`NewtonSchulzSeconds`), and the best ratio a Muon step could reach if the
rest of its update cost nothing, 1 / (1 + NS time x ours' steady steps/s).

digits.MlpMomentum (1200 steps, W = 100; quick 200):
  * `ours`: `learner.trainer.Trainer(mode='train')` on the registered
    `digits.MlpMomentum` (MLP 64-128-10, Momentum(0.9), 0.2 at batch 128
    linearly scaled to batch 64, 50-step warmup then cosine to 1 %,
    global-norm clip 5), with its checkpoints and summaries as configured;
  * `keras`: the same model (Glorot-uniform kernels, zero biases), batch,
    optimizer (Keras SGD(momentum=0.9), i.e. Keras's velocity form),
    schedule (a LearningRateSchedule with the same formula) and clipping
    (global_clipnorm) through `model.compile` + `model.fit` with Keras's
    defaults (no callbacks but the clock of `steady/s`).
Reported per side: wall time from the experiment's params to the trained
model (loading the data, building the model/task and its optimizer, tracing
and every step; ours also writes its params, summaries and checkpoints), steps/s = steps / that time, peak RSS, and the final training
loss (ours: the last step's; Keras: evaluated on the next training batch
after fit, since fit's history holds the epoch's running mean) as a sanity
check that both trained; the two Momentum forms differ in how a rate change
takes effect, so the losses agree only roughly. The target
(issue 8): ours >= 1.0x Keras's steps/s (wall).
"""

import argparse
import json
import math
import re
import resource
import sys
import tempfile
import time

from benchmarks import child_process
from benchmarks import timing

DIGITS = 'digits.MlpMomentum'
CHAR_LM = 'lm.CharTransformer'
CONVNET = 'mnist1d.ConvNet'
# The char LM's Muon twin (Muon.TwoLearners: Muon on the matrices, AdamW on
# the rest), run as the char LM's side `ours_muon` (issue 40).
CHAR_LM_MUON = 'lm.CharTransformerMuon'
# Per model: steps (full, quick), the steps left out of steady/s (W) and the
# sides it has (the loop writes Adam only).
_JIT_SIDES = ('ours_jit', 'loop_jit')
MODELS = {DIGITS: dict(steps=(1200, 200), warmup=(100, 100),
                       sides=('ours', 'keras')),
          CHAR_LM: dict(steps=(400, 20), warmup=(50, 10),
                        sides=('ours', 'keras', 'loop') + _JIT_SIDES +
                        ('ours_muon',)),
          CONVNET: dict(steps=(600, 20), warmup=(50, 10),
                        sides=('ours', 'keras', 'loop') + _JIT_SIDES)}
SIDES = ('ours', 'keras', 'loop') + _JIT_SIDES + ('ours_muon',)
_RESULT_PREFIX = 'TRAINER_RESULT '
_LOG_LINE = re.compile(r'^step (\d+)/')


def _PeakRss():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _ExperimentParams(model, steps):
  from learner.training.jobs import cli as cli_lib  # pylint: disable=g-import-not-at-top
  return cli_lib.LoadExperimentParams(model, max_steps=steps)


class _StepClock:
  """A text stream for the Trainer that notes when each log line arrives.

  `times` maps the step of each 'step N/M ...' progress line to
  time.perf_counter() at its writing (after that step's summaries);
  `cpu_times` to time.process_time() then (the CPU seconds of all the
  process's threads: on a shared machine, less moved by the other
  processes than the wall time).
  """

  def __init__(self):
    self.times = {}
    self.cpu_times = {}

  def write(self, text):
    for line in text.splitlines():
      m = _LOG_LINE.match(line)
      if m:
        self.times[int(m.group(1))] = time.perf_counter()
        self.cpu_times[int(m.group(1))] = time.process_time()

  def flush(self):
    pass


def _Steady(times, steps, warmup):
  """(steps - warmup) / (times[steps] - times[warmup]), or None."""
  if warmup >= steps or warmup not in times or steps not in times:
    return None
  return (steps - warmup) / (times[steps] - times[warmup])


def _SteadyCpu(cpu_times, steps, warmup):
  """CPU seconds per step after the first `warmup`: (cpu_times[steps] -
  cpu_times[warmup]) / (steps - warmup), or None."""
  rate = _Steady(cpu_times, steps, warmup)
  return None if rate is None else 1.0 / rate


def _KernelsActive():
  """Whether our fused optimizer kernels are switched on and load."""
  from learner.optimizers.kernels import loader  # pylint: disable=g-import-not-at-top
  return loader.Enabled() and loader.Unavailable() is None


def RunOurs(model, steps, warmup, jit_compile=False, side=None):
  """Trains `model` with our Trainer for `steps` steps; returns a result dict.

  jit_compile: sets the task's train.jit_compile (side `ours_jit`).
  side: the result's side name (default `ours` or `ours_jit`).
  """
  from learner.training.jobs import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  params = _ExperimentParams(model, steps)
  params.task.train.jit_compile = jit_compile
  if warmup < steps and warmup != params.task.train.log_interval_steps:
    params.task.train.log_interval_steps = warmup  # A log line at W.
  clock = _StepClock()
  with tempfile.TemporaryDirectory() as logdir:
    start = time.perf_counter()
    metrics = trainer_lib.Trainer(params, logdir, mode='train', tty=False,
                                  stream=clock).Run()
    wall = time.perf_counter() - start
  loss = metrics.get('train/loss', metrics.get('loss'))
  side = side or ('ours_jit' if jit_compile else 'ours')
  out = dict(side=side, steps=steps,
             wall_s=wall, steps_per_s=steps / wall,
             steady_steps_per_s=_Steady(clock.times, steps, warmup),
             steady_cpu_s_per_step=_SteadyCpu(clock.cpu_times, steps,
                                              warmup),
             warmup_steps=warmup, final_loss=loss,
             fused_kernels=_KernelsActive(), peak_rss=_PeakRss())
  if side == 'ours_muon':
    out['newton_schulz_s'] = NewtonSchulzSeconds(params)
  return out


def NewtonSchulzSeconds(params, calls=20):
  """Seconds per step of Muon's Newton-Schulz alone on `params`' matrices.

  Builds the experiment's task (no training), and for each learner whose
  optimizer is Muon, its `_Orthogonalize` (the rule's steps, coefficients
  and dtype) of every matrix it updates, viewed as Muon views it
  ([fan_in, fan_out], random values), in one tf.function; times `calls`
  calls after one traced call and returns the median. What a Muon step
  adds to the same model's Adam step cannot be less than this without
  changing Muon's numbers (e.g. a bfloat16 iteration), so it sets the
  floor of the `ours_muon` target (issue 40).

  Returns:
    float seconds, or None when no learner of the task is Muon.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from learner.optimizers.rules import muon as muon_lib  # pylint: disable=g-import-not-at-top
  task = params.task.Instantiate()
  task.CreateLearners()
  jobs = []
  for learner in task.learners:
    opt = learner.optimizer
    if isinstance(opt, muon_lib.Muon):
      for v in learner.GetTrainableVariables(task.vars).Flatten():
        shape = muon_lib.MatrixShape(v.shape.as_list())
        jobs.append((opt, tf.random.stateless_normal(shape, [1, 2], dtype=v.dtype)))
  if not jobs:
    return None
  fn = tf.function(lambda: [opt._Orthogonalize(u) for opt, u in jobs])  # pylint: disable=protected-access
  return timing.TimeRows({'ns': fn}, calls, warmup=1, rounds=1)['ns'].median


def _KerasClock():
  """A Keras callback noting time.perf_counter() after each batch (1-based)."""
  import keras  # pylint: disable=g-import-not-at-top

  class _Clock(keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self.times = {}

    def on_train_batch_end(self, batch, logs=None):
      self.times[batch + 1] = time.perf_counter()

  return _Clock()


def _KerasDigits(params, steps):
  """The digits MLP, compiled; returns (model, dataset of (x, y))."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  input_gen = params.train_input.Instantiate()
  dataset = input_gen.GetDataset().map(
      lambda b: (b['features'], b['labels']))
  warmup = 50
  total = params.task.train.max_steps - warmup
  base = 0.2 * 64 / 128

  class _Schedule(keras.optimizers.schedules.LearningRateSchedule):
    """0.1 * min(1, (t+1)/50) * cosine(max(t-50, 0), 1150, alpha=0.01)."""

    def __call__(self, step):
      t = tf.cast(step, tf.float32)
      ramp = tf.minimum(1.0, (t + 1.0) / warmup)
      c = tf.minimum(tf.maximum(t - warmup, 0.0), float(total))
      cos = 0.01 + 0.99 * 0.5 * (1.0 + tf.cos(math.pi * c / total))
      return base * ramp * cos

    def get_config(self):
      return {}

  keras.utils.set_random_seed(1234)
  model = keras.Sequential([
      keras.Input((64,)),
      keras.layers.Dense(128, activation='relu'),
      keras.layers.Dense(10),
  ])
  model.compile(
      optimizer=keras.optimizers.SGD(learning_rate=_Schedule(), momentum=0.9,
                                     global_clipnorm=5.0),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=['accuracy'])
  del steps
  return model, dataset


def _CheckFirstLoss(task, model, batch, inputs_key, what, config):
  """Raises unless the Keras twin's loss on `batch` is our task's (to 1e-5).

  Raises:
    ValueError: naming both losses and the config the twin must mirror.
  """
  from params import NestedMap  # pylint: disable=g-import-not-at-top
  ours = float(task.FProp(task.theta, NestedMap(batch))[0]['loss'][0])
  theirs = float(model.compute_loss(y=batch['labels'],
                                    y_pred=model(batch[inputs_key])))
  if abs(ours - theirs) > 1e-5 * abs(ours):
    raise ValueError('%s loss on the first batch: ours %r, the Keras twin %r; '
                     'the twin must mirror %s.' % (what, ours, theirs, config))


def _KerasCharLm(params, steps):
  """benchmarks/char_lm_keras.py's twin, from our task's initial weights.

  Raises:
    ValueError: the parameter counts differ, or the twin's loss on the
      first batch is not ours (naming both).
  """
  from benchmarks import char_lm_keras  # pylint: disable=g-import-not-at-top
  from configs import lm  # pylint: disable=g-import-not-at-top
  del steps
  exp = lm.CharTransformer()
  task = params.task.Instantiate()
  model = char_lm_keras.Build(params.task, exp.SEQ_LEN, exp.WARMUP, 0.9,
                              0.98, 1e-9, clip_norm=1.0)
  char_lm_keras.CopyWeights(task, model)
  dataset = params.train_input.Instantiate().GetDataset()
  _CheckFirstLoss(task, model, next(iter(dataset)), 'ids', 'CharTransformer',
                  'configs/lm.py')
  return model, dataset.map(lambda b: (b['ids'], b['labels']))


def _KerasConvNet(params, steps):
  """mnist1d.ConvNet as keras.Sequential, from our task's initial weights.

  The same layers (Conv1D 5 x 32 SAME ReLU + MaxPooling1D 2, three times;
  Flatten; Dense 10), Adam(1e-2, 0.9, 0.999, 1e-7), no clipping, sparse
  cross-entropy on logits and an 'accuracy' metric (ours computes both),
  compiled with Keras's defaults. The kernels and biases are copied from
  our task before training.

  Raises:
    ValueError: the twin's loss on the first batch is not ours (to 1e-5,
      naming both).
  """
  import keras  # pylint: disable=g-import-not-at-top
  del steps
  task = params.task.Instantiate()
  tp = params.task
  layers = [keras.Input((tp.length,)), keras.layers.Reshape((tp.length, 1))]
  for _ in range(tp.num_conv):
    layers += [keras.layers.Conv1D(tp.filters, tp.kernel_size,
                                   padding='same', activation='relu'),
               keras.layers.MaxPooling1D(2)]
  layers += [keras.layers.Flatten(), keras.layers.Dense(tp.num_classes)]
  model = keras.Sequential(layers)
  ours = [getattr(task, 'conv_%d' % i) for i in range(tp.num_conv)]
  theirs = [l for l in model.layers if isinstance(l, keras.layers.Conv1D)]
  for src, dst in zip(ours + [task.head], theirs + [model.layers[-1]]):
    dst.kernel.assign(src.kernel.numpy())
    dst.bias.assign(src.bias.numpy())
  model.compile(
      optimizer=keras.optimizers.Adam(learning_rate=1e-2, beta_1=0.9,
                                      beta_2=0.999, epsilon=1e-7),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=['accuracy'])
  dataset = params.train_input.Instantiate().GetDataset()
  _CheckFirstLoss(task, model, next(iter(dataset)), 'features', 'ConvNet',
                  'configs/mnist1d.py')
  return model, dataset.map(lambda b: (b['features'], b['labels']))


def RunKeras(model_name, steps, warmup):
  """Trains the same model with Keras model.fit; returns a result dict."""
  params = _ExperimentParams(model_name, steps)
  build = {CHAR_LM: _KerasCharLm, CONVNET: _KerasConvNet}.get(
      model_name, _KerasDigits)
  # Digits: the clock starts before the data is loaded and the model built,
  # as ours starts before the Trainer loads the data and builds the task.
  # The char LM's and ConvNet's clocks start after the twin is checked
  # against our task.
  start = time.perf_counter()
  model, dataset = build(params, steps)
  if model_name in (CHAR_LM, CONVNET):
    start = time.perf_counter()
  clock = _KerasClock()
  model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0,
            callbacks=[clock])
  wall = time.perf_counter() - start
  # fit's history holds the epoch's running mean, not the last loss.
  final = model.evaluate(dataset.take(1), verbose=0, return_dict=True)
  return dict(side='keras', steps=steps, wall_s=wall,
              steps_per_s=steps / wall,
              steady_steps_per_s=_Steady(clock.times, steps, warmup),
              warmup_steps=warmup, final_loss=float(final['loss']),
              num_params=int(model.count_params()),
              jit_compile=str(getattr(model, 'jit_compile', None)),
              peak_rss=_PeakRss())


def RunLoop(model, steps, warmup, jit_compile=False):
  """Trains `model` by benchmarks/hand_loop.py; returns a result dict."""
  from benchmarks import hand_loop  # pylint: disable=g-import-not-at-top
  params = _ExperimentParams(model, steps)
  wall, steady, loss = hand_loop.Run(params, steps, warmup, jit_compile)
  return dict(side='loop_jit' if jit_compile else 'loop', steps=steps,
              wall_s=wall, steps_per_s=steps / wall,
              steady_steps_per_s=steady, warmup_steps=warmup,
              final_loss=loss, peak_rss=_PeakRss())


def RunSide(model, side, steps, warmup):
  """Runs one side in this process; returns its result dict."""
  if side == 'keras':
    return RunKeras(model, steps, warmup)
  if side == 'ours_muon':
    return RunOurs(CHAR_LM_MUON, steps, warmup, side=side)
  run = RunLoop if side.startswith('loop') else RunOurs
  return run(model, steps, warmup, jit_compile=side.endswith('_jit'))


def _Spawn(model, side, steps, warmup):
  return child_process.SpawnChild(
      'benchmarks.trainer', ['--child=%s' % side, '--model=%s' % model,
                             '--steps=%d' % steps,
                             '--warmup_steps=%d' % warmup],
      '%s %s' % (model, side), _RESULT_PREFIX)


def ParseArgs(argv):
  """Parses command-line flags (argv without the program name)."""
  parser = argparse.ArgumentParser(
      prog='python -m benchmarks.trainer', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', default='all',
                      choices=['all'] + sorted(MODELS))
  parser.add_argument('--quick', action='store_true',
                      help='Fewer steps (digits 200, char LM 20).')
  parser.add_argument('--steps', type=int, default=None,
                      help='Steps per side (default per model and mode).')
  parser.add_argument('--warmup_steps', type=int, default=None,
                      help='Steps left out of steady/s (default per model '
                      'and mode; at most steps / 2 when --steps is given).')
  parser.add_argument('--child', default=None, choices=list(SIDES),
                      help=argparse.SUPPRESS)
  parser.add_argument('--sides', default=','.join(SIDES),
                      help='Comma-separated sides to run, of %s (each model '
                      'runs those it has; default all).' % ', '.join(SIDES))
  parser.add_argument('--output', default=None)
  parser.add_argument('--repeats', type=int, default=1,
                      help='Runs per side, alternating ours and keras; the '
                      'table shows each side\'s median (lower median for an '
                      'even count) and the JSON every wall time.')
  args = parser.parse_args(argv)
  if args.repeats < 1:
    parser.error('--repeats=%d must be >= 1.' % args.repeats)
  if args.steps is not None and args.steps < 1:
    parser.error('--steps=%d must be >= 1.' % args.steps)
  if args.warmup_steps is not None and args.warmup_steps < 1:
    parser.error('--warmup_steps=%d must be >= 1.' % args.warmup_steps)
  if args.child and args.model == 'all':
    parser.error('--child needs one --model.')
  args.sides = [x for x in args.sides.split(',') if x]
  unknown = [x for x in args.sides if x not in SIDES]
  if unknown or not args.sides:
    parser.error('--sides=%s: %s; choose from %s.' % (
        ','.join(args.sides), 'unknown side %s' % ', '.join(unknown)
        if unknown else 'no side', ', '.join(SIDES)))
  models = sorted(MODELS) if args.model == 'all' else [args.model]
  if not any(x in MODELS[m]['sides'] for m in models for x in args.sides):
    parser.error('--sides=%s: --model=%s has none of them; its sides: %s.' % (
        ','.join(args.sides), args.model, ', '.join(
            x for x in SIDES if any(x in MODELS[m]['sides'] for m in models))))
  return args


def _StepsOf(args, model):
  """(steps, warmup steps) of `model` under the flags."""
  mode = 1 if args.quick else 0
  steps = args.steps or MODELS[model]['steps'][mode]
  warmup = args.warmup_steps
  if warmup is None:
    warmup = MODELS[model]['warmup'][mode]
    if args.steps is not None:
      warmup = min(warmup, max(1, steps // 2))
  return steps, warmup


def _MedianRuns(runs):
  results = {}
  for side, rs in runs.items():
    if rs:
      rs = sorted(rs, key=lambda r: r['wall_s'])
      results[side] = dict(rs[(len(rs) - 1) // 2],
                           all_wall_s=[r['wall_s'] for r in rs],
                           all_steady_steps_per_s=[
                               r['steady_steps_per_s'] for r in rs])
  return results


def _Ratio(results, key, side='ours', base='keras'):
  """results[side][key] / results[base][key], or None if either is missing."""
  ours, other = (results.get(s, {}).get(key) for s in (side, base))
  return ours / other if ours and other else None


# Per model: (side, base, key, bound) of each target (issues 8, 16, 27, 40).
_TARGETS = {
    DIGITS: [('ours', 'keras', 'steps_per_s', 1.0)],
    CHAR_LM: [('ours', 'keras', 'steady_steps_per_s', 1.25),
              ('ours', 'loop', 'steady_steps_per_s', 0.95),
              ('ours_jit', 'loop_jit', 'steady_steps_per_s', 0.95),
              # Issue 40: Muon's steady step <= 1.05x Adam's.
              ('ours_muon', 'ours', 'steady_steps_per_s', 1 / 1.05)],
    CONVNET: [('ours', 'keras', 'steady_steps_per_s', 1.0),
              ('ours', 'loop', 'steady_steps_per_s', 0.95),
              ('ours_jit', 'loop_jit', 'steady_steps_per_s', 0.95)],
}


# Fewer steady steps than this judge no target (timing.MIN_JUDGED_STEPS,
# shared with benchmarks.update_step): a side's first steps after W can
# still hold a retrace or a cold cache (the hand loop's 10 steady steps in
# --quick gave 7.8 steps/s against its 156 over 550).
MIN_JUDGED_STEPS = timing.MIN_JUDGED_STEPS


def _Targets(model, results, steady_steps):
  """The model's target rows [{target, value, met}] for the sides it ran;
  met is None (not judged) below MIN_JUDGED_STEPS steady steps."""
  rows = []
  for side, base, key, bound in _TARGETS[model]:
    value = _Ratio(results, key, side, base)
    if value is not None:
      met = value >= bound if steady_steps >= MIN_JUDGED_STEPS else None
      text = '%s %s / %s >= %.2f' % (
          side, key.replace('_steps_per_s', ' steps/s').replace(
              'steps_per_s', 'steps/s'), base, bound)
      row = dict(target=text, value=value, met=met)
      if side == 'ours_muon':
        row['target'] += ' (%s step <= %.2fx %s\'s, issue 40)' % (
            CHAR_LM_MUON, 1 / bound, model)
        row['floor'] = _MuonFloor(results, base)
      rows.append(row)
  return rows


def _MuonFloor(results, base):
  """ours_muon / `base` steady steps/s with Muon's update costing only its
  Newton-Schulz: 1 / (1 + NS seconds x base's steady steps/s), or None."""
  ns = results.get('ours_muon', {}).get('newton_schulz_s')
  rate = results.get(base, {}).get('steady_steps_per_s')
  return 1.0 / (1.0 + ns * rate) if ns and rate else None


def RunModel(model, args):
  """Both sides of `model`; prints its table; returns its payload part."""
  steps, warmup = _StepsOf(args, model)
  notes = []
  sides = [x for x in MODELS[model]['sides'] if x in args.sides]
  runs = {side: [] for side in sides}
  # Sides alternate (ours, keras, loop, ..., ours, keras, ...) so that a
  # change of the machine's load during the run hits all; each side reports
  # its run of median wall time.
  for _ in range(args.repeats):
    for side in sides:
      res, err = _Spawn(model, side, steps, warmup)
      if res is None:
        notes.append(err)
      else:
        runs[side].append(res)
  results = _MedianRuns(runs)
  table = []
  for side, r in results.items():
    r['steps_per_s_ratio_to_keras'] = _Ratio(results, 'steps_per_s', side)
    r['steady_ratio_to_keras'] = _Ratio(results, 'steady_steps_per_s', side)
    r['steady_ratio_to_loop'] = _Ratio(
        results, 'steady_steps_per_s', side,
        'loop_jit' if side.endswith('_jit') else 'loop')
    table.append([side, r['steps'], r['wall_s'], r['steps_per_s'],
                  r['steps_per_s_ratio_to_keras'], r['steady_steps_per_s'],
                  r['steady_ratio_to_keras'], r['steady_ratio_to_loop'],
                  r['peak_rss'] / 2**20, r['final_loss']])
  print('%s, %d steps (steady/s leaves out the first %d; wall time includes '
        'set-up and tracing; steady_x_loop: against loop, or loop_jit for a '
        '_jit side)' % (model, steps, warmup))
  print(timing.FormatTable(['side', 'steps', 'wall_s', 'steps/s', 'x_keras',
                            'steady/s', 'steady_x_keras', 'steady_x_loop',
                            'peak_MiB', 'final_loss'], table))
  targets = _Targets(model, results, steps - warmup)
  for target in targets:
    too_few = timing.TooFewSteps(steps - warmup, 'steady steps')
    verdict = timing.Verdict(target['met'], too_few and
                             too_few + '; run without --quick')
    print('target: %s: %.2f %s' % (target['target'], target['value'],
                                   verdict))
    if target.get('floor'):
      ns = results['ours_muon']['newton_schulz_s']
      print('  floor: Newton-Schulz alone (float32, %.1f ms per step, '
            'timed apart) leaves at most %.2f even if the rest of Muon\'s '
            'update were free' % (1e3 * ns, target['floor']))
  for note in notes:
    print('note: ' + note)
  return dict(model=model, steps=steps, warmup_steps=warmup, results=results,
              targets=targets, notes=notes)


def main(argv=None):
  """Runs both sides of each model; prints the tables; returns the JSON payload.

  The payload: {'benchmark', 'models': {model: {steps, warmup_steps,
  results: {side: ...}, targets, notes}}, 'targets', 'notes'} (targets and
  notes of every model together).
  """
  args = ParseArgs(sys.argv[1:] if argv is None else argv)
  if args.child:
    steps, warmup = _StepsOf(args, args.model)
    result = RunSide(args.model, args.child, steps, warmup)
    print(_RESULT_PREFIX + json.dumps(result))
    sys.stdout.flush()
    return result
  models = sorted(MODELS) if args.model == 'all' else [args.model]
  parts = {m: RunModel(m, args) for m in models}
  payload = dict(benchmark='trainer', models=parts,
                 targets=[t for p in parts.values() for t in p['targets']],
                 notes=[n for p in parts.values() for n in p['notes']])
  path = timing.WriteJson(args.output or timing.DefaultOutputPath('trainer'),
                          payload)
  print('wrote ' + path)
  return payload


if __name__ == '__main__':
  main()
