"""Entity-level F1 for BIO tagging, as CoNLL-2003's ``conlleval`` counts it (Tjong Kim Sang & De Meulder 2003): an
entity is right only when its type and both boundaries are. A torchmetrics ``Metric`` (sum states), so it syncs across
processes like the library's own metrics."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy


def _split(tag: str) -> tuple[str, str]:
    return ("O", "") if tag == "O" or "-" not in tag else (tag[0], tag[2:])


def bio_chunks(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """The (start, end exclusive, type) entities of a tag sequence with conlleval's rules: a chunk starts at ``B-``,
    at an ``I-`` after ``O`` or after another type (so IOB1 files are read right too) and ends before the next start
    or ``O``."""
    chunks, start, kind = set(), None, ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, t = _split(tag)
        begins = prefix == "B" or (prefix == "I" and (start is None or t != kind))
        if start is not None and (prefix == "O" or begins):
            chunks.add((start, i, kind))
            start = None
        if begins:
            start, kind = i, t
    return chunks


class EntityF1(Metric):
    """Micro-averaged entity precision, recall and F1 over tag-id predictions; positions whose label is
    ``ignore_index`` (subword continuations, padding) are skipped."""

    full_state_update = False

    def __init__(self, tags: Sequence[str], ignore_index: int = -100) -> None:
        super().__init__()
        self.tags, self.ignore_index = list(tags), ignore_index
        for name in ("true_positives", "predicted", "gold"):
            self.add_state(name, default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds: Tensor, labels: Tensor) -> None:
        for pred_row, gold_row in zip(preds.tolist(), labels.tolist()):
            keep = [i for i, g in enumerate(gold_row) if g != self.ignore_index]
            predicted = bio_chunks([self.tags[pred_row[i]] for i in keep])
            gold = bio_chunks([self.tags[gold_row[i]] for i in keep])
            self.true_positives += len(predicted & gold)
            self.predicted += len(predicted)
            self.gold += len(gold)

    def compute(self) -> dict[str, Tensor]:
        precision = self.true_positives / self.predicted.clamp(min=1)
        recall = self.true_positives / self.gold.clamp(min=1)
        f1 = 2 * precision * recall / (precision + recall).clamp(min=1e-12)
        return {"entity_precision": precision.float(), "entity_recall": recall.float(), "entity_f1": f1.float()}


def tagging_metrics(tags: Sequence[str], ignore_index: int = -100) -> tuple[MetricCollection, MetricCollection]:
    """Validation and test metrics of a tagger: token accuracy and entity precision / recall / F1."""
    metrics = MetricCollection({"token_accuracy": MulticlassAccuracy(len(tags), average="micro", ignore_index=ignore_index),
                                "entity": EntityF1(tags, ignore_index)})
    return metrics.clone(prefix="val/"), metrics.clone(prefix="test/")
