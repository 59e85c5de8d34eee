"""Masked language modelling: BERT (MLM + NSP, Devlin et al. 2019), RoBERTa (MLM only, Liu et al. 2019) and
SpanBERT (span masking + Span Boundary Objective, Joshi et al. 2020).

corruption: token / whole-word / span masking (data.MaskedLMDataModule) | attention: bidirectional |
loss: masked positions (+ [CLS] for NSP). L = L_MLM + L_NSP (Devlin et al. 2019, appendix A.2: "the sum of the mean
masked LM likelihood and the mean next sentence prediction likelihood"); SpanBERT: L = L_MLM + L_SBO (eq. 3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.nn import Encoder, LMHead, SentenceHead, SpanBoundaryHead, document_mask
from plm_lightning.objectives.base import PretrainingModule


class MaskedLM(PretrainingModule):
    """Encoder + tied MLM head (+ NSP head when ``next_sentence_prediction``, + SBO head when
    ``span_boundary_objective``)."""

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(self, *args, next_sentence_prediction: bool = False, span_boundary_objective: bool = False,  # noqa: ANN002
                 **kwargs) -> None:  # noqa: ANN003
        """
        Args:
            next_sentence_prediction: Add BERT's NSP head and loss (needs data.packing=sentence_pairs).
            span_boundary_objective: Add SpanBERT's SBO head and loss (needs data.masking_scheme=span).
        """
        self.next_sentence_prediction = next_sentence_prediction
        self.span_boundary_objective = span_boundary_objective
        super().__init__(*args, **kwargs)

    def build(self) -> None:
        self.backbone = Encoder(self.config)
        self.lm_head = LMHead(self.config, transform=True, bias=True)
        self.nsp_head = SentenceHead(self.config.hidden_size) if self.next_sentence_prediction else None
        self.sbo_head = SpanBoundaryHead(self.config) if self.span_boundary_objective else None
        self.sbo_bias = nn.Parameter(torch.zeros(self.config.vocab_size)) if self.span_boundary_objective else None

    def encode(self, batch: dict[str, Tensor]) -> Tensor:
        extra = document_mask(batch["document_ids"]) if "document_ids" in batch else None
        out = self.backbone(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"), mask=extra)
        return out.last_hidden_state

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        hidden = self.encode(batch)
        mlm_loss, logits, targets = self.lm_loss(hidden, batch["labels"])
        out = {"loss": mlm_loss, "mlm_loss": mlm_loss, "lm_loss": mlm_loss, "lm_logits": logits, "lm_targets": targets}
        if self.nsp_head is not None:
            if "next_sentence_label" not in batch:
                raise ValueError("model.next_sentence_prediction needs sentence pairs: set data.packing=sentence_pairs")
            nsp_loss = F.cross_entropy(self.nsp_head(hidden).float(), batch["next_sentence_label"])
            out["nsp_loss"] = nsp_loss
            out["loss"] = out["loss"] + nsp_loss
        if self.sbo_head is not None:
            if "span_left" not in batch:
                raise ValueError("model.span_boundary_objective needs spans: set data.masking_scheme=span")
            positions = batch["span_ids"] >= 0
            y = self.sbo_head(hidden, positions, batch["span_left"], batch["span_right"], batch["span_offset"])
            logits = F.linear(y, self.lm_head.weight, self.sbo_bias)
            out["sbo_loss"] = F.cross_entropy(logits.float(), batch["labels"][positions])
            out["loss"] = out["loss"] + out["sbo_loss"]
        return out
