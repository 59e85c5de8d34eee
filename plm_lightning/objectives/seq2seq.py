"""Encoder-decoder denoising: T5 / T5.1.1 span corruption (Raffel et al. 2020), BART (Lewis et al. 2020), MASS
(Song et al. 2019).

corruption: in the data module (T5: noise spans replaced by sentinels, ``data.SpanCorruptionDataModule``; BART: the
five noising functions, ``data.BARTDataModule``; MASS: one masked fragment) | attention: bidirectional encoder,
causal decoder with cross-attention | loss: every target token (T5: sentinels, span tokens and EOS; BART: the whole
original row), teacher-forced (decoder input = target shifted right, from the pad token in T5, from ``</s>`` in BART).
"""

from __future__ import annotations

from typing import Any, Literal

from torch import Tensor, nn

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.nn import EncoderDecoder, LMHead
from plm_lightning.nn.flops import seq2seq_training_flops
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.objectives.base import PretrainingModule


class Seq2SeqLM(PretrainingModule):
    """Encoder-decoder with an LM head on the decoder: tied to the shared token embedding with the decoder output
    scaled by hidden_size^-0.5 (T5; ``tied_output_scaling``), or untied (T5.1.1: ``tie_word_embeddings: false``)."""

    required_special_tokens = ("pad", "eos")

    def __init__(self, *args: Any, decoder_start_token: Literal["pad", "eos"] = "pad", **kwargs: Any) -> None:
        """
        Args:
            decoder_start_token: The special token the decoder starts from: pad (T5, MASS) or eos (BART).
        """
        if decoder_start_token not in ("pad", "eos"):
            raise ConfigError(f"model.decoder_start_token={decoder_start_token!r} is not one of pad, eos")
        self.decoder_start_token = decoder_start_token
        super().__init__(*args, **kwargs)

    def check_data(self, data: DataContract) -> None:
        super().check_data(data)
        if data.decoder_only:
            raise ConfigError("data.decoder_only=true makes prefix-LM rows for a decoder-only model: use "
                              "model.class_path=plm_lightning.objectives.CausalLM, or data.decoder_only=false")
        start = data.decoder_start_token
        if start is not None and start != self.decoder_start_token:
            raise ConfigError(f"model.decoder_start_token={self.decoder_start_token!r} but the data starts the decoder "
                              f"from {start!r}; set model.decoder_start_token={start}")

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
        _, dec = self.backbone(batch["input_ids"], batch["decoder_input_ids"],
                               StackInputs(attention_mask=batch.get("attention_mask")),
                               StackInputs(attention_mask=batch.get("decoder_attention_mask"),
                                           encoder_attention_mask=batch.get("cross_attention_mask")))
        hidden = dec.last_hidden_state
        if self.config.tie_word_embeddings and self.config.tied_output_scaling:
            hidden = hidden * self.config.hidden_size ** -0.5
        return hidden

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        loss, lm = self.lm_loss(self.decode(batch), batch["labels"])
        return {"loss": loss, "lm_loss": loss, **lm}

    def loss_positions(self, batch: dict[str, Tensor]) -> Tensor:
        """Boolean ``[B, M]`` over the decoder's positions: every target token carries loss."""
        return batch["labels"] != IGNORE_INDEX

    def _set_flops(self, batch: dict[str, Tensor], loss_tokens: int, backward: bool) -> None:
        b, n = batch["input_ids"].shape
        self.flops_per_batch = seq2seq_training_flops(self.config, b, n, batch["decoder_input_ids"].shape[1],
                                                      loss_tokens, backward=backward)
