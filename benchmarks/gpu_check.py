"""The GPU check: tests, update step and a short char-LM run in one table.

    bash benchmarks/gpu_check.sh          # installs the `gpu` extra, then this
    python -m benchmarks.gpu_check [--out=DIR]

No machine of this project has a GPU today; this is ready for the day one
does (issue 27.6). `gpu_check.sh` looks for a device with `nvidia-smi -L`
first and prints `no GPU: skipped ...` (exit 0) without installing anything
when there is none. Here, on a machine with a GPU, three parts run, each as
its own process with its output kept under --out (default
benchmarks/results/gpu_check/):

  tests        `pytest -m gpu tests/test_gpu`: the Learner's numbers on the
               device against numpy, plain and under jit_compile=True, and
               the CPU-only fused kernels stepping aside;
  update_step  `benchmarks.update_step --quick`: the optimizer step, ours
               (`learner`, `learner_jit`) against TF's fused ops, Keras and
               optax where installed, on both variable sets;
  char_lm      `benchmarks.trainer --model=lm.CharTransformer --quick`: the
               registered experiment through the trainer against Keras fit.

Then one table: per part its status, and the figures a reader compares
(median ms per update-step row; steady steps/s of the char LM per side).

Exit status: 0 when every part ran and the tests passed, 1 otherwise;
2 when TensorFlow sees no GPU although the script was started (the CUDA
driver or the `gpu` extra is missing: the message says which check failed).
"""

import argparse
import json
import os
import subprocess
import sys

_DEFAULT_OUT = os.path.join('benchmarks', 'results', 'gpu_check')


def _Run(name, argv, out_dir):
  """Runs one part; its stdout+stderr go to DIR/NAME.txt. Returns the code."""
  path = os.path.join(out_dir, name + '.txt')
  with open(path, 'w') as log:
    proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT,
                          check=False)
  return proc.returncode


def _Load(path):
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def UpdateStepLines(payload):
  """Table lines for benchmarks.update_step's JSON (None: a missing part).

  Args:
    payload: the dict update_step writes ({'results': [{'set', 'optimizer',
      'rows': {row: {'median_s', ...}}}]}), or None.

  Returns:
    list of str, one per set, optimizer and row: median milliseconds and
    the ratio to the best peer row.
  """
  if not payload:
    return ['update_step   (no results: see update_step.txt)']
  lines = []
  for result in payload.get('results', []):
    for row, r in sorted(result['rows'].items()):
      if 'median_s' not in r:
        continue
      lines.append('update_step   %-8s %-9s %-20s %8.2f ms  x peer %5.2f' % (
          result['set'], result['optimizer'], row, 1e3 * r['median_s'],
          r.get('ratio_to_best_peer') or float('nan')))
  return lines


def CharLmLines(payload):
  """Table lines for benchmarks.trainer's JSON: steady steps/s per side.

  Args:
    payload: the dict benchmarks.trainer writes ({'models': {model:
      {'results': {side: {'steady_steps_per_s', ...}}}}}), or None.

  Returns:
    list of str, one per model and side ('ours', 'keras').
  """
  if not payload:
    return ['char_lm       (no results: see char_lm.txt)']
  lines = []
  for model, part in sorted(payload.get('models', {}).items()):
    for side, r in sorted(part.get('results', {}).items()):
      lines.append('char_lm       %-20s %-6s %8.2f steady steps/s' % (
          model, side, r.get('steady_steps_per_s', float('nan'))))
  return lines or ['char_lm       (no results: see char_lm.txt)']


def Table(codes, update_step, char_lm):
  """The printed table: each part's status, then its figures.

  Args:
    codes: [(part name, exit code)].
    update_step: update_step's JSON payload or None.
    char_lm: benchmarks.trainer's JSON payload or None.

  Returns:
    str, several lines.
  """
  lines = ['part          status']
  for name, code in codes:
    lines.append('%-13s %s' % (name, 'ok' if code == 0 else
                               'FAILED (exit %d)' % code))
  return '\n'.join(lines + UpdateStepLines(update_step) +
                   CharLmLines(char_lm))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', default=_DEFAULT_OUT)
  args = parser.parse_args(argv)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices('GPU')
  if not gpus:
    print('ERROR: TensorFlow sees no GPU (tf.config.list_physical_devices: '
          'none). Check `nvidia-smi` (the driver) and that the `gpu` extra '
          'is installed: pip install -e \'.[gpu,test]\'.', file=sys.stderr)
    return 2
  os.makedirs(args.out, exist_ok=True)
  py = sys.executable
  us_json = os.path.join(args.out, 'update_step.json')
  lm_json = os.path.join(args.out, 'char_lm.json')
  codes = [
      ('tests', _Run('tests', [py, '-m', 'pytest', '-q', '-n', '0', '-m',
                               'gpu', 'tests/test_gpu'], args.out)),
      ('update_step', _Run('update_step', [
          py, '-m', 'benchmarks.update_step', '--quick',
          '--output=' + us_json], args.out)),
      ('char_lm', _Run('char_lm', [
          py, '-m', 'benchmarks.trainer', '--model=lm.CharTransformer',
          '--quick', '--output=' + lm_json], args.out)),
  ]
  print('GPU: ' + ', '.join(g.name for g in gpus))
  print(Table(codes, _Load(us_json), _Load(lm_json)))
  print('outputs in ' + args.out)
  return 0 if all(code == 0 for _, code in codes) else 1


if __name__ == '__main__':
  sys.exit(main())
