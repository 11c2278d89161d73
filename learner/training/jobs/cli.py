r"""The trainer's command line: `python -m learner.trainer --model=... --logdir=...`.

Trains and/or evaluates a registered experiment (see `params.registry`):

    python -m learner.trainer --model=digits.MlpMomentum --logdir=/tmp/mlp
    python -m learner.trainer --list
    python -m learner.trainer --model=digits.MlpMomentum --logdir=/tmp/mlp \
        --mode=eval
    python -m learner.trainer --model=regression.LinearRegression \
        --logdir=/tmp/lr --params_override='task.train.max_steps : 50'

Before the logdir is created the whole experiment is built and checked: a
refused value, or a flag the mode does not read, is one `ERROR:` line
(exit 2; `--verbose` raises it with its traceback) and nothing is written.
A stop by signal is one line and 128 + the signal; a peer that did not
start, exit 1. What a run writes: `learner.training.jobs.trainer`.
"""


import logging as std_logging
import os
import re
import sys

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from params import checks
from params import params_text
from params import registry
from learner import tf_log
from learner.training.services import checkpointer as checkpointer_lib
from learner.training.cluster import distribution
from learner.training.jobs import eval_restore
from learner.training.jobs import evaler as evaler_lib
from learner.training.jobs import export as export_lib
from learner.training.services import logdir as logdir_lib
from learner.training.jobs import mode_keys
from learner.training.jobs.mode_keys import ModeKeys
from learner.training.services import skipped_steps
from learner.training.services import stops
from learner.training.jobs import validate

from learner.training.jobs import trainer as trainer_lib
from learner.training.jobs.trainer import Trainer


def LoadExperimentParams(model, params_file=None, params_override=None,
                         max_steps=None, jit_compile=None, eval_dataset=None):
  """Returns the experiment's params with the file and override applied.

  Everything is validated here, before any work: an unknown model, a typo
  in a key (with "did you mean"), a value of the wrong type.

  Args:
    model: registry key, e.g. 'digits.MlpMomentum'.
    params_file: optional path of a text file of 'key : value' lines rooted
      at the experiment's params ('task.train.max_steps : 10').
    params_override: optional text of the same form ('a : 1; b : 2'),
      applied after the file.
    max_steps: optional int, sets task.train.max_steps.
    jit_compile: optional bool, sets task.train.jit_compile.
    eval_dataset: optional 'eval', 'dev' or 'test': the experiment's
      Eval(), Dev() or Test() as 'eval_input' (default: the first defined).

  Returns:
    Params with 'task', 'train_input', 'eval_input'.

  Raises:
    LookupError: unknown model (with the closest keys).
    ValueError: a bad params file or override line (naming the flag, the
      line and the key), or a file that cannot be read.
  """
  p = registry.GetParams(model, eval_dataset=eval_dataset)
  if params_file:
    text = params_text.ReadTextFile(params_file, '--params_file')
    try:
      p.FromText(text)
    except ValueError as e:
      raise ValueError('--params_file %r: %s' % (params_file, e)) from None
  if params_override:
    try:
      p.FromText(params_override)
    except ValueError as e:
      raise ValueError('--params_override: %s' % e) from None
  if max_steps is not None:
    p.task.train.max_steps = int(max_steps)
  if jit_compile is not None:
    p.task.train.jit_compile = bool(jit_compile)
  return p


def ParseRules(text):
  """Parses 'regex=>replacement;regex2=>replacement2' into a list of pairs.

  Raises:
    ValueError: for a rule without '=>', a regex that does not compile or a
      replacement that refers to a group the regex lacks (naming the flag
      and the rule).
  """
  rules = []
  for part in (text or '').split(';'):
    part = part.strip()
    if not part:
      continue
    if '=>' not in part:
      raise ValueError('--init_from_checkpoint_rules: rule %r has no "=>"; '
                       'write regex=>replacement, separated by ";".' % part)
    regex, repl = part.split('=>', 1)
    rules.append((regex.strip(), repl.strip()))
  checks.CheckRewriteRules('Trainer', '--init_from_checkpoint_rules', rules)
  return rules


FLAGS = flags.FLAGS


