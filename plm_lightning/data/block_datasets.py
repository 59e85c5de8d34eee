"""Datasets of packed blocks: one split (``BlockDataset``) or several streams in one index space (``StreamDataset``),
each sample the block's fields plus what seeds its corruption (index, epoch, training progress)."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch.utils.data import Dataset

from plm_lightning.corpus.blocks import KNOWLEDGE_FIELDS, PackedBlocks


class BlockDataset(Dataset):
    """Packed blocks addressed by ``(epoch, index)`` keys (a plain int means epoch 0)."""

    def __init__(self, blocks: PackedBlocks) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, key: int | tuple[int, ...]) -> dict[str, Any]:
        """``key``: an index, or ``(epoch, index[, position])`` from :class:`BlockSampler`."""
        key = key if isinstance(key, tuple) else (0, key)
        epoch, index = key[:2]
        position = key[2] if len(key) > 2 else index
        return {**self.sample(index, epoch, epoch + position / max(1, len(self.blocks))), "position": position}

    def sample(self, index: int, epoch: int, progress: float) -> dict[str, Any]:
        """Block ``index`` with the fields its collator reads; ``progress`` is the training progress in epochs."""
        b = self.blocks
        sample = {
            "index": index,
            "epoch": epoch,
            "progress": progress,
            "input_ids": np.asarray(b.input_ids[index]),
            "document_ids": np.asarray(b.document_ids[index]),
            "segment_b_start": None if b.segment_b_start is None else int(b.segment_b_start[index]),
            "sentence_label": None if b.sentence_label is None else int(b.sentence_label[index]),
            "word_starts": None if b.word_starts is None else np.asarray(b.word_starts[index]),
        }
        if b.sentence_starts is not None:
            sample["sentence_starts"] = np.asarray(b.sentence_starts[index])
        for name in KNOWLEDGE_FIELDS:
            value = getattr(b, name)
            if value is not None:
                sample[name] = np.asarray(value[index])
        return sample


class StreamDataset(Dataset):
    """Several streams of packed blocks in one index space (stream after stream). Each sample carries its stream
    and, with ``languages`` (one per stream; multilingual data), its tokens' languages (the stream's, or a TLM
    pair's per side) and its 0-based positions."""

    def __init__(self, streams: list[PackedBlocks], languages: list[int] | None = None) -> None:
        self.streams = [BlockDataset(b) for b in streams]
        self.languages = languages
        self.sizes = np.array([len(b) for b in streams], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, key: int | tuple[int, ...]) -> dict[str, Any]:
        key = key if isinstance(key, tuple) else (0, key)
        epoch, index = key[:2]
        position = key[2] if len(key) > 2 else index
        stream = int(np.searchsorted(self.offsets, index, side="right") - 1)
        local = index - int(self.offsets[stream])
        sample = self.streams[stream].sample(local, epoch, epoch + position / max(1, len(self)))
        sample["index"] = index  # unique over the streams: seeds the corruption
        sample["stream"] = stream
        if self.languages is None:
            return sample
        blocks = self.streams[stream].blocks
        length = sample["input_ids"].shape[0]
        sample["position_ids"] = (np.asarray(blocks.position_ids[local]) if blocks.position_ids is not None
                                  else np.arange(length))
        sample["language_ids"] = (np.asarray(blocks.language_ids[local]) if blocks.language_ids is not None
                                  else np.full(length, self.languages[stream]))
        return sample
