"""What an objective optimises with: AdamW over decayed and undecayed parameter groups (Loshchilov & Hutter 2019),
the warm-up and decay schedule, and gradient clipping by the global norm across meshes; and the one-line check of
their settings."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from plm_lightning.errors import ConfigError
from plm_lightning.objectives import scale
from plm_lightning.objectives.schedules import lr_lambda


def check_optimizer_settings(learning_rate: float, weight_decay: float, betas: tuple[float, float], adam_eps: float,
                             warmup_steps: int | float, min_lr_ratio: float) -> None:
    """One line for a setting AdamW or the schedule would reject late (a traceback from the optimizer) or accept and
    misuse (a negative warmup)."""
    checks = [("learning_rate", learning_rate, learning_rate > 0, "> 0"),
              ("weight_decay", weight_decay, weight_decay >= 0, ">= 0"),
              ("betas", list(betas), len(betas) == 2 and all(0 <= b < 1 for b in betas), "two numbers in [0, 1)"),
              ("adam_eps", adam_eps, adam_eps > 0, "> 0"),
              ("warmup_steps", warmup_steps, warmup_steps >= 0, "steps (an integer >= 0) or a fraction of all steps "
               "(0 <= float < 1)"),
              ("min_lr_ratio", min_lr_ratio, 0 <= min_lr_ratio <= 1, "in [0, 1]")]
    for name, value, ok, valid in checks:
        if not ok:
            raise ConfigError(f"model.{name}={value} is not valid; it must be {valid}")


class OptimizationHooks:
    """The Lightning hooks of optimisation, mixed into ``PretrainingModule``."""

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        groups = []
        for params, lr in self.parameter_groups():
            trainable = [p for p in params if p.requires_grad]
            groups += [{"params": [p for p in trainable if p.ndim >= 2], "weight_decay": hp.weight_decay, "lr": lr},
                       {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0, "lr": lr}]
        optimizer = torch.optim.AdamW(groups, lr=hp.learning_rate, betas=tuple(hp.betas), eps=hp.adam_eps,
                                      fused=bool(hp.fused_optimizer and scale.fused_optimizer_fits(self.trainer)) or None)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        fraction = isinstance(hp.warmup_steps, float) and hp.warmup_steps < 1
        warmup = int(hp.warmup_steps * total) if fraction else int(hp.warmup_steps)
        schedule = lr_lambda(warmup, total, hp.lr_schedule, hp.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """(parameters, peak learning rate) pairs; biases and norms of each are not decayed."""
        return [(list(self.parameters()), self.hparams.learning_rate)]

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        if gradient_clip_val and scale.gradient_scaler(self.trainer) is None:
            scale.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
