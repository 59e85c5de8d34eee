"""Packed blocks cached on disk by a hash of everything they depend on (source, tokenizer, length, mode, split,
knowledge units), built once, written atomically and memory-mapped afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from plm_lightning.corpus.blocks import (
    FORMAT_VERSION,
    PackedBlocks,
    pack,
    reads_sentences,
    split_documents,
)
from plm_lightning.corpus.knowledge_units import KnowledgeSpec
from plm_lightning.corpus.shards import read_meta, write_meta
from plm_lightning.corpus.tokenized import tokenize_documents
from plm_lightning.corpus.tokenizer import TextTokenizer


def build_or_load(documents_fn, fingerprint: str, tokenizer: TextTokenizer, tokenizer_file: str | None, mode: str,  # noqa: ANN001
                  length: int, val_fraction: float, seed: int, cache_dir: Path,
                  knowledge: KnowledgeSpec | None = None, segmenter: str = "tokenizer", splitter: str = "pysbd"
                  ) -> dict[str, PackedBlocks]:
    """Packed train/validation blocks, built once per (source, tokenizer, length, mode, split, sentence splitter of
    a sentence-level mode) and then memory-mapped.

    ``documents_fn`` is only called on a cache miss.
    """
    key_fields = dict(v=FORMAT_VERSION, source=fingerprint, tokenizer=tokenizer_hash(tokenizer, tokenizer_file),
                      length=length, mode=mode, val_fraction=val_fraction, seed=seed,
                      knowledge=knowledge.cache_key() if knowledge else None, segmenter=segmenter)
    if reads_sentences(mode) and splitter != "pysbd":  # pysbd's entries keep the keys they had before the choice
        key_fields["splitter"] = splitter

    def build() -> dict[str, PackedBlocks]:
        docs = tokenize_documents(documents_fn(), tokenizer, by_sentence=reads_sentences(mode), knowledge=knowledge,
                                  segmenter=segmenter, splitter=splitter)
        train_idx, val_idx = split_documents(len(docs), val_fraction, seed)
        return {split: pack([docs[i] for i in idx], mode, length, tokenizer, seed, knowledge is not None)
                for split, idx in (("train", train_idx), ("val", val_idx))}

    return cached_splits(cache_dir, f"{mode}-{length}", key_fields, build)


def tokenizer_hash(tokenizer: TextTokenizer, tokenizer_file: str | None) -> str:
    if tokenizer_file is not None and Path(tokenizer_file).is_file():
        return hashlib.sha256(Path(tokenizer_file).read_bytes()).hexdigest()
    return hashlib.sha256(tokenizer.tokenizer.to_str().encode()).hexdigest()


def cached_splits(cache_dir: Path, name: str, key_fields: dict, build: Callable[[], dict[str, PackedBlocks]]
                  ) -> dict[str, PackedBlocks]:
    """The train/validation blocks cached under ``key_fields``: built once (written to a temporary directory and
    renamed into place, so a killed build leaves nothing half-written), then memory-mapped. An entry whose files no
    longer have the sizes its metadata recorded (truncated on disk) is rebuilt, with one warning."""
    key = hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()[:20]
    target = cache_dir / "packed" / f"{name}-{key}"
    if read_meta(target) is None:  # missing, or damaged (then removed with a warning)
        splits = build()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
        for split, blocks in splits.items():
            blocks.save(tmp, split)
        counts = {split: len(blocks) for split, blocks in splits.items()}
        write_meta(tmp, {**key_fields, "blocks": counts})
        try:
            os.replace(tmp, target)
        except OSError:  # built concurrently by another process
            shutil.rmtree(tmp, ignore_errors=True)
    return {split: PackedBlocks.load(target, split) for split in ("train", "val")}
