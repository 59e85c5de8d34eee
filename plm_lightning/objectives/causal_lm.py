"""Causal language modelling: GPT (Radford et al. 2018) and GPT-2 (Radford et al. 2019).

corruption: none | attention: causal (optionally block-diagonal per document) | loss: every next token,
L = -sum_i log P(x_{i+1} | x_{<=i}).
"""

from __future__ import annotations

from torch import Tensor

from plm_lightning.nn import Decoder, LMHead
from plm_lightning.objectives.base import PretrainingModule


class CausalLM(PretrainingModule):
    """Pre-norm decoder with a final norm and an LM head tied to the token embedding (no transform, no bias)."""

    required_special_tokens = ("eos",)
    causal = True

    def __init__(self, *args, backbone: str = "tiny-gpt", **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, backbone=backbone, **kwargs)

    def build(self) -> None:
        self.backbone = Decoder(self.config)
        self.lm_head = LMHead(self.config, transform=False, bias=False)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        loss, lm = self.lm_loss(self.run_stack(self.backbone, batch), batch["labels"])
        return {"loss": loss, "lm_loss": loss, **lm}
