"""Checkpoints written atomically: to a temporary file in the same directory, fsynced, then renamed over the
target, so a run killed while saving never leaves a half-written ``last.ckpt``. Loading uses ``weights_only=True``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any = None, weights_only: bool | None = None
                        ) -> dict[str, Any]:
        return torch.load(path, map_location=map_location or "cpu", weights_only=True)
