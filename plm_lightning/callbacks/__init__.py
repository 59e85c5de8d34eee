"""Lightning callbacks and plugins: throughput/MFU, atomic checkpoint writes, a metrics file for sweeps, training samples,
the progress bar, the model summary, fault injection for resume tests."""

from plm_lightning.callbacks.checkpoint_io import AtomicCheckpointIO
from plm_lightning.callbacks.fault import SigkillAtStep
from plm_lightning.callbacks.metrics_file import MetricsFile
from plm_lightning.callbacks.progress import ProgressBar
from plm_lightning.callbacks.samples import TrainingSamples
from plm_lightning.callbacks.summary import ModelSummary
from plm_lightning.callbacks.throughput import ThroughputMFU, measure_matmul_flops

__all__ = ["AtomicCheckpointIO", "MetricsFile", "ModelSummary", "ProgressBar", "SigkillAtStep", "ThroughputMFU",
           "TrainingSamples", "measure_matmul_flops"]
