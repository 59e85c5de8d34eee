"""Throughput and model FLOPs utilisation (MFU, Chowdhery et al. 2022 appendix B).

Lightning's `ThroughputMonitor` knows the peak FLOP/s of common GPUs; on other devices (CPUs) we measure the peak
ourselves as the best dense matmul rate of a short probe: our "roofline".
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.callbacks.throughput_monitor import _plugin_to_compute_dtype


def measure_matmul_flops(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, size: int = 1024,
                         repeats: int = 5) -> float:
    """Best observed FLOP/s of a ``size``-square matmul on ``device``."""
    device = torch.device(device)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def _batch_size(batch: dict[str, Any]) -> int:
    return int(batch["input_ids"].shape[0])


def _length(batch: dict[str, Any]) -> int:
    return int(batch["input_ids"].numel())


class ThroughputMFU(ThroughputMonitor):
    """Logs samples/s, tokens/s (``items_per_sec``), FLOP/s and MFU every ``window_size`` steps."""

    def __init__(self, window_size: int = 20) -> None:
        super().__init__(batch_size_fn=_batch_size, length_fn=_length, window_size=window_size)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.available_flops is None:
            dtype = _plugin_to_compute_dtype(trainer.precision_plugin)
            self.available_flops = int(measure_matmul_flops(trainer.strategy.root_device, dtype))
            for throughput in self._throughputs.values():
                throughput.available_flops = self.available_flops