def DefineFlags():
  """Defines the trainer's absl flags (once)."""
  if 'model' in FLAGS:
    return
  flags.DEFINE_string('model', None,
                      'Registry key of the experiment, e.g. digits.MlpMomentum.')
  flags.DEFINE_bool('list', False, 'Print every registered experiment and exit.')
  flags.DEFINE_string('logdir', None, 'Output directory (checkpoints, '
                      'summaries, params.txt, metrics.json).')
  flags.DEFINE_enum('mode', ModeKeys.TRAIN,
                    list(ModeKeys.ALL + ModeKeys.JOBS),
                    'train, eval (restore weights and evaluate), '
                    'train_and_eval, or a job that reads the run\'s '
                    'checkpoints: evaler (evaluate each new checkpoint once) '
                    'or export (a SavedModel of the predictions).')
  evaler_lib.DefineFlags()
  export_lib.DefineFlags()
  flags.DEFINE_string('checkpoint', None,
                      '--mode=eval or export: the checkpoint to read, a '
                      'prefix (<logdir>/ckpt/ckpt-200) or a directory of '
                      'checkpoints (<logdir>/best/); default: the newest in '
                      '<logdir>/ckpt. Alias: --export_checkpoint.')
  flags.DEFINE_enum('evaler_dataset', None, ['eval', 'dev', 'test'],
                    '--mode=eval or evaler: evaluate the experiment\'s '
                    'Eval(), Dev() or Test() (Lingvo\'s datasets). Default: '
                    'the first the experiment defines, written under '
                    'eval_job/ or evaler/ (also when named); another under '
                    '<logdir>/eval_job_<dataset> or <logdir>/evaler_<dataset>.')
  flags.DEFINE_string('eval_dir', None,
                      '--mode=eval: write its TensorBoard run and '
                      'metrics.json here instead of <logdir>/eval_job (e.g. '
                      'for a read-only logdir, where it writes nothing '
                      'without this flag).')
  flags.DEFINE_integer('max_steps', None, 'Overrides task.train.max_steps.')
  flags.DEFINE_string('params_override', None,
                      'Params text rooted at the experiment\'s params, e.g. '
                      '"task.train.learner.learning_rate : 0.1; '
                      'task.train.max_steps : 100".')
  flags.DEFINE_string('params_file', None,
                      'File of "key : value" lines applied before '
                      '--params_override.')
  flags.DEFINE_integer('seed', None, 'Global seed; enables TF op determinism.')
  flags.DEFINE_bool('jit_compile', None,
                    'Compile the train step with XLA (overrides '
                    'task.train.jit_compile).')
  flags.DEFINE_string('strategy', 'default',
                      'Distribution strategy: default, mirrored (this '
                      'machine\'s devices), multi_worker (one process per '
                      'worker from TF_CONFIG; start them with '
                      'python -m learner.launcher) or tpu. See '
                      'docs/distributed.md.')
  _DefineClusterFlags()
  flags.DEFINE_integer('cpu_devices', None,
                       '--strategy=mirrored on a machine without a GPU: '
                       'split its CPU into this many logical devices, one '
                       'replica each (to try several replicas, e.g. a '
                       'sharded optimizer state, on one CPU); >= 1.')
  flags.DEFINE_string('init_from_checkpoint', None,
                      'Warm-start the weights from this checkpoint (prefix, '
                      'directory or logdir) when the logdir has none.')
  flags.DEFINE_string('init_from_checkpoint_rules', None,
                      '"regex=>replacement;..." mapping variable names of the '
                      'init checkpoint to ours (re.sub, first match wins).')
  flags.DEFINE_bool('verbose', False,
                    'Show the traceback of a refused value (by default one '
                    'ERROR: line).')
  flags.DEFINE_float('worker_register_timeout_secs',
                     distribution.DEFAULT_REGISTER_TIMEOUT_SECONDS,
                     '--strategy=multi_worker: seconds every worker may take '
                     'to register at start-up; after it each started worker '
                     'fails with one line naming the missing one.')
  flags.DEFINE_integer('tf_log_level', None,
                       'TensorFlow\'s C++ log level (TF_CPP_MIN_LOG_LEVEL): '
                       '0 shows every INFO line, 3 only FATAL ones. Default '
                       'quiet: %s unless TF_CPP_MIN_LOG_LEVEL is set. Read '
                       'by the entry module before TensorFlow starts.' %
                       tf_log.QUIET_LEVEL)


