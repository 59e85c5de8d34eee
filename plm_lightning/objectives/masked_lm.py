"""Masked language modelling: BERT (MLM + NSP, Devlin et al. 2019) and RoBERTa (MLM only, Liu et al. 2019).

corruption: token masking (data.MaskedLMDataModule) | attention: bidirectional | loss: masked positions (+ [CLS]).
L = L_MLM + L_NSP (Devlin et al. 2019, appendix A.2: "the sum of the mean masked LM likelihood and the mean next
sentence prediction likelihood").
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from plm_lightning.nn import Encoder, LMHead, SentenceHead, document_mask
from plm_lightning.objectives.base import PretrainingModule


class MaskedLM(PretrainingModule):
    """Encoder + tied MLM head (+ NSP head when ``next_sentence_prediction``)."""

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(self, *args, next_sentence_prediction: bool = False, **kwargs) -> None:  # noqa: ANN002, ANN003
        """
        Args:
            next_sentence_prediction: Add BERT's NSP head and loss (needs data.packing=sentence_pairs).
        """
        self.next_sentence_prediction = next_sentence_prediction
        super().__init__(*args, **kwargs)

    def build(self) -> None:
        self.backbone = Encoder(self.config)
        self.lm_head = LMHead(self.config, transform=True, bias=True)
        self.nsp_head = SentenceHead(self.config.hidden_size) if self.next_sentence_prediction else None

    def encode(self, batch: dict[str, Tensor]) -> Tensor:
        extra = document_mask(batch["document_ids"]) if "document_ids" in batch else None
        out = self.backbone(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"), mask=extra)
        return out.last_hidden_state

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        hidden = self.encode(batch)
        mlm_loss, logits, targets = self.lm_loss(hidden, batch["labels"])
        out = {"loss": mlm_loss, "mlm_loss": mlm_loss, "lm_logits": logits, "lm_targets": targets}
        if self.nsp_head is not None:
            if "next_sentence_label" not in batch:
                raise ValueError("model.next_sentence_prediction needs sentence pairs: set data.packing=sentence_pairs")
            nsp_loss = F.cross_entropy(self.nsp_head(hidden).float(), batch["next_sentence_label"])
            out["nsp_loss"] = nsp_loss
            out["loss"] = mlm_loss + nsp_loss
        return out
