#!/usr/bin/env bash
# One short device check for a GPU machine: the gpu-marked tests, then model throughput on CUDA
# at the full default configuration (SPEC 4: batch 256, context 50, 64 dims). Needs `make setup`.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
.venv/bin/python -m pytest -m gpu -q tests/test_gpu.py
mkdir -p "${OUT:-bench/results}"
cd bench && ../.venv/bin/python model_bench.py --device cuda --items 10000 100000 1000000 \
  --train-items 10000 1000000 --train-steps 50 --out "${OUT:-results}/models_cuda.json"
