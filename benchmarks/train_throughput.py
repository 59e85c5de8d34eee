"""Training tokens/s and achieved FLOP/s of our MLM and CLM vs Hugging Face transformers, side by side.

    python benchmarks/train_throughput.py [--threads 2] [--repeats 6] [--compile]

Same config, batch, sequence length, dropout and thread count; the fused AdamW step (each framework's default)
included. The roofline is this machine's
best dense fp32 matmul rate, measured in the same run. ``--compile`` adds both models with every Transformer block
compiled (``torch.compile``, inductor; ours through ``--model.compile``'s own hook), timed in the same rounds after
a warm-up that includes the compilation.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.common import interleaved_timing
from plm_lightning.callbacks.throughput import measure_matmul_flops
from plm_lightning.nn.flops import training_flops
from plm_lightning.objectives import CausalLM, MaskedLM
from plm_lightning.objectives.scale import apply_compile


def _step_fn(model, loss_fn):  # noqa: ANN001, ANN202
    # fused AdamW on both sides: our configure_optimizers default and the Hugging Face Trainer's (adamw_torch_fused)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()

    return step


def _compiled_blocks(layers: torch.nn.ModuleList) -> None:
    for i, block in enumerate(layers):
        layers[i] = torch.compile(block)


def _variants(make_ours, make_hf, hf_layers, ours_loss, hf_loss, compiled: bool) -> dict:  # noqa: ANN001
    """Step functions of ours and HF, eager, and with ``compiled`` each with its blocks compiled as well
    (``hf_layers``: the model's lists of blocks)."""
    fns = {}
    for suffix in ("", "_compiled") if compiled else ("",):
        ours, hf = make_ours(), make_hf()
        if suffix:
            for stack in ours.stacks():
                apply_compile(stack)
            for layers in hf_layers(hf):
                _compiled_blocks(layers)
        fns[f"ours{suffix}"] = _step_fn(ours, lambda m=ours: ours_loss(m))
        fns[f"hf{suffix}"] = _step_fn(hf, lambda m=hf: hf_loss(m))
    return fns


def mlm(batch: int, seq: int, repeats: int, compiled: bool = False) -> dict:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    ids = torch.randint(5, 30522, (batch, seq))
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(batch, seq) < 0.15
    labels[chosen] = ids[chosen]
    mask = torch.ones_like(ids)
    batch_d = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    fns = _variants(lambda: MaskedLM(backbone="bert-base", vocab_size=30522).train(),
                    lambda: BertForMaskedLM(BertConfig()).train(), lambda hf: [hf.bert.encoder.layer],
                    lambda m: m(**batch_d)["loss"],
                    lambda m: m(input_ids=ids, attention_mask=mask, labels=labels).loss, compiled)
    t = interleaved_timing(fns, repeats=repeats, warmup=3 if compiled else 2)
    config = MaskedLM(backbone="bert-base", vocab_size=30522).config
    n_loss = int(chosen.sum())
    flops = {"ours": training_flops(config, batch, seq, n_loss),
             "hf": training_flops(config, batch, seq, batch * seq)}  # HF's head is dense over every token
    flops.update({f"{k}_compiled": v for k, v in flops.items()})
    return _report("MLM bert-base", batch, seq, t, flops, model_flops=flops["ours"])


def clm(batch: int, seq: int, repeats: int, compiled: bool = False) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    ids = torch.randint(0, 50257, (batch, seq))
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    batch_d = {"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids)}
    fns = _variants(lambda: CausalLM(backbone="gpt2", vocab_size=50257).train(),
                    lambda: GPT2LMHeadModel(GPT2Config()).train(), lambda hf: [hf.transformer.h],
                    lambda m: m(**batch_d)["loss"], lambda m: m(input_ids=ids, labels=ids, use_cache=False).loss, compiled)
    t = interleaved_timing(fns, repeats=repeats, warmup=3 if compiled else 2)
    f = training_flops(CausalLM(backbone="gpt2", vocab_size=50257).config, batch, seq, batch * (seq - 1),
                       head_transform=False)
    return _report("CLM gpt2", batch, seq, t, {k: f for k in t}, model_flops=f)


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
    if "ours_compiled" in t:
        out["speedup_ours_compiled_over_hf"] = round(t["hf"]["median"] / t["ours_compiled"]["median"], 3)
        out["speedup_ours_compiled_over_hf_compiled"] = round(t["hf_compiled"]["median"] / t["ours_compiled"]["median"], 3)
        out["speedup_of_compile_ours"] = round(t["ours"]["median"] / t["ours_compiled"]["median"], 3)
        out["speedup_of_compile_hf"] = round(t["hf"]["median"] / t["hf_compiled"]["median"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--compile", action="store_true", help="also time both models with compiled blocks")
    parser.add_argument("--only", choices=["mlm", "clm"], default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    roofline = measure_matmul_flops("cpu", torch.float32, size=1024, repeats=10)
    runs = {"mlm": lambda: mlm(8, 128, args.repeats, args.compile), "clm": lambda: clm(4, 256, args.repeats, args.compile)}
    results = [run() for name, run in runs.items() if args.only in (None, name)]
    roofline = max(roofline, measure_matmul_flops("cpu", torch.float32, size=1024, repeats=10))
    for r in results:
        for k in [k[: -len("_tokens_per_s")] for k in list(r) if k.endswith("_tokens_per_s")]:
            r[f"{k}_executed_fraction_of_roofline"] = round(r[f"{k}_executed_flops_per_s"] / roofline, 3)
            r[f"{k}_mfu"] = round(r[f"{k}_model_flops_per_s"] / roofline, 3)
            r[f"{k}_executed_flops_per_s"] = f"{r[f'{k}_executed_flops_per_s'] / 1e9:.1f} GFLOP/s"
            r[f"{k}_model_flops_per_s"] = f"{r[f'{k}_model_flops_per_s'] / 1e9:.1f} GFLOP/s"
        r["roofline"] = f"{roofline / 1e9:.1f} GFLOP/s (best fp32 1024^3 matmul)"
        print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
