"""Masked language modelling: BERT (MLM + NSP, Devlin et al. 2019), RoBERTa (MLM only, Liu et al. 2019), SpanBERT
(span masking + Span Boundary Objective, Joshi et al. 2020) and ALBERT's MLM + SOP (Lan et al. 2020).

corruption: token / whole-word / span masking (data.MaskedLMDataModule) | attention: bidirectional |
loss: masked positions (+ [CLS] for NSP). L = L_MLM + L_NSP (Devlin et al. 2019, appendix A.2: "the sum of the mean
masked LM likelihood and the mean next sentence prediction likelihood"); SpanBERT: L = L_MLM + L_SBO (eq. 3).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.nn import Encoder, LMHead, SentenceHead, SpanBoundaryHead
from plm_lightning.objectives.base import PretrainingModule

SENTENCE_PACKING = {"none": None, "nsp": "sentence_pairs", "sop": "sentence_order"}


class MaskedLM(PretrainingModule):
    """Encoder + tied MLM head (+ a [CLS] sentence head for NSP or SOP, + SBO head when
    ``span_boundary_objective``)."""

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(self, *args, sentence_prediction: Literal["none", "nsp", "sop"] = "none",  # noqa: ANN002
                 span_boundary_objective: bool = False, **kwargs) -> None:  # noqa: ANN003
        """
        Args:
            sentence_prediction: A two-class [CLS] head: nsp (BERT, needs data.packing=sentence_pairs) or sop
                (ALBERT, needs data.packing=sentence_order); both read the batch's sentence_label.
            span_boundary_objective: Add SpanBERT's SBO head and loss (needs data.masking_scheme=span).
        """
        if sentence_prediction not in SENTENCE_PACKING:
            raise ConfigError(f"model.sentence_prediction={sentence_prediction!r} is not one of none, nsp, sop")
        self.sentence_prediction = sentence_prediction
        self.span_boundary_objective = span_boundary_objective
        super().__init__(*args, **kwargs)

    def setup(self, stage: str) -> None:
        """Refuse data whose sentence pairs do not match the sentence head (NSP on SOP pairs would train silently)."""
        packing = getattr(getattr(self.trainer, "datamodule", None), "packing", None)
        wanted = SENTENCE_PACKING[self.sentence_prediction]
        pair_modes = set(SENTENCE_PACKING.values()) - {None}
        if packing is not None and (packing in pair_modes or wanted) and packing != wanted:
            if wanted is None:
                raise ConfigError(f"data.packing={packing} makes sentence pairs but model.sentence_prediction=none; "
                                  f"set model.sentence_prediction to nsp or sop, or pack full_sentences")
            raise ConfigError(f"model.sentence_prediction={self.sentence_prediction} needs data.packing={wanted}, "
                              f"not {packing}")
        super().setup(stage)

    def build(self) -> None:
        self.backbone = Encoder(self.config)
        self.lm_head = LMHead(self.config, transform=True, bias=True)
        self.sentence_head = SentenceHead(self.config.hidden_size) if self.sentence_prediction != "none" else None
        self.sbo_head = SpanBoundaryHead(self.config) if self.span_boundary_objective else None
        self.sbo_bias = nn.Parameter(torch.zeros(self.config.vocab_size)) if self.span_boundary_objective else None

    def encode(self, batch: dict[str, Tensor]) -> Tensor:
        return self.run_stack(self.backbone, batch)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        if self.sbo_head is None:  # the loss reads the masked positions (and [CLS]) only
            hidden, labels = self.run_stack_for_loss(self.backbone, batch, batch["labels"],
                                                     keep_first=self.sentence_head is not None)
        else:  # SBO reads the span boundaries too
            hidden, labels = self.encode(batch), batch["labels"]
        mlm_loss, logits, targets = self.lm_loss(hidden, labels)
        out = {"loss": mlm_loss, "mlm_loss": mlm_loss, "lm_loss": mlm_loss, "lm_logits": logits, "lm_targets": targets}
        if self.sentence_head is not None:
            kind = self.sentence_prediction
            if "sentence_label" not in batch:
                raise ValueError(f"model.sentence_prediction={kind} needs data.packing={SENTENCE_PACKING[kind]}")
            out[f"{kind}_loss"] = F.cross_entropy(self.sentence_head(hidden).float(), batch["sentence_label"])
            out["loss"] = out["loss"] + out[f"{kind}_loss"]
        if self.sbo_head is not None:
            if "span_left" not in batch:
                raise ValueError("model.span_boundary_objective needs spans: set data.masking_scheme=span")
            positions = batch["span_ids"] >= 0
            y = self.sbo_head(hidden, positions, batch["span_left"], batch["span_right"], batch["span_offset"])
            logits = F.linear(y, self.lm_head.weight, self.sbo_bias)
            out["sbo_loss"] = F.cross_entropy(logits.float(), batch["labels"][positions])
            out["loss"] = out["loss"] + out["sbo_loss"]
        return out
