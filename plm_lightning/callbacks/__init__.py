"""Lightning callbacks and plugins: throughput/MFU, atomic checkpoint writes, a metrics file for sweeps, training samples,
the progress bar, the model summary, fault injection for resume tests, a log of the
rows each rank trained on and a check that every parameter trains (what DDP requires)."""

from plm_lightning.callbacks.batch_log import BatchLog
from plm_lightning.callbacks.checkpoint_io import AtomicCheckpointIO
from plm_lightning.callbacks.fault import SigkillAtStep
from plm_lightning.callbacks.metrics_file import MetricsFile
from plm_lightning.callbacks.progress import ProgressBar
from plm_lightning.callbacks.samples import TrainingSamples
from plm_lightning.callbacks.summary import ModelSummary
from plm_lightning.callbacks.throughput import ThroughputMFU, measure_matmul_flops
from plm_lightning.callbacks.unused_parameters import UnusedParameters

__all__ = ["AtomicCheckpointIO", "BatchLog", "MetricsFile", "ModelSummary", "ProgressBar", "SigkillAtStep", "ThroughputMFU",
           "TrainingSamples", "UnusedParameters", "measure_matmul_flops"]
