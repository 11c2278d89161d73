"""Records bitsandbytes' 8-bit blockwise quantization for
tests/test_optimizers/test_quantized_state.py.

Run from the repository root, in the torch venv (never a dependency here;
`pip install bitsandbytes` there, 0.50.2 recorded, its CPU path):

    /work/venv-torch/bin/python tools/record_bnb_blockwise.py

Writes tests/data/bnb_blockwise_int8.json: `maps` (signed, unsigned):
`functional.create_dynamic_map(signed)` (256 float32 values, sorted), and
`cases`: for seeded inputs of 1000 elements (3 full blocks of 256 and a
padded one of 232; B = 256, and B = 64), a signed one (normal values,
magnitudes over 6 decades) and an unsigned one (squares of such values,
as a second moment): `codes` (uint8 index into the map) and `absmax`
(per block) of bitsandbytes' "default" backend kernel of
`quantize_blockwise` (backends/default/ops.py: torch.bucketize on the
midpoints of the map, i.e. the nearest code), `codes_native` of its
native CPU kernel (`functional.quantize_blockwise`: a binary search that
does not always end at the nearest code), and `dequantized`
(`functional.dequantize_blockwise` of the default codes).
"""

import gc
import json

import numpy as np
import torch
import bitsandbytes
from bitsandbytes import functional as F
from bitsandbytes.backends.default import ops as default_ops

OUT = 'tests/data/bnb_blockwise_int8.json'
N = 1000


def Inputs():
  """{name: (signed, float32 array [N])}, seeded."""
  rng = np.random.RandomState(38)
  x = rng.normal(size=N) * 10.0 ** rng.uniform(-6, 0, size=N)
  x[256:512] *= 1e-4  # One block of small values only.
  return {'signed': (True, x.astype(np.float32)),
          'unsigned': (False, (x * x).astype(np.float32))}


def DefaultKernel():
  """bitsandbytes' default-backend quantize_blockwise kernel (registered
  under the name `_`, so found among the module's functions)."""
  found = [o for o in gc.get_objects()
           if callable(o) and getattr(o, '__module__', '') ==
           default_ops.__name__ and getattr(o, '__code__', None) is not None
           and 'bucketize' in o.__code__.co_names and
           o.__code__.co_varnames[:3] == ('A', 'code', 'blocksize')]
  assert len(found) == 1, found
  return found[0]


def main():
  maps = {name: F.create_dynamic_map(signed=signed).numpy().tolist()
          for name, signed in (('signed', True), ('unsigned', False))}
  cases = []
  for name, (signed, x) in sorted(Inputs().items()):
    code = F.create_dynamic_map(signed=signed)
    for block in (256, 64):
      native, state = F.quantize_blockwise(torch.from_numpy(x), code=code,
                                           blocksize=block)
      q, absmax = DefaultKernel()(torch.from_numpy(x), code, block)
      assert torch.equal(absmax, state.absmax)
      state.absmax = absmax
      deq = F.dequantize_blockwise(q, state)
      cases.append(dict(
          name=name, signed=signed, block_size=block,
          x=x.tolist(), codes=q.numpy().astype(int).tolist(),
          codes_native=native.numpy().astype(int).tolist(),
          absmax=absmax.numpy().tolist(),
          dequantized=deq.numpy().tolist()))
  with open(OUT, 'w') as f:
    json.dump(dict(
        command='/work/venv-torch/bin/python tools/record_bnb_blockwise.py',
        bitsandbytes=bitsandbytes.__version__, torch=torch.__version__,
        maps=maps, cases=cases), f)
    f.write('\n')


if __name__ == '__main__':
  main()
