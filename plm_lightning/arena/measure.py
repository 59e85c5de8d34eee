"""What a recipe costs at the arena's shape, measured on its own batches before its run: FLOPs per training step (as
the objective counts them for the MFU callback), the step time, the parameters and the corruption statistics."""

from __future__ import annotations

import time
from typing import Any

import lightning as L

from plm_lightning.arena.config import ArenaConfig
from plm_lightning.errors import ConfigError


def measure_recipe(config: ArenaConfig, recipe: str, steps: int = 3) -> dict[str, Any]:
    """FLOPs per training step (the mean over ``steps`` real training steps at the arena's shape, as the objective
    counts them for the MFU callback), the objective, its parameter count and its corruption statistics."""
    from plm_lightning.inspection import corruption_statistics
    from plm_lightning.objectives.base import PretrainingModule
    from plm_lightning.recipe_cli import build_recipe as build_datamodule

    args = config.recipe_args(recipe)
    datamodule, model = build_datamodule([args[1]], args[2:])
    if not isinstance(model, PretrainingModule) or not hasattr(datamodule, "seq_len"):
        raise ConfigError(f"arena: {recipe} is not a Transformer pretraining recipe (the arena compares objectives "
                          "on one backbone size)")
    probe = _FlopsProbe()
    L.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
              callbacks=[probe]).fit(model, datamodule=datamodule)
    timed = sorted(probe.seconds[1:]) or probe.seconds
    return {"objective": type(model).__name__, "flops_per_step": sum(probe.flops) / len(probe.flops),
            "parameters": sum(p.numel() for p in model.parameters()), "seconds_per_step": timed[len(timed) // 2],
            "statistics": corruption_statistics(datamodule, model, 2)}


class _FlopsProbe(L.Callback):
    """Collects the objective's FLOPs of each training batch (what ``ThroughputMFU`` reads) and its time."""

    def __init__(self) -> None:
        self.flops: list[float] = []
        self.seconds: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self.seconds.append(time.perf_counter() - self._start)
        self.flops.append(float(pl_module.flops_per_batch))
