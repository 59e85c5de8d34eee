"""Training speed of the encoder-decoder recipes of issue 4 against transformers at the same config, and the span
corruption collator's cost as a share of one training step.

    python -m benchmarks.seq2seq_recipes [--threads 2] [--repeats 6] [--batch 8] [--seq 128] [--compile]
                                        [--matmul-ceiling]

- T5-base span corruption (seq inputs, T5's target length) vs ``T5ForConditionalGeneration``.
- T5.1.1-base (GeGLU, untied head, no dropout) vs ``T5ForConditionalGeneration`` (gated-gelu).
- BART-base denoising (text infilling of 30% + sentence permutation, the whole row as target) vs
  ``BartForConditionalGeneration``.
- The collators: seconds to corrupt one batch of rows (T5's random spans and sentinels; BART's five noising
  functions) over the seconds of one T5-base / BART-base training step on it; the issue's goal is <= 5%.

``--compile`` adds both models with every block of both stacks compiled, timed in the same rounds.
``--matmul-ceiling`` adds, in the same rounds, each step's dense matrix products alone (recorded from one step and
replayed on operands of the same layouts, four of each dealt out in turn: ``benchmarks.common.matmul_replay``): the
share of each step they take, and ``ceiling_speedup_ours_over_hf``, HF's step over ours' products alone, the speedup
ours would reach if everything but its matrix products (norms, activations, attention kernels, the optimizer, the
framework itself) cost nothing.
"""

from __future__ import annotations

import json
import time

import numpy as np
import torch

from benchmarks.common import interleaved_timing, matmul_replay, record_matmuls, step_parser
from benchmarks.train_throughput import _step_fn, _variants
from plm_lightning.data import BARTCollator, SpanCorruptionCollator
from plm_lightning.data.corruption.bart_noise import BARTNoise
from plm_lightning.data.corruption.t5_span import raw_length_for, sentinel_ids
from plm_lightning.objectives import Seq2SeqLM

VOCAB = 32128


def _samples(batch: int, raw: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"index": i, "epoch": 0, "input_ids": rng.integers(3, VOCAB - 100, raw), "document_ids": np.zeros(raw)}
            for i in range(batch)]


def _hf_t5(v1_1: bool) -> torch.nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=VOCAB, d_model=768, d_kv=64, d_ff=2048 if v1_1 else 3072, num_layers=12, num_heads=12,
                   feed_forward_proj="gated-gelu" if v1_1 else "relu", tie_word_embeddings=not v1_1,
                   dropout_rate=0.0 if v1_1 else 0.1, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = T5ForConditionalGeneration(cfg).train()
    if v1_1:  # transformers >= 5 ties every T5's head to its embeddings; T5.1.1's is its own matrix (as ours)
        model.lm_head.weight = torch.nn.Parameter(model.shared.weight.detach().clone())
    return model


def _versus_hf(make_ours, make_hf, hf_stacks, d: dict, repeats: int, name: str, counterpart: str,  # noqa: ANN001
               compiled: bool = False, ceiling: bool = False) -> dict:
    """One training step of each on the same batch, interleaved (and of each with compiled blocks when
    ``compiled``, and each one's matrix products alone when ``ceiling``); tokens = encoder + decoder tokens."""

    def hf_loss(hf: torch.nn.Module) -> torch.Tensor:
        return hf(input_ids=d["input_ids"], attention_mask=d["attention_mask"], decoder_input_ids=d["decoder_input_ids"],
                  decoder_attention_mask=d["decoder_attention_mask"], labels=d["labels"], use_cache=False).loss

    fns = _variants(make_ours, make_hf, hf_stacks, lambda m: m(**d)["loss"], hf_loss, compiled)
    if ceiling:
        fns["ours"](), fns["hf"]()  # record a step after the optimizer's state exists
        fns["ours_matmuls"] = matmul_replay(record_matmuls(fns["ours"]), copies=4)
        fns["hf_matmuls"] = matmul_replay(record_matmuls(fns["hf"]), copies=4)
    t = interleaved_timing(fns, repeats=repeats, warmup=3 if compiled else 2)
    tokens = int(d["attention_mask"].sum() + d["decoder_attention_mask"].sum())
    out = {"benchmark": name, "counterpart": counterpart, "threads": torch.get_num_threads()}
    for k, v in t.items():
        out[f"{k}_tokens_per_s"] = round(tokens / v["median"], 1)
        out[f"{k}_s_per_step_median"] = round(v["median"], 4)
    out["speedup_ours_over_hf"] = round(t["hf"]["ratio_to_first"], 3)
    out["speedup_ours_over_hf_by_min"] = round(t["hf"]["min"] / t["ours"]["min"], 3)  # noise only ever adds time
    if ceiling:
        for k in ("ours", "hf"):
            out[f"{k}_matmul_share_of_step"] = round(t[f"{k}_matmuls"]["median"] / t[k]["median"], 3)
        out["ceiling_speedup_ours_over_hf"] = round(t["hf"]["median"] / t["ours_matmuls"]["median"], 3)
    if compiled:
        out["speedup_ours_compiled_over_hf_compiled"] = round(t["hf_compiled"]["median"] / t["ours_compiled"]["median"], 3)
        out["speedup_of_compile_ours"] = round(t["ours"]["median"] / t["ours_compiled"]["median"], 3)
        out["speedup_of_compile_hf"] = round(t["hf"]["median"] / t["hf_compiled"]["median"], 3)
    return out


