"""A check that every trainable parameter takes part in every training step: what DDP with
``find_unused_parameters=False`` (our ``configs/strategy/ddp.yaml``, and the fast default) requires, found on one
process before a multi-node job stops on its second step."""

from __future__ import annotations

from typing import Any

import lightning as L

from plm_lightning.errors import ConfigError


class UnusedParameters(L.Callback):
    """Stops the run with one line naming the trainable parameters that received no gradient in a training step
    (after the step's accumulated backward passes), for the first ``steps`` steps (None: every step)."""

    def __init__(self, steps: int | None = None) -> None:
        if steps is not None and steps < 1:
            raise ValueError(f"UnusedParameters: steps={steps} must be >= 1 or None")
        self.steps = steps

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        if self.steps is not None and trainer.global_step >= self.steps:
            return
        unused = [name for name, p in pl_module.named_parameters() if p.requires_grad and p.grad is None]
        if unused:
            shown = ", ".join(unused[:6]) + (f" and {len(unused) - 6} more" if len(unused) > 6 else "")
            raise ConfigError(f"step {trainer.global_step + 1}: no loss reached {shown}; DDP with "
                              "find_unused_parameters=false stops on such parameters (freeze them, remove them, or "
                              "use strategy ddp_find_unused_parameters_true)")
