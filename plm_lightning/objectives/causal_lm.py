"""Causal language modelling: GPT (Radford et al. 2018) and GPT-2 (Radford et al. 2019), and the decoder-only
objectives that differ from it only in their data.

With a Transformer-XL backbone (``position_embedding: xl_relative``; Dai et al. 2019) the decoder is an ``XLStack``
with relative positions, and each batch row continues the previous batch's row (``data.RecurrentLMDataModule``):
the hidden states of the last ``mem_len`` tokens are carried over as memory, without gradient.

corruption: none (GPT), fill-in-the-middle (``data.FIMDataModule``), blank infilling (GLM, ``data.GLMDataModule``),
span corruption / UL2's denoisers as prefix-LM rows (``decoder_only``) | attention: causal (optionally
block-diagonal per document), or prefix-LM when the batch has ``prefix_lengths`` | loss: the labelled positions
(every next token for GPT), L = -sum_i log P(y_i | x_{<=i}).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.data.sampling import data_replicas
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.nn import Decoder, LMHead, StackInputs
from plm_lightning.nn.xl_stack import XLStack
from plm_lightning.objectives.base import PretrainingModule


class CausalLM(PretrainingModule):
    """Pre-norm decoder with a final norm and an LM head tied to the token embedding (no transform, no bias)."""

    required_special_tokens = ("eos",)
    causal = True

    def __init__(self, *args: Any, backbone: str = "tiny-gpt", eval_mem_len: int | None = None, **kwargs: Any) -> None:
        """
        Args:
            eval_mem_len: Transformer-XL backbones: the memory length in validation and test (the paper evaluates with
                a longer memory than it trains with, sec. 3.2); None = the backbone's mem_len, 0 = no memory.
        """
        if eval_mem_len is not None and eval_mem_len < 0:
            raise ConfigError(f"model.eval_mem_len={eval_mem_len} must be >= 0 (or null for the backbone's mem_len)")
        self.eval_mem_len = eval_mem_len
        self.memory: dict[str, list[Tensor] | None] = {}
        self._restored_streams = False
        super().__init__(*args, backbone=backbone, **kwargs)

    def check_data(self, data: DataContract) -> None:
        super().check_data(data)
        if data.decoder_only is False:
            raise ConfigError("this data makes (input, target) rows for an encoder-decoder: set data.decoder_only=true "
                              "for a decoder-only prefix LM, or use model.class_path=plm_lightning.objectives.Seq2SeqLM")

    def build(self) -> None:
        recurrent = self.config.position_embedding == "xl_relative"
        self.backbone = XLStack(self.config, causal=True) if recurrent else Decoder(self.config)
        self.lm_head = LMHead(self.config, transform=False, bias=False)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        hidden = self.recurrent(batch) if isinstance(self.backbone, XLStack) else self.run_stack(self.backbone, batch)
        loss, lm = self.lm_loss(hidden, batch["labels"])
        return {"loss": loss, "lm_loss": loss, **lm}

    def recurrent(self, batch: dict[str, Tensor]) -> Tensor:
        """Transformer-XL: the segment read with the memory its rows left in the previous batch of this stage."""
        stage = "train" if self.training else "eval"
        memory = self.memory.get(stage)
        if memory is not None and memory[0].shape[0] != batch["input_ids"].shape[0]:
            if self.training and self._restored_streams:
                rank_zero_warn(f"Transformer-XL: the checkpoint's memory holds {memory[0].shape[0]} streams per "
                               f"rank, this run reads {batch['input_ids'].shape[0]} (another global batch): the "
                               "streams are cut anew and the memory starts empty")
            memory = None  # a smaller last batch starts new streams
        if self.training:
            self._restored_streams = False
        if memory is not None and memory[0].device != batch["input_ids"].device:  # restored from a checkpoint
            memory = [m.to(batch["input_ids"].device) for m in memory]
        mem_len = None if self.training or self.eval_mem_len is None else self.eval_mem_len
        out = self.backbone(batch["input_ids"], StackInputs(attention_mask=batch.get("attention_mask"), memory=memory,
                                                            memory_length=mem_len))
        self.memory[stage] = out.memory
        return out.last_hidden_state

    def on_train_epoch_start(self) -> None:
        self.memory.pop("train", None)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Transformer-XL: the training memory goes into the checkpoint, every rank's rows gathered in stream order
        (``SegmentStreamSampler``: rank r, row b reads stream b R + r), so a run resumed mid-epoch continues each
        stream with the memory it had, under the same or another number of processes."""
        super().on_save_checkpoint(checkpoint)
        memory = self.memory.get("train")
        if isinstance(self.backbone, XLStack) and memory is not None:
            gathered = [self.trainer.strategy.all_gather(m) if self.trainer.world_size > 1 else m for m in memory]
            checkpoint[CHECKPOINT_KEY]["train_memory"] = [  # [R, B, ...] -> [B R, ...]: stream b R + r
                (m.transpose(0, 1).flatten(0, 1) if self.trainer.world_size > 1 else m).detach().cpu()
                for m in gathered]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        saved = checkpoint[CHECKPOINT_KEY].get("train_memory")
        if saved and self._trainer is not None:
            replicas, rank = data_replicas(self._trainer)
            self.memory["train"] = [m[rank::replicas] for m in saved]
            self._restored_streams = True

    def on_validation_epoch_start(self) -> None:
        self.memory.pop("eval", None)

    def on_test_epoch_start(self) -> None:
        self.memory.pop("eval", None)
