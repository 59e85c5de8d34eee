"""Training throughput, MFU and peak memory on one CUDA GPU under bf16 autocast: our MLM, CLM, T5 and BART against
the transformers model of the same config, side by side in one run (interleaved steps, fused AdamW on both sides).

    python -m benchmarks.gpu_throughput [--repeats 10] [--only mlm clm t5 bart] [--variants eager model_unfused ...]
                                        [--kernels] [--profile]

Each of ours is built once per ``--variants`` entry (``VARIANTS``: eager, the vocabulary unpadded, the plain head
and cross-entropy, compiled blocks, the whole loss compiled in each ``compile_mode``, xformers where its kernels run).
Each variant's first step (compilation included) is reported apart from the steady-state steps. MFU is the model
FLOPs of a step (the objective's own count: sparse MLM head, T5's encoder + decoder) over the step's time, against
two peaks: the vendor's dense bf16 figure (989.5 TFLOP/s for the H100/H200 SXM) and the best bf16 8192^3 matmul
measured in the same run. ``--kernels`` adds, per model, the CUDA kernels of one step that took the most time and
every attention kernel that ran.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import torch

from benchmarks.common import interleaved_timing
from plm_lightning.callbacks.throughput import measure_matmul_flops
from plm_lightning.nn.flops import seq2seq_training_flops, training_flops
from plm_lightning.objectives import CausalLM, MaskedLM, Seq2SeqLM

DEVICE = "cuda"
VENDOR_PEAK_BF16 = {"H100": 989.5e12, "H200": 989.5e12, "A100": 312e12}
UNFUSED = {"fused_cross_entropy": False}
VARIANTS: dict[str, dict] = {
    "eager": {},
    "eager_nopad": {"pad_vocab_multiple": 1},
    "eager_unfused": UNFUSED,
    "blocks": {"compile": "blocks"},
    "model": {"compile": "model"},
    "model_unfused": {"compile": "model", **UNFUSED},
    "model_unfused_ro": {"compile": "model", "compile_mode": "reduce-overhead", **UNFUSED},
    "model_unfused_mat": {"compile": "model", "compile_mode": "max-autotune-no-cudagraphs", **UNFUSED},
    "xformers": {"backbone_overrides": {"attention_backend": "xformers"}},
    # FlexAttention has no attention dropout: T5's bias in the fused kernel, attention-probability dropout off
    # (the transformers side keeps T5-base's 0.1 there; hidden-state dropout stays on both sides)
    "flex_nodrop": {"backbone_overrides": {"attention_backend": "flex", "attention_dropout": 0.0}},
    "model_flex_nodrop": {"compile": "model", **UNFUSED,
                          "backbone_overrides": {"attention_backend": "flex", "attention_dropout": 0.0}},
}
"""Our model's settings per variant (on top of ``attention_backend: sdpa``, fused cross-entropy and the default
vocabulary padding, 128 on CUDA)."""


def vendor_peak(name: str) -> float | None:
    return next((v for k, v in VENDOR_PEAK_BF16.items() if k in name), None)


def cuda_step(model: torch.nn.Module, loss_fn) -> callable:  # noqa: ANN001
    """One bf16-autocast training step with fused AdamW, synchronised so wall-clock timing sees the kernels."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

    def step() -> None:
        torch.compiler.cudagraph_mark_step_begin()  # reduce-overhead: a new step may overwrite the last one's outputs
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()

    return step


def peak_memory_gib(step) -> float:  # noqa: ANN001
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    return round((torch.cuda.max_memory_allocated() - base) / 2**30, 2)


OPTIONS = argparse.Namespace(variants=["eager"], kernels=False, profile=False)


def ours_variants(cls: type, **kwargs) -> dict[str, torch.nn.Module]:  # noqa: ANN003
    """``cls(**kwargs)`` on the device once per requested variant (xformers only where its kernels run)."""
    from plm_lightning.nn.attention import xformers_unusable_reason

    out = {}
    for name in OPTIONS.variants:
        if name == "xformers" and xformers_unusable_reason():
            print(json.dumps({"variant": name, "skipped": xformers_unusable_reason()}), flush=True)
            continue
        settings = {**kwargs, **VARIANTS[name]}
        overrides = {"attention_backend": "sdpa", **settings.pop("backbone_overrides", {})}
        m = cls(**settings, backbone_overrides=overrides).to(DEVICE).train()
        m.configure_model()
        out[f"ours_{name}"] = m
    return out


