r"""Starts N worker processes of a multi-worker run on this machine.

Usage:
  python -m learner.launcher --num_workers=2 [--deadline_secs=3600] \
      -- --model=regression.DistributedLinearRegression \
         --logdir=/tmp/run --strategy=multi_worker

Everything after `--` is passed to each worker, by default
`python -m learner.trainer <args>` (`--module` picks another module and
`--script` a script file). The launcher:
  * picks one free TCP port per worker on 127.0.0.1 at run time (only
    loopback addresses go into TF_CONFIG: TF's gRPC server binds every
    interface, so nothing but this machine's own workers is contacted);
  * writes each worker's TF_CONFIG ({"cluster": {"worker": [...]},
    "task": {"type": "worker", "index": i}}); worker 0 is the chief;
  * refuses, before starting anything (one ERROR line, exit 2), more than
    one trainer worker without `--strategy=multi_worker` in the worker
    arguments: they would be independent trainings writing one logdir;
  * prints each worker's output lines prefixed `[worker i] ` (whole lines,
    never interleaved within one), or writes them to `--log_dir`;
  * waits; when a worker fails it stops every other worker it started (by
    pid: SIGTERM, then SIGKILL after `--grace_secs`) and exits with the
    failed worker's exit code; after `--deadline_secs` it stops all of them
    and exits with code 124 (as `timeout` does);
  * ends with one summary line: the final global step and metrics the
    workers reported and whether their final weights are identical (each
    trainer worker prints a digest of its weights, `Final weights:`).

Several machines: run one worker per machine yourself, with the same
"cluster" list of every machine's host:port and each machine's own "task"
index in TF_CONFIG (see docs/distributed.md); this launcher is for one
machine (tests, debugging, several processes sharing one host).
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

DEADLINE_EXIT_CODE = 124


def PickFreePorts(n, host='127.0.0.1'):
  """Returns `n` distinct TCP ports that were free on `host` just now.

  All sockets are held open until every port is chosen, so the ports are
  distinct; another program could still take one before the worker binds
  it (rare; the run then fails at start-up and can simply be restarted).

  Args:
    n: int >= 1.
    host: str, the address to bind; loopback by default.

  Returns:
    list of n ints.
  """
  sockets = []
  try:
    for _ in range(n):
      s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
      s.bind((host, 0))
      sockets.append(s)
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def MakeTfConfigs(num_workers, host='127.0.0.1', ports=None):
  """Returns the TF_CONFIG JSON string of each of `num_workers` workers.

  Args:
    num_workers: int >= 1.
    host: str, address of every worker (one machine).
    ports: list of ints, one per worker; default free ports picked now.

  Returns:
    list of str, worker i's TF_CONFIG at index i.

  Raises:
    ValueError: num_workers < 1 or a ports list of the wrong length.
  """
  if not isinstance(num_workers, int) or num_workers < 1:
    raise ValueError('num_workers=%r must be an int >= 1.' % (num_workers,))
  ports = PickFreePorts(num_workers, host) if ports is None else list(ports)
  if len(ports) != num_workers:
    raise ValueError('ports has %d entries; expected num_workers=%d.' %
                     (len(ports), num_workers))
  cluster = {'worker': ['%s:%d' % (host, p) for p in ports]}
  return [
      json.dumps({'cluster': cluster, 'task': {'type': 'worker', 'index': i}})
      for i in range(num_workers)
  ]


def StopProcesses(procs, grace_secs=5.0):
  """Stops every still-running process in `procs` by its pid.

  SIGTERM first, SIGKILL after `grace_secs` for those still alive; waits for
  each so none is left as a zombie.

  Args:
    procs: list of subprocess.Popen (processes this program started).
    grace_secs: float seconds between SIGTERM and SIGKILL.
  """
  alive = [p for p in procs if p.poll() is None]
  for p in alive:
    try:
      os.kill(p.pid, signal.SIGTERM)
    except ProcessLookupError:
      pass
  end = time.monotonic() + grace_secs
  for p in alive:
    try:
      p.wait(timeout=max(0.0, end - time.monotonic()))
    except subprocess.TimeoutExpired:
      pass
  for p in alive:
    if p.poll() is None:
      try:
        os.kill(p.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      p.wait()


def StartWorkers(command, num_workers, env=None, log_paths=None,
                 host='127.0.0.1', ports=None, output=None):
  """Starts `num_workers` copies of `command`, each with its own TF_CONFIG.

  Args:
    command: list of str, the worker command line (argv).
    num_workers: int >= 1.
    env: base environment (default os.environ); TF_CONFIG is set per worker.
    log_paths: optional list of file paths, worker i's stdout+stderr go to
      log_paths[i]; default: inherited from this process.
    host: str; loopback by default.
    ports: optional list of ports; default free ones picked now.
    output: optional WorkerOutput; without log_paths, worker i's
      stdout+stderr are piped to it (prefixed lines) instead of inherited.

  Returns:
    list of subprocess.Popen, worker i at index i.
  """
  configs = MakeTfConfigs(num_workers, host, ports)
  base = dict(os.environ if env is None else env)
  procs = []
  try:
    for i, config in enumerate(configs):
      worker_env = dict(base, TF_CONFIG=config)
      out = None
      if log_paths is not None:
        out = open(log_paths[i], 'w')  # pylint: disable=consider-using-with
      elif output is not None:
        out = subprocess.PIPE
      try:
        procs.append(
            subprocess.Popen(
                command, env=worker_env, stdout=out,
                stderr=subprocess.STDOUT if out else None))
      finally:
        if log_paths is not None:
          out.close()
      if out is subprocess.PIPE:
        output.Follow(i, procs[-1].stdout)
  except BaseException:
    StopProcesses(procs)
    raise
  return procs


def WaitForWorkers(procs, deadline_secs, grace_secs=5.0, poll_secs=0.2):
  """Waits for all workers; stops the rest on the first failure or deadline.

  Args:
    procs: list of subprocess.Popen started by `StartWorkers`.
    deadline_secs: float seconds from now after which every worker still
      running is stopped.
    grace_secs: float, SIGTERM-to-SIGKILL delay of `StopProcesses`.
    poll_secs: float, how often exit codes are checked.

  Returns:
    (exit_code, failed_index): 0 and None when every worker exited 0; the
    first failed worker's exit code and index; or (DEADLINE_EXIT_CODE, None)
    at the deadline.
  """
  end = time.monotonic() + deadline_secs
  try:
    while True:
      codes = [p.poll() for p in procs]
      for i, c in enumerate(codes):
        if c not in (None, 0):
          return c, i
      if all(c == 0 for c in codes):
        return 0, None
      if time.monotonic() > end:
        return DEADLINE_EXIT_CODE, None
      time.sleep(poll_secs)
  finally:
    StopProcesses(procs, grace_secs)


# What a trainer worker prints at the end (learner/training/jobs/trainer.py).
_FINAL_METRICS = re.compile(r'^Final metrics \(global step (\d+)\): (\{.*\})$')
_FINAL_WEIGHTS = re.compile(r'^Final weights: sha256 ([0-9a-f]+)')


def ReadReport(line, report):
  """Records a worker's final-report line in `report` (a dict).

  Args:
    line: one output line of a worker, without its newline.
    report: dict updated with 'global_step' (int) and 'metrics' (dict) from
      a `Final metrics (global step N): {...}` line, 'weights' (hex str)
      from a `Final weights: sha256 H` line; other lines change nothing.
  """
  m = _FINAL_METRICS.match(line)
  if m:
    try:
      report['metrics'] = json.loads(m.group(2))
    except ValueError:
      return
    report['global_step'] = int(m.group(1))
    return
  m = _FINAL_WEIGHTS.match(line)
  if m:
    report['weights'] = m.group(1)


class WorkerOutput:
  """Copies each worker's output to one stream as `[worker i] <line>` lines.

  One reader thread per worker; each whole line is written under one lock,
  so the lines of two workers never mix within a line. The final-report
  lines of each worker are kept (`reports[i]`, see `ReadReport`).

  Args:
    stream: where the lines go; default sys.stdout.
  """

  def __init__(self, stream=None):
    self._stream = stream or sys.stdout
    self._lock = threading.Lock()
    self._threads = []
    self.reports = {}

  def Follow(self, index, pipe):
    """Starts copying `pipe` (a worker's binary stdout) as worker `index`."""
    self.reports[index] = {}
    thread = threading.Thread(target=self._Copy, args=(index, pipe),
                              daemon=True)
    thread.start()
    self._threads.append(thread)

  def _Copy(self, index, pipe):
    with pipe:
      for raw in iter(pipe.readline, b''):
        # A progress bar redrawn with '\r' shows its last state.
        line = raw.decode('utf-8', 'replace').rstrip('\r\n').split('\r')[-1]
        ReadReport(line, self.reports[index])
        with self._lock:
          self._stream.write('[worker %d] %s\n' % (index, line))
          self._stream.flush()

  def Join(self, timeout_secs=10.0):
    """Waits until every worker's output is copied (its pipe closed)."""
    end = time.monotonic() + timeout_secs
    for thread in self._threads:
      thread.join(max(0.0, end - time.monotonic()))


def ReadLogReports(log_paths):
  """{worker index: report} read from each worker's log file."""
  reports = {}
  for i, path in enumerate(log_paths):
    reports[i] = {}
    try:
      with open(path, errors='replace') as f:
        for line in f:
          ReadReport(line.rstrip('\r\n').split('\r')[-1], reports[i])
    except OSError:
      pass
  return reports


def Summary(reports):
  """The launcher's closing line for workers that all exited 0.

  Args:
    reports: {worker index: report} (see `ReadReport`).

  Returns:
    str: the final global step of every worker, the chief's (worker 0)
    final metrics and whether the workers' final weights are identical.
  """
  n = len(reports)
  steps = sorted({r['global_step'] for r in reports.values()
                  if 'global_step' in r})
  parts = ['%d worker(s) finished' % n]
  if steps:
    parts.append('final global step %s' % '/'.join(str(x) for x in steps))
  metrics = {k: v for k, v in reports.get(0, {}).get('metrics', {}).items()
             if k != 'global_step'}
  if metrics:
    parts.append('final metrics of worker 0: %s' % ', '.join(
        ('%s %.5g' % (k, v)) if isinstance(v, (int, float)) else
        '%s %s' % (k, v) for k, v in sorted(metrics.items())))
  digests = {i: r['weights'] for i, r in reports.items() if 'weights' in r}
  if not digests:
    parts.append('no worker reported its final weights')
  elif len(digests) < n:
    parts.append('only workers %s reported their final weights' %
                 sorted(digests))
  elif len(set(digests.values())) == 1:
    parts.append('final weights identical on every worker (sha256 %s)' %
                 next(iter(digests.values()))[:16])
  else:
    parts.append('final weights DIFFER: %s' % ', '.join(
        'worker %d sha256 %s' % (i, d[:16]) for i, d in sorted(
            digests.items())))
  return 'launcher: ' + '; '.join(parts) + '.'


_TRAINER_MODULES = ('learner.trainer', 'learner.training.jobs.cli')


def StrategyRefusal(num_workers, module, script, worker_args):
  """Why these workers must not start, or None.

  More than one worker of the trainer without `--strategy=multi_worker`
  would be independent trainings writing the same logdir. For another
  module or a script the launcher cannot know its flags, so only a
  `--strategy` other than multi_worker given in the worker arguments is
  refused.

  Args:
    num_workers: int.
    module: the -m module the workers run (None with `script`).
    script: the script file the workers run, or None.
    worker_args: list of str, the arguments after `--`.

  Returns:
    str, one line naming the flag and the fix; or None.
  """
  if num_workers <= 1:
    return None
  strategy = None
  for i, arg in enumerate(worker_args):
    for flag in ('--strategy', '-strategy'):
      if arg.startswith(flag + '='):
        strategy = arg[len(flag) + 1:]
      elif arg == flag and i + 1 < len(worker_args):
        strategy = worker_args[i + 1]
  if strategy == 'multi_worker':
    return None
  if strategy is None and (script or module not in _TRAINER_MODULES):
    return None
  return ('--num_workers=%d needs --strategy=multi_worker in the worker '
          'arguments (after --), got %s: the workers would be %d independent '
          'trainings writing the same logdir. Add --strategy=multi_worker '
          'after --, or use --num_workers=1.' % (
              num_workers, '--strategy=%s' % strategy if strategy else
              'no --strategy', num_workers))


def _ParseArgs(argv):
  parser = argparse.ArgumentParser(
      prog='python -m learner.launcher',
      description='Start N workers of a MultiWorkerMirroredStrategy run on '
      'this machine (127.0.0.1, free ports). Arguments after -- go to each '
      'worker.')
  parser.add_argument('--num_workers', type=int, default=2,
                      help='Worker processes to start (>= 1).')
  parser.add_argument('--deadline_secs', type=float, default=3600.0,
                      help='Stop every worker after this many seconds.')
  parser.add_argument('--grace_secs', type=float, default=5.0,
                      help='Seconds between SIGTERM and SIGKILL.')
  group = parser.add_mutually_exclusive_group()
  group.add_argument('--module', default='learner.trainer',
                     help='Python module each worker runs with -m.')
  group.add_argument('--script', default=None,
                     help='Python script each worker runs (instead of '
                     '--module).')
  parser.add_argument('--log_dir', default=None,
                      help='If set, worker i logs to <log_dir>/worker_<i>.log '
                      'instead of this terminal.')
  parser.add_argument('--tf_log_level', default=None,
                      help='TensorFlow\'s C++ log level '
                      '(TF_CPP_MIN_LOG_LEVEL) of the launcher and its '
                      'workers: 0 shows every INFO line; default 3 (only '
                      'FATAL) unless TF_CPP_MIN_LOG_LEVEL is set. Read '
                      'before TensorFlow starts (learner/tf_log.py).')
  if '--' in argv:
    cut = argv.index('--')
    own, rest = argv[:cut], argv[cut + 1:]
  else:
    own, rest = argv, []
  args = parser.parse_args(own)
  if args.num_workers < 1:
    parser.error('--num_workers=%d must be >= 1.' % args.num_workers)
  if args.deadline_secs <= 0:
    parser.error('--deadline_secs=%s must be > 0.' % args.deadline_secs)
  return args, rest


def main(argv=None):
  """Runs the launcher; returns the process exit code."""
  args, worker_args = _ParseArgs(sys.argv[1:] if argv is None else argv)
  refusal = StrategyRefusal(args.num_workers, args.module, args.script,
                            worker_args)
  if refusal:
    print('ERROR: ' + refusal, file=sys.stderr, flush=True)
    return 2
  if args.script:
    command = [sys.executable, args.script] + worker_args
  else:
    command = [sys.executable, '-m', args.module] + worker_args
  log_paths = None
  if args.log_dir:
    os.makedirs(args.log_dir, exist_ok=True)
    log_paths = [os.path.join(args.log_dir, 'worker_%d.log' % i)
                 for i in range(args.num_workers)]
  output = None if log_paths else WorkerOutput()
  procs = StartWorkers(command, args.num_workers, log_paths=log_paths,
                       output=output)
  print('launcher: started %d workers (pids %s): %s' %
        (len(procs), [p.pid for p in procs], ' '.join(command)),
        file=sys.stderr, flush=True)

  def _OnSignal(signum, frame):
    del frame
    StopProcesses(procs, args.grace_secs)
    sys.exit(128 + signum)

  old_handlers = {s: signal.signal(s, _OnSignal)
                  for s in (signal.SIGTERM, signal.SIGINT)}
  try:
    code, failed = WaitForWorkers(procs, args.deadline_secs, args.grace_secs)
  finally:
    for s, h in old_handlers.items():
      signal.signal(s, h)
  if output is not None:
    output.Join()
  if code < 0:  # Killed by a signal: report it as a shell would.
    code = 128 - code
  if code == 0:
    reports = output.reports if output else ReadLogReports(log_paths)
    print(Summary(reports), file=sys.stderr, flush=True)
  elif code == DEADLINE_EXIT_CODE and failed is None:
    print('launcher: deadline of %.0f s reached; stopped every worker.' %
          args.deadline_secs, file=sys.stderr, flush=True)
  elif code:
    print('launcher: worker %d (pid %d) failed with exit code %d; stopped '
          'the others.' % (failed, procs[failed].pid, code),
          file=sys.stderr, flush=True)
  return code


if __name__ == '__main__':
  sys.exit(main())
