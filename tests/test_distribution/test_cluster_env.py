"""--cluster=slurm|jobset: TF_CONFIG from a cluster manager (issue 41).

Fast tests: a faked 2-task SLURM step and a faked 2-pod indexed Job give
the TF_CONFIG one would write by hand; every malformed variable is one
ERROR line, exit 2, no logdir (refused before any TF cluster starts); the
shipped docs/examples files set up an environment that derives the same
cluster. The slow test trains regression.DistributedLinearRegression with
two trainer processes on 127.0.0.1, each given only its faked SLURM step.
"""

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time

import pytest

from learner.training.cluster import cluster_env
from learner.training.cluster import distribution
from learner.training.cluster import launcher
from learner.training.jobs import cli as cli_lib

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_SBATCH = os.path.join(_ROOT, 'docs', 'examples', 'slurm_2_nodes.sbatch')
_MANIFEST = os.path.join(_ROOT, 'docs', 'examples', 'jobset_2_pods.yaml')
_MODEL = 'regression.DistributedLinearRegression'


def _Slurm(procid, **more):
  """The variables srun sets for task `procid` of a 2-task, 1-node step."""
  env = {'SLURM_PROCID': str(procid), 'SLURM_STEP_NUM_TASKS': '2',
         'SLURM_NTASKS': '2', 'SLURM_STEP_NODELIST': 'localhost',
         'SLURM_STEP_TASKS_PER_NODE': '2', 'CUDA_VISIBLE_DEVICES': ''}
  env.update(more)
  return env


def _Jobset(index, **more):
  env = {'JOB_COMPLETION_INDEX': str(index), 'LEARNER_NUM_WORKERS': '2',
         'LEARNER_WORKER_HOST': 'lr-{index}.lr'}
  env.update(more)
  return env


@pytest.mark.parametrize('procid', [0, 1])
def test_slurm_step_on_one_node_gives_the_hand_written_tf_config(procid):
  # Two tasks on one node: ports port and port + 1, rank = worker index.
  got = cluster_env.ClusterConfig('slurm', _Slurm(procid), port=23456)
  assert got == {'cluster': {'worker': ['localhost:23456',
                                        'localhost:23457']},
                 'task': {'type': 'worker', 'index': procid}}


def test_slurm_step_on_two_nodes_one_task_each_uses_one_port():
  env = _Slurm(1, SLURM_STEP_NODELIST='node[01-02]',
               SLURM_STEP_TASKS_PER_NODE='1(x2)')
  got = cluster_env.ClusterConfig('slurm', env)
  assert got == {'cluster': {'worker': ['node01:8888', 'node02:8888']},
                 'task': {'type': 'worker', 'index': 1}}


def test_slurm_leaves_cuda_visible_devices_alone_without_gpus(monkeypatch):
  monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
  cluster_env.ClusterConfig('slurm', _Slurm(1))
  assert os.environ['CUDA_VISIBLE_DEVICES'] == ''


def test_slurm_with_gpus_gives_each_task_its_share(monkeypatch):
  # TF's resolver: 4 GPUs, 2 tasks on the node -> task 1 sees GPUs 2,3.
  monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,1,2,3')
  got = cluster_env.ClusterConfig(
      'slurm', _Slurm(1, CUDA_VISIBLE_DEVICES='0,1,2,3'))
  assert got['task'] == {'type': 'worker', 'index': 1}
  assert os.environ['CUDA_VISIBLE_DEVICES'] == '2,3'


@pytest.mark.parametrize('index', [0, 1])
def test_indexed_job_gives_the_hand_written_tf_config(index):
  got = cluster_env.ClusterConfig('jobset', _Jobset(index), port=2222)
  assert got == {'cluster': {'worker': ['lr-0.lr:2222', 'lr-1.lr:2222']},
                 'task': {'type': 'worker', 'index': index}}


