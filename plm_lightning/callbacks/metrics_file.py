"""Every logged metric appended to a JSON-lines file as training goes: what the offline sweep controller reads to
score trials and to stop them early, whatever loggers the recipe uses (CSV, TensorBoard, W&B offline)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import lightning as L

METRICS_FILE_ENV = "PLM_LIGHTNING_METRICS_FILE"
"""When set, the CLI adds a :class:`MetricsFile` callback writing to this path."""


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """The rows a :class:`MetricsFile` wrote so far (none when the file does not exist yet; a line still being
    written by a running process is left for the next read)."""
    file = Path(path)
    if not file.is_file():
        return []
    text = file.read_text(encoding="utf-8")
    complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


class MetricsFile(L.Callback):
    """One line ``{"step": ..., "<metric>": value, ...}`` after every ``every_n_steps`` training steps, every
    validation and the end of training (the latest value of each metric the run has logged)."""

    def __init__(self, path: str, every_n_steps: int = 10) -> None:
        self.path, self.every_n_steps = Path(path), max(1, every_n_steps)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, trainer: L.Trainer) -> None:
        if trainer.global_rank != 0:
            return
        row = {"step": int(trainer.global_step)}
        for name, value in trainer.callback_metrics.items():
            try:
                row[name] = float(value)
            except (TypeError, ValueError):
                continue
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self._write(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._write(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer)
