#!/usr/bin/env bash
# The GPU checks, as one script for a machine with a CUDA GPU, in the order of what matters most if time runs out:
#   1. the fast GPU tests (kernels against the eager reference, every backbone on CUDA against the CPU, cached
#      generation, transformers parity);
#   2. the GPU benchmark of GPT-2 124M and BERT-base against transformers, each of ours eager, unpadded, with the
#      plain head, with compiled blocks and with the whole loss compiled, with the kernels that ran;
#   3. the whole loss compiled with CUDA graphs (mode reduce-overhead);
#   4. the recipes trained from the CLI in bf16 (tests/test_gpu.py's slow half);
#   5. while the budget lasts: T5 and BART, then the whole loss compiled with max-autotune-no-cudagraphs (its GEMM
#      tuning takes minutes).
#
#     OUT=gpu-check SECONDS_BUDGET=540 bash benchmarks/gpu_check.sh
#
# Everything goes to $OUT (default ./gpu-check): env.txt, tests-*.log, bench-*.jsonl, and gpu_check.json gathering
# them. A machine without network may carry the pure-Python dependencies (and xformers) as wheels in ./.whl: they are
# installed to /tmp/site.
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

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, lightning, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'lightning', lightning.__version__, 'transformers', transformers.__version__)"
  python3 -c "import xformers, xformers.ops as x; print('xformers', xformers.__version__); \
import torch; q = torch.randn(1, 64, 2, 32, device='cuda', dtype=torch.bfloat16); \
print('xformers kernel ok', tuple(x.memory_efficient_attention(q, q, q).shape))" 2>&1 | tail -2
} | tee "$OUT/env.txt"

timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -n 8 -p no:cacheprovider --timeout 100 -rs \
  -k "not recipe_trains and not resumes and not fsdp2" 2>&1 | tee "$OUT/tests-fast.log"
bench clm 210 --only clm --repeats 8 --kernels --variants eager eager_nopad eager_unfused blocks model_unfused
bench mlm 150 --only mlm --repeats 8 --kernels --variants eager eager_nopad eager_unfused model_unfused
bench cudagraphs 100 --only clm --repeats 8 --variants eager model_unfused_ro
cap=$(( $(left) - 20 ))
if [ "$cap" -gt 60 ]; then
  timeout $(( cap < 170 ? cap : 170 )) python3 -m pytest -q -m gpu tests/test_gpu.py -n 8 -p no:cacheprovider \
    --timeout 160 -rs -k "recipe_trains or resumes or fsdp2" 2>&1 | tee "$OUT/tests-recipes.log"
fi
bench seq2seq 150 --only t5 bart --repeats 6 --kernels --variants eager flex_nodrop model_unfused model_flex_nodrop
bench autotune 200 --only clm --repeats 8 --variants model_unfused model_unfused_mat

python3 - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("bench-*.jsonl")):
    rows += [json.loads(line) for line in f.read_text().splitlines() if line.startswith("{")]
tests = {f.stem: (f.read_text().strip().splitlines() or ["(empty)"])[-1] for f in sorted(out.glob("tests-*.log"))}
(out / "gpu_check.json").write_text(json.dumps({"env": (out / "env.txt").read_text(), "tests": tests,
                                                "benchmarks": rows}, indent=1))
EOF
echo "gpu_check done after ${SECONDS}s"