def kernels(step, rows: int = 6) -> dict:  # noqa: ANN001
    """The CUDA kernels of one step: the ``rows`` that took the most time, and every attention kernel."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
    events = [e for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0]
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    total = sum(e.self_device_time_total for e in events) or 1
    attention = sorted({e.key[:90] for e in events
                        if any(w in e.key.lower() for w in ("flash", "fmha", "attention", "cudnn", "efficient"))})
    return {"top": [[e.key[:90], round(e.self_device_time_total / total, 3)] for e in events[:rows]],
            "attention": attention}


def profile(steps: dict, rows: int = 12) -> None:
    """The CUDA kernels that take the time of one step of each model (``--profile``)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for name, step in steps.items():
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
        print(f"== {name}\n" + prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=60),
              flush=True)


def compare(name: str, ours: dict, ours_loss, hf: torch.nn.Module, hf_loss, tokens: int, model_flops: int,  # noqa: ANN001
            repeats: int) -> dict:
    steps = {k: cuda_step(m, (lambda m=m: ours_loss(m))) for k, m in ours.items()}
    steps["hf"] = cuda_step(hf, lambda: hf_loss(hf))
    first_step, failed = {}, {}
    for k, step in list(steps.items()):  # the first step compiles: timed apart; a variant that fails is reported
        t0 = time.perf_counter()
        try:
            step()
        except Exception as error:  # noqa: BLE001 - one variant's failure must not lose the others' figures
            failed[k] = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
            del steps[k]
            continue
        first_step[k] = round(time.perf_counter() - t0, 2)
    memory = {k: peak_memory_gib(s) for k, s in steps.items()}
    if OPTIONS.profile:
        profile(steps)
    t = interleaved_timing(steps, warmup=2, repeats=repeats)
    out = {"benchmark": name, "gpu": torch.cuda.get_device_name(), "tokens_per_step": tokens,
           "model_tflop_per_step": round(model_flops / 1e12, 3), **({"failed": failed} if failed else {})}
    for k in steps:
        med = t[k]["median"]
        out[k] = {"s_per_step": round(med, 4), "first_step_s": first_step[k], "tokens_per_s": round(tokens / med),
                  "model_tflop_per_s": round(model_flops / med / 1e12, 1), "peak_memory_GiB": memory[k],
                  "speedup_over_hf": round(t["hf"]["median"] / med, 3)}
        if OPTIONS.kernels:
            out[k]["kernels"] = kernels(steps[k])
    return out


def _device_batch(d: dict) -> dict:
    return {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in d.items()}


