"""word2vec training throughput: skip-gram pairs per second (and CBOW examples per second) on the embedded corpus,
the collator (subsampling, windows, negatives) and the training step timed apart.

    python -m benchmarks.static_embeddings [--threads 2] [--batches 20]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from plm_lightning.data.static import WordChunks, WordEmbeddingDataModule
from plm_lightning.objectives.static_embeddings import FastText, Word2Vec


def throughput(model_cls: type, mode: str, batches: int, **model_kwargs) -> dict:  # noqa: ANN003
    dm = WordEmbeddingDataModule(mode=mode, val_fraction=0.0)
    dm.setup("fit")
    collate = dm.pairs_collator()
    chunks = WordChunks(dm.splits["train"], dm.chunk_words)
    model = model_cls(**model_kwargs)
    model.set_vocabulary(dm.vocabulary)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.025)
    examples = collate_s = step_s = 0.0
    for b in range(batches):
        t0 = time.perf_counter()
        batch = collate([chunks[(0, (b * dm.batch_size + i) % len(chunks))] for i in range(dm.batch_size)])
        t1 = time.perf_counter()
        optimizer.zero_grad()
        (model.loss(batch) * len(batch["center"])).backward()
        optimizer.step()
        t2 = time.perf_counter()
        if b:  # the first batch warms up
            examples += len(batch["center"])
            collate_s += t1 - t0
            step_s += t2 - t1
    return {"benchmark": f"{model_cls.__name__} {mode}", "threads": torch.get_num_threads(),
            "vocabulary": len(dm.vocabulary), "examples_per_batch": round(examples / (batches - 1)),
            "examples_per_s": round(examples / (collate_s + step_s)), "step_examples_per_s": round(examples / step_s),
            "collator_share": round(collate_s / (collate_s + step_s), 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for cls, mode, kwargs in ((Word2Vec, "skipgram", {}), (Word2Vec, "cbow", {}),
                              (Word2Vec, "skipgram", {"output": "hierarchical_softmax"}),
                              (FastText, "skipgram", {"buckets": 200_000})):
        row = throughput(cls, mode, args.batches, **kwargs)
        if kwargs:
            row["benchmark"] += " " + ", ".join(f"{k}={v}" for k, v in kwargs.items())
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