def _DefineClusterFlags():
  """--cluster and --cluster_port (a multi-worker run's cluster source)."""
  flags.DEFINE_enum('cluster', 'tf_config', distribution.CLUSTER_SOURCES,
                    '--strategy=multi_worker: where the cluster comes from: '
                    'tf_config (the TF_CONFIG variable), slurm (the SLURM_* '
                    'variables of an srun step, one task per worker) or '
                    'jobset (a Kubernetes indexed Job: JOB_COMPLETION_INDEX, '
                    'LEARNER_NUM_WORKERS, LEARNER_WORKER_HOST). See '
                    'docs/distributed.md, "Multi-host".')
  flags.DEFINE_integer('cluster_port', distribution.DEFAULT_CLUSTER_PORT,
                       '--cluster=slurm|jobset: the TCP port the workers '
                       'listen on (slurm: the first task of each node; its '
                       'k-th task uses port + k).')


def ListExperiments():
  """Returns 'key  first docstring line' lines of every experiment."""
  keys = registry.GetAllRegisteredKeys()
  width = max([len(k) for k in keys] + [1])
  return '\n'.join('%-*s  %s' % (width, k, registry.Describe(k)) for k in keys)


def _EvalArgs(mode):
  """The Trainer's keyword arguments of mode eval from the flags ({} else)."""
  if mode != ModeKeys.EVAL:
    return {}
  flag, checkpoint = eval_restore.ChosenCheckpoint(FLAGS)
  return dict(checkpoint=checkpoint, checkpoint_flag=flag,
              eval_dir=FLAGS.eval_dir,
              eval_job_dir=logdir_lib.EvalJobDir(
                  FLAGS.evaler_dataset,
                  registry.DefaultEvalDataset(FLAGS.model)))


def _ResumeHint():
  """How to resume the run in --logdir unchanged, in this command's flags."""
  return ('rerun with --params_file=%s and without --params_override, '
          '--max_steps or --jit_compile' %
          os.path.join(FLAGS.logdir, logdir_lib.PARAMS_FILE))


def _Refuse(error):
  """Prints `error` as one ERROR: line; returns exit status 2.

  With --verbose the error is raised again instead, with its traceback.
  """
  if FLAGS.verbose:
    raise error
  print('ERROR: %s' % validate.OneLine(error), file=sys.stderr)
  return 2


# What a numeric flag takes, for the refusal of a value absl cannot parse
# (absl says only "invalid literal for int() with base 10: 'abc'").
_NUMBER_FLAG_EXPECTS = {
    'cpu_devices': 'a positive integer count of logical CPU devices (one '
                   'replica each under --strategy=mirrored), e.g. '
                   '--cpu_devices=2',
    'cluster_port': 'a TCP port in [1, 65535] free on every node, e.g. '
                    '--cluster_port=%d' % distribution.DEFAULT_CLUSTER_PORT,
    'max_steps': 'a positive integer count of global steps, e.g. '
                 '--max_steps=1000',
    'seed': 'an integer in [0, 2**32 - 1], e.g. --seed=1234',
    'tf_log_level': 'an integer from 0 (every INFO line) to 3 (only FATAL '
                    'lines), e.g. --tf_log_level=0',
}


def _FlagErrorLine(error):
  """absl's flag-parsing error as our one line (without 'ERROR: ')."""
  text = validate.OneLine(error)
  enum = re.match(r'^flag --(\w+)=(.*): value should be one of <(.*)>$', text)
  if enum:
    return ('--%s=%s is not one of %s; --help describes them.' %
            (enum.group(1), enum.group(2),
             ', '.join(enum.group(3).split('|'))))
  number = re.match(r'^flag --(\w+)=(.*): (invalid literal for int\(\)|'
                    r'could not convert string to float)', text)
  if number:
    name, value, kind = number.groups()
    kind = 'an integer' if kind.startswith('invalid') else 'a number'
    expects = _NUMBER_FLAG_EXPECTS.get(name, '%s; --help describes it' % kind)
    return '--%s=%s is not %s: --%s takes %s.' % (name, value, kind, name,
                                                 expects)
  if text.startswith('flag --'):
    text = text[len('flag '):]
  return '%s (--help lists every flag).' % text.replace(' ?', '?').rstrip('.')


