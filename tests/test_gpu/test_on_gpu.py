"""The Learner on a GPU: numbers of numpy, plain and under XLA (issue 27.6).

Skipped where TensorFlow sees no GPU (every machine of this project today);
`benchmarks/gpu_check.sh` runs them the day one is available
(`pytest -m gpu tests/test_gpu`). The fused multi-tensor kernels are
CPU-only, so on a GPU the Learner runs its pure-TF path; these tests check
that it does, on the device, with the numbers of a numpy reference:
Momentum (TF1 form v = 0.9 v + c g, w -= lr v) and Adam (TF's form, epsilon
1e-6 before the bias correction), global-norm clip to 1.0, three steps.
"""

import numpy as np
import pytest
import tensorflow as tf

from learner import optimizers
from learner.learner import Learner
from learner.optimizers import kernels
from params import NestedMap
from schedules import ConstantOne

_GPUS = tf.config.list_logical_devices('GPU')

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _GPUS, reason='no GPU visible to TensorFlow'),
]

_SHAPES = [(37, 53), (53,)]
_LR = 0.1
_CLIP = 1.0
_STEPS = 3
_OPTIMIZERS = {
    'momentum': lambda: optimizers.Momentum.Params().Set(alpha=0.9),
    'adam': lambda: optimizers.Adam.Params(),
}


def _Values():
  rng = np.random.RandomState(0)
  weights = [(0.5 * rng.randn(*s)).astype(np.float32) for s in _SHAPES]
  grads = [rng.randn(*s).astype(np.float32) for s in _SHAPES]
  return weights, grads


def _Norm(arrays):
  return np.sqrt(sum(np.sum(np.square(a.astype(np.float64))) for a in arrays))


def _Reference(optimizer):
  weights, grads = _Values()
  w = [x.astype(np.float64) for x in weights]
  scale = _CLIP / max(_Norm(grads), _CLIP)
  g = [x.astype(np.float64) * scale for x in grads]
  s1 = [np.zeros_like(x) for x in w]
  s2 = [np.zeros_like(x) for x in w]
  for t in range(1, _STEPS + 1):
    for i in range(len(w)):
      if optimizer == 'momentum':
        s1[i] = 0.9 * s1[i] + g[i]
        w[i] = w[i] - _LR * s1[i]
      else:
        s1[i] = 0.9 * s1[i] + 0.1 * g[i]
        s2[i] = 0.999 * s2[i] + 0.001 * g[i] * g[i]
        lr_t = _LR * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        w[i] = w[i] - lr_t * s1[i] / (np.sqrt(s2[i]) + 1e-6)
  return w


def _Train(optimizer, jit_compile):
  """Three steps on /GPU:0; returns the weights and their device names."""
  weights, grads = _Values()
  with tf.device(_GPUS[0].name):
    variables = [tf.Variable(w, name='w%d' % i)
                 for i, w in enumerate(weights)]
    vmap = NestedMap(w0=variables[0], w1=variables[1])
    learner = Learner.Params().Set(
        name='loss', learning_rate=_LR, clip_gradient_norm_to_value=_CLIP,
        optimizer=_OPTIMIZERS[optimizer](),
        lr_schedule=ConstantOne.Params()).Instantiate()
    learner.Bind(vmap)

    @tf.function(jit_compile=jit_compile)
    def Step():
      loss = tf.add_n([tf.reduce_sum(tf.constant(g) * v)
                       for v, g in zip(variables, grads)])
      learner.Apply({'loss': (loss, tf.constant(1.0))}, vmap)

    for _ in range(_STEPS):
      Step()
  return [v.numpy() for v in variables], [v.device for v in variables]


def test_the_fused_kernels_step_aside_when_a_gpu_is_visible():
  # They are CPU-only: with a GPU the Learner must take the pure-TF path.
  reason = kernels.Unsupported()
  assert reason is not None and 'GPU' in reason, reason


@pytest.mark.parametrize('jit_compile', [False, True], ids=['plain', 'xla'])
@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
def test_three_steps_on_the_gpu_give_numpys_weights(optimizer, jit_compile):
  got, devices = _Train(optimizer, jit_compile)
  assert all('GPU' in d for d in devices), devices
  for a, want in zip(got, _Reference(optimizer)):
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
