"""XLNet training speed against transformers' ``XLNetLMHeadModel`` at the same config, side by side in one run.

    python -m benchmarks.xlnet [--threads 2] [--repeats 6] [--batch 8] [--seq 128]

XLNet-base shapes (12 x 768, 12 heads, 3072 inner, 32k vocabulary), dropout 0.1, rows of our permutation-LM
collator (``A <sep> B <sep> <cls>``, 1/6 of the tokens predicted as n-gram spans, perm_size = seq / 2); both models get
the same perm_mask and targets (``target_mapping`` for transformers). Tokens/s count every input token (both streams
run over them).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from benchmarks.common import interleaved_timing, step_parser
from benchmarks.train_throughput import _step_fn
from plm_lightning.data.xlnet import PermutationLMCollator
from plm_lightning.objectives import PermutationLM
from plm_lightning.objectives.base import final_layer_positions

VOCAB = 32000


def _batch(batch: int, seq: int) -> dict:
    rng = np.random.default_rng(0)
    samples = []
    for i in range(batch):
        ids = rng.integers(10, VOCAB, seq)
        ids[0], ids[seq // 2], ids[-1] = 3, 4, 4  # [CLS] A [SEP] B [SEP]
        samples.append({"index": i, "epoch": 0, "input_ids": ids, "document_ids": np.zeros(seq, np.int64),
                        "segment_b_start": seq // 2 + 1, "word_starts": rng.random(seq) < 0.75})
    return PermutationLMCollator(seq, 5, 4, 3, 6.0, seq // 2)(samples)


def xlnet(batch: int, seq: int, repeats: int) -> dict:
    from transformers import XLNetConfig, XLNetLMHeadModel

    d = _batch(batch, seq)
    torch.manual_seed(0)
    ours = PermutationLM(backbone="xlnet-base", vocab_size=VOCAB).train()
    hf = XLNetLMHeadModel(XLNetConfig(vocab_size=VOCAB, d_model=768, n_layer=12, n_head=12, d_inner=3072,
                                      dropout=0.1, mem_len=None)).train()
    positions, labels = final_layer_positions(d["labels"])
    mapping = torch.zeros(batch, positions.shape[1], seq)
    mapping[torch.arange(batch)[:, None], torch.arange(positions.shape[1])[None], positions] = 1
    perm = d["perm_mask"].float()
    t = interleaved_timing({
        "ours": _step_fn(ours, lambda: ours(**d)["loss"]),
        "hf": _step_fn(hf, lambda: hf(input_ids=d["input_ids"], attention_mask=d["attention_mask"].long(),
                                      token_type_ids=d["token_type_ids"], perm_mask=perm, target_mapping=mapping,
                                      labels=labels).loss),
    }, repeats=repeats)
    tokens = batch * seq
    return {"benchmark": f"XLNet-base permutation LM ({batch} x {seq}, {positions.shape[1]} targets per row)",
            "counterpart": "XLNetLMHeadModel", "threads": torch.get_num_threads(),
            "ours_tokens_per_s": round(tokens / t["ours"]["median"], 1), "hf_tokens_per_s": round(tokens / t["hf"]["median"], 1),
            "ours_s_per_step_median": round(t["ours"]["median"], 4), "hf_s_per_step_median": round(t["hf"]["median"], 4),
            "speedup_ours_over_hf": round(t["hf"]["ratio_to_first"], 3)}


def main() -> None:
    args = step_parser(["xlnet"]).parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps(xlnet(args.batch, args.seq, args.repeats)))


if __name__ == "__main__":
    main()
