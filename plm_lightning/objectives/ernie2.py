"""ERNIE 2.0 (Sun et al. 2020, "ERNIE 2.0: A Continual Pre-training Framework for Language Understanding"): one
encoder with a task embedding (fig. 2) and a head per self-supervised task, trained by continual multi-task
learning: the data (:class:`~plm_lightning.data.ERNIE2DataModule`) brings the tasks in stage by stage and labels
only the active ones, and the loss is the sum of the active tasks' losses.

corruption: knowledge masking (+ shuffled segments) | attention: bidirectional | loss: masked tokens (MLM), the
unmasked words (capitalisation, token-document relation), [CLS] (sentence reordering, sentence distance).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.sentence_reorder import reorder_classes
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.nn import SentenceHead
from plm_lightning.nn.heads import TokenDetectionHead
from plm_lightning.objectives.masked_lm import MaskedLM

TOKEN_TASKS = {"capitalization": "capitalization_labels", "relation": "relation_labels"}
SENTENCE_TASKS = {"reorder": "reorder_label", "distance": "distance_label"}


class ERNIE2(MaskedLM):
    """The MLM of :class:`MaskedLM` plus ERNIE 2.0's heads: two binary token heads (capitalisation, token-document
    relation) and two [CLS] classifiers (sentence reordering over sum_{n<=m} n! orders, sentence distance over 3)."""

    def __init__(self, *args, max_reorder_segments: int = 3, task_embeddings: bool = True,  # noqa: ANN002
                 **kwargs) -> None:  # noqa: ANN003
        """
        Args:
            max_reorder_segments: m of sentence reordering; must equal data.max_reorder_segments.
            task_embeddings: Add ERNIE 2.0's task embedding (one row per input form: word-aware block, reordered
                block, sentence pair) to every token.
        """
        if max_reorder_segments < 1:
            raise ConfigError(f"model.max_reorder_segments={max_reorder_segments} must be >= 1")
        self.max_reorder_segments, self.task_embeddings = max_reorder_segments, task_embeddings
        kwargs.setdefault("sentence_prediction", "none")
        super().__init__(*args, **kwargs)

    def check_data(self, data: DataContract) -> None:
        super().check_data(data)
        data_m = data.max_reorder_segments
        if data_m is not None and data_m != self.max_reorder_segments:
            raise ConfigError(f"model.max_reorder_segments={self.max_reorder_segments} differs from "
                              f"data.max_reorder_segments={data_m}; the reordering head needs the data's classes")

    def build(self) -> None:
        if self.task_embeddings and self.config.task_type_vocab_size < 3:
            self.config = self.config.replace(task_type_vocab_size=3)
        super().build()
        cfg = self.config
        self.capitalization_head = TokenDetectionHead(cfg)
        self.relation_head = TokenDetectionHead(cfg)
        self.reorder_head = SentenceHead(cfg.hidden_size, reorder_classes(self.max_reorder_segments))
        self.distance_head = SentenceHead(cfg.hidden_size, 3)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        hidden = self.encode(batch)  # the word-aware heads read every position
        mlm_loss, lm = self.lm_loss(hidden, batch["labels"])
        out = {"mlm_loss": mlm_loss, "lm_loss": mlm_loss, **lm}
        total = mlm_loss
        for name, key in TOKEN_TASKS.items():
            scores = getattr(self, f"{name}_head")(hidden)
            labels = batch.get(key)
            asked = labels != IGNORE_INDEX if labels is not None else None
            if asked is None or not bool(asked.any()):
                total = total + 0.0 * scores.sum()  # every head takes part in every step (DDP, FSDP)
                continue
            out[f"{name}_loss"] = F.binary_cross_entropy_with_logits(scores[asked].float(), labels[asked].float())
            out[f"{name}_accuracy"] = ((scores[asked] > 0).long() == labels[asked]).float().mean()
            total = total + out[f"{name}_loss"]
        for name, key in SENTENCE_TASKS.items():
            scores = getattr(self, f"{name}_head")(hidden)
            labels = batch[key]
            asked = labels != IGNORE_INDEX
            if not bool(asked.any()):
                total = total + 0.0 * scores.sum()
                continue
            out[f"{name}_loss"] = F.cross_entropy(scores[asked].float(), labels[asked])
            out[f"{name}_accuracy"] = (scores[asked].argmax(-1) == labels[asked]).float().mean()
            total = total + out[f"{name}_loss"]
        out["loss"] = total
        return out

    def loss_positions(self, batch: dict[str, Tensor]) -> Tensor:
        """Masked tokens and the words the capitalisation / token-document heads are asked about."""
        positions = batch["labels"] != IGNORE_INDEX
        for key in TOKEN_TASKS.values():
            if key in batch:
                positions = positions | (batch[key] != IGNORE_INDEX)
        return positions
