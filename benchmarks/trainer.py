"""Benchmark: digits.MlpMomentum through our trainer vs Keras model.fit.

    python -m benchmarks.trainer [--quick] [--steps=1200] [--repeats=N]
                                 [--output=PATH]

Both sides run in their own subprocess (so each one's peak RSS is its own)
in the same run, on the same data pipeline (the experiment's
`train_input`, the digits train split in batches of 64) for `--steps`
steps:
  * `ours`: `learner.trainer.Trainer(mode='train')` on the registered
    `digits.MlpMomentum` (MLP 64-128-10, Momentum(0.9), 0.2 at batch 128
    linearly scaled to batch 64, 50-step warmup then cosine to 1 %,
    global-norm clip 5), with its checkpoints and summaries as configured;
  * `keras`: the same model (Glorot-uniform kernels, zero biases), batch,
    optimizer (Keras SGD(momentum=0.9), i.e. Keras's velocity form),
    schedule (a LearningRateSchedule with the same formula) and clipping
    (global_clipnorm) through `model.compile` + `model.fit` with Keras's
    defaults (no callbacks).
Reported per side: wall time from the experiment's params to the trained
model (loading the data, building the model/task and its optimizer, tracing
and every step; ours also writes its params, summaries and checkpoints), steps/s = steps / that time, peak RSS, and the final training
loss (ours: the last step's; Keras: evaluated on the next training batch
after fit, since fit's history holds the epoch's running mean) as a sanity
check that both trained; the two Momentum forms differ in how a rate change
takes effect, so the losses agree only roughly. The target
(issue 8): ours >= 1.0x Keras's steps/s.
"""

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time

from benchmarks import child_process
from benchmarks import timing

MODEL = 'digits.MlpMomentum'
_RESULT_PREFIX = 'TRAINER_RESULT '


def _PeakRss():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _ExperimentParams(steps):
  from learner.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  return trainer_lib.LoadExperimentParams(MODEL, max_steps=steps)


def RunOurs(steps):
  """Trains MODEL with our Trainer for `steps` steps; returns a result dict."""
  from learner.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  params = _ExperimentParams(steps)
  with tempfile.TemporaryDirectory() as logdir:
    with open(os.devnull, 'w') as devnull:
      start = time.perf_counter()
      metrics = trainer_lib.Trainer(params, logdir, mode='train', tty=False,
                                    stream=devnull).Run()
      wall = time.perf_counter() - start
  loss = metrics.get('train/loss', metrics.get('loss'))
  return dict(side='ours', steps=steps, wall_s=wall, steps_per_s=steps / wall,
              final_loss=loss, peak_rss=_PeakRss())


def RunKeras(steps):
  """Trains the same model with Keras model.fit; returns a result dict."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  params = _ExperimentParams(steps)
  # The clock starts before the data is loaded and the model built, as ours
  # starts before the Trainer loads the data and builds the task.
  start = time.perf_counter()
  input_gen = params.train_input.Instantiate()
  dataset = input_gen.GetDataset().map(
      lambda b: (b['features'], b['labels']))
  task = params.task
  warmup = 50
  total = task.train.max_steps - warmup
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
  history = model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
  wall = time.perf_counter() - start
  del history  # Its 'loss' is the epoch's running mean, not the last loss.
  final = model.evaluate(dataset.take(1), verbose=0, return_dict=True)
  return dict(side='keras', steps=steps, wall_s=wall,
              steps_per_s=steps / wall, final_loss=float(final['loss']),
              jit_compile=str(getattr(model, 'jit_compile', None)),
              peak_rss=_PeakRss())


def _Spawn(side, steps):
  return child_process.SpawnChild(
      'benchmarks.trainer', ['--child=%s' % side, '--steps=%d' % steps],
      side, _RESULT_PREFIX)


def ParseArgs(argv):
  """Parses command-line flags (argv without the program name)."""
  parser = argparse.ArgumentParser(
      prog='python -m benchmarks.trainer', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--quick', action='store_true',
                      help='200 steps instead of the experiment\'s 1200.')
  parser.add_argument('--steps', type=int, default=None)
  parser.add_argument('--child', default=None, choices=['ours', 'keras'],
                      help=argparse.SUPPRESS)
  parser.add_argument('--output', default=None)
  parser.add_argument('--repeats', type=int, default=1,
                      help='Runs per side, alternating ours and keras; the '
                      'table shows each side\'s median (lower median for an '
                      'even count) and the JSON every wall time.')
  args = parser.parse_args(argv)
  if args.steps is None:
    args.steps = 200 if args.quick else 1200
  if args.repeats < 1:
    parser.error('--repeats=%d must be >= 1.' % args.repeats)
  if args.steps < 1:
    parser.error('--steps=%d must be >= 1.' % args.steps)
  return args


def main(argv=None):
  """Runs both sides; prints the table; returns the JSON payload."""
  args = ParseArgs(sys.argv[1:] if argv is None else argv)
  if args.child:
    run = RunOurs if args.child == 'ours' else RunKeras
    result = run(args.steps)
    print(_RESULT_PREFIX + json.dumps(result))
    sys.stdout.flush()
    return result
  results, notes = {}, []
  runs = {'ours': [], 'keras': []}
  # Sides alternate (ours, keras, ours, keras, ...) so that a change of the
  # machine's load during the run hits both; each side reports its run of
  # median wall time.
  for _ in range(args.repeats):
    for side in ('ours', 'keras'):
      res, err = _Spawn(side, args.steps)
      if res is None:
        notes.append(err)
      else:
        runs[side].append(res)
  for side, rs in runs.items():
    if rs:
      rs = sorted(rs, key=lambda r: r['wall_s'])
      results[side] = dict(rs[(len(rs) - 1) // 2],
                           all_wall_s=[r['wall_s'] for r in rs])
  table = []
  for side, r in results.items():
    ratio = (r['steps_per_s'] / results['keras']['steps_per_s']
             if 'keras' in results else None)
    r['steps_per_s_ratio_to_keras'] = ratio
    table.append([side, r['steps'], r['wall_s'], r['steps_per_s'], ratio,
                  r['peak_rss'] / 2**20, r['final_loss']])
  print('%s, %d steps of batch 64 (wall time includes set-up and tracing)' %
        (MODEL, args.steps))
  print(timing.FormatTable(['side', 'steps', 'wall_s', 'steps/s', 'x_keras',
                            'peak_MiB', 'final_loss'], table))
  targets = []
  if 'ours' in results and 'keras' in results:
    v = results['ours']['steps_per_s_ratio_to_keras']
    targets.append(dict(target='trainer steps/s / keras >= 1.0', value=v,
                        met=v >= 1.0))
    print('target: trainer steps/s / keras >= 1.0: %.2f %s' %
          (v, 'met' if v >= 1.0 else 'MISSED'))
  for note in notes:
    print('note: ' + note)
  payload = dict(benchmark='trainer', model=MODEL, steps=args.steps,
                 results=results, targets=targets, notes=notes)
  path = timing.WriteJson(args.output or timing.DefaultOutputPath('trainer'),
                          payload)
  print('wrote ' + path)
  return payload


if __name__ == '__main__':
  main()
