"""Lightning callbacks and plugins: throughput/MFU, atomic checkpoint writes, a metrics file for sweeps, training samples,
the progress bar, the model summary, fault injection for resume tests, a log of the
rows each rank trained on and a check that every parameter trains (what DDP requires).

Every name a module here defines is exported, imported on first use (``plm_lightning.lazy``): there is no
list to keep, and importing one module of this package does not import the rest."""

from plm_lightning.lazy import package_exports

__getattr__, __dir__ = package_exports(__name__)