def ParseFlags(argv):
  """Parses argv into FLAGS; a bad flag is one ERROR: line and exit 2.

  absl's own parser (app.run's default) prints 'FATAL Flags parsing error'
  and a usage hint and exits 1; every other refusal of ours is one line,
  exit 2.

  Returns:
    The arguments absl leaves (argv[0] first).
  """
  try:
    return FLAGS(argv)
  except flags.Error as e:
    print('ERROR: %s' % _FlagErrorLine(e), file=sys.stderr)
    sys.exit(2)


def _RefuseModule(error):
  """Prints an error in the user's experiment module; returns exit status 2.

  A few lines (the user's file, line and message; see
  `registry.ExperimentModuleError`), not the traceback through importlib;
  --verbose raises it again with the whole traceback.
  """
  if FLAGS.verbose:
    raise error
  print('ERROR: %s' % error, file=sys.stderr)
  return 2


def _BadSeedOrLogdir(seed, logdir):
  """The one-line refusal of a --seed or --logdir that cannot work, or None.

  A seed seeds numpy, Python and TF (tf.keras.utils.set_random_seed), whose
  range is [0, 2**32 - 1]; a logdir must be a directory or not exist yet.
  """
  if seed is not None and not 0 <= seed < 2**32:
    return ('--seed=%d is out of range: a seed is an integer in [0, 2**32 - '
            '1] (numpy\'s and TensorFlow\'s range), e.g. --seed=1234.' % seed)
  if tf.io.gfile.exists(logdir) and not tf.io.gfile.isdir(logdir):
    return ('--logdir=%s is an existing file, not a directory: give the '
            'path of a directory (a new one, or the logdir of an earlier run '
            'of this experiment).' % logdir)
  return None


def _BadCluster(cluster, cluster_port, strategy):
  """The one-line refusal of --cluster/--cluster_port, or None.

  Only the flags; the variables of the cluster manager are read (and
  refused) by `distribution.ExportClusterConfig` after the params load.
  """
  if cluster != 'tf_config' and strategy != 'multi_worker':
    return ('--cluster=%s only applies with --strategy=multi_worker (got '
            '--strategy=%s); add --strategy=multi_worker or drop --cluster.' %
            (cluster, strategy))
  try:
    distribution.CheckClusterPort(cluster_port)
  except ValueError as e:
    return str(e)
  return None


def _SplitCpu(cpu_devices, strategy):
  """Splits the CPU into `cpu_devices` logical devices; an error line or None.

  Only with --strategy=mirrored (the strategy that uses every logical CPU
  of a machine without a GPU), before TensorFlow's runtime starts.
  """
  if cpu_devices is None:
    return None
  if isinstance(cpu_devices, bool) or cpu_devices < 1:
    return ('--cpu_devices=%s must be an int >= 1 (the logical CPU devices '
            'of --strategy=mirrored), e.g. --cpu_devices=2.' % cpu_devices)
  if strategy != 'mirrored':
    return ('--cpu_devices=%d only applies with --strategy=mirrored (got '
            '--strategy=%s); drop it or add --strategy=mirrored.' %
            (cpu_devices, strategy))
  try:
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices('CPU')[0],
        [tf.config.LogicalDeviceConfiguration()] * cpu_devices)
  except RuntimeError as e:  # The runtime already started.
    return '--cpu_devices=%d could not be applied: %s' % (cpu_devices, e)
  return None


