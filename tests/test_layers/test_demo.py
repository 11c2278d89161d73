"""`python -m params.demo`: the README's first command until the trainer exists."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import params
from params import demo


def test_demo_prints_params_text_and_variables():
  out = io.StringIO()
  model = demo.Main(out)
  text = out.getvalue()
  assert "cls : Class('params.demo.MlpClassifier')" in text
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


def test_python_m_params_demo_runs():
  root = os.path.dirname(os.path.dirname(params.__file__))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
  res = subprocess.run([sys.executable, '-m', 'params.demo'], cwd=root,
                       env=env, capture_output=True, text=True, timeout=120)
  assert res.returncode == 0, res.stderr[-2000:]
  assert 'mlp/output/b' in res.stdout and 'logits (4, 10)' in res.stdout