def test_export_writes_tf_config_and_prints_the_cluster_once(
    monkeypatch, capsys):
  monkeypatch.setenv('TF_CONFIG', '{"stale": 1}')
  for name, value in _Jobset(1).items():
    monkeypatch.setenv(name, value)
  derived = distribution.ExportClusterConfig('jobset', 2222)
  assert json.loads(os.environ['TF_CONFIG']) == derived
  assert derived['cluster'] == {'worker': ['lr-0.lr:2222', 'lr-1.lr:2222']}
  assert capsys.readouterr().out == (
      "Cluster from --cluster=jobset: worker 1 of worker ['lr-0.lr:2222', "
      "'lr-1.lr:2222']\n")


def test_create_strategy_refuses_a_bad_variable_before_any_tf_config(
    monkeypatch):
  monkeypatch.delenv('TF_CONFIG', raising=False)
  for name, value in _Jobset(5).items():
    monkeypatch.setenv(name, value)
  with pytest.raises(ValueError, match=r'JOB_COMPLETION_INDEX=5 .*0\.\.1'):
    distribution.CreateStrategy('multi_worker', cluster='jobset')
  assert 'TF_CONFIG' not in os.environ


# Each malformed variable (or port): (source, environment, flags, names the
# one ERROR line must contain).
_BAD = [
    ('slurm', {k: v for k, v in _Slurm(0).items() if k != 'SLURM_PROCID'},
     [], ['SLURM_PROCID', 'unset', 'srun']),
    ('slurm', _Slurm('x'), [], ["SLURM_PROCID='x'", 'integer']),
    ('slurm', _Slurm(2), [], ['SLURM_PROCID=2', 'ranks 0..1']),
    ('slurm', _Slurm(0, SLURM_STEP_NUM_TASKS='0'), [],
     ["SLURM_STEP_NUM_TASKS='0'", '>= 1']),
    ('slurm', _Slurm(0, SLURM_STEP_NUM_TASKS='3'), [],
     ['SLURM_STEP_NUM_TASKS=3', 'places 2 task(s)']),
    ('slurm', _Slurm(0, SLURM_STEP_NODELIST='node[01-'), [],
     ["SLURM_STEP_NODELIST='node[01-'", 'host list']),
    ('slurm', _Slurm(0, SLURM_STEP_NODELIST='a,a',
                     SLURM_STEP_TASKS_PER_NODE='1(x2)'), [],
     ["SLURM_STEP_NODELIST='a,a'", 'more than once']),
    ('slurm', _Slurm(0, SLURM_STEP_TASKS_PER_NODE='two'), [],
     ["SLURM_STEP_TASKS_PER_NODE='two'", 'tasks-per-node']),
    ('slurm', _Slurm(0, SLURM_STEP_TASKS_PER_NODE='1(x2)'), [],
     ["SLURM_STEP_TASKS_PER_NODE='1(x2)'", 'gives 2 node(s)']),
    ('slurm', _Slurm(0), ['--cluster_port=70000'],
     ['--cluster_port=70000', '[1, 65535]']),
    ('slurm', _Slurm(0), ['--cluster_port=65535'],
     ['--cluster_port=65535', 'above 65535']),
    ('jobset', {k: v for k, v in _Jobset(0).items()
                if k != 'JOB_COMPLETION_INDEX'}, [],
     ['JOB_COMPLETION_INDEX', 'unset', 'indexed Job']),
    ('jobset', _Jobset(-1), [], ["JOB_COMPLETION_INDEX='-1'", 'integer']),
    ('jobset', _Jobset(2), [], ['JOB_COMPLETION_INDEX=2', 'indices 0..1']),
    ('jobset', _Jobset(0, LEARNER_NUM_WORKERS='two'), [],
     ["LEARNER_NUM_WORKERS='two'", 'integer']),
    ('jobset', _Jobset(0, LEARNER_WORKER_HOST='lr.lr'), [],
     ["LEARNER_WORKER_HOST='lr.lr'", '{index}']),
    ('jobset', _Jobset(0, LEARNER_WORKER_HOST='lr {index}'), [],
     ["LEARNER_WORKER_HOST='lr {index}'", 'host name']),
    ('jobset', _Jobset(0), ['--cluster_port=0'],
     ['--cluster_port=0', '[1, 65535]']),
    ('jobset', _Jobset(0), ['--strategy=mirrored'],
     ['--cluster=jobset', '--strategy=multi_worker']),
]
_BAD_IDS = ['procid_unset', 'procid_not_int', 'procid_outside',
            'num_tasks_zero', 'num_tasks_disagree', 'nodelist_bad',
            'nodelist_twice', 'tasks_per_node_bad', 'tasks_per_node_length',
            'port_out_of_range', 'port_plus_tasks_over', 'index_unset',
            'index_negative', 'index_outside', 'num_workers_not_int',
            'host_without_index', 'host_with_space', 'port_zero',
            'cluster_without_multi_worker']


