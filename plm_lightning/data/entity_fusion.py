"""ERNIE's (Tsinghua; Zhang et al. 2019) data: text whose entity mentions are linked to a knowledge graph, each
entity aligned with the first token of its mention (sec. 3.1), TransE embeddings of the graph's entities (sec. 4.1),
BERT's token masking plus the dEA's alignment noise (:mod:`plm_lightning.data.corruption.entity_alignment`).

The graph is a triples TSV (``data.graph``, optional aliases ``data.graph_aliases``), or, when the text is the
synthetic knowledge world (``data.source: world...``) and no graph is given, the world's own facts and aliases.
Rows are ``[CLS] tokens [SEP]`` chunks of one document each, at most ``seq_len`` tokens.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from plm_lightning.corpus.block_cache import cached_splits, tokenizer_hash
from plm_lightning.corpus.blocks import FORMAT_VERSION, PackedBlocks, split_documents
from plm_lightning.data.collators import sample_extras, sample_keys, stack_samples
from plm_lightning.data.corruption import MaskingConfig, mask_tokens
from plm_lightning.data.corruption.entity_alignment import (
    NO_ENTITY,
    AlignmentNoise,
    candidate_entities,
    corrupt_alignments,
)
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data.inspection_notes import InspectionNotes
from plm_lightning.data.sampling import BlockSampler, KeyedList, ResumableDataLoader
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError

if TYPE_CHECKING:
    from plm_lightning.corpus.graph import EntityLinker, KnowledgeGraph


def linked_blocks(documents: list[str], tokenizer, linker: EntityLinker, seq_len: int,  # noqa: ANN001
                  cls_id: int, sep_id: int, pad_id: int) -> PackedBlocks:
    """Each document's tokens in ``[CLS] chunk [SEP]`` rows of at most ``seq_len`` tokens (padded), with the entity
    aligned to each token (``entity_ids``, -1 for none); ``document_ids`` is 0 on tokens, -1 on padding."""
    ids_rows, entity_rows = [], []
    width = seq_len - 2
    for text, encoding in zip(documents, tokenizer.tokenizer.encode_batch(documents, add_special_tokens=False)):
        aligned = linker.align(encoding.offsets, linker.link(text))
        ids = np.asarray(encoding.ids, dtype=np.int64)
        for s in range(0, len(ids), width):
            ids_rows.append(np.concatenate([[cls_id], ids[s: s + width], [sep_id]]))
            entity_rows.append(np.concatenate([[NO_ENTITY], aligned[s: s + width], [NO_ENTITY]]))
    rows = len(ids_rows)
    input_ids = np.full((rows, seq_len), pad_id, dtype=np.int64)
    entity_ids = np.full((rows, seq_len), NO_ENTITY, dtype=np.int64)
    document_ids = np.full((rows, seq_len), -1, dtype=np.int64)
    for r, (ids, entities) in enumerate(zip(ids_rows, entity_rows)):
        input_ids[r, : len(ids)], entity_ids[r, : len(ids)], document_ids[r, : len(ids)] = ids, entities, 0
    return PackedBlocks(input_ids, document_ids, entity_ids=entity_ids)


class LinkedRows(KeyedList):
    """Linked blocks in the collators' sample format: ``input_ids``, ``document_ids``, ``entity_ids``; with the
    (epoch, index) the corruption is seeded from."""

    items: PackedBlocks

    def __getitem__(self, key: int | tuple[int, ...]) -> dict[str, Any]:
        key = key if isinstance(key, tuple) else (0, key)
        blocks, i = self.items, key[1]
        return {"epoch": key[0], "index": i, "input_ids": np.asarray(blocks.input_ids[i]),
                "document_ids": np.asarray(blocks.document_ids[i]), "entity_ids": np.asarray(blocks.entity_ids[i])}


class EntityFusionCollator:
    """BERT's masking of tokens, then the dEA noise of the alignments; the batch carries ``entity_ids`` (what the
    model sees), ``entity_candidates`` ``[B, C]`` and ``entity_labels`` (each aligned token's true entity as an index
    into its row's candidates) and ``entity_corrupted``."""

    objective = "masked_lm_entity_alignment"

    def __init__(self, special_ids: np.ndarray, mask_token_id: int, vocab_size: int, masking: MaskingConfig,
                 noise: AlignmentNoise, num_entities: int, seed: int) -> None:
        self.special_ids, self.mask_token_id, self.masking, self.noise = special_ids, mask_token_id, masking, noise
        self.random_token_ids = np.setdiff1d(np.arange(vocab_size), special_ids)
        self.num_entities, self.seed = num_entities, seed

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        stacked = stack_samples(samples)
        ids = stacked["input_ids"]
        keys = sample_keys(self.seed, samples)
        maskable = stacked["attention_mask"] & ~np.isin(ids, self.special_ids)
        corrupted, labels = mask_tokens(ids, maskable, keys, self.masking, self.mask_token_id, self.random_token_ids)
        entities = np.stack([s["entity_ids"] for s in samples]).astype(np.int64)
        seen, noised = corrupt_alignments(entities, keys, self.num_entities, self.noise)
        candidates, entity_labels = candidate_entities(entities)
        return {"input_ids": torch.from_numpy(corrupted), "labels": torch.from_numpy(labels),
                "entity_ids": torch.from_numpy(seen), "entity_candidates": torch.from_numpy(candidates),
                "entity_labels": torch.from_numpy(entity_labels), "entity_corrupted": torch.from_numpy(noised),
                **sample_extras(samples, stacked, False)}


class ERNIETHUDataModule(TextDataModule):
    """Entity-linked rows for :class:`~plm_lightning.objectives.ERNIETHU`, and the graph's TransE embeddings
    (``entity_embeddings``), which the model takes as its fixed entity table."""

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(self, *args: Any, graph: str | None = None, graph_aliases: str | None = None,
                 mask_prob: float = 0.15, mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1,
                 entity_replace_prob: float = 0.05, entity_mask_prob: float = 0.15, transe_dim: int = 100,
                 transe_epochs: int = 1000, transe_margin: float = 1.0, transe_norm: int = 1,
                 transe_learning_rate: float = 0.01, **kwargs: Any) -> None:
        """
        Args:
            graph: The knowledge graph: a TSV of head<TAB>relation<TAB>tail lines. Null with a world source takes
                the world's facts.
            graph_aliases: Other names of the graph's entities: a TSV of entity<TAB>alias lines.
            mask_prob: BERT masking: fraction of non-special tokens chosen for prediction.
            mask_replace_prob: Of the chosen, fraction replaced by the mask token.
            random_replace_prob: Of the chosen, fraction replaced by a random token.
            entity_replace_prob: dEA: alignments whose entity is replaced by another random one (ERNIE: 0.05).
            entity_mask_prob: dEA: alignments removed from the input (ERNIE: 0.15).
            transe_dim: TransE embedding size (ERNIE: 100).
            transe_epochs: TransE training epochs over the graph (Bordes et al.: at most 1000).
            transe_margin: TransE margin gamma.
            transe_norm: TransE dissimilarity: 1 (L1) or 2 (L2).
            transe_learning_rate: TransE SGD learning rate.
        """
        from plm_lightning.corpus.graph import load_graph
        from plm_lightning.corpus.transe import TransEConfig

        super().__init__(*args, **kwargs)
        self.packing = "documents"  # one document per row (chunked at seq_len); no packing across documents
        self.graph_file, self.aliases_file = graph, graph_aliases
        self.masking = MaskingConfig(mask_prob, mask_replace_prob, random_replace_prob)
        self.noise = AlignmentNoise(entity_replace_prob, entity_mask_prob)
        self.transe = TransEConfig(transe_dim, transe_margin, transe_norm, transe_learning_rate, transe_epochs,
                                   seed=self.seed)
        if graph is not None:  # a bad file fails before any text is read
            self._graph: KnowledgeGraph | None = load_graph(graph, graph_aliases)
        else:
            self._graph = None
            if graph_aliases is not None:
                raise ConfigError("data.graph_aliases needs data.graph (the triples its entities belong to)")
        self._entities: torch.Tensor | None = None

    @property
    def graph(self) -> KnowledgeGraph:
        from plm_lightning.corpus.graph import graph_from_world
        from plm_lightning.corpus.world import is_world_spec, world_from_spec

        if self._graph is None:
            if not is_world_spec(self.source):
                raise ConfigError(f"data.graph is required for data.source '{self.source or 'embedded'}': give a "
                                  "TSV of head<TAB>relation<TAB>tail triples (only a world source brings its own)")
            self._graph = graph_from_world(world_from_spec(self.source))
        return self._graph

    def contract(self) -> DataContract:
        return replace(super().contract(), entity_embeddings=self.entity_embeddings)

    @property
    def entity_embeddings(self) -> torch.Tensor:
        """``[entities, transe_dim]`` TransE embeddings (trained once per graph and settings, then cached)."""
        from plm_lightning.corpus.transe import entity_embeddings

        if self._entities is None:
            self._entities = entity_embeddings(self.graph, self.transe, self.cache_dir / "knowledge")
        return self._entities

    def _load_blocks(self) -> None:
        from plm_lightning.corpus.graph import EntityLinker

        if self.blocks:
            return
        ids = self.tokenizer.ids
        key = dict(v=FORMAT_VERSION, source=self._fingerprint(), tokenizer=tokenizer_hash(self.tokenizer,
                                                                                           self.tokenizer.file),
                   graph=self.graph.fingerprint(), length=self.seq_len, val_fraction=self.val_fraction, seed=self.seed)

        def build() -> dict[str, PackedBlocks]:
            documents = self.documents()[0]
            linker = EntityLinker(self.graph)
            train_idx, val_idx = split_documents(len(documents), self.val_fraction, self.seed)
            return {split: linked_blocks([documents[i] for i in idx], self.tokenizer, linker, self.seq_len,
                                         ids["cls"], ids["sep"], ids["pad"])
                    for split, idx in (("train", train_idx), ("val", val_idx))}

        blocks = cached_splits(self.cache_dir, f"linked-{self.seq_len}", key, build)
        if not (np.asarray(blocks["train"].entity_ids) != NO_ENTITY).any():
            raise ConfigError(f"data.source '{self.source or 'embedded'}': no entity of data.graph is mentioned in "
                              "the training text; the graph's names must occur in the text as they are written")
        self.blocks = blocks

    def collator(self) -> EntityFusionCollator:
        tok = self.tokenizer
        return EntityFusionCollator(tok.special_ids(), tok.ids["mask"], tok.vocab_size, self.masking, self.noise,
                                    self.graph.num_entities, self.seed)

    def inspection_notes(self) -> list[InspectionNotes]:
        return [EntityNotes(self)]

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        self._load_blocks()
        rows = LinkedRows(self.blocks[split])
        if not len(rows):
            return []
        replicas, rank = self._replicas()
        sampler = BlockSampler(len(rows), shuffle=shuffle, seed=self.seed, num_replicas=replicas, rank=rank,
                               drop_last=shuffle)
        return self._resumable(rows, sampler, shuffle)


class EntityNotes(InspectionNotes):
    """ERNIE (Tsinghua) in ``inspect``: alignments per row and the shares of them the dEA masked and replaced (Zhang
    et al. 2019, sec. 3.4: 15% and 5%); for a sample, each aligned token with its entity and what the noise did."""

    def __init__(self, datamodule: ERNIETHUDataModule) -> None:
        self.datamodule, self.rows, self.aligned, self.masked, self.replaced = datamodule, 0, 0, 0, 0

    def add(self, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
        original = np.stack([s["entity_ids"] for s in samples])
        seen = batch["entity_ids"].numpy()
        aligned = original != NO_ENTITY
        self.rows += len(samples)
        self.aligned += int(aligned.sum())
        self.masked += int((aligned & (seen == NO_ENTITY)).sum())
        self.replaced += int((aligned & (seen != NO_ENTITY) & (seen != original)).sum())

    def summary(self) -> dict[str, Any]:
        if not self.rows:
            return {}
        aligned = self.aligned
        return {"entities_per_sequence": aligned / self.rows,
                "entity_masked_fraction": self.masked / aligned if aligned else None,
                "entity_replaced_fraction": self.replaced / aligned if aligned else None}

    def describe(self, sample: dict[str, Any], batch: dict[str, Any], tokenizer: Any, real: int) -> str:
        names = self.datamodule.graph.entities
        original, seen = sample["entity_ids"][:real], batch["entity_ids"][0, :real].numpy()
        ids = sample["input_ids"][:real]
        pieces = []
        for i in np.flatnonzero(original != NO_ENTITY):
            shown = ("masked" if seen[i] == NO_ENTITY else f"replaced by {names[seen[i]]}" if seen[i] != original[i]
                     else "")
            pieces.append(f"{i}:{tokenizer.id_to_token(int(ids[i]))} -> {names[original[i]]}"
                          + (f" ({shown})" if shown else ""))
        return ("entity alignments (position:first token -> entity; the dEA predicts each among the row's "
                f"{len(set(original[original != NO_ENTITY].tolist()))} entities):\n  " + "\n  ".join(pieces) + "\n\n")