def main(argv):
  del argv
  if FLAGS.list:
    print(ListExperiments())
    return 0
  # Missing flags get one line, not absl's page of usage text.
  if not FLAGS.model:
    print('ERROR: --model is required, e.g. --model=digits.MlpMomentum '
          '(--list prints every experiment).', file=sys.stderr)
    return 2
  if not FLAGS.logdir:
    print('ERROR: --logdir is required: the directory for checkpoints, '
          'summaries and metrics.json, e.g. --logdir=/tmp/%s.' %
          FLAGS.model.replace('.', '_'), file=sys.stderr)
    return 2
  bad_flag = (mode_keys.FlagNotForMode(FLAGS.mode, FLAGS) or
              _BadSeedOrLogdir(FLAGS.seed, FLAGS.logdir) or
              _BadCluster(FLAGS.cluster, FLAGS.cluster_port, FLAGS.strategy) or
              _SplitCpu(FLAGS.cpu_devices, FLAGS.strategy))
  if bad_flag:
    print('ERROR: %s' % bad_flag, file=sys.stderr)
    return 2
  try:
    params = LoadExperimentParams(FLAGS.model, FLAGS.params_file,
                                  FLAGS.params_override, FLAGS.max_steps,
                                  FLAGS.jit_compile, FLAGS.evaler_dataset)
    rules = (ParseRules(FLAGS.init_from_checkpoint_rules)
             if FLAGS.init_from_checkpoint_rules is not None else None)
    # The jobs that only read the run's checkpoints (evaler.py, export.py).
    if FLAGS.mode == ModeKeys.EVALER:
      return evaler_lib.Main(params, FLAGS)
    if FLAGS.mode == ModeKeys.EXPORT:
      return export_lib.Main(params, FLAGS)
    if FLAGS.cluster != 'tf_config':  # TF_CONFIG from SLURM / Kubernetes.
      distribution.ExportClusterConfig(FLAGS.cluster, FLAGS.cluster_port)
  except registry.ExperimentModuleError as e:
    return _RefuseModule(e)
  except (LookupError, ValueError) as e:
    return _Refuse(e)
  try:
    trainer = Trainer(
        params, FLAGS.logdir, mode=FLAGS.mode, seed=FLAGS.seed,
        strategy=FLAGS.strategy,
        init_from_checkpoint=FLAGS.init_from_checkpoint,
        init_from_checkpoint_rules=rules, resume_hint=_ResumeHint(),
        worker_register_timeout_secs=FLAGS.worker_register_timeout_secs,
        **_EvalArgs(FLAGS.mode))
  except ValueError as e:  # E.g. init_from_checkpoint_rules that cannot work.
    return _Refuse(e)
  try:
    trainer.Run()
  except (validate.ExperimentError, trainer_lib.NothingToEvaluateError,
          checkpointer_lib.CheckpointError) as e:
    return _Refuse(e)
  except stops.StopRequested as e:
    print(str(e), file=sys.stderr, flush=True)
    return e.exit_code
  except skipped_steps.NonFiniteTrainingError as e:
    if FLAGS.verbose:
      raise
    print('ERROR: %s' % validate.OneLine(e), file=sys.stderr)
    return 1
  except distribution.ClusterStartupError as e:
    # A peer that did not start or a duplicate index: exit 1; a cluster
    # that cannot work as written (CheckCluster) is a bad value: exit 2.
    if FLAGS.verbose:
      raise
    print('ERROR: %s' % validate.OneLine(e), file=sys.stderr)
    return 2 if isinstance(e, distribution.ClusterConfigError) else 1
  return 0


class LevelFormatter(std_logging.Formatter):
  """Log records as our commands' lines: 'WARNING: <message>'.

  Not absl's 'W1203 09:15:06.123456 1234 learner.py:376] ' prefix: a
  warning from the learner looks like every other line of ours.
  """

  def __init__(self):
    super().__init__('%(levelname)s: %(message)s')


_HELP_FLAGS = ('--help', '-help', '-h', '-?', '--helpshort', '-helpshort',
               '--helpfull', '-helpfull')


def Usage(full=False):
  """The trainer's --help text: how to run it and its flags."""
  if full:
    flag_help = FLAGS.get_help()
  else:  # This module's flags and the jobs' (evaler.py, export.py).
    flag_help = '\n'.join(
        h for h in (FLAGS.module_help(m) for m in (
            __name__, evaler_lib.__name__, export_lib.__name__)) if h.strip())
  return ('%s\n\nThe console script tf-learner-train is the same command.'
          '\n\nFlags:\n%s\n' % (__doc__.strip(), flag_help))


def Main():
  """Console entry point."""
  registry.AddWorkingDirectoryToPath()  # The user's package, as python -m.
  DefineFlags()
  wanted = [a for a in sys.argv[1:] if a in _HELP_FLAGS]
  if wanted:  # absl's --help shows no flag of ours and exits 1.
    sys.stdout.write(Usage(full=any('full' in a for a in wanted)))
    sys.exit(0)
  quiet = os.environ.get(tf_log.ENV, tf_log.QUIET_LEVEL) >= '2'
  logging.set_verbosity(logging.WARNING if quiet else logging.INFO)
  logging.get_absl_handler().setFormatter(LevelFormatter())
  app.run(lambda argv: sys.exit(main(argv)), flags_parser=ParseFlags)


if __name__ == '__main__':
  Main()
