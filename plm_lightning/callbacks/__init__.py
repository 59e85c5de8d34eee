"""Lightning callbacks and plugins: throughput/MFU, atomic checkpoint writes."""

from plm_lightning.callbacks.checkpoint_io import AtomicCheckpointIO
from plm_lightning.callbacks.throughput import ThroughputMFU, measure_matmul_flops

__all__ = ["AtomicCheckpointIO", "ThroughputMFU", "measure_matmul_flops"]
