"""ERNIE 2.0 data (Sun et al. 2020): the self-supervised tasks built from raw text, introduced by continual
multi-task learning (sec. 3.2): stage k trains tasks 1..k together, so a new task never makes the model forget the
earlier ones.

Word-aware tasks, on every sample: knowledge masking (ERNIE 1.0's phrase and entity masking), capitalisation
prediction (was this word capitalised? the input is lower-cased) and token-document relation (does this word occur in
another segment of its document?). Structure-aware tasks: sentence reordering (a block's segments shuffled, the order
classified, :mod:`~plm_lightning.data.corruption.sentence_reorder`) and sentence distance (a pair's B follows A, is
elsewhere in A's document, or from another document; packing ``sentence_distance``).

corruption: knowledge masking (+ segment shuffling on reordering samples) | attention: bidirectional | loss: masked
tokens (MLM), the words of the word-aware tasks, [CLS] for the structure-aware ones.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
import torch

from plm_lightning.corpus.blocks import KNOWLEDGE_FIELDS, PackedBlocks
from plm_lightning.data.collators import MaskedLMCollator, sample_keys
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.sentence_reorder import class_permutation, reorder_segments
from plm_lightning.data.datamodule import MaskedLMDataModule, stage_boundaries
from plm_lightning.data.inspection_notes import InspectionNotes
from plm_lightning.data.sampling import ResumableDataLoader
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError

Task = Literal["knowledge_masking", "capitalization", "token_document_relation", "sentence_reordering",
               "sentence_distance"]
TASKS = ("knowledge_masking", "capitalization", "token_document_relation", "sentence_reordering", "sentence_distance")
FORMS = {"word": 0, "reordering": 1, "distance": 2}
"""The task id of a sample (ERNIE 2.0's task embedding): its input form."""


class ERNIE2Collator(MaskedLMCollator):
    """Each sample's stage (from its training progress) decides its active tasks; the batch carries ``labels``
    (MLM), ``capitalization_labels`` and ``relation_labels`` (``[B, L]``, on word starts that are not masked),
    ``reorder_label`` and ``distance_label`` (``[B]``; -100 where a task does not apply) and ``task_type_ids``."""

    def __init__(self, *args: Any, tasks: tuple[str, ...] = TASKS, task_epochs: tuple[float, ...] = (),
                 max_reorder_segments: int = 3, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tasks, self.task_epochs, self.max_reorder_segments = tuple(tasks), tuple(task_epochs), max_reorder_segments

    def active_tasks(self, progress: float) -> tuple[str, ...]:
        """The tasks trained at a training progress (in epochs): the first task, plus one more per stage reached."""
        return self.tasks[: 1 + int(np.searchsorted(np.asarray(self.task_epochs), progress, side="right"))]

    def _reorder(self, sample: dict[str, Any], key: int) -> tuple[dict[str, Any], int]:
        real = int((sample["document_ids"] >= 0).sum())
        index, label = reorder_segments(sample["word_starts"], real, self.max_reorder_segments, key)
        moved = dict(sample)
        for name in ("input_ids", "document_ids", "word_starts", *KNOWLEDGE_FIELDS):
            if sample.get(name) is not None:
                moved[name] = np.asarray(sample[name])[index]
        return moved, label

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        active = [self.active_tasks(s.get("progress", 0.0)) for s in samples]
        keys = sample_keys(self.seed + 1, samples, self.dupe_factor if self.static_masking else None)
        length = len(samples[0]["input_ids"])
        prepared, forms, reorder, distance = [], [], [], []
        for s, tasks, key in zip(samples, active, keys):
            pair = s.get("sentence_label") is not None
            if pair:
                forms.append(FORMS["distance"])
                distance.append(int(s["sentence_label"]) if "sentence_distance" in tasks else IGNORE_INDEX)
                reorder.append(IGNORE_INDEX)
            elif "sentence_reordering" in tasks:
                s, label = self._reorder(s, int(key))
                forms.append(FORMS["reordering"])
                reorder.append(label)
                distance.append(IGNORE_INDEX)
            else:
                forms.append(FORMS["word"])
                reorder.append(IGNORE_INDEX)
                distance.append(IGNORE_INDEX)
            # one batch mixes pairs and single blocks: a single block is all segment A and has no pair label
            prepared.append({**s, "segment_b_start": s["segment_b_start"] if pair else length,
                             "sentence_label": s["sentence_label"] if pair else IGNORE_INDEX})
        out = super().__call__(prepared)
        out.pop("sentence_label")
        chosen = out["labels"].numpy() != IGNORE_INDEX
        for task, field, name in (("capitalization", "capitalised", "capitalization_labels"),
                                  ("token_document_relation", "elsewhere", "relation_labels")):
            if not any(task in tasks for tasks in active):
                continue
            asked = np.stack([p["word_starts"] & p["lexical"] for p in prepared]) & ~chosen
            asked &= np.array([task in tasks for tasks in active])[:, None]
            values = np.stack([p[field] for p in prepared]).astype(np.int64)
            out[name] = torch.from_numpy(np.where(asked, values, IGNORE_INDEX))
        out["reorder_label"] = torch.tensor(reorder)
        out["distance_label"] = torch.tensor(distance)
        out["task_type_ids"] = torch.tensor(forms)
        return out


class ERNIE2DataModule(MaskedLMDataModule):
    """Blocks for the word-aware tasks and sentence reordering, plus ``sentence_distance`` pairs (a second stream,
    drawn half the time once sentence distance is active); every block carries ERNIE's knowledge units and the
    word signals (capitalised, occurs elsewhere in its document)."""

    def __init__(
        self,
        *args: Any,
        tasks: list[Task] | None = None,
        task_epochs: list[float] | None = None,
        max_reorder_segments: int = 3,
        masking_scheme: Literal["token", "whole_word", "ngram", "span", "ernie"] = "ernie",
        **kwargs: Any,
    ) -> None:
        """
        Args:
            tasks: The tasks in the order they are introduced (the first must be knowledge_masking); default all
                five: knowledge_masking, capitalization, token_document_relation, sentence_reordering,
                sentence_distance.
            task_epochs: The training progress, in epochs, at which each task after the first joins (one increasing
                value per later task). Default: the tasks join at equal steps over the first epoch.
            max_reorder_segments: Sentence reordering's m: 1..m segments, k = sum_{n<=m} n! classes.
        """
        super().__init__(*args, masking_scheme=masking_scheme, **kwargs)
        self.tasks = tuple(tasks or TASKS)
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or len(set(self.tasks)) != len(self.tasks) or self.tasks[0] != "knowledge_masking":
            raise ConfigError(f"data.tasks={list(self.tasks)}: give distinct tasks of {', '.join(TASKS)}, "
                              "knowledge_masking first (the MLM every stage keeps training)")
        self.task_epochs = stage_boundaries(self.tasks, task_epochs, "task_epochs", "task")
        if max_reorder_segments < 1:
            raise ConfigError(f"data.max_reorder_segments={max_reorder_segments} must be >= 1")
        if self.packing in ("sentence_pairs", "sentence_order", "sentence_distance", "contiguous"):
            raise ConfigError(f"data.packing={self.packing}: ERNIE 2.0 blocks are full_sentences or doc_sentences "
                              "(sentence distance pairs are packed on their own)")
        self.max_reorder_segments = max_reorder_segments
        self.knowledge = self.knowledge_source  # the word signals are marked with the knowledge units
        self.stream_blocks: dict[str, list[PackedBlocks]] = {}

    def _load_blocks(self) -> None:
        if "capitalization" in self.tasks:
            normalizer = self.tokenizer.tokenizer.normalizer
            if normalizer is None or normalizer.normalize_str("Ab") != "ab":
                raise ConfigError(f"data.tasks: capitalization prediction needs a lower-casing tokenizer (the input "
                                  f"would show the answer); '{self.tokenizer.name}' keeps case: use "
                                  "data.tokenizer=wordpiece or drop the task")
        super()._load_blocks()
        streams = {split: [self.blocks[split]] for split in ("train", "val")}
        if "sentence_distance" in self.tasks:
            pairs = self.blocks_of(self.source, lambda: self.documents()[0], self._fingerprint, "sentence_distance")
            if len(pairs["train"]) == 0:
                raise ConfigError("data.tasks: sentence_distance found no sentence pair in the training documents")
            for split in streams:
                streams[split].append(pairs[split])
        self.stream_blocks = streams

    def packing_modes(self) -> tuple[str, ...]:
        return (self.packing, "sentence_distance") if "sentence_distance" in self.tasks else (self.packing,)

    def stage_weights(self) -> np.ndarray:
        """``[stages, streams]``: the pair stream is drawn half the time once sentence distance has joined."""
        rows = []
        for k in range(len(self.tasks)):
            if len(self.stream_blocks["train"]) == 1:
                rows.append([1.0])
            else:
                rows.append([0.5, 0.5] if "sentence_distance" in self.tasks[: k + 1] else [1.0, 0.0])
        return np.asarray(rows)

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        return self._stream_loader(self.stream_blocks[split], shuffle, self.stage_weights(),
                                   stage_epochs=self.task_epochs)

    def contract(self) -> DataContract:
        return replace(super().contract(), max_reorder_segments=self.max_reorder_segments)

    def collator(self) -> ERNIE2Collator:
        return ERNIE2Collator(self.collator_settings(), tasks=self.tasks, task_epochs=self.task_epochs,
                              max_reorder_segments=self.max_reorder_segments)

    def inspection_notes(self) -> list[InspectionNotes]:
        return [*super().inspection_notes(), ERNIE2Notes(self.collator())]


class ERNIE2Notes(InspectionNotes):
    """ERNIE 2.0 in ``inspect``: how often each task is trained, the input forms, the label balance of each task;
    for a sample, its active tasks, input form and the labels of each task."""

    def __init__(self, collate: ERNIE2Collator) -> None:
        self.collate = collate
        self.seen: dict[str, list] = {k: [] for k in ("forms", "active", "reorder", "distance", "capitalization",
                                                      "relation")}

    def add(self, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
        seen = self.seen
        seen["forms"].extend(batch["task_type_ids"].tolist())
        seen["active"].extend(self.collate.active_tasks(s.get("progress", 0.0)) for s in samples)
        for key, name in (("reorder_label", "reorder"), ("distance_label", "distance")):
            seen[name].extend(v for v in batch[key].tolist() if v != IGNORE_INDEX)
        for key, name in (("capitalization_labels", "capitalization"), ("relation_labels", "relation")):
            if key in batch:
                labels = batch[key].numpy()
                seen[name].extend(labels[labels != IGNORE_INDEX].tolist())

    def summary(self) -> dict[str, Any]:
        seen = self.seen
        if not seen["forms"]:
            return {}
        n = len(seen["forms"])
        orders = {c: class_permutation(c) for c in set(seen["reorder"])}

        def share(values: list[int], classes: int) -> list[float] | None:
            return (np.bincount(values, minlength=classes) / len(values)).round(4).tolist() if values else None

        reorder = seen["reorder"]
        return {
            "task_fraction": {t: sum(t in a for a in seen["active"]) / n for t in self.collate.tasks},
            "form_fraction": dict(zip(("word", "reordering", "distance"), share(seen["forms"], 3))),
            # m = 3: n ~ U{1, 2, 3} segments, so 2 on average and in order 1/3 (1 + 1/2 + 1/6) = 0.556 of the time
            "reorder_mean_segments": float(np.mean([len(orders[c]) for c in reorder])) if reorder else None,
            "reorder_in_order_fraction": float(np.mean([orders[c] == tuple(sorted(orders[c])) for c in reorder]))
            if reorder else None,
            "distance_label_fraction": share(seen["distance"], 3),
            "capitalized_fraction": float(np.mean(seen["capitalization"])) if seen["capitalization"] else None,
            "relation_positive_fraction": float(np.mean(seen["relation"])) if seen["relation"] else None,
        }

    def describe(self, sample: dict[str, Any], batch: dict[str, Any], tokenizer: Any, real: int) -> str:
        form = ("word-aware block", "reordered block", "sentence pair")[int(batch["task_type_ids"][0])]
        text = f"tasks: {', '.join(self.collate.active_tasks(sample.get('progress', 0.0)))} (task id: {form})\n\n"
        reorder, distance = int(batch["reorder_label"][0]), int(batch["distance_label"][0])
        if reorder != IGNORE_INDEX:
            order = class_permutation(reorder)
            text += (f"sentence reordering: class {reorder} = {len(order)} segment(s) laid out in order "
                     f"{list(order)}\n\n")
        if distance != IGNORE_INDEX:
            meaning = ("B follows A", "B elsewhere in A's document", "B from another document")
            text += f"sentence distance: {distance} ({meaning[distance]})\n\n"
        ids = batch["input_ids"][0].tolist()
        for key, name, positive in (("capitalization_labels", "capitalization", "capitalised"),
                                    ("relation_labels", "token-document relation", "in another sentence")):
            if key in batch and (batch[key][0] != IGNORE_INDEX).any():
                labels = batch[key][0].tolist()[:real]
                words = " ".join(tokenizer.id_to_token(ids[i]) + ("*" if v == 1 else "") for i, v in enumerate(labels)
                                 if v != IGNORE_INDEX)
                text += f"{name} (words asked; * = {positive}):\n  {words}\n\n"
        return text
