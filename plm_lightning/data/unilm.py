"""UniLM (Dong et al. 2019, "Unified Language Model Pre-training for Natural Language Understanding and Generation",
sec. 2 and fig. 1): one Transformer, one set of weights, BERT's masked-LM corruption, and a self-attention mask drawn
per training batch (the global batch: every rank's share of one step asks for the same LM, drawn from the seed, the
epoch and the batch's place in the epoch, so a resume on another number of processes draws what the first run
drew): bidirectional (1/3 of the batches), left-to-right and right-to-left (1/6 each), sequence-to-sequence
(1/3: the source segment ``[CLS] A [SEP]`` bidirectional, the target ``B [SEP]`` causal and seeing the source).
A masked token is predicted from what its mask lets it see.

Segment ids tell the model which LM it is in, as in the reference implementation: 0/1 = source/target segment of a
bidirectional batch, 2 = left-to-right, 3 = right-to-left, 4/5 = source/target of a sequence-to-sequence batch (six
segment embeddings).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from plm_lightning.corpus.blocks import PackingMode
from plm_lightning.data.collators import MaskedLMCollator, sample_keys
from plm_lightning.data.datamodule import MaskedLMDataModule
from plm_lightning.data.inspection_notes import InspectionNotes
from plm_lightning.data_contract import ATTENTION_KINDS
from plm_lightning.errors import ConfigError

UNILM_KINDS = ("bidirectional", "left_to_right", "right_to_left", "prefix")
"""UniLM's four LMs (the last = sequence-to-sequence), in the order of ``lm_mixture``."""
UNILM_SEGMENTS = {"bidirectional": (0, 1), "left_to_right": (2, 2), "right_to_left": (3, 3), "prefix": (4, 5)}


class UniLMCollator(MaskedLMCollator):
    """BERT masking of continuation pairs, plus the batch's LM: ``attention_kind`` (an index into
    ``data_contract.ATTENTION_KINDS``), ``prefix_lengths`` (the source segment) and the LM's segment ids."""

    def __init__(self, *args: Any, mixture: np.ndarray, global_batch: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mixture = mixture
        self.global_batch = global_batch
        """Samples per training step over all data-parallel ranks: the LM is drawn per global batch."""
        self.objective = "unified_lm"

    def choose(self, samples: list[dict[str, Any]]) -> str:
        """The batch's LM, drawn with ``mixture`` from (seed, epoch, global batch number): the samples' place in
        the epoch's global order over ``global_batch`` (samples without a place: their first sample's key)."""
        first = samples[0]
        if "position" in first:
            key = [self.seed, int(first["epoch"]), int(first["position"]) // self.global_batch, 11]
        else:
            key = [int(sample_keys(self.seed, samples[:1])[0]), 11]
        return UNILM_KINDS[int(np.random.default_rng(key).choice(len(UNILM_KINDS), p=self.mixture))]

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        out = super().__call__(samples)
        out.pop("sentence_label", None)  # continuation pairs: no NSP
        kind = self.choose(samples)
        real = out["attention_mask"].bool()
        b_start = torch.tensor([s["segment_b_start"] for s in samples])
        target = torch.arange(real.shape[1])[None] >= b_start[:, None]
        first, second = UNILM_SEGMENTS[kind]
        out["token_type_ids"] = torch.where(target, second, first) * real
        out["attention_kind"] = torch.tensor(ATTENTION_KINDS.index(kind))
        out["prefix_lengths"] = b_start
        return out


class UniLMDataModule(MaskedLMDataModule):
    """UniLM's data: ``[CLS] A [SEP] B [SEP]`` pairs with B the continuation of A, BERT masking, one LM per batch."""

    token_type_vocab = 6

    def __init__(self, *args: Any, packing: PackingMode = "continuation_pairs", lm_mixture: list[float] | None = None,
                 **kwargs: Any) -> None:
        """
        Args:
            lm_mixture: Probabilities of the batch LMs: bidirectional, left-to-right, right-to-left,
                sequence-to-sequence (UniLM: 1/3, 1/6, 1/6, 1/3).
        """
        super().__init__(*args, packing=packing, **kwargs)
        if self.packing != "continuation_pairs":
            raise ConfigError(f"data.packing={self.packing}: UniLM reads source/target pairs (continuation_pairs)")
        weights = np.asarray(lm_mixture if lm_mixture is not None else [1 / 3, 1 / 6, 1 / 6, 1 / 3], dtype=np.float64)
        if weights.shape != (4,) or (weights < 0).any() or weights.sum() <= 0:
            raise ConfigError(f"data.lm_mixture={lm_mixture} needs 4 non-negative weights with a positive sum: "
                              "bidirectional, left_to_right, right_to_left, seq2seq")
        self.lm_mixture = weights / weights.sum()

    def collator(self) -> UniLMCollator:
        return UniLMCollator(self.collator_settings(), mixture=self.lm_mixture,
                             global_batch=self.batch_size * self._replicas()[0])

    def inspection_notes(self) -> list[InspectionNotes]:
        return [*super().inspection_notes(), AttentionKindNotes()]


class AttentionKindNotes(InspectionNotes):
    """UniLM in ``inspect``: the share of measured batches under each language model's mask (Dong et al. 2019,
    sec. 2.3: 1/3 bidirectional, 1/6 each direction, 1/3 sequence-to-sequence)."""

    def __init__(self) -> None:
        self.kinds: list[int] = []

    def add(self, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
        self.kinds.append(int(batch["attention_kind"]))

    def summary(self) -> dict[str, Any]:
        kinds = self.kinds
        return ({"attention_kind_fraction": {ATTENTION_KINDS[k]: kinds.count(k) / len(kinds)
                                             for k in sorted(set(kinds))}} if kinds else {})