def mlm(repeats: int, batch: int = 32, seq: int = 512) -> dict:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    ids = torch.randint(5, 30522, (batch, seq))
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(batch, seq) < 0.15
    labels[chosen] = ids[chosen]
    d = _device_batch({"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids)})

    ours = ours_variants(MaskedLM, backbone="bert-base", vocab_size=30522)
    hf = BertForMaskedLM(BertConfig()).to(DEVICE).train()
    flops = training_flops(next(iter(ours.values())).config, batch, seq, int(chosen.sum()))
    return compare(f"MLM bert-base {batch}x{seq}", ours, lambda m: m(**d)["loss"], hf,
                   lambda h: h(input_ids=d["input_ids"], attention_mask=d["attention_mask"], labels=d["labels"]).loss,
                   batch * seq, flops, repeats)


def clm(repeats: int, batch: int = 16, seq: int = 1024) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    ids = torch.randint(0, 50257, (batch, seq))
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    d = _device_batch({"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids)})

    ours = ours_variants(CausalLM, backbone="gpt2", vocab_size=50257)
    hf = GPT2LMHeadModel(GPT2Config()).to(DEVICE).train()
    flops = training_flops(next(iter(ours.values())).config, batch, seq, batch * (seq - 1), head_transform=False)
    return compare(f"CLM gpt2 {batch}x{seq}", ours, lambda m: m(**d)["loss"], hf,
                   lambda h: h(input_ids=d["input_ids"], labels=d["input_ids"]).loss, batch * seq, flops, repeats)


def _seq2seq(name: str, preset: str, d: dict, hf: torch.nn.Module, vocab: int, repeats: int, **kwargs) -> dict:
    d = _device_batch(d)

    ours = ours_variants(Seq2SeqLM, backbone=preset, vocab_size=vocab, **kwargs)
    b, n_in = d["input_ids"].shape
    n_out = d["labels"].shape[1]
    flops = seq2seq_training_flops(next(iter(ours.values())).config, b, n_in, n_out, int((d["labels"] >= 0).sum()))
    hf_loss = lambda h: h(input_ids=d["input_ids"], attention_mask=d["attention_mask"],  # noqa: E731
                          decoder_input_ids=d["decoder_input_ids"], decoder_attention_mask=d["decoder_attention_mask"],
                          labels=d["labels"]).loss
    return compare(f"{name} {b}x{n_in} in / {n_out} out", ours, lambda m: m(**d)["loss"], hf.to(DEVICE), hf_loss,
                   b * (n_in + n_out), flops, repeats)


def t5(repeats: int, batch: int = 32, seq: int = 512) -> dict:
    from benchmarks.seq2seq_recipes import VOCAB, _hf_t5, _samples
    from plm_lightning.data import SpanCorruptionCollator
    from plm_lightning.data.corruption.t5_span import raw_length_for, sentinel_ids

    raw, _ = raw_length_for(seq, 0.15, 3.0)
    d = SpanCorruptionCollator(sentinel_ids(VOCAB, 100), eos_id=1, pad_id=0)(_samples(batch, raw))
    return _seq2seq("T5-base span corruption", "t5-base", d, _hf_t5(False), VOCAB, repeats)


def bart(repeats: int, batch: int = 32, seq: int = 512) -> dict:
    from transformers import BartConfig, BartForConditionalGeneration

    from benchmarks.seq2seq_recipes import BART_VOCAB, _bart_collator, _bart_samples

    d = _bart_collator()(_bart_samples(batch, seq))
    hf = BartForConditionalGeneration(BartConfig(vocab_size=BART_VOCAB, d_model=768, encoder_layers=6, decoder_layers=6,
                                                 encoder_attention_heads=12, decoder_attention_heads=12,
                                                 encoder_ffn_dim=3072, decoder_ffn_dim=3072)).train()
    return _seq2seq("BART-base denoising", "bart-base", d, hf, BART_VOCAB, repeats, decoder_start_token="eos")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--only", nargs="*", choices=["mlm", "clm", "t5", "bart"], default=["mlm", "clm", "t5", "bart"])
    parser.add_argument("--variants", nargs="*", choices=list(VARIANTS), default=["eager", "blocks"],
                        help="our model's variants (VARIANTS), each timed beside transformers")
    parser.add_argument("--kernels", action="store_true", help="record the top CUDA kernels and the attention kernels")
    parser.add_argument("--profile", action="store_true", help="print the top CUDA kernels of one step of each model")
    args = parser.parse_args()
    OPTIONS.variants, OPTIONS.kernels, OPTIONS.profile = args.variants, args.kernels, args.profile
    ours = logging.getLogger("plm_lightning")  # which attention kernel runs, logged once per kind of call
    ours.setLevel(logging.INFO)
    ours.addHandler(logging.StreamHandler())
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.gpu_throughput needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = True
    name = torch.cuda.get_device_name()
    measured = measure_matmul_flops("cuda", torch.bfloat16, size=8192, repeats=10)
    vendor = vendor_peak(name)
    print(json.dumps({"gpu": name, "measured_bf16_matmul_tflops": round(measured / 1e12, 1),
                      "vendor_bf16_peak_tflops": vendor and vendor / 1e12}), flush=True)
    runs = {"mlm": mlm, "clm": clm, "t5": t5, "bart": bart}
    for key in args.only:
        t0 = time.perf_counter()
        row = runs[key](args.repeats)
        row["benchmark_s"] = round(time.perf_counter() - t0, 1)
        for v in row.values():
            if isinstance(v, dict):
                v["mfu_vs_measured_matmul"] = round(v["model_tflop_per_s"] * 1e12 / measured, 3)
                if vendor:
                    v["mfu_vs_vendor_peak"] = round(v["model_tflop_per_s"] * 1e12 / vendor, 3)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
