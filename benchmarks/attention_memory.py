"""Peak memory of one attention forward + backward, eager vs SDPA, at several sequence lengths.

    python benchmarks/attention_memory.py [--device cpu|cuda]

On CPU each case runs in a fresh process and reports the growth of peak RSS; on CUDA, torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch

from plm_lightning.nn import MultiHeadAttention


def one(backend: str, seq: int, device: str, batch: int = 4, hidden: int = 768, heads: int = 12) -> float:
    torch.manual_seed(0)
    attn = MultiHeadAttention(hidden, heads, backend=backend).to(device)
    x = torch.randn(batch, seq, hidden, device=device, requires_grad=True)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    attn(x, is_causal=False).sum().backward()
    if device == "cuda":
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        print(one(args.child[0], int(args.child[1]), args.device))
        return
    rows = []
    for seq in (512, 1024, 2048):
        row = {"seq": seq, "batch": 4, "hidden": 768, "heads": 12}
        for backend in ("eager", "sdpa"):
            if args.device == "cpu":
                out = subprocess.run([sys.executable, "-m", "benchmarks.attention_memory", "--child", backend, str(seq)],
                                     capture_output=True, text=True, check=True).stdout
                row[f"{backend}_peak_MiB"] = round(float(out.strip().splitlines()[-1]), 1)
            else:
                row[f"{backend}_peak_MiB"] = round(one(backend, seq, args.device), 1)
        rows.append(row)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
