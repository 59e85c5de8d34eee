"""Encoder-decoder denoising: T5 / T5.1.1 span corruption (Raffel et al. 2020).

corruption: noise spans replaced by sentinels in the encoder input (``data.SpanCorruptionDataModule``) | attention:
bidirectional encoder, causal decoder with cross-attention | loss: every target token (sentinels, span tokens, EOS),
teacher-forced (decoder input = target shifted right, starting from the pad token as in T5).
"""

from __future__ import annotations

from torch import Tensor, nn

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.nn import EncoderDecoder, LMHead
from plm_lightning.nn.flops import seq2seq_training_flops
from plm_lightning.objectives.base import PretrainingModule


class Seq2SeqLM(PretrainingModule):
    """Encoder-decoder with an LM head on the decoder: tied to the shared token embedding with the decoder output
    scaled by hidden_size^-0.5 (T5; ``tied_output_scaling``), or untied (T5.1.1: ``tie_word_embeddings: false``)."""

    required_special_tokens = ("pad", "eos")

    def build(self) -> None:
        self.backbone = EncoderDecoder(self.config)
        self.lm_head = LMHead(self.config, transform=False, bias=False)

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.tie(self.backbone.encoder.embeddings.token)

    def stacks(self) -> list[nn.Module]:
        return [self.backbone.encoder, self.backbone.decoder]

    def decode(self, batch: dict[str, Tensor]) -> Tensor:
        """The decoder's last hidden state (teacher forcing), scaled for a tied head when the config says so."""
        _, dec = self.backbone(batch["input_ids"], batch["decoder_input_ids"], batch.get("attention_mask"),
                               batch.get("decoder_attention_mask"))
        hidden = dec.last_hidden_state
        if self.config.tie_word_embeddings and self.config.tied_output_scaling:
            hidden = hidden * self.config.hidden_size ** -0.5
        return hidden

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        loss, logits, targets = self.lm_loss(self.decode(batch), batch["labels"])
        return {"loss": loss, "lm_loss": loss, "lm_logits": logits, "lm_targets": targets}

    def loss_positions(self, batch: dict[str, Tensor]) -> Tensor:
        """Boolean ``[B, M]`` over the decoder's positions: every target token carries loss."""
        return batch["labels"] != IGNORE_INDEX

    def _set_flops(self, batch: dict[str, Tensor], loss_tokens: int, backward: bool) -> None:
        b, n = batch["input_ids"].shape
        self.flops_per_batch = seq2seq_training_flops(self.config, b, n, batch["decoder_input_ids"].shape[1],
                                                      loss_tokens, backward=backward)
