"""MLM collator samples/s: ours vs transformers' DataCollatorForLanguageModeling on the same packed blocks.

    python benchmarks/collator.py [--batches 200]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from plm_lightning.data import MaskedLMDataModule


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

    dm = MaskedLMDataModule(seq_len=128, batch_size=args.batch_size, packing="full_sentences")
    dm.prepare_data()
    dm.setup("fit")
    tok = dm.tokenizer
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok.tokenizer, pad_token="[PAD]", mask_token="[MASK]",
                                     cls_token="[CLS]", sep_token="[SEP]", unk_token="[UNK]")
    hf_col = DataCollatorForLanguageModeling(hf_tok, mlm_probability=0.15)
    ours = dm.collator()
    loader = dm.train_dataloader()
    keys = list(loader.sampler)[: args.batches * args.batch_size]
    samples = [loader.dataset[k] for k in keys]
    chunks = [samples[i:i + args.batch_size] for i in range(0, len(samples), args.batch_size)]
    hf_chunks = [[{"input_ids": s["input_ids"].astype(np.int64).tolist()} for s in c] for c in chunks]
    timings = {}
    for name, fn, data in (("ours", ours, chunks), ("hf", hf_col, hf_chunks), ("ours_2", ours, chunks),
                           ("hf_2", hf_col, hf_chunks)):
        t0 = time.perf_counter()
        for c in data:
            fn(c)
        timings[name] = time.perf_counter() - t0
    n = len(samples)
    best = {k: min(timings[k], timings[f"{k}_2"]) for k in ("ours", "hf")}
    print(json.dumps({"samples": n, "seq": 128, "ours_samples_per_s": round(n / best["ours"]),
                      "hf_samples_per_s": round(n / best["hf"]),
                      "speedup_ours_over_hf": round(best["hf"] / best["ours"], 2)}, indent=1))


if __name__ == "__main__":
    main()