@pytest.mark.parametrize('source,env,flags,names', _BAD, ids=_BAD_IDS)
def test_malformed_variable_is_one_error_line_exit_2_and_no_logdir(
    tmp_path, capsys, monkeypatch, source, env, flags, names):
  for name in list(os.environ):
    if name.startswith(('SLURM_', 'LEARNER_', 'JOB_COMPLETION')) or (
        name == 'TF_CONFIG'):
      monkeypatch.delenv(name)
  for name, value in env.items():
    monkeypatch.setenv(name, value)
  logdir = tmp_path / 'never'
  cli_lib.DefineFlags()
  try:
    cli_lib.FLAGS(['trainer', '--model=' + _MODEL, '--logdir=%s' % logdir,
                   '--strategy=multi_worker', '--cluster=' + source] + flags)
    code = cli_lib.main([])
  finally:
    cli_lib.FLAGS.unparse_flags()
  err = capsys.readouterr().err
  assert code == 2, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('ERROR: '), err
  for name in names:
    assert name in lines[0], (name, lines[0])
  assert not logdir.exists()
  assert 'TF_CONFIG' not in os.environ  # Nothing derived was written.


@pytest.mark.parametrize('flag,line', [
    ('--cluster=slrum', 'ERROR: --cluster=slrum is not one of tf_config, '
     'slurm, jobset; --help describes them.'),
    ('--cluster_port=abc', 'ERROR: --cluster_port=abc is not an integer: '
     '--cluster_port takes a TCP port in [1, 65535] free on every node, '
     'e.g. --cluster_port=8888.'),
])
def test_unparsable_cluster_flag_is_one_line_exit_2(capsys, flag, line):
  cli_lib.DefineFlags()
  try:
    with pytest.raises(SystemExit) as e:
      cli_lib.ParseFlags(['trainer', '--model=' + _MODEL, flag])
  finally:
    cli_lib.FLAGS.unparse_flags()
  assert e.value.code == 2
  assert capsys.readouterr().err == line + '\n'


# ---- the shipped sbatch script and manifest ---------------------------------


def _SbatchOptions(text):
  """{option: value} of the script's '#SBATCH --option=value' lines."""
  return dict(re.findall(r'^#SBATCH --([\w-]+)=(\S+)', text, re.M))


def test_sbatch_script_sets_up_a_step_that_derives_two_workers():
  with open(_SBATCH) as f:
    text = f.read()
  options = _SbatchOptions(text)
  assert options['nodes'] == '2' and options['ntasks-per-node'] == '1'
  # The trainer lines: srun ... python -m learner.trainer --cluster=slurm.
  commands = [shlex.split(' '.join(l.strip().rstrip('\\') for l in block))
              for block in _Commands(text)
              if 'learner.trainer' in ' '.join(block)]
  assert commands, text
  models = set()
  for argv in commands:
    assert argv[0] == 'srun'
    assert '--strategy=multi_worker' in argv and '--cluster=slurm' in argv
    models.add(_Flag(argv, '--model'))
    port = int(_Flag(argv, '--cluster_port'))
  assert _MODEL in models and any(m.startswith('lm.') for m in models)
  # What srun sets for this allocation (2 nodes, 1 task each) on rank 1.
  nodes = int(options['nodes'])
  env = {'SLURM_PROCID': '1', 'SLURM_STEP_NUM_TASKS': str(nodes),
         'SLURM_STEP_NODELIST': 'node[01-02]',
         'SLURM_STEP_TASKS_PER_NODE': '%s(x%d)' % (
             options['ntasks-per-node'], nodes),
         'CUDA_VISIBLE_DEVICES': ''}
  got = cluster_env.ClusterConfig('slurm', env, port=port)
  assert got == {'cluster': {'worker': ['node01:%d' % port,
                                        'node02:%d' % port]},
                 'task': {'type': 'worker', 'index': 1}}


