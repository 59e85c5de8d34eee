#!/usr/bin/env bash
# The GPU checks, as one script for a machine with a CUDA GPU, in the order of what matters most if time runs out
# (issue 55): each step's figures are gathered into $OUT/gpu_check.json as soon as the step ends, so a run cut off
# by the lent machine's budget still reports what it measured.
#   1. GPT-2 124M (16 x 1024) against transformers: eager, the whole loss compiled, compiled blocks, xformers;
#   2. BERT-base (32 x 512): eager, compiled, xformers;
#   3. T5-base (32 x 512 / 114): SDPA (its math kernel under the bias), FlexAttention eager and compiled;
#   4. BART-base: eager and compiled;
#   5. the fast GPU tests (kernels against the eager reference, FlexAttention's backward and bias gradient,
#      xformers' BlockDiagonalMask path against SDPA with packed rows, every backbone on CUDA against the CPU,
#      cached generation, transformers parity);
#   6. CUDA graphs; the recipes trained from the CLI in bf16; max-autotune (its GEMM tuning takes minutes).
# Every benchmark but the last two runs with --kernels: the top CUDA kernels of a step by time (which attention
# kernel ran).
#
#     OUT=gpu-check SECONDS_BUDGET=540 bash benchmarks/gpu_check.sh
#
# Everything goes to $OUT (default ./gpu-check): env.txt (GPU, torch, CUDA, and xformers' own build record: the torch
# and CUDA it was built for, which kernels it has), tests-*.log, bench-*.jsonl, and gpu_check.json gathering them. A
# machine without network may carry the pure-Python dependencies (and an xformers wheel built for its torch) as
# wheels in ./.whl: they are installed to /tmp/site.
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
bench() {  # bench NAME SECONDS ARGS...: one benchmark process, stopped after SECONDS (or what the budget leaves)
  local name=$1 limit=$2; shift 2
  local cap=$(( $(left) - 15 )); [ "$limit" -gt "$cap" ] && limit=$cap
  [ "$limit" -gt 30 ] || { echo "skipped $name: budget spent"; return; }
  echo "== $name (at most ${limit}s)"
  timeout "$limit" python3 -m benchmarks.gpu_throughput "$@" 2>&1 | tee "$OUT/bench-$name.jsonl"
}

gpu_tests() {  # gpu_tests NAME SECONDS MIN_SECONDS K_EXPR: tests/test_gpu.py -k K_EXPR, if MIN_SECONDS are left
  local name=$1 limit=$2 least=$3 cap=$(( $(left) - 20 ))
  [ "$cap" -gt "$least" ] || { echo "skipped tests-$name: budget spent"; return; }
  [ "$limit" -gt "$cap" ] && limit=$cap
  timeout "$limit" python3 -m pytest -q -m gpu tests/test_gpu.py -n 8 -p no:cacheprovider --timeout $(( limit - 10 )) \
    -rs -k "$4" 2>&1 | tee "$OUT/tests-$name.log"
}

gather() {  # $OUT/gpu_check.json from what exists now
python3 - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("bench-*.jsonl")):
    rows += [json.loads(line) for line in f.read_text().splitlines() if line.startswith("{")]
tests = {f.stem: (f.read_text().strip().splitlines() or ["(empty)"])[-1] for f in sorted(out.glob("tests-*.log"))}
env = (out / "env.txt").read_text() if (out / "env.txt").is_file() else ""
(out / "gpu_check.json").write_text(json.dumps({"env": env, "tests": tests, "benchmarks": rows}, indent=1))
EOF
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, lightning, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'lightning', lightning.__version__, 'transformers', transformers.__version__)"
  python3 -c "import torch.nn.attention.flex_attention; print('flex_attention available')" 2>&1 | tail -1
  timeout 60 python3 -m xformers.info 2>&1 | grep -E "xFormers|pytorch|build\.|memory_efficient_attention\.(cutlassF|fa2F|fa3F)" | head -20
  python3 -c "import xformers, xformers.ops as x; print('xformers', xformers.__version__); \
import torch; q = torch.randn(1, 64, 2, 32, device='cuda', dtype=torch.bfloat16); \
print('xformers kernel ok', tuple(x.memory_efficient_attention(q, q, q).shape))" 2>&1 | tail -2
} | tee "$OUT/env.txt"
gather

bench clm 150 --only clm --repeats 8 --kernels --variants eager model_unfused blocks xformers; gather
bench mlm 110 --only mlm --repeats 8 --kernels --variants eager model_unfused xformers; gather
bench t5 100 --only t5 --repeats 6 --kernels --variants eager flex_nodrop model_flex_nodrop; gather
bench bart 60 --only bart --repeats 6 --kernels --variants eager model_unfused; gather
gpu_tests fast 110 40 "not recipe_trains and not resumes and not fsdp2"; gather
bench cudagraphs 80 --only clm --repeats 8 --variants eager model_unfused_ro; gather
gpu_tests recipes 170 60 "recipe_trains or resumes or fsdp2"; gather
bench autotune 200 --only clm --repeats 8 --variants model_unfused model_unfused_mat; gather
echo "gpu_check done after ${SECONDS}s"
