"""The progress line of every recipe: Lightning's rich bar without what means nothing on a step-budgeted run."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import RichProgressBar


class ProgressBar(RichProgressBar):
    """Lightning's ``RichProgressBar``, but "Epoch 3" instead of "Epoch 3/-2" when the run is bounded by steps
    (``max_epochs: -1``), and no ``v_num`` (the logger's version, shown as ``0.000``): the run prints where it writes
    at its start."""

    def _get_train_description(self, current_epoch: int) -> str:
        description = super()._get_train_description(current_epoch)
        max_epochs = self.trainer.max_epochs
        if max_epochs is None or max_epochs < 0:
            description = f"Epoch {current_epoch}".ljust(len(description))
        return description

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics
