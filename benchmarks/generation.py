"""Generation tokens/s with and without the key-value cache (greedy), for GPT-2-small, T5-base, BART-base and a
GPT-3-style banded GPT-2-small (dense and 256-token banded layers alternating), side by side.

    python -m benchmarks.generation [--threads 2] [--prompt 32] [--new 64] [--batch 1]

Without the cache every step re-runs the whole prefix, so its cost per token grows with the length; with it each
step runs one position through the decoder (and T5's encoder once).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from plm_lightning.generation import GenerationConfig, generate
from plm_lightning.objectives import CausalLM, Seq2SeqLM


def _time(model: torch.nn.Module, ids: torch.Tensor, new: int, cache: bool, start: int | None) -> float:
    config = GenerationConfig("greedy", max_new_tokens=new, use_cache=cache)
    generate(model, ids, None, GenerationConfig("greedy", max_new_tokens=2, use_cache=cache), None, start)  # warm-up
    t0 = time.perf_counter()
    generate(model, ids, None, config, None, start)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = {"GPT-2-small": (CausalLM(backbone="gpt2", vocab_size=50257), None),
              "T5-base": (Seq2SeqLM(backbone="t5-base", vocab_size=32128), 0),
              "BART-base": (Seq2SeqLM(backbone="bart-base", vocab_size=50265, decoder_start_token="eos"), 2),
              "GPT-3-style banded GPT-2-small": (CausalLM(backbone="gpt2", vocab_size=50257, backbone_overrides={
                  "local_attention_window": 256, "global_attention_every": 2}), None)}
    for name, (model, start) in models.items():
        model.eval()
        ids = torch.randint(3, 30000, (args.batch, args.prompt))
        cached, full = _time(model, ids, args.new, True, start), _time(model, ids, args.new, False, start)
        tokens = args.batch * args.new
        print(json.dumps({"benchmark": f"{name} greedy, {args.prompt}-token prompt, {args.new} new tokens",
                          "threads": args.threads, "batch": args.batch,
                          "with_cache_tokens_per_s": round(tokens / cached, 1),
                          "without_cache_tokens_per_s": round(tokens / full, 1),
                          "speedup_of_cache": round(full / cached, 2)}))


if __name__ == "__main__":
    main()
