#!/usr/bin/env bash
# The GPU check (issue 27.6): on a machine with an NVIDIA GPU, installs the
# `gpu` extra into .venv-gpu, then runs the tests that need the device,
# benchmarks.update_step (with and without jit_compile) and a short
# lm.CharTransformer run, and prints one table (benchmarks/gpu_check.py).
#
#     bash benchmarks/gpu_check.sh
#
# Without a GPU (no `nvidia-smi`, or it lists no device) it prints
# "no GPU: skipped" and exits 0, having installed and written nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi > /dev/null 2>&1; then
  echo "no GPU: skipped (nvidia-smi is not installed)"
  exit 0
fi
if ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
  echo "no GPU: skipped (nvidia-smi -L lists no device)"
  exit 0
fi
python3 -m venv .venv-gpu
. .venv-gpu/bin/activate
pip install -q -e '.[gpu,test]'
python -m benchmarks.gpu_check "$@"
