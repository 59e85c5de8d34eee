"""``inspect --png`` for the recipes without attention: the shape of the context each prediction reads, in the same
matrix form (row = the prediction, column = the word it reads; red rows carry loss).

* word2vec / fastText: a chunk after frequent-word subsampling; row = centre word, filled = the context words of
  its window b ~ U[1, window] (skip-gram predicts each of them from the centre; CBOW predicts the centre from
  them), drawn with the collator's own random numbers for that chunk.
* GloVe: a document's words; row i counts co-occurrences with every word within ``window`` (weighted 1/d).
* ELMo: one row per word and direction: the forward LSTM's state at t has read words <= t and predicts t + 1, the
  backward one has read words >= t and predicts t - 1 (the two directions never see each other).
* CoVe: the attentional LSTM encoder-decoder as one matrix over [source; target], as the Transformer ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plm_lightning.data.collators import sample_keys
from plm_lightning.data.parallel import ParallelDataModule
from plm_lightning.data.static import WordEmbeddingDataModule, windows
from plm_lightning.inspection.picture_parts import ObjectivePicture, encoder_decoder_picture


def word_level_picture(datamodule: WordEmbeddingDataModule | ParallelDataModule, model: Any, width: int,
                       name: str) -> ObjectivePicture:
    if isinstance(datamodule, ParallelDataModule):
        return _translation(datamodule, width, name)
    if datamodule.examples == "sequences":
        return _bidirectional_lm(datamodule, width, name)
    if datamodule.examples == "cooccurrence":
        return _cooccurrence(datamodule, width, name)
    return _windows(datamodule, width, name)


def _translation(datamodule: ParallelDataModule, width: int, name: str) -> ObjectivePicture:
    from plm_lightning.inspection.translation import pair_batch

    batch = pair_batch(datamodule, 1)
    src, tgt = datamodule.source_vocabulary, datamodule.target_vocabulary
    n = int(batch["source_mask"][0].sum())
    labels = batch["labels"][0]
    dec = min(int((labels != -100).sum()), max(1, width // 2))
    source = [src.words[int(i)] for i in batch["source_ids"][0, :min(n, width)]]
    target = [tgt.words[int(i)] for i in batch["decoder_input_ids"][0, :dec]]
    return encoder_decoder_picture(f"{name} (translation)", source, target, (labels[:dec] != -100).numpy(),
                                   " ".join(src.words[int(i)] for i in batch["source_ids"][0, :n]),
                                   " ".join(tgt.words[int(i)] for i in labels if i >= 0),
                                   "LSTM encoder over the source; LSTM decoder, attending to every source word")


def _bidirectional_lm(datamodule: WordEmbeddingDataModule, width: int, name: str) -> ObjectivePicture:
    from plm_lightning.inspection.static import sequence_rows

    batch = sequence_rows(datamodule, 1)[0]
    n = min(width // 2, int(batch["lengths"][0]))
    words = [datamodule.vocabulary.words[int(i)] for i in batch["input_ids"][0, :n]]
    forward, backward = np.tril(np.ones((n, n), bool)), np.triu(np.ones((n, n), bool))
    loss = np.concatenate([np.arange(n) < n - 1, np.arange(n) > 0])  # the last / first word predict nothing
    text = " ".join(words)
    return ObjectivePicture(f"{name} (biLM)", words, np.concatenate([forward, backward]), loss, [], text, text,
                            "forward LSTM: reads words <= t, predicts t + 1; backward LSTM: reads words >= t, "
                            "predicts t - 1", row_tokens=[f"{w} ->" for w in words] + [f"<- {w}" for w in words],
                            row_blocks=[("forward", n), ("backward", n)])


def _cooccurrence(datamodule: WordEmbeddingDataModule, width: int, name: str) -> ObjectivePicture:
    document = datamodule.splits["train"][0][:width]
    words = [datamodule.vocabulary.words[int(i)] for i in document]
    distance = np.abs(np.arange(len(words))[:, None] - np.arange(len(words))[None, :])
    mask = (distance > 0) & (distance <= datamodule.window)
    text = " ".join(words)
    return ObjectivePicture(f"{name} (co-occurrence)", words, mask, np.ones(len(words), bool), [], text, text,
                            f"X_ij counts words within {datamodule.window} of each other, 1/d per pair")


def _windows(datamodule: WordEmbeddingDataModule, width: int, name: str) -> ObjectivePicture:
    from plm_lightning.inspection.static import word_chunks

    collate = datamodule.pairs_collator()
    sample = word_chunks(datamodule, 1)[0][0]
    rng = np.random.default_rng(int(sample_keys(collate.seed, [sample])[0]))  # the collator's draws, in its order
    kept = sample["words"][rng.random(len(sample["words"])) < collate.keep[sample["words"]]]
    center, context = windows(len(kept), collate.window, rng)
    n = min(width, len(kept))
    mask = np.zeros((n, n), bool)
    inside = (center < n) & (context < n)
    mask[center[inside], context[inside]] = True
    vocab = datamodule.vocabulary
    words = [vocab.words[int(w)] for w in kept[:n]]
    how = "predicts each context word from the centre" if collate.mode == "skipgram" else \
        "predicts the centre from its context words"
    return ObjectivePicture(f"{name} ({collate.mode})", words, mask, mask.any(1), [],
                            " ".join(vocab.words[int(w)] for w in sample["words"]), " ".join(words),
                            f"window b ~ U[1, {collate.window}] per centre after subsampling; {how}")
