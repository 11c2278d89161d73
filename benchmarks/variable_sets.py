"""Variable sets the benchmarks update: names and shapes, values from a seed.

Two sets (issue 8):
  * `small`: 20 float32 variables, 10 dense layers of kernel [320, 320] and
    bias [320]: 1,027,200 parameters.
  * `resnet50`: 161 float32 variables with ResNet-50's trainable shapes
    (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016,
    table 1, 50-layer column; v1.5 layout: convolutions without biases, each
    followed by batch norm with gamma and beta): 53 convolution kernels,
    53 x 2 batch-norm vectors, the 2048x1000 classifier kernel and its bias:
    25,557,032 parameters. Many small vectors, a few large kernels.

Weights are drawn N(0, 0.05^2) and gradients N(0, 1) with numpy, float32, so
every row of a benchmark starts from the same values and a numpy reference
can be computed from them.
"""

import collections

import numpy as np

VariableSpec = collections.namedtuple('VariableSpec', ['name', 'shape'])


def SmallSpecs():
  """20 VariableSpecs: 10 x (kernel [320, 320], bias [320]); 1,027,200 params."""
  specs = []
  for i in range(10):
    specs.append(VariableSpec('small/layer%d/w' % i, (320, 320)))
    specs.append(VariableSpec('small/layer%d/b' % i, (320,)))
  return specs


def _ConvBn(specs, prefix, k, cin, cout):
  specs.append(VariableSpec(prefix + '/conv/w', (k, k, cin, cout)))
  specs.append(VariableSpec(prefix + '/bn/gamma', (cout,)))
  specs.append(VariableSpec(prefix + '/bn/beta', (cout,)))


def ResNet50Specs():
  """161 VariableSpecs with ResNet-50's trainable shapes; 25,557,032 params."""
  specs = []
  _ConvBn(specs, 'resnet50/stem', 7, 3, 64)
  cin = 64
  for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3],
                                              [64, 128, 256, 512])):
    for block in range(blocks):
      prefix = 'resnet50/stage%d/block%d' % (stage + 1, block)
      if block == 0:
        _ConvBn(specs, prefix + '/shortcut', 1, cin, 4 * width)
      _ConvBn(specs, prefix + '/a', 1, cin, width)
      _ConvBn(specs, prefix + '/b', 3, width, width)
      _ConvBn(specs, prefix + '/c', 1, width, 4 * width)
      cin = 4 * width
  specs.append(VariableSpec('resnet50/fc/w', (2048, 1000)))
  specs.append(VariableSpec('resnet50/fc/b', (1000,)))
  return specs


_SETS = {'small': SmallSpecs, 'resnet50': ResNet50Specs}
# The set names the benchmarks' --sets / --set take.
SET_NAMES = tuple(sorted(_SETS))


def Specs(set_name):
  """Returns the list of VariableSpec of `set_name` ('small' or 'resnet50').

  Raises:
    ValueError: for an unknown set name (the message lists the known ones).
  """
  if set_name not in _SETS:
    raise ValueError('Unknown variable set %r; expected one of %s.' %
                     (set_name, sorted(_SETS)))
  return _SETS[set_name]()


def NumParams(specs):
  """Total number of scalars (int) in a list of VariableSpec."""
  return int(sum(int(np.prod(s.shape)) for s in specs))


def MakeValues(specs, seed=0):
  """Returns (weights, grads): two lists of float32 numpy arrays.

  Args:
    specs: list of VariableSpec.
    seed: int seed of numpy's generator.

  Returns:
    weights ~ N(0, 0.05^2) and grads ~ N(0, 1), one array per spec, each of
    the spec's shape, dtype float32.
  """
  rng = np.random.default_rng(seed)
  weights, grads = [], []
  for s in specs:
    weights.append((0.05 * rng.standard_normal(s.shape, np.float32)))
    grads.append(rng.standard_normal(s.shape, np.float32))
  return weights, grads