def t5(batch: int, seq: int, repeats: int, v1_1: bool, compiled: bool = False, ceiling: bool = False) -> dict:
    raw, _ = raw_length_for(seq, 0.15, 3.0)
    collate = SpanCorruptionCollator(sentinel_ids(VOCAB, 100), eos_id=1, pad_id=0)
    d = collate(_samples(batch, raw))
    name = "T5.1.1-base" if v1_1 else "T5-base"
    return _versus_hf(lambda: Seq2SeqLM(backbone="t5-v1_1-base" if v1_1 else "t5-base", vocab_size=VOCAB).train(),
                      lambda: _hf_t5(v1_1), _hf_blocks, d, repeats,
                      f"{name} span corruption ({seq} in / {d['labels'].shape[1]} out)", "T5ForConditionalGeneration",
                      compiled, ceiling)


def _hf_blocks(hf: torch.nn.Module) -> list[torch.nn.ModuleList]:
    """Both stacks' blocks of a transformers T5 or BART."""
    if hasattr(hf, "encoder"):
        return [hf.encoder.block, hf.decoder.block]
    return [hf.model.encoder.layers, hf.model.decoder.layers]


BART_VOCAB = 50265


def _bart_samples(batch: int, seq: int) -> list[dict]:
    """Rows of ``<s> ... </s>`` with GPT-2-like word starts (3 in 4 tokens) and a sentence every ~25 tokens."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(batch):
        ids = rng.integers(4, BART_VOCAB - 1, seq)
        ids[0], ids[-1] = 0, 2
        samples.append({"index": i, "epoch": 0, "input_ids": ids, "document_ids": np.zeros(seq),
                        "word_starts": rng.random(seq) < 0.75, "sentence_starts": rng.random(seq) < 0.04})
    return samples


def _bart_collator() -> BARTCollator:
    return BARTCollator(BARTNoise(), bos_id=0, eos_id=2, pad_id=1, mask_id=BART_VOCAB - 1,
                        random_ids=np.arange(4, BART_VOCAB - 1))


def bart(batch: int, seq: int, repeats: int, compiled: bool = False, ceiling: bool = False) -> dict:
    from transformers import BartConfig, BartForConditionalGeneration

    d = _bart_collator()(_bart_samples(batch, seq))
    config = BartConfig(vocab_size=BART_VOCAB, d_model=768, encoder_layers=6, decoder_layers=6,
                        encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                        decoder_ffn_dim=3072, dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)
    return _versus_hf(lambda: Seq2SeqLM(backbone="bart-base", vocab_size=BART_VOCAB, decoder_start_token="eos").train(),
                      lambda: BartForConditionalGeneration(config).train(), _hf_blocks, d, repeats,
                      f"BART-base denoising ({d['input_ids'].shape[1]} in / {seq} out)", "BartForConditionalGeneration",
                      compiled, ceiling)


def collator_share(batch: int, seq: int, repeats: int, recipe: str = "t5") -> dict:
    if recipe == "bart":
        collate, samples = _bart_collator(), _bart_samples(batch, seq)
        ours = Seq2SeqLM(backbone="bart-base", vocab_size=BART_VOCAB, decoder_start_token="eos").train()
    else:
        raw, _ = raw_length_for(seq, 0.15, 3.0)
        collate = SpanCorruptionCollator(sentinel_ids(VOCAB, 100), eos_id=1, pad_id=0)
        samples = _samples(batch, raw)
        ours = Seq2SeqLM(backbone="t5-base", vocab_size=VOCAB).train()
    d = collate(samples)
    step = _step_fn(ours, lambda: ours(**d)["loss"])
    step()
    collate_s, step_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(10):
            collate(samples)
        collate_s.append((time.perf_counter() - t0) / 10)
        t0 = time.perf_counter()
        step()
        step_s.append(time.perf_counter() - t0)
    c, s = float(np.median(collate_s)), float(np.median(step_s))
    what = "BART noising collator share of a BART-base" if recipe == "bart" else "span corruption collator share of a T5-base"
    return {"benchmark": f"{what} step (batch {batch}, {seq} tokens)",
            "collator_s_per_batch": round(c, 5), "step_s": round(s, 4), "collator_share": round(c / s, 4),
            "note": "the collator runs in DataLoader workers (num_workers > 0) beside the step; 1 thread here"}


def main() -> None:
    parser = step_parser(["t5", "t5-v1_1", "bart", "collator", "bart-collator"])
    parser.add_argument("--compile", action="store_true", help="also time both models with compiled blocks")
    parser.add_argument("--matmul-ceiling", action="store_true",
                        help="also time each step's matrix products alone (the speedup ours could reach)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ceiling = args.matmul_ceiling
    runs = {"t5": lambda: t5(args.batch, args.seq, args.repeats, False, args.compile, ceiling),
            "t5-v1_1": lambda: t5(args.batch, args.seq, args.repeats, True, args.compile, ceiling),
            "bart": lambda: bart(args.batch, args.seq, args.repeats, args.compile, ceiling),
            "collator": lambda: collator_share(args.batch, args.seq, args.repeats),
            "bart-collator": lambda: collator_share(args.batch, args.seq, args.repeats, "bart")}
    for name in args.only:
        print(json.dumps(runs[name]()))


if __name__ == "__main__":
    main()
