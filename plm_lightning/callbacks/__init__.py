"""Lightning callbacks and plugins: throughput/MFU, atomic checkpoint writes, a metrics file for sweeps, training samples,
the progress bar, the model summary, fault injection for resume tests and a log of the
rows each rank trained on."""

from plm_lightning.callbacks.batch_log import BatchLog
from plm_lightning.callbacks.checkpoint_io import AtomicCheckpointIO
from plm_lightning.callbacks.fault import SigkillAtStep
from plm_lightning.callbacks.metrics_file import MetricsFile
from plm_lightning.callbacks.progress import ProgressBar
from plm_lightning.callbacks.samples import TrainingSamples
from plm_lightning.callbacks.summary import ModelSummary
from plm_lightning.callbacks.throughput import ThroughputMFU, measure_matmul_flops

__all__ = ["AtomicCheckpointIO", "BatchLog", "MetricsFile", "ModelSummary", "ProgressBar", "SigkillAtStep", "ThroughputMFU",
           "TrainingSamples", "measure_matmul_flops"]