def _Commands(text):
  """The script's commands as lists of lines (continued with '\\')."""
  blocks, current = [], []
  for line in text.splitlines():
    if line.startswith('#') or not line.strip():
      continue
    current.append(line)
    if not line.rstrip().endswith('\\'):
      blocks.append(current)
      current = []
  return blocks


def _Flag(argv, name):
  values = [a.split('=', 1)[1] for a in argv if a.startswith(name + '=')]
  assert len(values) == 1, (name, argv)
  return values[0]


def _ManifestDocs(text):
  """The manifest's documents: PyYAML is not a dependency (nor installed),
  so the block-style subset the manifest is written in is read here:
  'key: value', 'key:' + an indented block, '- item' lists, quoted or plain
  scalars, full-line comments, '---' between documents. Anything else
  (flow collections, block scalars, anchors) fails the test."""
  docs = []
  for part in re.split(r'^---\s*$', text, flags=re.M):
    lines = [(len(l) - len(l.lstrip(' ')), l.strip())
             for l in part.splitlines()
             if l.strip() and not l.strip().startswith('#')]
    if lines:
      value, end = _YamlBlock(lines, 0, lines[0][0])
      assert end == len(lines), lines[end]
      docs.append(value)
  return docs


def _YamlScalar(text):
  assert not text.startswith(('{', '[', '|', '>', '&', '*')), text
  if len(text) >= 2 and text[0] == text[-1] and text[0] in '"\'':
    return text[1:-1]
  if re.match(r'^-?\d+$', text):
    return int(text)
  return text


def _YamlBlock(lines, i, indent):
  """(value, next line) of the block of `lines` starting at i, at indent."""
  if lines[i][1].startswith('- ') or lines[i][1] == '-':
    out = []
    while i < len(lines) and lines[i][0] == indent and (
        lines[i][1].startswith('- ')):
      item = lines[i][1][2:].strip()
      if re.match(r'^[\w.-]+:(\s|$)', item):
        # '- key: value': a mapping whose first key sits after the dash.
        lines = lines[:i] + [(indent + 2, item)] + lines[i + 1:]
        value, i = _YamlBlock(lines, i, indent + 2)
        out.append(value)
      else:
        out.append(_YamlScalar(item))
        i += 1
    return out, i
  out = {}
  while i < len(lines) and lines[i][0] == indent and not (
      lines[i][1].startswith('- ')):
    m = re.match(r'^([\w./-]+):(?:\s+(.*))?$', lines[i][1])
    assert m, lines[i]
    key, rest = m.group(1), m.group(2)
    i += 1
    if rest:
      out[key] = _YamlScalar(rest.strip())
    elif i < len(lines) and (lines[i][0] > indent or (
        lines[i][0] == indent and lines[i][1].startswith('- '))):
      out[key], i = _YamlBlock(lines, i, lines[i][0])
    else:
      out[key] = None
  return out, i


def _Env(container):
  return {e['name']: e.get('value') for e in container.get('env', [])}


