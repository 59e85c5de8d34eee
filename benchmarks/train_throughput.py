"""Training tokens/s and achieved FLOP/s of our MLM and CLM vs Hugging Face transformers, side by side.

    python benchmarks/train_throughput.py [--threads 2] [--repeats 6]

Same config, batch, sequence length, dropout and thread count; the fused AdamW step (each framework's default)
included. The roofline is this machine's
best dense fp32 matmul rate, measured in the same run.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.common import interleaved_timing
from plm_lightning.callbacks.throughput import measure_matmul_flops
from plm_lightning.nn.flops import training_flops
from plm_lightning.objectives import CausalLM, MaskedLM


def _step_fn(model, loss_fn):  # noqa: ANN001, ANN202
    # fused AdamW on both sides: our configure_optimizers default and the Hugging Face Trainer's (adamw_torch_fused)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()

    return step


def mlm(batch: int, seq: int, repeats: int) -> dict:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    ids = torch.randint(5, 30522, (batch, seq))
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(batch, seq) < 0.15
    labels[chosen] = ids[chosen]
    mask = torch.ones_like(ids)
    ours = MaskedLM(backbone="bert-base", vocab_size=30522).train()
    hf = BertForMaskedLM(BertConfig()).train()
    batch_d = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    t = interleaved_timing({
        "ours": _step_fn(ours, lambda: ours(**batch_d)["loss"]),
        "hf": _step_fn(hf, lambda: hf(input_ids=ids, attention_mask=mask, labels=labels).loss),
    }, repeats=repeats)
    n_loss = int(chosen.sum())
    flops = {"ours": training_flops(ours.config, batch, seq, n_loss),
             "hf": training_flops(ours.config, batch, seq, batch * seq)}  # HF's head is dense over every token
    return _report("MLM bert-base", batch, seq, t, flops, model_flops=flops["ours"])


def clm(batch: int, seq: int, repeats: int) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    ids = torch.randint(0, 50257, (batch, seq))
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    ours = CausalLM(backbone="gpt2", vocab_size=50257).train()
    hf = GPT2LMHeadModel(GPT2Config()).train()
    batch_d = {"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids)}
    t = interleaved_timing({
        "ours": _step_fn(ours, lambda: ours(**batch_d)["loss"]),
        "hf": _step_fn(hf, lambda: hf(input_ids=ids, labels=ids).loss),
    }, repeats=repeats)
    f = training_flops(ours.config, batch, seq, batch * (seq - 1), head_transform=False)
    return _report("CLM gpt2", batch, seq, t, {"ours": f, "hf": f}, model_flops=f)


def _report(name: str, batch: int, seq: int, t: dict, flops: dict, model_flops: int) -> dict:
    """Throughput from the median step; the speed-up is the median of per-round ratios (HF time / our time)."""
    tokens = batch * seq
    out = {"benchmark": name, "batch": batch, "seq": seq, "threads": torch.get_num_threads()}
    for k in t:
        med = t[k]["median"]
        out[f"{k}_s_per_step_median"] = round(med, 4)
        out[f"{k}_s_per_step_min"] = round(t[k]["min"], 4)
        out[f"{k}_tokens_per_s"] = round(tokens / med, 1)
        out[f"{k}_executed_flops_per_s"] = flops[k] / med
        out[f"{k}_model_flops_per_s"] = model_flops / med
    out["speedup_ours_over_hf"] = round(t["hf"]["ratio_to_first"], 3)
    out["speedup_ours_over_hf_by_min"] = round(t["hf"]["min"] / t["ours"]["min"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    roofline = measure_matmul_flops("cpu", torch.float32, size=1024, repeats=10)
    results = [mlm(8, 128, args.repeats), clm(4, 256, args.repeats)]
    roofline = max(roofline, measure_matmul_flops("cpu", torch.float32, size=1024, repeats=10))
    for r in results:
        for k in ("ours", "hf"):
            r[f"{k}_executed_fraction_of_roofline"] = round(r[f"{k}_executed_flops_per_s"] / roofline, 3)
            r[f"{k}_mfu"] = round(r[f"{k}_model_flops_per_s"] / roofline, 3)
            r[f"{k}_executed_flops_per_s"] = f"{r[f'{k}_executed_flops_per_s'] / 1e9:.1f} GFLOP/s"
            r[f"{k}_model_flops_per_s"] = f"{r[f'{k}_model_flops_per_s'] / 1e9:.1f} GFLOP/s"
        r["roofline"] = f"{roofline / 1e9:.1f} GFLOP/s (best fp32 1024^3 matmul)"
        print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
