"""Masked language modelling: BERT (MLM + NSP, Devlin et al. 2019), RoBERTa (MLM only, Liu et al. 2019), SpanBERT
(span masking + Span Boundary Objective, Joshi et al. 2020), ALBERT's MLM + SOP (Lan et al. 2020), DeBERTa's MLM
through the Enhanced Mask Decoder (He et al. 2021) and ModernBERT (Warner et al. 2024; the backbone's doing).

corruption: token / whole-word / span masking (data.MaskedLMDataModule) | attention: bidirectional |
loss: masked positions (+ [CLS] for NSP). L = L_MLM + L_NSP (Devlin et al. 2019, appendix A.2: "the sum of the mean
masked LM likelihood and the mean next sentence prediction likelihood"); SpanBERT: L = L_MLM + L_SBO (eq. 3).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.nn import Encoder, LMHead, SentenceHead, SpanBoundaryHead, document_mask
from plm_lightning.nn.attention import take_rows
from plm_lightning.objectives.base import PretrainingModule, final_layer_positions

SENTENCE_PACKING = {"none": None, "nsp": "sentence_pairs", "sop": "sentence_order"}


class MaskedLM(PretrainingModule):
    """Encoder + tied MLM head (+ a [CLS] sentence head for NSP or SOP, + SBO head when
    ``span_boundary_objective``)."""

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(self, *args, sentence_prediction: Literal["none", "nsp", "sop"] = "none",  # noqa: ANN002
                 span_boundary_objective: bool = False, enhanced_mask_decoder: bool = False,
                 **kwargs) -> None:  # noqa: ANN003
        """
        Args:
            sentence_prediction: A two-class [CLS] head: nsp (BERT, needs data.packing=sentence_pairs) or sop
                (ALBERT, needs data.packing=sentence_order); both read the batch's sentence_label.
            span_boundary_objective: Add SpanBERT's SBO head and loss (needs data.masking_scheme=span).
            enhanced_mask_decoder: DeBERTa's EMD (He et al. 2021, sec. 3.2): the MLM reads the last layer applied
                twice over absolute position embeddings + the previous layer's states (needs a disentangled-
                attention backbone, whose layers see relative positions only).
        """
        if sentence_prediction not in SENTENCE_PACKING:
            raise ConfigError(f"model.sentence_prediction={sentence_prediction!r} is not one of none, nsp, sop")
        if enhanced_mask_decoder and span_boundary_objective:
            raise ConfigError("model.enhanced_mask_decoder and model.span_boundary_objective cannot be combined")
        self.sentence_prediction = sentence_prediction
        self.span_boundary_objective = span_boundary_objective
        self.enhanced_mask_decoder = enhanced_mask_decoder
        super().__init__(*args, **kwargs)

    def check_data(self, data: DataContract) -> None:
        """Refuse data whose sentence pairs do not match the sentence head (NSP on SOP pairs would train silently)."""
        super().check_data(data)
        packing = data.packing
        wanted = SENTENCE_PACKING[self.sentence_prediction]
        pair_modes = set(SENTENCE_PACKING.values()) - {None}
        if packing is not None and (packing in pair_modes or wanted) and packing != wanted:
            if wanted is None:
                raise ConfigError(f"data.packing={packing} makes sentence pairs but model.sentence_prediction=none; "
                                  f"set model.sentence_prediction to nsp or sop, or pack full_sentences")
            raise ConfigError(f"model.sentence_prediction={self.sentence_prediction} needs data.packing={wanted}, "
                              f"not {packing}")

    def build(self) -> None:
        if self.enhanced_mask_decoder and (self.config.position_embedding != "disentangled" or self.config.num_layers < 2):
            raise ConfigError("model.enhanced_mask_decoder needs a disentangled-attention backbone with >= 2 layers "
                              f"(model.backbone={self.hparams.backbone!r} has position_embedding="
                              f"{self.config.position_embedding}); use a deberta preset")
        self.backbone = Encoder(self.config)
        self.emd_positions = (nn.Embedding(self.config.max_position_embeddings, self.config.hidden_size)
                              if self.enhanced_mask_decoder else None)
        self.lm_head = LMHead(self.config, transform=True, bias=True)
        self.sentence_head = SentenceHead(self.config.hidden_size) if self.sentence_prediction != "none" else None
        self.sbo_head = SpanBoundaryHead(self.config) if self.span_boundary_objective else None
        self.sbo_bias = nn.Parameter(torch.zeros(self.config.vocab_size)) if self.span_boundary_objective else None

    def encode(self, batch: dict[str, Tensor]) -> Tensor:
        return self.run_stack(self.backbone, batch)

    def decode_masks(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(hidden, labels) from the Enhanced Mask Decoder: layers 1..L-1, then the last layer twice with the
        absolute positions in its queries (at the loss positions only when ``sparse_final_layer``)."""
        extra = document_mask(batch["document_ids"]) if "document_ids" in batch else None
        ids = batch["input_ids"]
        inputs = self.stack_inputs(self.backbone, batch).but(document_ids=None, position_ids=None, mask=extra,
                                                             num_blocks=self.config.num_layers - 1)
        previous = self.backbone(ids, inputs).last_hidden_state
        query = previous + self.emd_positions(torch.arange(ids.shape[1], device=ids.device))[None]
        labels, index = batch["labels"], None
        if self.hparams.get("sparse_final_layer", True):
            index, labels = final_layer_positions(labels, keep_first=self.sentence_head is not None)
            query = take_rows(query, index)
        hidden = self.backbone.enhanced_mask_decoder(previous, query, inputs, query_index=index)
        return hidden, labels

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        if self.emd_positions is not None:
            hidden, labels = self.decode_masks(batch)
        elif self.sbo_head is None:  # the loss reads the masked positions (and [CLS]) only
            hidden, labels = self.run_stack_for_loss(self.backbone, batch, batch["labels"],
                                                     keep_first=self.sentence_head is not None)
        else:  # SBO reads the span boundaries too
            hidden, labels = self.encode(batch), batch["labels"]
        mlm_loss, lm = self.lm_loss(hidden, labels)
        out = {"loss": mlm_loss, "mlm_loss": mlm_loss, "lm_loss": mlm_loss, **lm}
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