def test_manifest_sets_up_pods_that_derive_two_workers():
  with open(_MANIFEST) as f:
    docs = _ManifestDocs(f.read())
  service = [d for d in docs if d['kind'] == 'Service']
  jobs = [d for d in docs if d['kind'] == 'Job']
  assert len(service) == 1 and service[0]['spec']['clusterIP'] == 'None'
  models = set()
  for job in jobs:
    spec = job['spec']
    assert spec['completionMode'] == 'Indexed'
    assert spec['completions'] == spec['parallelism'] == 2
    pod = spec['template']['spec']
    assert pod['subdomain'] == service[0]['metadata']['name']
    assert service[0]['spec']['selector'].items() <= (
        spec['template']['metadata']['labels'].items())
    (container,) = pod['containers']
    argv = container['command'] + container.get('args', [])
    assert '--strategy=multi_worker' in argv and '--cluster=jobset' in argv
    models.add(_Flag(argv, '--model'))
    port = int(_Flag(argv, '--cluster_port'))
    env = _Env(container)
    assert int(env['LEARNER_NUM_WORKERS']) == spec['completions']
    name = job['metadata']['name']
    # Kubernetes: pod i of indexed Job `name` is host `name-i`, reachable
    # as `name-i.<subdomain>` through the headless Service.
    assert env['LEARNER_WORKER_HOST'] == '%s-{index}.%s' % (
        name, pod['subdomain'])
    env['JOB_COMPLETION_INDEX'] = '1'  # Kubernetes sets it in pod 1.
    got = cluster_env.ClusterConfig('jobset', env, port=port)
    assert got == {'cluster': {'worker': [
        '%s-%d.%s:%d' % (name, i, pod['subdomain'], port) for i in (0, 1)]},
                   'task': {'type': 'worker', 'index': 1}}
  assert _MODEL in models and any(m.startswith('lm.') for m in models)


def test_distributed_md_includes_the_shipped_files_verbatim():
  with open(os.path.join(_ROOT, 'docs', 'distributed.md')) as f:
    doc = f.read()
  for path in (_SBATCH, _MANIFEST):
    with open(path) as f:
      assert f.read().strip() in doc, path


# ---- end to end: two trainer processes, each with its faked SLURM step ------


def _TwoFreePorts():
  """A port p with p and p + 1 free on 127.0.0.1 just now."""
  for _ in range(50):
    (port,) = launcher.PickFreePorts(1)
    if port >= 65535:
      continue
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
      s.bind(('127.0.0.1', port + 1))
      return port
    except OSError:
      continue
    finally:
      s.close()
  raise RuntimeError('no two consecutive free ports')


def _FinalLine(text, prefix):
  for line in text.splitlines():
    if line.startswith(prefix):
      return line[len(prefix):]
  return None


@pytest.mark.slow
def test_two_slurm_tasks_on_localhost_train_the_regression(tmp_path):
  port = _TwoFreePorts()
  logdir = str(tmp_path / 'logdir')
  procs = []
  base = {k: v for k, v in os.environ.items()
          if not k.startswith('SLURM_') and k != 'TF_CONFIG'}
  base.update(TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1')
  start = time.monotonic()
  try:
    for rank in (0, 1):
      env = dict(base, **_Slurm(rank))
      procs.append(subprocess.Popen(
          [sys.executable, '-m', 'learner.trainer', '--model=' + _MODEL,
           '--logdir=' + logdir, '--strategy=multi_worker', '--cluster=slurm',
           '--cluster_port=%d' % port, '--worker_register_timeout_secs=60'],
          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
  finally:
    launcher.StopProcesses(procs)
  secs = time.monotonic() - start
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, (out[-2000:], err[-3000:])
  cluster = "worker ['localhost:%d', 'localhost:%d']" % (port, port + 1)
  for rank, (out, _) in enumerate(outs):
    assert out.count('Cluster from --cluster=slurm:') == 1, out
    assert ('Cluster from --cluster=slurm: worker %d of %s' % (rank, cluster)
            in out), out
  digests = [_FinalLine(out, 'Final weights: sha256 ') for out, _ in outs]
  assert digests[0] and digests[0] == digests[1], digests
  metrics = [json.loads(_FinalLine(out, 'Final metrics ').split(': ', 1)[1])
             for out, _ in outs]
  # The loss is each worker's own batch's; the weights are the group's.
  assert [(m['global_step'], m['train/w'], m['train/b']) for m in metrics[1:]] \
      == [(metrics[0]['global_step'], metrics[0]['train/w'],
           metrics[0]['train/b'])], metrics
  assert abs(metrics[0]['train/w'] - 5.0) < 0.05, metrics[0]
  assert abs(metrics[0]['train/b'] - 2.0) < 0.05, metrics[0]
  print('2-task SLURM run on localhost: %.1f s, w=%.4f b=%.4f' % (
      secs, metrics[0]['train/w'], metrics[0]['train/b']))
