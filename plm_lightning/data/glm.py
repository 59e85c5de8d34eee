"""GLM data (Du et al. 2022): contiguous raw rows, blank-infilled when batched (``data.corruption.glm``), for a
decoder-only stack with a prefix-LM mask over Part A and 2D positions (``CausalLM`` with ``block_position_embedding``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from plm_lightning.corpus.blocks import PackingMode
from plm_lightning.data.collators import length_mask, pad_rows, sample_keys
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.glm import blank_infill, generation_span, nlu_spans
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data.inspection_notes import InspectionNotes
from plm_lightning.errors import ConfigError

GLM_MEAN_SPAN = 3.0 / (1.0 - math.exp(-3.0))
"""Mean of Poisson(3) restricted to 1..39, GLM's span lengths."""


class GLMCollator:
    """Raw rows -> Part A + Part B with ``labels``, ``position_ids``, ``block_position_ids`` and ``prefix_lengths``
    (Part A's length, the prefix of the prefix-LM mask); ``blanked_tokens`` and ``spans`` per row for ``inspect``."""

    objective = "blank_infilling"

    def __init__(self, mask_id: int, start_id: int, end_id: int, pad_id: int, seq_len: int, mask_ratio: float = 0.15,
                 poisson_lambda: float = 3.0, generation_fraction: float = 0.0, seed: int = 0) -> None:
        self.mask_id, self.start_id, self.end_id, self.pad_id, self.seq_len = mask_id, start_id, end_id, pad_id, seq_len
        self.mask_ratio, self.poisson_lambda, self.generation_fraction, self.seed = (mask_ratio, poisson_lambda,
                                                                                    generation_fraction, seed)

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = []
        for s, key in zip(samples, sample_keys(self.seed, samples)):
            tokens = np.asarray(s["input_ids"])[np.asarray(s["document_ids"]) >= 0].astype(np.int64)
            rng = np.random.default_rng(int(key))
            if rng.random() < self.generation_fraction:
                spans = generation_span(len(tokens), rng)
            else:
                spans = nlu_spans(len(tokens), self.mask_ratio, self.poisson_lambda, rng)
                spans = spans[: max(1, (self.seq_len - len(tokens)) // 2)]  # Part B's [S]/[E] must fit seq_len
            rows.append(blank_infill(tokens, spans, rng, self.mask_id, self.start_id, self.end_id))
        return {"input_ids": pad_rows([r.input_ids for r in rows], self.pad_id),
                "attention_mask": length_mask([r.input_ids for r in rows]),
                "labels": pad_rows([r.labels for r in rows], IGNORE_INDEX),
                "position_ids": pad_rows([r.position_ids for r in rows], 0),
                "block_position_ids": pad_rows([r.block_position_ids for r in rows], 0),
                "prefix_lengths": torch.tensor([r.part_a_length for r in rows]),
                "blanked_tokens": torch.tensor([sum(e - s for s, e in r.spans) for r in rows]),
                "spans": torch.tensor([len(r.spans) for r in rows])}


class GLMNotes(InspectionNotes):
    """GLM in ``inspect``: a row's 2-D positions (Du et al. 2022, sec. 2.2.1): Part A's own positions, Part B's
    tokens at the position of their span's [MASK] in Part A; the block position, 0 in Part A and 1.. within each
    span of Part B."""

    def describe(self, sample: dict[str, Any], batch: dict[str, Any], tokenizer: Any, real: int) -> str:
        return (f"positions (Part B: its span's [MASK] in Part A):\n  {batch['position_ids'][0, :real].tolist()}\n\n"
                f"block positions (0: Part A; 1.. within a span):\n  {batch['block_position_ids'][0, :real].tolist()}"
                "\n\n")


class GLMDataModule(TextDataModule):
    """GLM's pretraining data: raw rows short enough that Part A + Part B (the row plus two tokens per span) fit
    ``seq_len``."""

    document_mask_refusal = ("moves blanks of the whole row to Part B, whose 2-D positions have no per-document mask")

    inspection_view = "blank_infilling"

    required_special_tokens = ("pad", "mask", "sop", "eop", "eos")

    def __init__(self, *args: Any, tokenizer: str = "bpe", packing: PackingMode = "contiguous",
                 mask_ratio: float = 0.15, poisson_lambda: float = 3.0, generation_fraction: float = 0.0,
                 **kwargs: Any) -> None:
        """
        Args:
            mask_ratio: NLU mode: blank spans until at least this share of the row is covered (GLM: 0.15).
            poisson_lambda: Mean of the span lengths' Poisson (GLM: 3).
            generation_fraction: Share of the rows in generation mode, one span of 50-100% at the end (GLM's
                document-level objective; 0 = NLU blanks only, as GLM-Base/Large pretraining; 0.5 mixes both).
        """
        super().__init__(*args, tokenizer=tokenizer, packing=packing, **kwargs)
        if not 0.0 < mask_ratio < 1.0:
            raise ConfigError(f"data.mask_ratio={mask_ratio} must lie in (0, 1) (GLM: 0.15)")
        if poisson_lambda <= 0:
            raise ConfigError(f"data.poisson_lambda={poisson_lambda} must be positive (GLM: 3)")
        if not 0.0 <= generation_fraction <= 1.0:
            raise ConfigError(f"data.generation_fraction={generation_fraction} must lie in [0, 1]")
        if self.packing != "contiguous":
            raise ConfigError(f"data.packing={self.packing}: GLM reads contiguous raw rows")
        self.mask_ratio, self.poisson_lambda, self.generation_fraction = mask_ratio, poisson_lambda, generation_fraction

    def packed_length(self) -> int:
        """Raw rows whose Part A + Part B (about 1 + 2 * ratio / mean span of the row) fill ``seq_len``."""
        spans = self.mask_ratio / GLM_MEAN_SPAN
        return max(4, int((self.seq_len - 4) / (1 + 2 * spans)))

    def collator(self) -> GLMCollator:
        tok = self.tokenizer
        return GLMCollator(tok.ids["mask"], tok.ids["sop"], tok.ids["eop"], tok.ids["pad"], self.seq_len,
                           self.mask_ratio, self.poisson_lambda, self.generation_fraction, self.seed)

    def inspection_notes(self) -> list[InspectionNotes]:
        return [GLMNotes()]
