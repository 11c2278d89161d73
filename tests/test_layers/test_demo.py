"""`python -m layers.demo` (formerly `python -m params.demo`): a layer tree, built and printed."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import layers
from layers import demo


def test_demo_prints_params_text_and_variables():
  out = io.StringIO()
  model = demo.Main(out)
  text = out.getvalue()
  assert "cls : Class('layers.demo.MlpClassifier')" in text
  assert "hidden_dims : [32, 16]" in text
  # vars key, variable name (no ':0'), shape, dtype - one line each.
  for line in ['hidden[0].w  mlp/hidden_0/w   [64, 32]   float32',
               'hidden[1].b  mlp/hidden_1/b   [16]       float32',
               'output.w     mlp/output/w     [16, 10]   float32']:
    assert line in text
  assert 'logits (4, 10)' in text
  # The printed params text rebuilds the same params.
  printed = text.split('# Params (ToText)\n')[1].split('\n# Variables')[0]
  assert demo.MlpClassifier.Params().FromText(printed) == demo.DemoParams()
  # Glorot-uniform bound for the [64, 32] matrix: sqrt(6 / 96) = 0.25.
  w = model.vars.hidden[0].w.numpy()
  assert np.abs(w).max() <= 0.25 and w.std() > 0.05


def test_demo_linear_refuses_unset_dims():
  p = demo.Linear.Params().Set(name='lin', input_dim=3)
  with pytest.raises(ValueError) as e:
    p.Instantiate()
  assert 'output_dim=0 is not >= 1' in str(e.value)
  assert 'lin' in str(e.value)


def test_python_m_layers_demo_runs():
  root = os.path.dirname(os.path.dirname(layers.__file__))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
  res = subprocess.run([sys.executable, '-m', 'layers.demo'], cwd=root,
                       env=env, capture_output=True, text=True, timeout=120)
  assert res.returncode == 0, res.stderr[-2000:]
  assert 'mlp/output/b' in res.stdout and 'logits (4, 10)' in res.stdout


def test_python_m_layers_demo_prints_no_tf_start_up_lines(onednn):
  # README's demo, as a new user runs it (TF_CPP_MIN_LOG_LEVEL unset): the
  # package quiets TensorFlow before loading it, as the trainer does (it
  # printed absl's preamble, oneDNN and cpu_feature_guard lines). With
  # oneDNN forced on (tests/conftest.py). --tf_log_level=0 shows them.
  root = os.path.dirname(os.path.dirname(layers.__file__))
  env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn,
             CUDA_VISIBLE_DEVICES='')
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  res = subprocess.run([sys.executable, '-m', 'layers.demo'], cwd=root,
                       env=env, capture_output=True, text=True, timeout=120)
  assert res.returncode == 0, res.stderr[-2000:]
  assert 'logits (4, 10)' in res.stdout
  for noise in ('cpu_feature_guard', 'oneDNN', 'I0000', 'W0000',
                'absl::InitializeLog'):
    assert noise not in res.stderr, res.stderr


def test_importing_layers_leaves_the_tf_log_level_alone():
  # Only the demo command is quieted: a library import of `layers` sets no
  # TF_CPP_MIN_LOG_LEVEL (as importing TensorFlow itself: unset, or '1'
  # where jax is installed).
  root = os.path.dirname(os.path.dirname(layers.__file__))
  env = dict(os.environ)
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)

  def LevelAfter(module):
    return subprocess.run(
        [sys.executable, '-c', 'import os, %s; '
         'print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))' % module],
        capture_output=True, text=True, timeout=120, env=env,
        cwd=root).stdout.strip()

  assert LevelAfter('layers') == LevelAfter('tensorflow')


# What `python -m params.demo` printed before the demo moved to layers/
# (issue 22), classes named by their old paths.
_PRE_MOVE_TEXT = """\
cls : Class('params.demo.MlpClassifier')
dtype : DType('float32')
fprop_dtype : None
hidden.activation : 'relu'
hidden.cls : Class('params.demo.Linear')
hidden.dtype : DType('float32')
hidden.fprop_dtype : None
hidden.input_dim : 0
hidden.name : ''
hidden.output_dim : 0
hidden.params_init : None
hidden.random_seed : None
hidden.skip_lp_regularization : None
hidden_dims : [32, 16]
input_dim : 64
name : 'mlp'
num_classes : 10
output.activation : None
output.cls : Class('params.demo.Linear')
output.dtype : DType('float32')
output.fprop_dtype : None
output.input_dim : 0
output.name : ''
output.output_dim : 0
output.params_init : None
output.random_seed : None
output.skip_lp_regularization : None
params_init : 'glorot_uniform'
random_seed : 1234
skip_lp_regularization : None
"""


def test_params_text_written_by_params_demo_still_loads():
  # Start with no nested params, so the old 'hidden.cls' / 'output.cls'
  # lines must rebuild them as layers.demo.Linear params.
  p = demo.MlpClassifier.Params().Set(hidden=None, output=None)
  moved = (r"'params\.demo\.(Linear|MlpClassifier)' has moved to "
           r"'layers\.demo\.(Linear|MlpClassifier)'")
  with pytest.warns(FutureWarning, match=moved):
    p.FromText(_PRE_MOVE_TEXT)
  assert p == demo.DemoParams()
  assert p.hidden.cls is demo.Linear and p.output.activation is None
  # Written again, it names the new paths and nothing else changed but the
  # params added since (BaseLayer's remat, default False).
  added = ('hidden.remat : False\n', 'output.remat : False\n',
           'remat : False\n')
  text = p.ToText()
  for line in added:
    assert line in text
    text = text.replace(line, '', 1)
  assert text == _PRE_MOVE_TEXT.replace('params.demo.', 'layers.demo.')
