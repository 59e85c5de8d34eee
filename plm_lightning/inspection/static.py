"""``inspect`` for the static embeddings: what subsampling keeps, the windows and pairs word2vec / fastText train on,
and GloVe's co-occurrence counts."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from plm_lightning.data.collators import sample_keys
from plm_lightning.data.static import WordChunks, WordEmbeddingDataModule


def word_chunks(datamodule: WordEmbeddingDataModule, batches: int) -> list[list[dict[str, Any]]]:
    """``batches`` batches of training chunks spread over the corpus (the samples ``inspect`` shows)."""
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
    for samples in word_chunks(datamodule, batches):
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
    sample = word_chunks(datamodule, 1)[0][0]
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


def sequence_rows(datamodule: WordEmbeddingDataModule, batches: int) -> list[dict[str, Any]]:
    """ELMo: those chunks collated into rows of word ids and characters."""
    collate = datamodule.collator()
    return [collate(samples) for samples in word_chunks(datamodule, batches)]


def sequence_statistics(datamodule: WordEmbeddingDataModule, model: Any, batches: int) -> dict[str, Any]:
    """ELMo's rows: ``loss_fraction`` is predictions per real token over both directions (each LM predicts every token
    but the first / last of its row), ``unk_fraction`` the words outside the vocabulary."""
    vocab = datamodule.vocabulary
    tokens = predictions = unknown = rows = 0
    for batch in sequence_rows(datamodule, batches):
        real = batch["attention_mask"]
        tokens += int(real.sum())
        predictions += 2 * int((batch["lengths"] - 1).sum())
        unknown += int((batch["input_ids"][real] == vocab.index["<unk>"]).sum())
        rows += len(real)
    return {"objective": type(model).__name__, "corruption": None, "batches": batches, "vocabulary": len(vocab),
            "examples": "sequences", "tokens": tokens, "rows": rows, "input_length_mean": tokens / rows,
            "loss_fraction": predictions / tokens, "unk_fraction": unknown / tokens}


def render_sequences(datamodule: WordEmbeddingDataModule, model: Any, out: TextIO, words: int = 16) -> None:
    vocab = datamodule.vocabulary
    batch = sequence_rows(datamodule, 1)[0]
    n = min(words, int(batch["lengths"][0]))
    row = [vocab.words[int(i)] for i in batch["input_ids"][0, :n]]
    out.write(f"objective: {type(model).__name__} (biLM over words), vocabulary: {len(vocab)} words "
              f"(min_count={datamodule.min_count}; the rest read as <unk>), rows of {datamodule.chunk_words} words\n\n")
    out.write("row:\n  " + " ".join(row) + "\n\n")
    out.write("forward LM (position t predicts t + 1):\n  "
              + " ".join(f"{a}->{b}" for a, b in zip(row[:6], row[1:7])) + "\n")
    out.write("backward LM (position t predicts t - 1):\n  "
              + " ".join(f"{b}->{a}" for a, b in zip(row[:6], row[1:7])) + "\n\n")
    chars = batch["chars"][0, 1].tolist()
    out.write(f"characters of '{row[1]}' (begin/end-of-word marks 258/259, padding 260):\n  {chars[:16]}\n")
