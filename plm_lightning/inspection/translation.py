"""``inspect`` for translation pairs (CoVe's MT-LSTM): what the encoder reads and what the decoder predicts."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from plm_lightning.data.parallel import ParallelDataModule, TranslationCollator


def pair_batch(datamodule: ParallelDataModule, size: int) -> dict[str, Any]:
    """``size`` training pairs spread over the corpus, collated as the model reads them."""
    pairs = datamodule.splits["train"]
    index = np.linspace(0, len(pairs) - 1, min(size, len(pairs))).astype(int)
    return TranslationCollator(datamodule.source_vocabulary, datamodule.target_vocabulary)([pairs[i] for i in index])


def translation_statistics(datamodule: ParallelDataModule, model: Any, batches: int) -> dict[str, Any]:
    batch = pair_batch(datamodule, batches * datamodule.batch_size)
    src, tgt = datamodule.source_vocabulary, datamodule.target_vocabulary
    real = batch["source_mask"]
    labels = batch["labels"][batch["labels"] != -100]
    return {"objective": type(model).__name__, "corruption": None, "batches": batches,
            "pairs": len(datamodule.splits["train"]), "source_vocabulary": len(src), "target_vocabulary": len(tgt),
            "input_length_mean": float(real.sum(1).float().mean()),
            "target_length_mean": float((batch["labels"] != -100).sum(1).float().mean()),
            "source_unk_fraction": float((batch["source_ids"][real] == src.index["<unk>"]).float().mean()),
            "target_unk_fraction": float((labels == tgt.index["<unk>"]).float().mean())}


def render_translation(datamodule: ParallelDataModule, model: Any, out: TextIO) -> None:
    batch = pair_batch(datamodule, 1)
    src, tgt = datamodule.source_vocabulary, datamodule.target_vocabulary
    n = int(batch["source_mask"][0].sum())
    out.write(f"objective: {type(model).__name__} (translation: {datamodule.parallel_corpus}), "
              f"{len(datamodule.splits['train'])} training pairs, vocabularies {len(src)} / {len(tgt)} words\n\n")
    out.write("encoder reads (CoVe's input):\n  " + " ".join(src.words[int(i)] for i in batch["source_ids"][0, :n]) + "\n\n")
    out.write("decoder reads:\n  " + " ".join(tgt.words[int(i)] for i in batch["decoder_input_ids"][0]) + "\n")
    out.write("decoder predicts:\n  " + " ".join(tgt.words[int(i)] for i in batch["labels"][0] if i >= 0) + "\n")
