"""Causal language modelling: GPT (Radford et al. 2018) and GPT-2 (Radford et al. 2019), and the decoder-only
objectives that differ from it only in their data.

corruption: none (GPT), fill-in-the-middle (``data.FIMDataModule``), blank infilling (GLM, ``data.GLMDataModule``),
span corruption / UL2's denoisers as prefix-LM rows (``decoder_only``) | attention: causal (optionally
block-diagonal per document), or prefix-LM when the batch has ``prefix_lengths`` | loss: the labelled positions
(every next token for GPT), L = -sum_i log P(y_i | x_{<=i}).
"""

from __future__ import annotations

from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.nn import Decoder, LMHead
from plm_lightning.objectives.base import PretrainingModule


class CausalLM(PretrainingModule):
    """Pre-norm decoder with a final norm and an LM head tied to the token embedding (no transform, no bias)."""

    required_special_tokens = ("eos",)
    causal = True

    def __init__(self, *args, backbone: str = "tiny-gpt", **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, backbone=backbone, **kwargs)

    def setup(self, stage: str) -> None:
        if getattr(getattr(self.trainer, "datamodule", None), "decoder_only", None) is False:
            raise ConfigError("this data makes (input, target) rows for an encoder-decoder: set data.decoder_only=true "
                              "for a decoder-only prefix LM, or use model.class_path=plm_lightning.objectives.Seq2SeqLM")
        super().setup(stage)

    def build(self) -> None:
        self.backbone = Decoder(self.config)
        self.lm_head = LMHead(self.config, transform=False, bias=False)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        loss, lm = self.lm_loss(self.run_stack(self.backbone, batch), batch["labels"])
        return {"loss": loss, "lm_loss": loss, **lm}
