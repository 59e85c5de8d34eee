#!/usr/bin/env bash
# The GPU checks, as one script for a machine with a CUDA GPU: the GPU tests (tests/test_gpu.py), then the GPU
# benchmark (benchmarks/gpu_throughput.py), then, while the time budget lasts, the benchmark again with torch.compile.
#
#     OUT=gpu-check SECONDS_BUDGET=540 bash benchmarks/gpu_check.sh
#
# Logs go to $OUT (default ./gpu-check): env.txt, tests.log, bench.jsonl, bench-compile.jsonl. A machine without
# network may carry the pure-Python dependencies (and xformers) as wheels in ./.whl: they are installed to /tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check}
BUDGET=${SECONDS_BUDGET:-540}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1 WANDB_MODE=offline PYTHONWARNINGS=ignore
left() { echo $(( BUDGET - SECONDS )); }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, lightning, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'lightning', lightning.__version__, 'transformers', transformers.__version__)"
  python3 -c "import xformers, xformers.ops as x; print('xformers', xformers.__version__); \
import torch; q = torch.randn(1, 64, 2, 32, device='cuda', dtype=torch.bfloat16); \
print('xformers kernel ok', tuple(x.memory_efficient_attention(q, q, q).shape))" 2>&1 | tail -2
} | tee "$OUT/env.txt"

timeout $(( $(left) - 210 )) python3 -m pytest -q -m gpu tests/test_gpu.py -n 6 -p no:cacheprovider --timeout 240 -rs 2>&1 \
  | tee "$OUT/tests.log"
timeout $(( $(left) - 20 )) python3 -m benchmarks.gpu_throughput 2>&1 | tee "$OUT/bench.jsonl"
if [ "$(left)" -gt 90 ]; then
  timeout $(( $(left) - 10 )) python3 -m benchmarks.gpu_throughput --compile --only mlm clm 2>&1 | tee "$OUT/bench-compile.jsonl"
fi
echo "gpu_check done after ${SECONDS}s"
