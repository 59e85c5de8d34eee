"""``inspect`` for the static embeddings: what subsampling keeps, the windows and pairs word2vec / fastText train on,
and GloVe's co-occurrence counts."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from plm_lightning.data.collators import sample_keys
from plm_lightning.data.static import WordChunks, WordEmbeddingDataModule


def _chunks(datamodule: WordEmbeddingDataModule, batches: int) -> list[list[dict[str, Any]]]:
    chunks = WordChunks(datamodule.splits["train"], datamodule.chunk_words)
    step = max(1, len(chunks) // max(1, batches * datamodule.batch_size))
    keys = list(range(0, len(chunks), step))[: batches * datamodule.batch_size]
    return [[chunks[(0, k)] for k in keys[b::batches]] for b in range(batches)]


def static_statistics(datamodule: WordEmbeddingDataModule, model: Any, batches: int) -> dict[str, Any]:
    vocab = datamodule.vocabulary
    out: dict[str, Any] = {"objective": type(model).__name__, "corruption": None, "batches": batches,
                           "vocabulary": len(vocab), "corpus_words": int(sum(len(d) for d in datamodule.splits["train"])),
                           "examples": datamodule.examples}
    if datamodule.examples == "cooccurrence":
        e = datamodule.entries
        x_max = model.hparams.get("x_max", 100.0)
        out.update(nonzero_counts=len(e), density=len(e) / len(vocab) ** 2, mean_count=float(e.values.mean()),
                   saturated_fraction=float((e.values >= x_max).mean()), window=datamodule.window)
        return out
    collate = datamodule.pairs_collator()
    words = examples = 0
    for samples in _chunks(datamodule, batches):
        batch = collate(samples)
        words += sum(len(s["words"]) for s in samples)
        examples += len(batch["center"])
    out.update(mode=datamodule.mode, window=datamodule.window, sample=datamodule.sample,
               negatives=datamodule.negatives,
               kept_fraction_expected=float((vocab.keep_probability(datamodule.sample) * vocab.counts).sum()
                                            / vocab.counts.sum()),
               examples_per_word=examples / words if words else None)
    return out


def render_static(datamodule: WordEmbeddingDataModule, model: Any, out: TextIO, words: int = 24) -> None:
    vocab = datamodule.vocabulary
    out.write(f"objective: {type(model).__name__} ({datamodule.examples}), vocabulary: {len(vocab)} words "
              f"(min_count={datamodule.min_count}), most frequent: {' '.join(vocab.words[:10])}\n\n")
    if datamodule.examples == "cooccurrence":
        e = datamodule.entries
        top = np.argsort(-e.values)[:10]
        out.write(f"co-occurrence counts (window {datamodule.window}, 1/d per pair): {len(e)} non-zero\n")
        for i in top:
            out.write(f"  X[{vocab.words[e.rows[i]]}, {vocab.words[e.cols[i]]}] = {e.values[i]:.1f}\n")
        return
    sample = _chunks(datamodule, 1)[0][0]
    keep = vocab.keep_probability(datamodule.sample)
    rng = np.random.default_rng(int(sample_keys(datamodule.seed, [sample])[0]))  # the collator's own draw
    kept = (rng.random(len(sample["words"])) < keep[sample["words"]])[:words]
    shown = sample["words"][:words]
    out.write(f"a chunk, subsampled with t={datamodule.sample} ([x] = discarded this time):\n  "
              + " ".join(vocab.words[w] if k else f"[{vocab.words[w]}]" for w, k in zip(shown, kept)) + "\n\n")
    batch = datamodule.pairs_collator()([sample])
    out.write(f"{datamodule.mode} examples (windows b ~ U[1, {datamodule.window}]), first 8:\n")
    for i in range(min(8, len(batch["center"]))):
        center = vocab.words[int(batch["center"][i])]
        context = batch["context"][i]
        context = (vocab.words[int(context)] if context.dim() == 0
                   else "{" + " ".join(vocab.words[int(c)] for c in context if c >= 0) + "}")
        negatives = (" negatives: " + " ".join(vocab.words[int(n)] for n in batch["negatives"][i])
                     if "negatives" in batch else "")
        out.write(f"  center {center} <-> {context}{negatives}\n")
