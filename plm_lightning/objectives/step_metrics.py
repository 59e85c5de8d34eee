"""What an objective logs at each step: the losses, token counters, accuracy, the validation perplexity (token-weighted
over the epoch), per-language losses of multilingual data, and the FLOPs of each batch that the throughput/MFU
callback reads."""

from __future__ import annotations

import torch
from torch import Tensor

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.nn.flops import training_flops


class StepHooks:
    """The training, validation, test and predict steps of ``PretrainingModule``, around its ``compute_loss``."""

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        out = self(**batch)
        tokens = int(batch["attention_mask"].sum())
        loss_tokens = int(out["lm_targets"].numel())
        self.tokens_seen += tokens * self.trainer.world_size
        self.loss_tokens_seen += loss_tokens * self.trainer.world_size
        self._set_flops(batch, loss_tokens, backward=True)
        self.flops_seen += (self.flops_per_batch or 0) * self.trainer.world_size
        self.train_accuracy(out["lm_predictions"], out["lm_targets"])
        bs = batch["input_ids"].shape[0]
        for name, value in self._scalars(out).items():
            self.log(f"train/{name}", value.detach(), prog_bar=name == "loss", batch_size=bs, sync_dist=True)
        self.log("train/accuracy", self.train_accuracy, batch_size=bs)
        self.log("train/tokens_seen", float(self.tokens_seen), batch_size=bs)
        self.log("train/loss_tokens_seen", float(self.loss_tokens_seen), batch_size=bs)
        return out["loss"]

    @staticmethod
    def _scalars(out: dict[str, Tensor]) -> dict[str, Tensor]:
        """The per-batch scalars to log: the total and auxiliary losses and rates (``lm_*`` go to the epoch metrics)."""
        return {k: v for k, v in out.items() if not k.startswith("lm_") and v.ndim == 0}

    def _set_flops(self, batch: dict[str, Tensor], loss_tokens: int, backward: bool) -> None:
        """FLOPs of this batch, read by the ThroughputMFU callback after each step."""
        b, n = batch["input_ids"].shape
        self.flops_per_batch = training_flops(self.config, b, n, loss_tokens,
                                              head_transform=self.lm_head.dense is not None, backward=backward)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        out = self(**batch)
        self._set_flops(batch, int(out["lm_targets"].numel()), backward=False)
        self.val_lm_loss.update(out["lm_loss"], weight=out["lm_targets"].numel())
        self.val_accuracy(out["lm_predictions"], out["lm_targets"])
        bs = batch["input_ids"].shape[0]
        for name, value in self._scalars(out).items():
            self.log(f"val/{name}", value, batch_size=bs, sync_dist=True, prog_bar=name == "loss")
        self.log("val/accuracy", self.val_accuracy, batch_size=bs)
        names = self.data.stream_names
        if "stream" in batch and names:
            self._log_stream_losses(out, batch, names)

    def _log_stream_losses(self, out: dict[str, Tensor], batch: dict[str, Tensor], names: list[str]) -> None:
        """Multilingual data: the LM cross-entropy per language / parallel corpus (``val/lm_loss_<name>``,
        token-weighted over the epoch; under DDP the values are rank 0's half of the validation set, since a rank
        whose batch lacks a language logs nothing for it and a synced log would wait for it forever)."""
        rows = torch.nonzero(batch["labels"] != IGNORE_INDEX)[:, 0]  # the row of each target, in lm_targets' order
        if rows.numel() != out["lm_targets"].numel():
            return
        losses = out["lm_token_losses"]
        stream = batch["stream"][rows]
        for index, name in enumerate(names):
            chosen = stream == index
            if chosen.any():
                self.log(f"val/lm_loss_{name}", losses[chosen].mean(), batch_size=int(chosen.sum()))

    def on_validation_epoch_end(self) -> None:
        """Token-weighted LM cross-entropy over the whole validation set, and its perplexity (auxiliary losses such
        as NSP or SBO are logged separately and never enter the perplexity)."""
        lm_loss = self.val_lm_loss.compute()
        self.log("val/lm_loss", lm_loss, sync_dist=True)
        self.log("val/perplexity", torch.exp(lm_loss.clamp(max=50)), sync_dist=True)
        self.val_lm_loss.reset()

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_test_epoch_end(self) -> None:
        self.on_validation_epoch_end()

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        out = self(**batch)
        return {"loss": out["loss"], "predictions": out["lm_predictions"], "targets": out["lm_targets"]}
